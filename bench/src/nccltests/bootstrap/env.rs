//! Rank, world size and rendezvous address from the launcher's environment,
//! for runs without MPI (containers, Kubernetes, torchrun-style launchers,
//! Slurm's srun, or mpirun of a binary built without MPI).
//!
//! Sources, first match wins: RANK/WORLD_SIZE/LOCAL_RANK;
//! OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK; SLURM_PROCID/SLURM_NTASKS/
//! SLURM_LOCALID; PMI_RANK/PMI_SIZE. The rendezvous is MASTER_ADDR and
//! MASTER_PORT (default 29500); without MASTER_ADDR, 127.0.0.1 is used when
//! every rank is on one node, and for Slurm the first node of the job.

use crate::nccltests::errors::{TestError, TestResult};

/// Default MASTER_PORT (PyTorch's).
pub const DEFAULT_PORT: u16 = 29500;

/// The largest WORLD_SIZE accepted: far beyond any cluster this runs on,
/// and small enough that per-rank tables stay small (a WORLD_SIZE of 1e8
/// or 2^64-1 is a typo, refused before anything is sized by it).
pub const MAX_WORLD: usize = 1 << 20;

/// What the environment says about this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchEnv {
    /// Which variables were used.
    pub source: &'static str,
    /// This process's rank.
    pub rank: usize,
    /// Number of processes.
    pub size: usize,
    /// Local rank, when given.
    pub local_rank: Option<usize>,
    /// Rendezvous host.
    pub master_addr: String,
    /// Rendezvous port.
    pub master_port: u16,
}

type Getter<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Reads the process environment; None when no rank variables are set.
pub fn detect() -> Option<TestResult<LaunchEnv>> {
    detect_with(&|k| std::env::var(k).ok())
}

/// [`detect`] over any variable source (for tests).
pub fn detect_with(get: Getter) -> Option<TestResult<LaunchEnv>> {
    if let Some(e) = half_pair(get) {
        return Some(Err(e));
    }
    let sources: [(&str, &str, &str, &str); 4] = [
        ("RANK", "WORLD_SIZE", "LOCAL_RANK", "RANK/WORLD_SIZE"),
        (
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "Open MPI",
        ),
        ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "Slurm"),
        ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "PMI"),
    ];
    let (rk, sk, lk, source) = sources
        .into_iter()
        .find(|(r, s, _, _)| get(r).is_some() && get(s).is_some())?;
    Some(build(get, rk, sk, lk, source))
}

/// RANK or WORLD_SIZE without the other: half of the pair is a broken
/// launch script, not "no launcher" (the process would run alone, silently).
fn half_pair(get: Getter) -> Option<TestError> {
    match (get("RANK").is_some(), get("WORLD_SIZE").is_some()) {
        (false, true) => Some(TestError::InvalidUsage(
            "WORLD_SIZE is set but RANK is not: export RANK (0..WORLD_SIZE-1) for every process, or unset WORLD_SIZE".into(),
        )),
        (true, false) => Some(TestError::InvalidUsage(
            "RANK is set but WORLD_SIZE is not: export WORLD_SIZE (the number of processes), or unset RANK".into(),
        )),
        _ => None,
    }
}

/// RANK and WORLD_SIZE alone (no rendezvous needed): None when neither is
/// set, an error when one is missing or either is not a number.
pub fn rank_and_size(get: Getter) -> Option<TestResult<(usize, usize)>> {
    if let Some(e) = half_pair(get) {
        return Some(Err(e));
    }
    get("RANK")?;
    Some(number(get, "RANK").and_then(|r| Ok((r, number(get, "WORLD_SIZE")?))))
}

fn number(get: Getter, key: &str) -> TestResult<usize> {
    let v = get(key).unwrap_or_default();
    v.trim().parse::<usize>().map_err(|_| {
        TestError::InvalidUsage(format!(
            "environment variable {key}='{v}' is not a non-negative integer"
        ))
    })
}

fn build(get: Getter, rk: &str, sk: &str, lk: &str, source: &'static str) -> TestResult<LaunchEnv> {
    let rank = number(get, rk)?;
    let size = number(get, sk)?;
    if size == 0 || size > MAX_WORLD {
        return Err(TestError::InvalidUsage(format!(
            "{sk}={size} is not a number of processes this tool can run (1 to {MAX_WORLD})"
        )));
    }
    if rank >= size {
        return Err(TestError::InvalidUsage(format!(
            "{rk}={rank} is not below {sk}={size}: every rank must be in 0..{sk}"
        )));
    }
    let local_rank = if get(lk).is_some() {
        Some(number(get, lk)?)
    } else {
        None
    };
    let master_port = match get("MASTER_PORT") {
        None => DEFAULT_PORT,
        Some(p) => p
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| {
                TestError::InvalidUsage(format!("MASTER_PORT='{p}' is not a TCP port (1-65535)"))
            })?,
    };
    let master_addr = match get("MASTER_ADDR").filter(|a| !a.trim().is_empty()) {
        Some(a) => a.trim().to_string(),
        None => default_master(get, size).ok_or_else(|| {
            TestError::InvalidUsage(format!(
                "MASTER_ADDR is not set and the {size} ranks span several nodes: export MASTER_ADDR=<address of rank 0's host> (and MASTER_PORT)"
            ))
        })?,
    };
    Ok(LaunchEnv {
        source,
        rank,
        size,
        local_rank,
        master_addr,
        master_port,
    })
}

