//! Stage 2 of erdma-cluster (`--pairs`): RDMA bandwidth between every pair of
//! ranks' NICs, both directions, each direction one erdma-perf run in-process
//! (the client on one rank, the server on the other, perftest's exchange), in
//! rounds in which every rank has at most one partner. The MPI part (swapping
//! addresses, a barrier after each run, gathering the runs on rank 0) is the
//! binary's; this module runs one rank's share and renders the matrix.

use std::net::Ipv4Addr;

use serde_json::{Value, json};

use crate::doctor::Status;
use crate::doctor::host::Host;
use crate::perf;
use crate::perf::options::{Options, Parsed};

/// The erdma-perf tests a pair may run.
pub const TESTS: [&str; 3] = ["write_bw", "read_bw", "send_bw"];

/// The options of the pair stage (part of erdma-cluster's command line).
#[derive(Debug, Clone, clap::Args)]
pub struct PairArgs {
    /// Also measure every pair of ranks' NICs with erdma-perf, both
    /// directions (after the checks).
    #[arg(long)]
    pub pairs: bool,
    /// The erdma-perf test of each pair.
    #[arg(long, value_name = "TEST", default_value = "write_bw", value_parser = TESTS)]
    pub pair_test: String,
    /// Each rank's device: rank i takes entry i modulo the list's length
    /// (default: -d of --perf-args, else the first device).
    #[arg(long, value_name = "D0,D1,...", value_delimiter = ',')]
    pub devices: Vec<String>,
    /// More erdma-perf options for every pair, e.g. "-x 1 -s 1048576 -n 1000
    /// --report_gbits" (iWARP devices get -R without asking).
    #[arg(
        long,
        value_name = "OPTIONS",
        default_value = "",
        allow_hyphen_values = true
    )]
    pub perf_args: String,
    /// TCP port of the first run's exchange; each run takes the next one.
    #[arg(long, value_name = "PORT", default_value_t = 18600)]
    pub pair_port: u16,
}

/// One direction of one pair, as the rank that ran it reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct PairRun {
    /// The rank of the client (erdma-perf's initiator).
    pub client: usize,
    /// The rank of the server.
    pub server: usize,
    /// Which side this is: `client` or `server`.
    pub role: String,
    /// The client's BW average in Gb/s at the largest size (none when the
    /// run failed or on the server side).
    pub gbps: Option<f64>,
    /// What failed, in one line.
    pub error: Option<String>,
    /// The erdma-perf document (`null` when the run failed before it had one).
    pub doc: Value,
}

impl PairRun {
    /// As JSON (what a rank sends to rank 0).
    pub fn to_json(&self) -> Value {
        json!({"client": self.client, "server": self.server, "role": self.role,
               "gbps": self.gbps, "error": self.error, "doc": self.doc})
    }

    /// From [`PairRun::to_json`]; `None` when it is not one.
    pub fn from_json(v: &Value) -> Option<PairRun> {
        Some(PairRun {
            client: v["client"].as_u64()? as usize,
            server: v["server"].as_u64()? as usize,
            role: v["role"].as_str()?.to_owned(),
            gbps: v["gbps"].as_f64(),
            error: v["error"].as_str().map(str::to_owned),
            doc: v["doc"].clone(),
        })
    }
}

/// The round-robin schedule: this rank's partner in round `r` of `n` (even)
/// slots, or `None` when it sits out (odd rank counts).
pub fn partner(rank: usize, r: usize, n: usize, real: usize) -> Option<usize> {
    let m = n - 1;
    let p = if rank == m {
        r
    } else if rank == r {
        m
    } else {
        (2 * r + m - rank) % m
    };
    (p != rank && p < real && rank < real).then_some(p)
}

/// How many rounds `size` ranks need (each one run per direction).
pub fn rounds(size: usize) -> usize {
    if size < 2 {
        0
    } else {
        size.div_ceil(2) * 2 - 1
    }
}

