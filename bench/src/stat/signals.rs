//! Signals: live mode stops cleanly on Ctrl-C/TERM (and still prints its JSON
//! document); `--during` outlives the command's Ctrl-C (the terminal sends it
//! to both) and forwards TERM and HUP to it, so the report is always printed.

use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNAL.store(sig, Ordering::SeqCst);
}

fn install(sigs: &[libc::c_int]) {
    for &s in sigs {
        // SAFETY: sigaction is plain data; the handler only stores to an
        // atomic (async-signal-safe). Handlers are reset to the default in a
        // child at exec, so the command gets normal signal behaviour.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(s, &sa, std::ptr::null_mut());
        }
    }
}

/// Live mode: INT, TERM and HUP end the loop instead of the process.
pub fn catch_stop() {
    install(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP]);
}

/// Sleeps `d`; `false` when a stop signal came first.
pub fn sleep_unless_stopped(d: Duration) -> bool {
    let end = Instant::now() + d;
    loop {
        if SIGNAL.load(Ordering::SeqCst) != 0 {
            return false;
        }
        let now = Instant::now();
        if now >= end {
            return true;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
}

/// `--during`: catch INT, QUIT, TERM and HUP while the command runs.
pub fn forward_to_child() {
    install(&[libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP]);
}

/// Waits for the child; TERM and HUP sent to erdma-stat are passed on to it
/// (INT and QUIT from a terminal reach it directly).
pub fn wait_forwarding(child: &mut Child) -> std::io::Result<ExitStatus> {
    let pid = child.id() as libc::pid_t;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(move || {
            let _ = tx.send(child.wait());
        });
        loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(r) => return r,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(std::io::Error::other("the waiting thread ended"));
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    let sig = SIGNAL.swap(0, Ordering::SeqCst);
                    if sig == libc::SIGTERM || sig == libc::SIGHUP {
                        // SAFETY: kill takes any pid. The child is reaped only by
                        // the waiting thread, which had not reported it yet: at
                        // worst the signal hits it as a zombie.
                        unsafe { libc::kill(pid, sig) };
                    }
                }
            }
        }
    })
}