/// A rendezvous address when MASTER_ADDR is missing.
fn default_master(get: Getter, size: usize) -> Option<String> {
    let all_local = get("OMPI_COMM_WORLD_LOCAL_SIZE").and_then(|v| v.trim().parse::<usize>().ok())
        == Some(size)
        || get("SLURM_NNODES")
            .map(|v| v.trim() == "1")
            .unwrap_or(false)
        || get("LOCAL_WORLD_SIZE").and_then(|v| v.trim().parse::<usize>().ok()) == Some(size);
    if all_local || size == 1 {
        return Some("127.0.0.1".into());
    }
    get("SLURM_JOB_NODELIST")
        .or_else(|| get("SLURM_NODELIST"))
        .and_then(|l| first_node(&l))
}

/// The first host of a Slurm node list such as `gpu[03-05,07],cpu1`.
pub fn first_node(list: &str) -> Option<String> {
    let first = split_top(list).into_iter().next()?.trim().to_string();
    match first.find('[') {
        None => (!first.is_empty()).then_some(first),
        Some(open) => {
            let prefix = &first[..open];
            let inner = first[open + 1..].trim_end_matches(']');
            let range = inner.split(',').next()?;
            let lo = range.split('-').next()?;
            Some(format!("{prefix}{lo}"))
        }
    }
}

/// Splits at commas outside brackets.
fn split_top(list: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&list[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Option<TestResult<LaunchEnv>> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        detect_with(&move |k| m.get(k).cloned())
    }

    #[test]
    fn rank_and_size_alone() {
        let m = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|p| p.0 == k).map(|p| p.1.to_string())
        };
        assert!(rank_and_size(&m(&[("SLURM_PROCID", "1")])).is_none());
        let both = rank_and_size(&m(&[("RANK", "1"), ("WORLD_SIZE", "2")]));
        assert_eq!(both.unwrap().unwrap(), (1, 2));
        assert!(rank_and_size(&m(&[("WORLD_SIZE", "2")])).unwrap().is_err());
    }

    #[test]
    fn half_of_rank_and_world_size_is_an_error() {
        for (k, missing) in [("WORLD_SIZE", "RANK is not"), ("RANK", "WORLD_SIZE is not")] {
            let e = env(&[(k, "2")]).unwrap().unwrap_err();
            assert_eq!(e.exit_code(), 6);
            assert!(e.to_string().contains(missing), "{e}");
        }
    }

    #[test]
    fn torchrun_style() {
        let e = env(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "1234"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (
                e.rank,
                e.size,
                e.local_rank,
                e.master_addr.as_str(),
                e.master_port
            ),
            (1, 4, Some(1), "10.0.0.1", 1234)
        );
    }

    #[test]
    fn open_mpi_on_one_node_defaults_to_localhost() {
        let e = env(&[
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (e.source, e.master_addr.as_str(), e.master_port),
            ("Open MPI", "127.0.0.1", DEFAULT_PORT)
        );
    }

    #[test]
    fn slurm_uses_first_node() {
        let e = env(&[
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NNODES", "2"),
            ("SLURM_JOB_NODELIST", "gpu[07-08],x"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (e.rank, e.local_rank, e.master_addr.as_str()),
            (3, Some(1), "gpu07")
        );
    }

    #[test]
    fn errors_are_messages() {
        assert!(env(&[]).is_none());
        let bad = |p: &[(&str, &str)]| env(p).unwrap().unwrap_err().to_string();
        assert!(bad(&[("RANK", "x"), ("WORLD_SIZE", "2")]).contains("RANK='x'"));
        assert!(bad(&[("RANK", "2"), ("WORLD_SIZE", "2")]).contains("not below"));
        for huge in ["100000000", "18446744073709551615", "0"] {
            assert!(
                bad(&[("RANK", "0"), ("WORLD_SIZE", huge)]).contains(&format!(
                    "WORLD_SIZE={huge} is not a number of processes this tool can run (1 to 1048576)"
                )),
                "{huge}"
            );
        }
        assert!(
            bad(&[("RANK", "0"), ("WORLD_SIZE", "99999999999999999999")]).contains("WORLD_SIZE='")
        );
        assert!(
            bad(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "99999")])
                .contains("MASTER_PORT")
        );
        assert!(bad(&[("RANK", "0"), ("WORLD_SIZE", "2")]).contains("MASTER_ADDR is not set"));
    }

    #[test]
    fn node_lists() {
        assert_eq!(first_node("a1,a2").as_deref(), Some("a1"));
        assert_eq!(first_node("n[1,3-4]").as_deref(), Some("n1"));
        assert_eq!(first_node("").as_deref(), None);
    }
}