/// Whether the port range of all runs fits below 65536.
pub fn check_ports(a: &PairArgs, size: usize) -> Result<(), String> {
    let runs = 2 * rounds(size) as u32;
    if u32::from(a.pair_port) + runs > 65535 {
        return Err(format!(
            "--pair-port {}: {size} ranks need {runs} ports from there: take a lower port",
            a.pair_port
        ));
    }
    Ok(())
}

/// erdma-perf's command line for this rank's side of a run (`peer`: the
/// server's address, for the client).
fn perf_argv(a: &PairArgs, rank: usize, port: u16, iwarp: bool, peer: Option<&str>) -> Vec<String> {
    let mut v: Vec<String> = vec!["erdma-perf".into(), a.pair_test.clone()];
    v.extend(["--timeout", "30"].map(String::from));
    v.extend(a.perf_args.split_whitespace().map(String::from));
    if !a.devices.is_empty() {
        v.extend(["-d".into(), a.devices[rank % a.devices.len()].clone()]);
    }
    if iwarp && !v.iter().any(|s| s == "-R" || s == "--rdma_cm") {
        v.push("-R".into());
    }
    v.extend(["--json".into(), "-p".into(), port.to_string()]);
    v.extend(peer.map(str::to_owned));
    v
}

/// The options of this rank's runs (as its server side), or why they are
/// wrong (said once by rank 0 as a usage error).
pub fn options(a: &PairArgs, rank: usize) -> Result<Options, String> {
    let argv = perf_argv(a, rank, a.pair_port, false, None);
    match perf::options::parse(&argv) {
        Ok(Parsed::Run(o)) if o.server.is_some() => Err(format!(
            "--perf-args: '{}' is a server address: each pair's client is given its peer's",
            o.server.unwrap_or_default()
        )),
        Ok(Parsed::Run(o)) => Ok(*o),
        Ok(Parsed::Print(_)) => Err("--perf-args: -h/-V are not options of a run".into()),
        Err(e) => Err(format!("--perf-args: {e}")),
    }
}

/// What this rank's device is: whether it is iWARP (connects through RDMA
/// CM only) and the address its peers reach it at (the device's IPv4: an
/// IPv4-mapped GID, else its interface's; else the host name).
pub fn local_endpoint(o: &Options, host: &dyn Host) -> (bool, String) {
    let list = erdma::devices();
    let dev = match &o.device {
        Some(n) => list.find(n).ok(),
        None => list.iter().next(),
    };
    let Some(ctx) = dev.and_then(|d| d.open().ok()) else {
        return (false, perf::output::hostname());
    };
    let iwarp = ctx.transport() == erdma::Transport::Iwarp;
    let table = ctx.gid_table(o.ib_port).unwrap_or_default();
    let ip = table.iter().find_map(|g| g.gid.to_ipv4()).or_else(|| {
        let netdev = table.iter().find_map(|g| g.netdev.clone())?;
        interface_ipv4(host, &netdev)
    });
    (
        iwarp,
        ip.map_or_else(perf::output::hostname, |ip| ip.to_string()),
    )
}

fn interface_ipv4(host: &dyn Host, name: &str) -> Option<Ipv4Addr> {
    let i = host.interfaces().iter().find(|i| i.name == name)?;
    i.addrs.iter().find_map(|a| match a {
        std::net::IpAddr::V4(v4) => Some(*v4),
        std::net::IpAddr::V6(_) => None,
    })
}

/// This rank's share: in every round, both directions with its partner (the
/// lower rank is the client first); `barrier` after each run keeps the
/// ranks in step. `addrs[i]`: rank i's address, `iwarp`: whether this
/// rank's device needs RDMA CM.
pub fn run_rank(
    a: &PairArgs,
    rank: usize,
    addrs: &[String],
    iwarp: bool,
    barrier: &mut dyn FnMut(),
) -> Vec<PairRun> {
    let size = addrs.len();
    let n = size.div_ceil(2) * 2;
    let mut runs = Vec::new();
    for r in 0..rounds(size) {
        for d in 0..2u16 {
            let port = a.pair_port + 2 * r as u16 + d;
            if let Some(p) = partner(rank, r, n, size) {
                let client = if d == 0 { rank.min(p) } else { rank.max(p) };
                runs.push(one_run(a, rank, p, client == rank, port, iwarp, &addrs[p]));
            }
            barrier();
        }
    }
    runs
}

