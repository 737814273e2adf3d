//! Starting threads without risking an abort when memory runs out.
//!
//! `std::thread::Builder::spawn` reports a failed `pthread_create` as an
//! error, but the new thread then maps its signal stack itself, and when
//! that mapping fails (the address space is full: `ulimit -v`, many
//! threads) the runtime aborts the process. So a thread is started only
//! when the address space has room for its stack plus `HEADROOM`, one at
//! a time: the caller waits until the thread runs (its signal stack is in
//! place) before checking room for the next, and threads started for a job
//! wait at a [`Gate`] (allocating nothing) until every one has started.

use std::io;
use std::sync::{Condvar, Mutex, OnceLock};
use std::thread::{Builder, Scope, ScopedJoinHandle};

/// Address space left free after a new thread's stack: its signal stack,
/// thread-local data and the first allocations of its work.
const HEADROOM: usize = 16 << 20;

/// std's default stack for spawned threads (`RUST_MIN_STACK` overrides it).
const DEFAULT_STACK: usize = 2 << 20;

/// Fails with `ENOMEM` unless a thread's stack and `HEADROOM` fit in the
/// address space now.
pub fn room_for_thread() -> io::Result<()> {
    // std reads RUST_MIN_STACK once too.
    static STACK: OnceLock<usize> = OnceLock::new();
    let stack = *STACK.get_or_init(|| {
        std::env::var("RUST_MIN_STACK")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(DEFAULT_STACK)
    });
    let len = stack.saturating_add(HEADROOM);
    // SAFETY: an anonymous, inaccessible mapping at an address the kernel
    // chooses; it overlaps nothing that exists and is unmapped at once.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `p`/`len` is exactly the mapping made above, used by nothing.
    unsafe { libc::munmap(p, len) };
    Ok(())
}

/// Starts `f` on a scoped thread named `name` and returns once it runs,
/// after [`room_for_thread`].
pub fn spawn_started<'scope, T, F>(
    s: &'scope Scope<'scope, '_>,
    name: String,
    f: F,
) -> io::Result<ScopedJoinHandle<'scope, T>>
where
    F: FnOnce() -> T + Send + 'scope,
    T: Send + 'scope,
{
    room_for_thread()?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let h = Builder::new().name(name).spawn_scoped(s, move || {
        let _ = tx.send(());
        f()
    })?;
    // Only fails if the thread ended first, which also means it ran.
    let _ = rx.recv();
    Ok(h)
}

/// Holds started threads until the starter says go (or stop).
#[derive(Default)]
pub struct Gate {
    state: Mutex<Option<bool>>,
    opened: Condvar,
}

impl Gate {
    /// Waits until [`Gate::open`]; true to go on, false to stop.
    pub fn wait(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(go) = *s {
                return go;
            }
            s = self.opened.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Releases every waiting (and later) thread with `go`.
    pub fn open(&self, go: bool) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = Some(go);
        self.opened.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn started_threads_wait_at_the_gate_and_see_its_answer() {
        for go in [true, false] {
            let gate = Gate::default();
            let got: Vec<bool> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..4)
                    .map(|i| spawn_started(s, format!("t{i}"), || gate.wait()).expect("spawn"))
                    .collect();
                gate.open(go);
                hs.into_iter().map(|h| h.join().expect("join")).collect()
            });
            assert_eq!(got, vec![go; 4]);
        }
    }

    #[test]
    fn room_is_found_in_an_ordinary_process() {
        room_for_thread().expect("room for one thread");
    }
}
