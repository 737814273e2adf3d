//! A memory cgroup for one test (the memory rows of issue 33: a
//! regression fails the test, never the machine).
#![allow(dead_code)] // each test binary uses its part
#![allow(clippy::disallowed_methods)] // a test writes the cgroup's files directly

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A memory cgroup of `bytes` made for one test (cgroup v1's memory
/// controller, or v2's where it is enabled below the root), removed when
/// dropped; None where none can be made (not root, no memory controller):
/// the test then says so and passes, unless ERDMA_REQUIRE_CGROUP is set.
pub struct Cgroup(PathBuf);

impl Cgroup {
    /// A cgroup of `bytes` (no swap) named after `tag` and this process.
    pub fn new(tag: &str, bytes: u64) -> Option<Cgroup> {
        let name = format!("erdma-test-{tag}-{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let v2 = Path::new("/sys/fs/cgroup");
        let made = if v1.join("memory.limit_in_bytes").exists() {
            let d = v1.join(&name);
            std::fs::create_dir(&d).ok()?;
            let cg = Cgroup(d);
            std::fs::write(cg.0.join("memory.limit_in_bytes"), bytes.to_string()).ok()?;
            // With swap the kernel would swap, not kill: no swap either.
            let _ = std::fs::write(cg.0.join("memory.memsw.limit_in_bytes"), bytes.to_string());
            Some(cg)
        } else if std::fs::read_to_string(v2.join("cgroup.subtree_control"))
            .is_ok_and(|c| c.split_whitespace().any(|w| w == "memory"))
        {
            let d = v2.join(&name);
            std::fs::create_dir(&d).ok()?;
            let cg = Cgroup(d);
            std::fs::write(cg.0.join("memory.max"), bytes.to_string()).ok()?;
            let _ = std::fs::write(cg.0.join("memory.swap.max"), "0");
            Some(cg)
        } else {
            None
        };
        if made.is_none() {
            assert!(
                std::env::var_os("ERDMA_REQUIRE_CGROUP").is_none(),
                "no memory cgroup can be made here"
            );
            eprintln!("skipped: no memory cgroup can be made here (root and a memory controller)");
        }
        made
    }

    /// `c` started inside the cgroup.
    pub fn wrap(&self, c: &Command) -> Command {
        in_shell(
            &format!("echo $$ > {}/cgroup.procs &&", self.0.display()),
            c,
        )
    }
}

/// `c` (its program, arguments and environment) exec'd by bash after
/// `prefix` (`ulimit -f 64;`, a cgroup's join): a limit set for `c` alone.
pub fn in_shell(prefix: &str, c: &Command) -> Command {
    let mut sh = Command::new("bash");
    sh.arg("-c")
        .arg(format!("{prefix} exec \"$0\" \"$@\""))
        .arg(c.get_program())
        .args(c.get_args());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    sh
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Its processes have ended; the kernel may take a moment.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
