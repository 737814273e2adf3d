//! The pair stage's results round by round under `--out DIR/rounds/`, so
//! that a job that is interrupted (a host hangs, mpirun is killed) keeps
//! the rounds it measured, and `--resume DIR` runs only the rest.
//!
//! A round file, `round-NNN.json`: `{"round": r, "job": {..}, "lost":
//! [ranks], "runs": [[rank 0's runs], [rank 1's runs], ...]}`, each run as
//! [`super::pairs::PairRun::to_json`] writes it. `job` names what the
//! rounds belong to (ranks, hosts, test, rails): a resumed job must be the
//! same one, or its matrix would mix two clusters. A round with ranks
//! `lost` in it is incomplete: `--resume` runs it again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// What a round belongs to: a resumed job must match it key by key.
pub fn job(hosts: &[String], test: &str, rails: usize, cross_rails: bool) -> Value {
    json!({"ranks": hosts.len(), "hosts": hosts, "test": test, "rails": rails,
           "cross_rails": cross_rails})
}

/// The directory the round files are in.
pub fn dir(out: &Path) -> PathBuf {
    out.join("rounds")
}

/// Writes round `r` (each rank's runs as the JSON array it sent) to
/// `out/rounds/round-NNN.json` through [`crate::outfile::write`], so that a
/// job killed while writing leaves the whole round or none.
/// `lost`: the ranks lost by the end of the round.
pub fn write(
    out: &Path,
    r: usize,
    job: &Value,
    per_rank: &[Vec<u8>],
    lost: &[usize],
) -> Result<PathBuf, String> {
    let runs: Vec<Value> = per_rank
        .iter()
        .map(|b| serde_json::from_slice(b).unwrap_or(Value::Null))
        .collect();
    let doc = json!({"round": r, "job": job, "lost": lost, "runs": runs});
    let d = dir(out);
    let path = d.join(format!("round-{r:03}.json"));
    std::fs::create_dir_all(&d)
        .and_then(|()| crate::outfile::write(&path, doc.to_string().as_bytes()))
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(path)
}

/// The rounds measured under `resume/rounds/` (round -> each rank's runs),
/// checked to belong to `job`, without the rounds that lost a rank (they
/// run again); an error is one line saying what differs or what is
/// missing, naming the file. `planned`: the rounds of the job's schedule;
/// a round beyond it, more round files than it has, a run on a rail or a
/// rank the job does not have or a file over [`crate::input::MAX_DOCUMENT_BYTES`]
/// (or not a regular file) is refused.
pub fn read(
    resume: &Path,
    job: &Value,
    planned: usize,
) -> Result<BTreeMap<usize, Vec<Value>>, String> {
    let d = dir(resume);
    let entries = std::fs::read_dir(&d).map_err(|e| {
        format!(
            "--resume {}: {e} reading {}: name the --out directory of the interrupted job",
            resume.display(),
            d.display()
        )
    })?;
    let mut files = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("round-") && name.ends_with(".json")) {
            continue;
        }
        files.push(e.path());
        // Enough to know there are too many: 20,000 files are not read.
        if files.len() > planned {
            break;
        }
    }
    files.sort();
    if files.len() > planned {
        // Another job's rounds are named as such first.
        if let Some(first) = files.first() {
            parse(first, job, usize::MAX)?;
        }
        return Err(format!(
            "--resume {}: more round files in {} than the {planned} rounds of this job's schedule: name the --out directory of the same job, or start afresh",
            resume.display(),
            d.display()
        ));
    }
    let mut done = BTreeMap::new();
    for path in &files {
        if let (r, Some(runs)) = parse(path, job, planned)? {
            done.insert(r, runs);
        }
    }
    if files.is_empty() {
        return Err(format!(
            "--resume {}: no round-NNN.json in {}: name the --out directory of the interrupted job",
            resume.display(),
            d.display()
        ));
    }
    Ok(done)
}