fn one_run(
    a: &PairArgs,
    rank: usize,
    peer: usize,
    client: bool,
    port: u16,
    iwarp: bool,
    peer_addr: &str,
) -> PairRun {
    let argv = perf_argv(a, rank, port, iwarp, client.then_some(peer_addr));
    let (doc, outcome) = match perf::options::parse(&argv) {
        Ok(Parsed::Run(mut o)) => {
            // A server whose client never comes (it failed first) gives
            // up like any other step, so that the rounds go on.
            o.wait = Some(o.timeout);
            perf::run_quiet(&o)
        }
        Ok(Parsed::Print(_)) => (None, Ok(())),
        Err(e) => (None, Err(e)),
    };
    let doc = doc.unwrap_or(Value::Null);
    let gbps = if client { last_gbps(&doc) } else { None };
    PairRun {
        client: if client { rank } else { peer },
        server: if client { peer } else { rank },
        role: if client { "client" } else { "server" }.into(),
        gbps,
        error: outcome.err().map(|e| e.to_string()),
        doc,
    }
}

/// The BW average (Gb/s) of the document's last row.
pub fn last_gbps(doc: &Value) -> Option<f64> {
    doc["results"].as_array()?.last()?["bw_avg_gbps"].as_f64()
}

/// The gathered runs of every rank, as a matrix.
#[derive(Debug, Clone)]
pub struct Matrix {
    /// The test every pair ran.
    pub test: String,
    /// `gbps[client][server]`.
    pub gbps: Vec<Vec<Option<f64>>>,
    /// Every run, both sides.
    pub runs: Vec<PairRun>,
}

impl Matrix {
    /// From the runs each rank sent (index = rank; each a JSON array).
    pub fn from_ranks(test: &str, raw: &[Vec<u8>]) -> Result<Matrix, String> {
        let n = raw.len();
        let mut runs = Vec::new();
        for (rank, bytes) in raw.iter().enumerate() {
            let v: Value = serde_json::from_slice(bytes)
                .map_err(|e| format!("rank {rank}: its pair runs are not JSON: {e}"))?;
            for r in v.as_array().into_iter().flatten() {
                let run = PairRun::from_json(r)
                    .filter(|r| r.client < n && r.server < n)
                    .ok_or_else(|| format!("rank {rank}: a pair run is malformed: {r}"))?;
                runs.push(run);
            }
        }
        let mut gbps = vec![vec![None; n]; n];
        for r in runs.iter().filter(|r| r.role == "client") {
            gbps[r.client][r.server] = r.gbps;
        }
        Ok(Matrix {
            test: test.to_owned(),
            gbps,
            runs,
        })
    }

    /// Fail when a run failed or a pair has no value; ok otherwise.
    pub fn status(&self) -> Status {
        let n = self.gbps.len();
        let missing = (0..n).any(|i| (0..n).any(|j| i != j && self.gbps[i][j].is_none()));
        if missing || self.runs.iter().any(|r| r.error.is_some()) {
            Status::Fail
        } else {
            Status::Ok
        }
    }

