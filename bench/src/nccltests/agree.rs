//! The options every process must share, compared when the run starts.
//!
//! Processes started with different options (an MPMD launch, a wrapper
//! script that differs per node) would issue different collectives, or
//! the same ones with different sizes, and wait on each other until `-T`
//! or fail deep inside MPI (MPI_ERR_TRUNCATE). So before anything else
//! each process sends a digest of these options; when they differ, every
//! process exits 6 naming the first option that differs and its values.

use super::bootstrap::{self, Bootstrap};
use super::errors::{TestError, TestResult};
use super::options::Options;

/// The options that must agree, as (flag, value) in a fixed order. Only
/// what rank 0 alone uses is left out: the output files (`-J`, `--csv`)
/// and what only changes its report (`-C`, `-S`, `-M`, `-K`).
pub fn shared(o: &Options) -> Vec<(&'static str, String)> {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "all".into());
    vec![
        ("collective (the program)", o.program_name.clone()),
        ("--backend", o.backend.name().into()),
        ("-t", o.nthreads.to_string()),
        ("-g", o.ngpus.to_string()),
        ("-b", o.min_bytes.to_string()),
        ("-e", o.max_bytes.to_string()),
        ("-i", o.step_bytes.to_string()),
        ("-f", o.step_factor.to_string()),
        ("-n", o.iters.to_string()),
        ("-w", o.warmup_iters.to_string()),
        ("-m", o.agg_iters.to_string()),
        ("-N", o.run_cycles.to_string()),
        ("-p", o.parallel_init.to_string()),
        ("-c", o.datacheck.to_string()),
        ("-o", opt(o.op.map(|x| x.name().to_string()))),
        ("-d", opt(o.dtype.map(|x| x.name().to_string()))),
        ("-r", o.root.to_string()),
        ("-z", o.blocking.to_string()),
        ("-y", o.stream_null.to_string()),
        ("-T", o.timeout.to_string()),
        ("-G", o.graph_launches.to_string()),
        ("-a", o.average.to_string()),
        ("-R", o.local_register.to_string()),
        ("-x", o.cta_policy.to_string()),
        ("-D", o.device_impl.to_string()),
        ("-V", o.device_cta_count.to_string()),
        ("-u", o.unalign.to_string()),
        ("-I", o.per_iter_timing.to_string()),
    ]
}

/// FNV-1a over the shared options (flag, NUL, value, NUL...).
pub fn digest(o: &Options) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (k, v) in shared(o) {
        for b in k.bytes().chain([0]).chain(v.bytes()).chain([0]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Checks that every process of `boot` has the same shared options
/// (collective over `boot`; the first exchange of the run).
pub fn check(o: &Options, boot: &dyn Bootstrap) -> TestResult<()> {
    if boot.size() < 2 || super::hooks::Hooks::from_env().skip_option_check {
        return Ok(());
    }
    let all = boot.allgather(&digest(o).to_le_bytes())?;
    let digests: Vec<&[u8]> = all.chunks_exact(8).collect();
    if digests.iter().all(|d| *d == digests[0]) {
        return Ok(());
    }
    // Rarely here: exchange the options themselves to say which differs.
    let text: String = shared(o)
        .iter()
        .map(|(k, v)| format!("{k}\t{v}\n"))
        .collect();
    let texts = bootstrap::allgather_var(boot, text.as_bytes())?;
    Err(TestError::InvalidUsage(describe(&texts)))
}

/// The first option that differs between rank 0 and another process.
fn describe(texts: &[Vec<u8>]) -> String {
    let parse = |b: &[u8]| -> Vec<(String, String)> {
        String::from_utf8_lossy(b)
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let first = parse(&texts[0]);
    for (p, t) in texts.iter().enumerate().skip(1) {
        let other = parse(t);
        for (i, (k, v)) in first.iter().enumerate() {
            let theirs = other.get(i).map_or("?", |(_, w)| w.as_str());
            if theirs != v {
                return format!(
                    "the processes were started with different options: {k} is {v} on process 0 but {theirs} on process {p}: every process must get the same options (only -J, --csv, -C, -S, -M and -K may differ)"
                );
            }
        }
    }
    "the processes were started with different options (a different erdma-bench build?)".into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccltests::options::{Parsed, Printed, parse};
    use crate::nccltests::types::Features;

    fn opts(args: &[&str]) -> Options {
        let argv: Vec<String> = std::iter::once("all_reduce_perf")
            .chain(args.iter().copied())
            .map(String::from)
            .collect();
        match parse(&argv, Features::ALL, 0, &mut Printed::default()) {
            Parsed::Run(o) => *o,
            Parsed::Exit(c) => panic!("exit {c}"),
        }
    }

    fn text(o: &Options) -> Vec<u8> {
        shared(o)
            .iter()
            .map(|(k, v)| format!("{k}\t{v}\n"))
            .collect::<String>()
            .into_bytes()
    }

    #[test]
    fn digests_differ_exactly_when_shared_options_do() {
        let a = opts(&["-b", "8", "-e", "64K", "-J", "a.json", "-M", "1"]);
        let b = opts(&["-b", "8", "-e", "64K", "--csv", "b.csv", "-C", "1"]);
        assert_eq!(digest(&a), digest(&b));
        for other in [
            &["-b", "8", "-e", "1M"][..],
            &["-b", "8", "-e", "64K", "-c", "0"],
            &["-b", "8", "-e", "64K", "--backend", "host"],
            &["-b", "8", "-e", "64K", "-T", "0"],
            &["-b", "8", "-e", "64K", "-n", "50"],
        ] {
            assert_ne!(digest(&a), digest(&opts(other)), "{other:?}");
        }
    }

    #[test]
    fn the_first_difference_is_named() {
        let a = opts(&["-b", "8", "-e", "64K", "-n", "5"]);
        let b = opts(&["-b", "8", "-e", "1M", "-n", "50"]);
        let msg = describe(&[text(&a), text(&a), text(&b)]);
        assert!(
            msg.starts_with(
                "the processes were started with different options: -e is 65536 on process 0 but 1048576 on process 2"
            ),
            "{msg}"
        );
    }
}