/// One round file: its round and each rank's runs (none if a rank was
/// lost in it).
fn parse(path: &Path, job: &Value, planned: usize) -> Result<(usize, Option<Vec<Value>>), String> {
    let bad = |why: String| format!("--resume: {}: {why}", path.display());
    let v = crate::input::read_json(path).map_err(|e| match e.kind {
        crate::input::InputErrorKind::NotJson(why) => bad(format!("not JSON: {why}")),
        _ => format!("--resume: {e}"),
    })?;
    if let Some(why) = differs(&v["job"], job) {
        return Err(bad(format!(
            "another job: {why}; resume with the same hosts, ranks, --pair-test and NICs, or start afresh"
        )));
    }
    let r = v["round"]
        .as_u64()
        .ok_or_else(|| bad("no \"round\" number".into()))?;
    if r >= planned as u64 {
        return Err(bad(format!(
            "round {r} is beyond this job's schedule of {planned} rounds: start afresh"
        )));
    }
    let r = r as usize;
    if !path.ends_with(format!("round-{r:03}.json")) {
        return Err(bad(format!(
            "it holds round {r}, not the round of its name: start afresh"
        )));
    }
    let ranks = job["ranks"].as_u64().unwrap_or(0) as usize;
    let runs = v["runs"]
        .as_array()
        .filter(|a| a.len() == ranks)
        .filter(|a| a.iter().all(Value::is_array))
        .ok_or_else(|| bad("\"runs\" is not one array of runs per rank".into()))?;
    let rails = job["rails"].as_u64().unwrap_or(1).max(1);
    // Both directions with each peer on every pair of rails, and a rerun
    // of each: far more than any schedule gives a rank in one round.
    let most = 4 * ranks as u64 * rails * rails;
    for (i, rank_runs) in runs.iter().enumerate() {
        let rank_runs = rank_runs.as_array().map_or(&[][..], Vec::as_slice);
        if rank_runs.len() as u64 > most {
            return Err(bad(format!(
                "rank {i} has {} runs in one round, more than this job can make ({most}): start afresh",
                rank_runs.len()
            )));
        }
        for run in rank_runs {
            if let Some(why) = foreign(run, ranks as u64, rails) {
                return Err(bad(format!("rank {i}: {why}: start afresh")));
            }
        }
    }
    let complete = v["lost"].as_array().is_none_or(Vec::is_empty);
    Ok((r, complete.then(|| runs.clone())))
}

/// Why a run does not belong to a job of `ranks` ranks on `rails` rails:
/// a rank or a rail it does not have.
fn foreign(run: &Value, ranks: u64, rails: u64) -> Option<String> {
    for k in ["client", "server"] {
        match run[k].as_u64() {
            Some(v) if v < ranks => {}
            _ => {
                return Some(format!(
                    "a run's {k} is {}, not one of its {ranks} ranks",
                    run[k]
                ));
            }
        }
    }
    match &run["rail"] {
        Value::Null => None,
        v if v.as_u64().is_some_and(|r| r < rails) => None,
        v => Some(format!("a run's rail is {v}, not one of its {rails} rails")),
    }
}

/// The first key in which the round's job differs from this one.
fn differs(was: &Value, now: &Value) -> Option<String> {
    ["ranks", "hosts", "test", "rails", "cross_rails", "schedule"]
        .iter()
        .find(|k| was[**k] != now[**k])
        .map(|k| format!("{k} was {} and is now {}", was[*k], now[*k]))
}