    /// The text section (`labels[i]`: rank i's name).
    pub fn render_text(&self, labels: &[String]) -> String {
        let n = self.gbps.len();
        let mut s = format!(
            "# NIC pairs: erdma-perf {}, BW average in Gb/s (row: client, column: server)\n",
            self.test
        );
        if n < 2 {
            s.push_str("one rank: no pair to measure\n");
            return s;
        }
        let w = labels.iter().map(|l| l.len()).max().unwrap_or(6).max(8);
        s.push_str(&format!("{:<w$}", "client"));
        for l in labels {
            s.push_str(&format!(" {l:>w$}"));
        }
        s.push('\n');
        for (i, row) in self.gbps.iter().enumerate() {
            s.push_str(&format!("{:<w$}", labels[i]));
            for (j, v) in row.iter().enumerate() {
                let cell = match (i == j, v) {
                    (true, _) => "-".to_owned(),
                    (false, Some(g)) => format!("{g:.2}"),
                    (false, None) => "failed".to_owned(),
                };
                s.push_str(&format!(" {cell:>w$}"));
            }
            s.push('\n');
        }
        if let (Some(lo), Some(hi)) = (self.extreme(false), self.extreme(true)) {
            s.push_str(&format!(
                "slowest {} -> {} {:.2} Gb/s, fastest {} -> {} {:.2} Gb/s\n",
                labels[lo.0], labels[lo.1], lo.2, labels[hi.0], labels[hi.1], hi.2
            ));
        }
        // Each error once, with the runs that had it (a missing device
        // fails every run alike).
        let mut by_error: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
        for r in &self.runs {
            if let Some(e) = &r.error {
                let run = format!("{} -> {} ({})", labels[r.client], labels[r.server], r.role);
                by_error.entry(e).or_default().push(run);
            }
        }
        for (e, runs) in by_error {
            let shown = runs.iter().take(4).cloned().collect::<Vec<_>>().join(", ");
            let more = match runs.len() {
                n if n > 4 => format!(", ... ({} more)", n - 4),
                _ => String::new(),
            };
            s.push_str(&format!(
                "fail  {} run(s): {e}\n      in: {shown}{more}\n",
                runs.len()
            ));
        }
        s
    }

    /// The slowest (`fastest` false) or fastest pair: (client, server, Gb/s).
    fn extreme(&self, fastest: bool) -> Option<(usize, usize, f64)> {
        let all = self.gbps.iter().enumerate().flat_map(|(i, row)| {
            row.iter()
                .enumerate()
                .filter_map(move |(j, v)| v.map(|g| (i, j, g)))
        });
        all.reduce(|a, b| if (b.2 > a.2) == fastest { b } else { a })
    }

    /// The `pairs` object of the cluster's JSON document.
    pub fn to_json(&self) -> Value {
        json!({
            "test": self.test,
            "unit": "Gb/s",
            "status": self.status(),
            "gbps": self.gbps,
            "runs": self.runs.iter().map(PairRun::to_json).collect::<Vec<_>>(),
        })
    }

