//! A check, its result, and what every check gets to look at.

use std::fmt;

use super::host::Host;

/// The result of one check, ordered from best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Fine.
    Ok,
    /// Not applicable here, or skipped on request.
    Skip,
    /// Works, but slower or fragile: the fix is recommended.
    Warn,
    /// Will not work as configured: the fix is needed.
    Fail,
}

impl Status {
    /// The word printed in the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Skip => "skip",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }

    /// The exit status for this worst result (see [`super::EXIT_OK`] and the others).
    pub fn exit_code(self) -> i32 {
        match self {
            Status::Ok | Status::Skip => super::EXIT_OK,
            Status::Warn => super::EXIT_WARN,
            Status::Fail => super::EXIT_FAIL,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which part of the bring-up a check belongs to (`--skip` takes these names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Group {
    /// libibverbs, devices, ports, GIDs, MTU, device nodes.
    Rdma,
    /// memlock, /dev/shm, open files.
    Limits,
    /// CUDA driver, GPUs, nvidia_peermem, NCCL library, GPU-NIC affinity.
    Gpu,
    /// The NCCL_* environment.
    Nccl,
    /// Container detection and docker run flags.
    Container,
}

impl Group {
    /// The group's name (the prefix of its checks' ids).
    pub fn as_str(self) -> &'static str {
        match self {
            Group::Rdma => "rdma",
            Group::Limits => "limits",
            Group::Gpu => "gpu",
            Group::Nccl => "nccl",
            Group::Container => "container",
        }
    }
}

/// What one check found.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Outcome {
    /// ok / skip / warn / fail.
    pub status: Status,
    /// What was found, one line.
    pub found: String,
    /// The one-line fix (warn and fail).
    pub fix: Option<String>,
    /// Machine-readable details (`--json`), `null` when none.
    pub details: serde_json::Value,
}

impl Outcome {
    fn new(status: Status, found: impl Into<String>, fix: Option<String>) -> Outcome {
        Outcome {
            status,
            found: one_line(found.into()),
            fix: fix.map(one_line),
            details: serde_json::Value::Null,
        }
    }
    /// Fine.
    pub fn ok(found: impl Into<String>) -> Outcome {
        Outcome::new(Status::Ok, found, None)
    }
    /// Not applicable.
    pub fn skip(found: impl Into<String>) -> Outcome {
        Outcome::new(Status::Skip, found, None)
    }
    /// Works, but the fix is recommended.
    pub fn warn(found: impl Into<String>, fix: impl Into<String>) -> Outcome {
        Outcome::new(Status::Warn, found, Some(fix.into()))
    }
    /// Will not work: the fix is needed.
    pub fn fail(found: impl Into<String>, fix: impl Into<String>) -> Outcome {
        Outcome::new(Status::Fail, found, Some(fix.into()))
    }
    /// With machine-readable details.
    pub fn details(mut self, details: serde_json::Value) -> Outcome {
        self.details = details;
        self
    }
}

/// Newlines in messages from libraries would break the one-line format.
fn one_line(s: String) -> String {
    if s.contains('\n') {
        s.split('\n')
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    } else {
        s
    }
}

/// One check: an id (`group.name`), what it checks, and the function.
#[derive(Clone, Copy)]
pub struct Check {
    /// `rdma.ports`, `limits.memlock`, ...
    pub id: &'static str,
    /// Its group.
    pub group: Group,
    /// What it checks, for `--list`.
    pub about: &'static str,
    /// The check itself.
    pub run: fn(&Ctx) -> Outcome,
}

impl fmt::Debug for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Check").field("id", &self.id).finish()
    }
}

/// What a check sees: the host, and which checks the user skipped (a check
/// that would name a fix for a skipped part, e.g. `--gpus all` when the GPU
/// checks are skipped, leaves it out).
pub struct Ctx<'a> {
    /// The host being checked.
    pub host: &'a dyn Host,
    /// Skipped groups and check ids.
    pub skipped: &'a [String],
    /// The GPUs this host should have (`--expect-gpus`); `None`: the
    /// `ERDMA_EXPECT_GPUS` environment variable, if set, else no expectation.
    pub expect_gpus: Option<u32>,
}

impl Ctx<'_> {
    /// Whether the check or group `name` runs.
    pub fn wants(&self, name: &str) -> bool {
        !self
            .skipped
            .iter()
            .any(|s| s == name || name.split('.').next() == Some(s.as_str()) && !s.contains('.'))
    }

    /// An environment variable, `None` when unset (an empty value counts as unset,
    /// as NCCL reads it).
    pub fn env(&self, name: &str) -> Option<String> {
        self.host.env(name).filter(|v| !v.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_status_orders_and_exit_codes() {
        let mut v = vec![Status::Warn, Status::Ok, Status::Fail, Status::Skip];
        v.sort();
        assert_eq!(v, [Status::Ok, Status::Skip, Status::Warn, Status::Fail]);
        assert_eq!(Status::Skip.exit_code(), 0);
        assert_eq!(Status::Warn.exit_code(), 1);
        assert_eq!(Status::Fail.exit_code(), 2);
    }

    #[test]
    fn messages_stay_on_one_line() {
        let o = Outcome::fail("a\n  b\n", "fix\nit");
        assert_eq!(o.found, "a; b");
        assert_eq!(o.fix.as_deref(), Some("fix; it"));
    }
}