/// Each rank's runs of every round in round order, as the JSON arrays the
/// report reads (rank 0's view of the whole stage).
pub fn per_rank(rounds: &BTreeMap<usize, Vec<Value>>, ranks: usize) -> Vec<Vec<u8>> {
    (0..ranks)
        .map(|i| {
            let mut all = Vec::new();
            for (r, per) in rounds {
                match per.get(i).and_then(Value::as_array) {
                    Some(runs) => all.extend(runs.iter().cloned()),
                    // Garbage from a rank is not dropped: these bytes are
                    // not JSON, so the matrix names the rank and the round.
                    None => return format!("round {r}: no array of runs").into_bytes(),
                }
            }
            Value::Array(all).to_string().into_bytes()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("erdma-rounds-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn rounds_written_read_back_and_joined() {
        let d = tmp("rw");
        let hosts = vec!["a".to_string(), "b".to_string()];
        let j = job(&hosts, "write_bw", 1, false);
        let run = |c: u64| json!({"client": c, "server": 1 - c, "role": "client"});
        write(
            &d,
            0,
            &j,
            &[b"[]".to_vec(), json!([run(1)]).to_string().into()],
            &[],
        )
        .unwrap();
        write(
            &d,
            2,
            &j,
            &[json!([run(0)]).to_string().into(), b"[]".to_vec()],
            &[],
        )
        .unwrap();
        // A round that lost rank 1 is run again by --resume.
        write(&d, 1, &j, &[b"[]".to_vec(), b"[]".to_vec()], &[1]).unwrap();
        // No temporary file is left beside the rounds.
        assert_eq!(std::fs::read_dir(dir(&d)).unwrap().count(), 3);
        let done = read(&d, &j, 3).unwrap();
        assert_eq!(done.keys().copied().collect::<Vec<_>>(), vec![0, 2]);
        let all = per_rank(&done, 2);
        let r0: Value = serde_json::from_slice(&all[0]).unwrap();
        let r1: Value = serde_json::from_slice(&all[1]).unwrap();
        assert_eq!(r0, json!([run(0)]));
        assert_eq!(r1, json!([run(1)]));
        // Another job: one line naming the key that differs.
        let other = job(&hosts, "read_bw", 1, false);
        let e = read(&d, &other, 3).unwrap_err();
        assert!(
            e.contains("test was \"write_bw\" and is now \"read_bw\""),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_directory_without_rounds_is_an_error() {
        let d = tmp("none");
        let j = job(&["a".into()], "write_bw", 1, false);
        assert!(
            read(&d, &j, 3)
                .unwrap_err()
                .contains("name the --out directory")
        );
        std::fs::create_dir_all(dir(&d)).unwrap();
        assert!(read(&d, &j, 3).unwrap_err().contains("no round-NNN.json"));
        std::fs::write(dir(&d).join("round-000.json"), "{").unwrap();
        assert!(read(&d, &j, 3).unwrap_err().contains("not JSON"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn rounds_are_checked_against_the_job() {
        let d = tmp("plan");
        let hosts = vec!["a".to_string(), "b".to_string()];
        let j = job(&hosts, "write_bw", 1, false);
        let run = |c: u64, rail: Value| json!({"client": c, "server": 1 - c, "rail": rail});
        let one = |r: usize, rail: Value| {
            write(
                &d,
                r,
                &j,
                &[json!([run(0, rail)]).to_string().into(), b"[]".to_vec()],
                &[],
            )
            .unwrap()
        };
        // A round beyond the schedule of 3 rounds, named.
        let p = one(3, json!(0));
        let e = read(&d, &j, 3).unwrap_err();
        assert!(
            e.contains("round-003.json: round 3 is beyond this job's schedule of 3 rounds"),
            "{e}"
        );
        std::fs::remove_file(&p).unwrap();
        // A rail the job does not have.
        one(0, json!(20000));
        let e = read(&d, &j, 3).unwrap_err();
        assert!(
            e.contains("round-000.json: rank 0: a run's rail is 20000, not one of its 1 rails"),
            "{e}"
        );
        one(0, json!(0));
        assert_eq!(read(&d, &j, 3).unwrap().len(), 1);
        // More round files than rounds.
        for r in 1..4 {
            std::fs::copy(
                dir(&d).join("round-000.json"),
                dir(&d).join(format!("round-{r:03}.json")),
            )
            .unwrap();
        }
        let e = read(&d, &j, 3).unwrap_err();
        assert!(e.contains("more round files"), "{e}");
        std::fs::remove_file(dir(&d).join("round-003.json")).unwrap();
        // A file that holds another round than its name says.
        let e = read(&d, &j, 3).unwrap_err();
        assert!(e.contains("not the round of its name"), "{e}");
        for r in 1..3 {
            std::fs::remove_file(dir(&d).join(format!("round-{r:03}.json"))).unwrap();
        }
        // /dev/zero and a FIFO as round files: refused at once, named.
        let zero = dir(&d).join("round-001.json");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = read(&d, &j, 3).unwrap_err();
        assert!(e.contains("round-001.json is a character device"), "{e}");
        std::fs::remove_file(&zero).unwrap();
        let c = std::ffi::CString::new(zero.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read(&d, &j, 3).unwrap_err();
        assert!(e.contains("round-001.json is a FIFO"), "{e}");
        std::fs::remove_file(&zero).unwrap();
        // A round file over the document cap.
        let big = std::fs::File::create(&zero).unwrap();
        big.set_len(crate::input::MAX_DOCUMENT_BYTES + 1).unwrap();
        let e = read(&d, &j, 3).unwrap_err();
        assert!(e.contains("round-001.json is larger than 16 MiB"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn garbage_from_a_rank_in_a_round_is_not_dropped() {
        let mut rounds = BTreeMap::new();
        rounds.insert(0, vec![json!([]), json!([])]);
        rounds.insert(1, vec![json!([]), Value::Null]);
        let per = per_rank(&rounds, 2);
        assert_eq!(per[0], b"[]");
        let err = crate::cluster::pairs::Matrix::from_ranks("write_bw", &per).unwrap_err();
        assert!(err.contains("rank 1: its pair runs are not JSON"), "{err}");
    }
}