    /// The client documents to write under `--out`: (client, server, doc).
    pub fn client_docs(&self) -> impl Iterator<Item = (usize, usize, &Value)> {
        self.runs
            .iter()
            .filter(|r| r.role == "client" && !r.doc.is_null())
            .map(|r| (r.client, r.server, &r.doc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_meets_every_pair_once() {
        for size in 2..=9usize {
            let n = size.div_ceil(2) * 2;
            let mut met = vec![vec![0; size]; size];
            for r in 0..rounds(size) {
                for (rank, row) in met.iter_mut().enumerate() {
                    if let Some(p) = partner(rank, r, n, size) {
                        assert_eq!(partner(p, r, n, size), Some(rank), "symmetric");
                        row[p] += 1;
                    }
                }
            }
            for (i, row) in met.iter().enumerate() {
                for (j, &m) in row.iter().enumerate() {
                    assert_eq!(m, usize::from(i != j), "size {size}: {i} and {j}");
                }
            }
        }
        assert_eq!(rounds(1), 0);
    }

    fn args(extra: &str) -> PairArgs {
        PairArgs {
            pairs: true,
            pair_test: "write_bw".into(),
            devices: vec!["rxe0".into(), "rxe1".into()],
            perf_args: extra.into(),
            pair_port: 18600,
        }
    }

    #[test]
    fn argv_of_each_side() {
        let a = args("-x 1 -s 65536");
        let c = perf_argv(&a, 1, 18601, false, Some("10.0.0.1"));
        assert_eq!(
            c.join(" "),
            "erdma-perf write_bw --timeout 30 -x 1 -s 65536 -d rxe1 --json -p 18601 10.0.0.1"
        );
        let s = perf_argv(&a, 2, 18600, true, None);
        assert_eq!(
            s.join(" "),
            "erdma-perf write_bw --timeout 30 -x 1 -s 65536 -d rxe0 -R --json -p 18600"
        );
        assert!(options(&a, 0).is_ok());
        let bad = options(&args("--no-such-option"), 0).unwrap_err();
        assert!(bad.starts_with("--perf-args: "), "{bad}");
        let addr = options(&args("-s 4096 10.0.0.9"), 0).unwrap_err();
        assert!(addr.contains("'10.0.0.9' is a server address"), "{addr}");
    }

    #[test]
    fn ports_must_fit() {
        let mut a = args("");
        assert!(check_ports(&a, 64).is_ok());
        a.pair_port = 65500;
        assert!(
            check_ports(&a, 64)
                .unwrap_err()
                .contains("take a lower port")
        );
    }

    fn run(
        client: usize,
        server: usize,
        role: &str,
        gbps: Option<f64>,
        err: Option<&str>,
    ) -> Value {
        PairRun {
            client,
            server,
            role: role.into(),
            gbps,
            error: err.map(str::to_owned),
            doc: json!({"tool": "erdma-perf", "results": [{"bw_avg_gbps": gbps}]}),
        }
        .to_json()
    }

    #[test]
    fn matrix_from_gathered_runs() {
        let r0 = json!([
            run(0, 1, "client", Some(20.5), None),
            run(1, 0, "server", None, None)
        ]);
        let r1 = json!([
            run(0, 1, "server", None, None),
            run(1, 0, "client", Some(19.0), None)
        ]);
        let raw: Vec<Vec<u8>> = [r0, r1]
            .iter()
            .map(|v| v.to_string().into_bytes())
            .collect();
        let m = Matrix::from_ranks("write_bw", &raw).unwrap();
        assert_eq!(m.gbps, vec![vec![None, Some(20.5)], vec![Some(19.0), None]]);
        assert_eq!(m.status(), Status::Ok);
        let text = m.render_text(&["a".into(), "b".into()]);
        assert!(
            text.contains("slowest b -> a 19.00 Gb/s, fastest a -> b 20.50 Gb/s"),
            "{text}"
        );
        assert_eq!(m.client_docs().count(), 2);
        assert_eq!(m.to_json()["gbps"][0][1], 20.5);
    }

    #[test]
    fn a_failed_side_fails_the_matrix() {
        let r0 = json!([run(
            0,
            1,
            "client",
            None,
            Some("connect to 10.0.0.2: refused")
        )]);
        let r1 = json!([run(0, 1, "server", None, Some("accept: timed out"))]);
        let raw: Vec<Vec<u8>> = [r0, r1]
            .iter()
            .map(|v| v.to_string().into_bytes())
            .collect();
        let m = Matrix::from_ranks("write_bw", &raw).unwrap();
        assert_eq!(m.status(), Status::Fail);
        let text = m.render_text(&["a".into(), "b".into()]);
        assert!(
            text.contains(
                "fail  1 run(s): connect to 10.0.0.2: refused\n      in: a -> b (client)"
            ),
            "{text}"
        );
        assert!(text.contains("failed"), "{text}");
    }

    #[test]
    fn garbage_from_a_rank_is_an_error() {
        assert!(Matrix::from_ranks("write_bw", &[b"[{\"client\": 7}]".to_vec()]).is_err());
        assert!(Matrix::from_ranks("write_bw", &[b"not json".to_vec()]).is_err());
        let far = json!([run(0, 5, "client", Some(1.0), None)])
            .to_string()
            .into_bytes();
        assert!(
            Matrix::from_ranks("write_bw", &[far]).is_err(),
            "rank out of range"
        );
    }
}
