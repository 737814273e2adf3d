//! The command line: perftest's option letters and long names (perftest
//! 4.5-0.17), the same defaults and the same consistency rules
//! (`force_dependecies`), plus erdma-perf's own long options. Deliberate
//! differences are listed in [`USAGE`] and docs/tools/erdma-perf.md.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use erdma::Mtu;

use super::cases::{self, Kind, TestCase, Verb};
use super::error::{PerfError, PerfResult};
use crate::nccltests::getopt::{Event, Getopt, HasArg, LongOpt};

/// perftest's `MAX_SIZE`: the largest size of `-a` (8 MiB).
pub const MAX_SIZE: u64 = 1 << 23;
/// perftest's `MSG_SIZE_CQ_MOD_LIMIT`: above it CQ moderation is off by default.
const CQ_MOD_LIMIT: u64 = 8192;
/// perftest computes the peak bandwidth only up to this many iterations.
const PEAK_MAX_ITERS: u64 = 20000;
/// The default file of `--out_json` (perftest's `DEFAULT_JSON_FILE_NAME`).
pub const DEFAULT_JSON_FILE: &str = "perftest_out.json";

/// Atomic operation of the atomic tests (`-A`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicType {
    /// `CMP_AND_SWAP`.
    CmpAndSwap,
    /// `FETCH_AND_ADD` (perftest's default).
    FetchAndAdd,
}

impl AtomicType {
    /// perftest's name.
    pub fn name(self) -> &'static str {
        match self {
            AtomicType::CmpAndSwap => "CMP_AND_SWAP",
            AtomicType::FetchAndAdd => "FETCH_AND_ADD",
        }
    }
}

/// How GPU memory is registered (`--use_cuda` with or without
/// `--use_cuda_dmabuf` / `--use_cuda_peermem`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuReg {
    /// The library picks: dma-buf where the provider has it, else peer memory.
    Auto,
    /// `ibv_reg_mr` on the device pointer (needs nvidia_peermem; eRDMA's way).
    PeerMemory,
    /// dma-buf export and `ibv_reg_dmabuf_mr`.
    DmaBuf,
}

/// perftest's `--output`: print only one number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verbosity {
    /// The full report (default).
    Full,
    /// `--output=bandwidth`: the average bandwidth.
    Bandwidth,
    /// `--output=message_rate`: the message rate.
    MessageRate,
    /// `--output=latency`: the average latency.
    Latency,
}

/// A parsed, consistent command line.
#[derive(Debug, Clone)]
pub struct Options {
    /// The test.
    pub case: &'static TestCase,
    /// The command line as given.
    pub argv: Vec<String>,
    /// The server to connect to (client side); `None` on the server.
    pub server: Option<String>,
    /// `-d`.
    pub device: Option<String>,
    /// `-i`.
    pub ib_port: u8,
    /// `-x`.
    pub gid_index: Option<u32>,
    /// `-s` (the largest size with `-a`, which sets it to 8 MiB).
    pub size: u64,
    /// `-a`.
    pub all: bool,
    /// `-n`.
    pub iters: u64,
    /// `-D` in seconds.
    pub duration: Option<u32>,
    /// `-f` in seconds (warm-up and cool-down of `-D`).
    pub margin: u32,
    /// `-q`.
    pub qps: u32,
    /// `-m`.
    pub mtu: Option<Mtu>,
    /// `-I` (`None`: the default of the test and device).
    pub inline: Option<u32>,
    /// `-t`.
    pub tx_depth: u32,
    /// `-r`.
    pub rx_depth: u32,
    /// `-Q`.
    pub cq_mod: u32,
    /// `-b`.
    pub duplex: bool,
    /// `-R`.
    pub rdma_cm: bool,
    /// `-p`.
    pub port: u16,
    /// `--report_gbits`.
    pub report_gbits: bool,
    /// `-N` (or implied).
    pub no_peak: bool,
    /// `-o`.
    pub out_reads: Option<u32>,
    /// `-A`.
    pub atomic: AtomicType,
    /// `-u`.
    pub qp_timeout: u8,
    /// `-S`.
    pub sl: u8,
    /// `--tclass`.
    pub tclass: u8,
    /// `--retry_count` (RDMA CM).
    pub retry_count: u8,
    /// `--source_ip`.
    pub source_ip: Option<Ipv4Addr>,
    /// `--use_cuda=<gpu>`.
    pub cuda: Option<usize>,
    /// `--use_cuda_dmabuf` / `--use_cuda_peermem`.
    pub cuda_reg: GpuReg,
    /// `--out_json` (with `--out_json_file`).
    pub out_json: Option<PathBuf>,
    /// `--output`.
    pub verbosity: Verbosity,
    /// `--disable_pcie_relaxed` clears it.
    pub relaxed_ordering: bool,
    /// erdma-perf: `--json`.
    pub json: bool,
    /// erdma-perf: `--csv FILE`.
    pub csv: Option<PathBuf>,
    /// erdma-perf: `--verify`.
    pub verify: bool,
    /// erdma-perf: `--persistent`.
    pub persistent: bool,
    /// erdma-perf: `--timeout SEC`.
    pub timeout: Duration,
    /// How long a server waits for its client: `None` (the command line's
    /// only choice) waits for ever, as perftest does; erdma-cluster bounds it.
    pub wait: Option<Duration>,
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Parsed {
    /// Run a test.
    Run(Box<Options>),
    /// Print this text and exit 0 (`-h`, `-V`, no test given with `--list`).
    Print(String),
}

impl Options {
    /// Client (connects) or server (listens).
    pub fn is_client(&self) -> bool {
        self.server.is_some()
    }

    /// The message sizes to run (`-a`: 2 B to 8 MiB).
    pub fn sizes(&self) -> Vec<u64> {
        if self.all && !(self.case.verb == Verb::Atomic) {
            (1..24).map(|i| 1u64 << i).collect()
        } else {
            vec![self.size]
        }
    }

    /// Whether sizes up to `size` get inline data.
    pub fn inline_size(&self) -> u32 {
        self.inline.unwrap_or(0)
    }
}

const OPT_REPORT_GBITS: i32 = 1000;
const OPT_USE_CUDA: i32 = 1001;
const OPT_USE_CUDA_DMABUF: i32 = 1002;
const OPT_USE_CUDA_PEERMEM: i32 = 1003;
const OPT_OUT_JSON: i32 = 1004;
const OPT_OUT_JSON_FILE: i32 = 1005;
const OPT_JSON: i32 = 1006;
const OPT_CSV: i32 = 1007;
const OPT_VERIFY: i32 = 1008;
const OPT_PERSISTENT: i32 = 1009;
const OPT_TIMEOUT: i32 = 1010;
const OPT_SOURCE_IP: i32 = 1011;
const OPT_TCLASS: i32 = 1012;
const OPT_RETRY_COUNT: i32 = 1013;
const OPT_OUTPUT: i32 = 1014;
const OPT_DISABLE_PCIR: i32 = 1015;
const OPT_OLD_POST_SEND: i32 = 1016;
const OPT_LIST: i32 = 1017;
/// perftest options erdma-perf recognises and refuses (ids 1100+).
const OPT_UNSUPPORTED: i32 = 1100;

const SHORT: &str =
    "w:y:p:d:i:m:s:n:t:u:S:x:c:q:I:o:M:r:Q:A:l:D:f:B:T:L:E:J:j:K:k:X:W:aFegzRvhbNVCHUOZP";

const fn req(name: &'static str, c: u8) -> LongOpt {
    LongOpt {
        name,
        has_arg: HasArg::Required,
        val: c as i32,
    }
}
const fn flag(name: &'static str, c: u8) -> LongOpt {
    LongOpt {
        name,
        has_arg: HasArg::No,
        val: c as i32,
    }
}
const fn long(name: &'static str, has_arg: HasArg, val: i32) -> LongOpt {
    LongOpt { name, has_arg, val }
}

/// perftest's long options that erdma-perf does not implement, refused
/// with a message (so that they are not mistaken for typos).
const UNSUPPORTED_LONG: &[(&str, HasArg)] = &[
    ("run_infinitely", HasArg::No),
    ("use-srq", HasArg::No),
    ("report-both", HasArg::No),
    ("reversed", HasArg::No),
    ("pkey_index", HasArg::Required),
    ("inline_recv", HasArg::Required),
    ("tcp", HasArg::No),
    ("burst_size", HasArg::Required),
    ("typical_pkt_size", HasArg::Required),
    ("rate_limit", HasArg::Required),
    ("rate_limit_type", HasArg::Required),
    ("rate_units", HasArg::Required),
    ("cpu_util", HasArg::No),
    ("latency_gap", HasArg::Required),
    ("flow_label", HasArg::Required),
    ("dont_xchg_versions", HasArg::No),
    ("use_cuda_bus_id", HasArg::Required),
    ("use_rocm", HasArg::Required),
    ("mmap", HasArg::Required),
    ("mmap-offset", HasArg::Required),
    ("ipv6", HasArg::No),
    ("raw_ipv6", HasArg::No),
    ("force-link", HasArg::Required),
    ("dlid", HasArg::Required),
    ("odp", HasArg::No),
    ("use_hugepages", HasArg::No),
    ("mr_per_qp", HasArg::No),
    ("perform_warm_up", HasArg::No),
    ("wait_destroy", HasArg::Required),
    ("recv_post_list", HasArg::Required),
    ("report-per-port", HasArg::No),
    ("remote_mac", HasArg::Required),
    ("local_mac", HasArg::Required),
    ("remote_ip", HasArg::Required),
    ("local_ip", HasArg::Required),
    ("remote_port", HasArg::Required),
    ("local_port", HasArg::Required),
];

fn long_options() -> Vec<LongOpt> {
    let mut v = vec![
        req("port", b'p'),
        req("ib-dev", b'd'),
        req("ib-port", b'i'),
        req("mtu", b'm'),
        req("size", b's'),
        req("iters", b'n'),
        req("tx-depth", b't'),
        req("qp-timeout", b'u'),
        req("sl", b'S'),
        req("gid-index", b'x'),
        flag("all", b'a'),
        flag("CPU-freq", b'F'),
        req("connection", b'c'),
        req("qp", b'q'),
        flag("events", b'e'),
        req("vector", b'X'),
        req("inline_size", b'I'),
        req("outs", b'o'),
        flag("mcg", b'g'),
        flag("comm_rdma_cm", b'z'),
        flag("rdma_cm", b'R'),
        req("tos", b'T'),
        req("hop_limit", b'L'),
        flag("help", b'h'),
        req("MGID", b'M'),
        req("rx-depth", b'r'),
        flag("bidirectional", b'b'),
        req("cq-mod", b'Q'),
        flag("noPeak", b'N'),
        flag("version", b'V'),
        flag("report-cycles", b'C'),
        flag("report-histogrm", b'H'),
        flag("report-unsorted", b'U'),
        req("atomic_type", b'A'),
        flag("dualport", b'O'),
        req("post_list", b'l'),
        req("duration", b'D'),
        req("margin", b'f'),
        req("source_mac", b'B'),
        req("dest_mac", b'E'),
        req("dest_ip", b'J'),
        req("dest_port", b'K'),
        req("source_port", b'k'),
        req("ethertype", b'Y'),
        req("limit_bw", b'w'),
        req("limit_msgrate", b'y'),
        flag("server", b'Z'),
        flag("client", b'P'),
        flag("mac_fwd", b'v'),
        flag("use_rss", b'G'),
        req("report-counters", b'W'),
        long("report_gbits", HasArg::No, OPT_REPORT_GBITS),
        long("use_cuda", HasArg::Required, OPT_USE_CUDA),
        long("use_cuda_dmabuf", HasArg::No, OPT_USE_CUDA_DMABUF),
        long("use_cuda_peermem", HasArg::No, OPT_USE_CUDA_PEERMEM),
        long("out_json", HasArg::No, OPT_OUT_JSON),
        long("out_json_file", HasArg::Required, OPT_OUT_JSON_FILE),
        long("json", HasArg::No, OPT_JSON),
        long("csv", HasArg::Required, OPT_CSV),
        long("verify", HasArg::No, OPT_VERIFY),
        long("persistent", HasArg::No, OPT_PERSISTENT),
        long("timeout", HasArg::Required, OPT_TIMEOUT),
        long("source_ip", HasArg::Required, OPT_SOURCE_IP),
        long("tclass", HasArg::Required, OPT_TCLASS),
        long("retry_count", HasArg::Required, OPT_RETRY_COUNT),
        long("output", HasArg::Required, OPT_OUTPUT),
        long("disable_pcie_relaxed", HasArg::No, OPT_DISABLE_PCIR),
        long("use_old_post_send", HasArg::No, OPT_OLD_POST_SEND),
        long("list", HasArg::No, OPT_LIST),
    ];
    for (i, (name, has_arg)) in UNSUPPORTED_LONG.iter().enumerate() {
        v.push(long(name, *has_arg, OPT_UNSUPPORTED + i as i32));
    }
    v
}

/// `--help`.
pub const USAGE: &str = "\
Usage:
  erdma-perf TEST [options]            start a server and wait for a client
  erdma-perf TEST [options] SERVER     connect to the server at SERVER
  erdma_TEST [options] [SERVER]        the same, when the binary is called erdma_TEST (a link)
TEST: write_bw read_bw send_bw write_lat read_lat send_lat atomic_bw atomic_lat
Both sides must run the same test with the same options (as with perftest). The peer may be
erdma-perf or perftest 4.5 (ib_write_bw & co.); see docs/tools/erdma-perf.md for what interoperates.

perftest options:
  -a, --all                 run sizes from 2 B to 8 MiB
  -b, --bidirectional       measure bidirectional bandwidth (BW tests)
  -c, --connection=RC       connection type: RC only (eRDMA implements only RC)
  -d, --ib-dev=DEV          RDMA device (default: the first)
  -D, --duration=SEC        run for SEC seconds instead of -n iterations
  -f, --margin=SEC          warm-up and cool-down of -D (default: SEC/4)
  -F, --CPU-freq            accepted (erdma-perf calibrates its clock, it never reads cpufreq)
  -h, --help                this text
  -i, --ib-port=PORT        device port (default 1)
  -I, --inline_size=SIZE    largest message sent inline (default: 0 for BW tests; for
                            write_lat/send_lat min(220/236, the device's limit))
  -m, --mtu=MTU             256..4096 (default: the port's active MTU)
  -n, --iters=N             iterations, 5..100000000 (default 5000 write_bw, else 1000)
  -N, --noPeak              do not compute the peak bandwidth (implied above 20000 iterations)
  -o, --outs=N              outstanding RDMA READs/atomics (default: the device's maximum)
  -p, --port=PORT           TCP (or RDMA CM with -R) port (default 18515)
  -q, --qp=N                queue pairs (BW tests; default 1)
  -Q, --cq-mod=N            one completion every N requests (default 100; 1 above 8 KiB)
  -r, --rx-depth=N          receive queue depth (send tests; default 512)
  -R, --rdma_cm             connect the QPs with RDMA CM (needed on iWARP: eRDMA's default
                            mode, siw)
  -s, --size=SIZE           message size, bytes, K or M suffix (default 65536 BW, 2 latency)
  -S, --sl=SL               service level (default 0)
  -t, --tx-depth=N          send queue depth (default 128 BW, 1 latency)
  -u, --qp-timeout=T        ACK timeout, 4.096 us x 2^T (default 14)
  -V, --version             print perftest's version this protocol speaks, and ours
  -x, --gid-index=N         GID index (default: the IPv4 RoCE v2 GID, as NCCL picks it)
  -A, --atomic_type=TYPE    CMP_AND_SWAP or FETCH_AND_ADD (atomic tests; default FETCH_AND_ADD)
      --report_gbits        report Gb/s (10^9 bit/s) instead of MB/s (2^20 byte/s)
      --out_json            write the report to --out_json_file (perftest's keys, valid JSON)
      --out_json_file=FILE  default perftest_out.json
      --output=WHAT         print only bandwidth, message_rate or latency
      --source_ip=IP        local IPv4 address of the exchange (and of RDMA CM)
      --tclass=TC           GRH traffic class (RoCE: DSCP << 2)
      --retry_count=N       RDMA CM retry count (default 7)
      --disable_pcie_relaxed  register memory without relaxed ordering
      --use_old_post_send   accepted (erdma-perf always posts with ibv_post_send)
      --use_cuda=GPU        buffers in the memory of CUDA device GPU (BW tests)
      --use_cuda_dmabuf     register GPU memory by dma-buf (default: the library chooses)
erdma-perf options:
      --use_cuda_peermem    register GPU memory with ibv_reg_mr on the device pointer
                            (nvidia_peermem; eRDMA's way)
      --verify              check every byte received (both sides must be erdma-perf; slows
                            the test: do not compare its numbers)
      --json                one JSON document on stdout instead of the text report
      --csv FILE            one CSV line per message size
      --persistent          server: serve clients one after another until killed; a failed
                            client is reported and the server goes on
      --timeout SEC         limit of each step of the exchange and of connecting (default 60)
      --list                list the tests
Exit status: 0 ok; 1 an RDMA verb or completion failed; 2 bad command line; 3 no RDMA device;
4 libibverbs/librdmacm missing; 5 no such device, port or GID index; 6 the peer failed
(unreachable, disconnected, timed out, garbage, other options); 7 --verify found wrong data;
8 GPU memory failed; 9 the device cannot run this test (e.g. atomics on iWARP).
";

fn usage_err(msg: impl Into<String>) -> PerfError {
    PerfError::Usage(msg.into())
}

/// A whole-string C integer (`strtol(s, &end, 0)` with `*end == 0`): decimal,
/// `0x` hexadecimal or `0` octal, optional sign.
pub fn parse_c_int(s: &str) -> Option<i64> {
    let t = s.trim_start();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, digits) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (16, h)
    } else if t.len() > 1 && t.starts_with('0') {
        (8, &t[1..])
    } else {
        (10, t)
    };
    if digits.is_empty() {
        return None;
    }
    let v = i64::from_str_radix(digits, radix).ok()?;
    Some(if neg { -v } else { v })
}

/// The leading number of `s` as C's `atof` reads it (0 when none).
pub fn atof_prefix(s: &str) -> f64 {
    let t = s.trim_start();
    let end = t
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '-' || c == '+'))))
        .map(|(i, _)| i)
        .unwrap_or(t.len());
    t[..end].parse().unwrap_or(0.0)
}

fn int_in(name: &str, opt: &str, v: &str, min: i64, max: i64) -> PerfResult<i64> {
    let n =
        parse_c_int(v).ok_or_else(|| usage_err(format!("{opt} {v}: {name} must be an integer")))?;
    if n < min || n > max {
        return Err(usage_err(format!(
            "{opt} {v}: {name} must be between {min} and {max}"
        )));
    }
    Ok(n)
}

/// perftest's `-s`: an integer with an optional K or M suffix.
pub fn parse_size(v: &str) -> PerfResult<u64> {
    let (num, factor) = if let Some(n) = v.strip_suffix('K') {
        (n, 1024)
    } else if let Some(n) = v.strip_suffix('M') {
        (n, 1024 * 1024)
    } else {
        (v, 1)
    };
    let max = i64::from(u32::MAX / 2);
    let n = parse_c_int(num)
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| {
            usage_err(format!(
                "-s {v}: the message size must be an integer with an optional K or M"
            ))
        })?;
    if n < 1 || n > max {
        return Err(usage_err(format!(
            "-s {v}: the message size must be between 1 and {max}"
        )));
    }
    Ok(n as u64)
}

/// The test a binary name selects: `erdma_write_bw`, `erdma-write_bw`.
pub fn case_from_argv0(argv0: &str) -> Option<&'static TestCase> {
    let base = argv0.rsplit('/').next().unwrap_or(argv0);
    let name = base
        .strip_prefix("erdma_")
        .or_else(|| base.strip_prefix("erdma-"))?;
    cases::find(name)
}

#[derive(Default)]
struct Raw {
    size: Option<u64>,
    iters: Option<u64>,
    tx: Option<u32>,
    rx: Option<u32>,
    cq_mod: Option<u32>,
    inline: Option<u32>,
    margin: Option<u32>,
    json_file: Option<PathBuf>,
    out_json: bool,
    qps: Option<u32>,
}

/// Parses `argv` (with `argv[0]` the program name).
pub fn parse(argv: &[String]) -> PerfResult<Parsed> {
    let longs = long_options();
    let mut g = Getopt::new(argv, SHORT, &longs);
    let mut events = Vec::new();
    while let Some(ev) = g.next_event() {
        match ev {
            Event::Opt(c, v) => events.push((c, v)),
            Event::Error(msg) => {
                let msg = msg.trim_start_matches(argv.first().map(String::as_str).unwrap_or(""));
                return Err(usage_err(format!(
                    "{}: see erdma-perf --help",
                    msg.trim_start_matches(": ")
                )));
            }
        }
    }
    let mut operands = g.operands();
    if events.iter().any(|(c, _)| *c == b'h' as i32) {
        return Ok(Parsed::Print(USAGE.to_string()));
    }
    if events.iter().any(|(c, _)| *c == b'V' as i32) {
        return Ok(Parsed::Print(format!(
            "Version: {} (perftest exchange protocol; erdma-perf {})\n",
            super::wire::PERFTEST_VERSION,
            env!("CARGO_PKG_VERSION")
        )));
    }
    if events.iter().any(|(c, _)| *c == OPT_LIST) {
        let names: Vec<&str> = cases::ALL.iter().map(|c| c.name).collect();
        return Ok(Parsed::Print(format!("{}\n", names.join("\n"))));
    }
    let case = match argv.first().and_then(|a| case_from_argv0(a)) {
        Some(c) => c,
        None => {
            if operands.is_empty() {
                return Err(usage_err(
                    "no test given: erdma-perf TEST [options] [SERVER], TEST one of write_bw read_bw send_bw \
                     write_lat read_lat send_lat atomic_bw atomic_lat (see --help)",
                ));
            }
            let name = operands.remove(0);
            cases::find(&name).ok_or_else(|| {
                usage_err(format!(
                    "unknown test '{name}': one of write_bw read_bw send_bw write_lat read_lat send_lat \
                     atomic_bw atomic_lat (perftest's ib_write_bw is erdma-perf write_bw)"
                ))
            })?
        }
    };
    if operands.len() > 1 {
        return Err(usage_err(format!(
            "more than one server address given ({}): erdma-perf TEST [options] [SERVER]",
            operands.join(" ")
        )));
    }
    let mut o = defaults(case, argv);
    o.server = operands.pop();
    let mut raw = Raw::default();
    for (c, v) in events {
        apply(&mut o, &mut raw, c, v.as_deref().unwrap_or(""))?;
    }
    finish(&mut o, raw)?;
    Ok(Parsed::Run(Box::new(o)))
}

fn defaults(case: &'static TestCase, argv: &[String]) -> Options {
    let bw = case.kind == Kind::Bw;
    Options {
        case,
        argv: argv.to_vec(),
        server: None,
        device: None,
        ib_port: 1,
        gid_index: None,
        size: if case.verb == Verb::Atomic {
            8
        } else if bw {
            65536
        } else {
            2
        },
        all: false,
        iters: if bw && case.verb == Verb::Write {
            5000
        } else {
            1000
        },
        duration: None,
        margin: 0,
        qps: 1,
        mtu: None,
        inline: None,
        tx_depth: if bw { 128 } else { 1 },
        rx_depth: if case.verb == Verb::Send { 512 } else { 1 },
        cq_mod: 100,
        duplex: false,
        rdma_cm: false,
        port: 18515,
        report_gbits: false,
        no_peak: false,
        out_reads: None,
        atomic: AtomicType::FetchAndAdd,
        qp_timeout: 14,
        sl: 0,
        tclass: 0,
        retry_count: 7,
        source_ip: None,
        cuda: None,
        cuda_reg: GpuReg::Auto,
        out_json: None,
        verbosity: Verbosity::Full,
        relaxed_ordering: true,
        json: false,
        csv: None,
        verify: false,
        persistent: false,
        timeout: Duration::from_secs(60),
        wait: None,
    }
}

fn apply(o: &mut Options, raw: &mut Raw, c: i32, v: &str) -> PerfResult<()> {
    let verb = o.case.verb;
    let lat = o.case.kind == Kind::Lat;
    let short = |c: i32| u8::try_from(c).map(char::from).unwrap_or('?');
    match c {
        _ if c == b'p' as i32 => o.port = int_in("the port", "-p", v, 1, 65535)? as u16,
        _ if c == b'd' as i32 => o.device = Some(v.to_string()),
        _ if c == b'i' as i32 => o.ib_port = int_in("the port number", "-i", v, 1, 255)? as u8,
        _ if c == b'm' as i32 => {
            let n = int_in("the MTU", "-m", v, 256, 4096)?;
            o.mtu = Some(Mtu::from_bytes(n as u32).ok_or_else(|| {
                usage_err(format!(
                    "-m {v}: the MTU must be 256, 512, 1024, 2048 or 4096"
                ))
            })?);
        }
        _ if c == b's' as i32 => raw.size = Some(parse_size(v)?),
        _ if c == b'n' as i32 => {
            raw.iters = Some(int_in("the iteration count", "-n", v, 5, 100_000_000)? as u64)
        }
        _ if c == b't' as i32 => raw.tx = Some(int_in("the TX depth", "-t", v, 1, 15000)? as u32),
        _ if c == b'u' as i32 => o.qp_timeout = int_in("the QP timeout", "-u", v, 0, 31)? as u8,
        _ if c == b'S' as i32 => o.sl = int_in("the service level", "-S", v, 0, 15)? as u8,
        _ if c == b'x' as i32 => {
            o.gid_index = Some(int_in("the GID index", "-x", v, 0, 255)? as u32)
        }
        _ if c == b'c' as i32 => {
            if v != "RC" {
                return Err(usage_err(format!(
                    "-c {v}: erdma-perf runs RC only (eRDMA implements only RC; UC/UD/XRC/DC/SRD are not supported)"
                )));
            }
        }
        _ if c == b'q' as i32 => {
            if lat {
                return Err(usage_err("-q: multiple QPs are only available in BW tests"));
            }
            raw.qps = Some(int_in("the number of QPs", "-q", v, 1, 16384)? as u32);
        }
        _ if c == b'I' as i32 => {
            if matches!(verb, Verb::Read | Verb::Atomic) {
                return Err(usage_err(
                    "-I: inline data is not available in READ/atomic tests",
                ));
            }
            raw.inline = Some(int_in("the inline size", "-I", v, 0, 912)? as u32);
        }
        _ if c == b'o' as i32 => {
            if !matches!(verb, Verb::Read | Verb::Atomic) {
                return Err(usage_err(
                    "-o: outstanding reads are only available in READ/atomic tests",
                ));
            }
            o.out_reads = Some(int_in("the outstanding reads", "-o", v, 1, 255)? as u32);
        }
        _ if c == b'r' as i32 => {
            let n = int_in("the RX depth", "-r", v, 1, 16384)? as u32;
            if verb != Verb::Send && n > 1 {
                return Err(usage_err("-r: on RDMA verbs the RX depth can only be 1"));
            }
            raw.rx = Some(n);
        }
        _ if c == b'Q' as i32 => {
            raw.cq_mod = Some(int_in("the CQ moderation", "-Q", v, 1, 1024)? as u32)
        }
        _ if c == b'A' as i32 => {
            if verb != Verb::Atomic {
                return Err(usage_err(
                    "-A: the atomic type applies to atomic_bw/atomic_lat only",
                ));
            }
            o.atomic = match v {
                "CMP_AND_SWAP" => AtomicType::CmpAndSwap,
                "FETCH_AND_ADD" => AtomicType::FetchAndAdd,
                _ => {
                    return Err(usage_err(format!(
                        "-A {v}: choose CMP_AND_SWAP or FETCH_AND_ADD"
                    )));
                }
            };
        }
        _ if c == b'D' as i32 => {
            o.duration = Some(int_in("the duration", "-D", v, 1, 1 << 30)? as u32)
        }
        _ if c == b'f' as i32 => {
            raw.margin = Some(int_in("the margin", "-f", v, 0, 1 << 30)? as u32)
        }
        _ if c == b'a' as i32 => o.all = true,
        _ if c == b'F' as i32 => {}
        _ if c == b'R' as i32 => o.rdma_cm = true,
        _ if c == b'b' as i32 => {
            if lat {
                return Err(usage_err("-b: bidirectional is only available in BW tests"));
            }
            o.duplex = true;
        }
        _ if c == b'N' as i32 => {
            if lat {
                return Err(usage_err("-N: noPeak is only valid for BW tests"));
            }
            o.no_peak = true;
        }
        OPT_REPORT_GBITS => o.report_gbits = true,
        OPT_USE_CUDA => {
            o.cuda = Some(int_in("the CUDA device", "--use_cuda", v, 0, 1 << 20)? as usize)
        }
        OPT_USE_CUDA_DMABUF => o.cuda_reg = GpuReg::DmaBuf,
        OPT_USE_CUDA_PEERMEM => o.cuda_reg = GpuReg::PeerMemory,
        OPT_OUT_JSON => raw.out_json = true,
        OPT_OUT_JSON_FILE => raw.json_file = Some(PathBuf::from(v)),
        OPT_JSON => o.json = true,
        OPT_CSV => o.csv = Some(PathBuf::from(v)),
        OPT_VERIFY => o.verify = true,
        OPT_PERSISTENT => o.persistent = true,
        OPT_TIMEOUT => {
            o.timeout = Duration::from_secs(int_in("the timeout", "--timeout", v, 1, 86400)? as u64)
        }
        OPT_SOURCE_IP => {
            o.source_ip = Some(
                v.parse()
                    .map_err(|_| usage_err(format!("--source_ip {v}: not an IPv4 address")))?,
            );
        }
        OPT_TCLASS => o.tclass = int_in("the traffic class", "--tclass", v, 0, 255)? as u8,
        OPT_RETRY_COUNT => {
            o.retry_count = int_in("the retry count", "--retry_count", v, 0, 7)? as u8
        }
        OPT_OUTPUT => {
            o.verbosity = match v {
                "bandwidth" => Verbosity::Bandwidth,
                "message_rate" => Verbosity::MessageRate,
                "latency" => Verbosity::Latency,
                _ => {
                    return Err(usage_err(format!(
                        "--output {v}: choose bandwidth, message_rate or latency"
                    )));
                }
            }
        }
        OPT_DISABLE_PCIR => o.relaxed_ordering = false,
        OPT_OLD_POST_SEND => {}
        _ if c >= OPT_UNSUPPORTED => {
            let name = UNSUPPORTED_LONG
                .get((c - OPT_UNSUPPORTED) as usize)
                .map(|(n, _)| *n)
                .unwrap_or("?");
            return Err(usage_err(format!(
                "--{name}: this perftest option is not supported by erdma-perf (see --help)"
            )));
        }
        _ => {
            let what = match short(c) {
                'e' | 'X' => "events",
                'l' => "post lists",
                'O' => "dual-port mode",
                'z' => "the RDMA CM exchange with regular QPs (use -R)",
                'g' | 'M' => "multicast",
                'w' | 'y' => "bandwidth limits",
                'W' => "performance counters (see erdma-stat)",
                'C' | 'H' | 'U' => "cycle, histogram and unsorted reports",
                'T' => "the type of service",
                'L' => "the hop limit",
                _ => "raw Ethernet",
            };
            return Err(usage_err(format!(
                "-{}: {what} is not supported by erdma-perf (see --help)",
                short(c)
            )));
        }
    }
    Ok(())
}

/// perftest's `force_dependecies` and the checks that need all options.
fn finish(o: &mut Options, raw: Raw) -> PerfResult<()> {
    let bw = o.case.kind == Kind::Bw;
    let verb = o.case.verb;
    if let Some(s) = raw.size {
        if verb == Verb::Atomic && s != 8 {
            return Err(usage_err(
                "-s: the message size cannot be changed for atomic tests (8 bytes)",
            ));
        }
        o.size = s;
    }
    if let Some(n) = raw.iters {
        o.iters = n;
    }
    if let Some(q) = raw.qps {
        o.qps = q;
    }
    if let Some(t) = raw.tx {
        o.tx_depth = t;
    }
    if let Some(r) = raw.rx {
        o.rx_depth = r;
    }
    if o.rdma_cm && o.gid_index.is_some() {
        // perftest accepts it and ignores it for the QPs; so do we.
    }
    if o.duration.is_some() && o.all {
        return Err(usage_err(
            "-D: duration mode does not support running all sizes (-a)",
        ));
    }
    if o.cuda.is_none() && o.cuda_reg != GpuReg::Auto {
        return Err(usage_err(
            "--use_cuda_dmabuf/--use_cuda_peermem need --use_cuda=GPU",
        ));
    }
    if o.cuda.is_some() && !bw {
        return Err(usage_err(
            "--use_cuda: GPU memory is supported in BW tests only (as in perftest)",
        ));
    }
    if o.verify && o.duration.is_some() {
        return Err(usage_err(
            "--verify: not available with -D (the iteration count must be known to both sides)",
        ));
    }
    if o.verify && o.cuda.is_some() {
        return Err(usage_err("--verify: checking GPU memory is not supported"));
    }
    if o.json && o.verbosity != Verbosity::Full {
        return Err(usage_err("--json and --output: choose one"));
    }
    match o.verbosity {
        Verbosity::Bandwidth | Verbosity::MessageRate if !bw => {
            return Err(usage_err("--output: latency tests can only print latency"));
        }
        Verbosity::Latency if bw => {
            return Err(usage_err(
                "--output: BW tests can print bandwidth or message_rate",
            ));
        }
        _ => {}
    }
    if o.all {
        o.size = MAX_SIZE;
    }
    // Iterations mode: the queues never need more than the iterations.
    if o.duration.is_none() {
        o.tx_depth = o.tx_depth.min(o.iters.min(u64::from(u32::MAX)) as u32);
        if verb == Verb::Send {
            o.rx_depth = o.rx_depth.min(o.iters.min(u64::from(u32::MAX)) as u32);
        }
    }
    if let Some(q) = raw.cq_mod {
        o.cq_mod = q;
    } else if o.size > CQ_MOD_LIMIT && !o.all {
        o.cq_mod = 1;
    }
    o.cq_mod = o.cq_mod.min(o.tx_depth);
    // The default inline size of latency tests (perftest: known devices
    // only; capped to the device's limit when the QP is created).
    o.inline = match raw.inline {
        Some(i) => Some(i),
        None if !bw && verb == Verb::Write => Some(220),
        None if !bw && verb == Verb::Send => Some(236),
        None => Some(0),
    };
    if matches!(verb, Verb::Read | Verb::Atomic) {
        o.inline = Some(0);
    }
    if let Some(d) = o.duration {
        o.margin = raw.margin.unwrap_or(d / 4);
        if d <= 2 * o.margin {
            return Err(usage_err(format!(
                "-D {d} -f {}: the duration must exceed twice the margin",
                o.margin
            )));
        }
        o.no_peak = true;
    } else if let Some(m) = raw.margin {
        o.margin = m;
    }
    if bw && verb == Verb::Send && !o.is_client() && !o.duplex {
        o.no_peak = true;
    }
    if bw && o.iters > PEAK_MAX_ITERS {
        o.no_peak = true;
    }
    // perftest's work-around for odd RX depths in SEND.
    if verb == Verb::Send && o.rx_depth % 2 == 1 && !o.all && o.rx_depth > 1 {
        o.rx_depth += 1;
    }
    if raw.out_json || raw.json_file.is_some() {
        o.out_json = Some(
            raw.json_file
                .unwrap_or_else(|| PathBuf::from(DEFAULT_JSON_FILE)),
        );
    }
    if o.persistent && o.is_client() {
        return Err(usage_err(
            "--persistent applies to the server (run without a SERVER address)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> PerfResult<Options> {
        let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        match parse(&v)? {
            Parsed::Run(o) => Ok(*o),
            Parsed::Print(t) => Err(PerfError::Usage(format!("printed {t}"))),
        }
    }

    #[test]
    fn perftest_defaults() {
        let o = p(&["erdma-perf", "write_bw"]).unwrap();
        assert_eq!(
            (o.size, o.iters, o.tx_depth, o.cq_mod, o.qps),
            (65536, 5000, 128, 1, 1)
        );
        assert!(!o.is_client());
        let o = p(&["erdma-perf", "send_lat", "10.0.0.2"]).unwrap();
        assert_eq!(
            (o.size, o.iters, o.tx_depth, o.inline),
            (2, 1000, 1, Some(236))
        );
        assert_eq!(o.server.as_deref(), Some("10.0.0.2"));
        let o = p(&["erdma-perf", "read_bw", "-s", "4K", "h"]).unwrap();
        assert_eq!((o.size, o.cq_mod, o.inline), (4096, 100, Some(0)));
        let o = p(&["erdma-perf", "send_bw", "-n", "101"]).unwrap();
        assert_eq!(o.rx_depth, 102, "odd RX depth rounded up as perftest does");
        let o = p(&["erdma-perf", "atomic_bw"]).unwrap();
        assert_eq!(o.size, 8);
    }

    #[test]
    fn letters_long_names_and_argv0() {
        let o = p(&[
            "/usr/bin/erdma_write_lat",
            "--ib-dev=rxe0",
            "-x",
            "1",
            "--size=64",
            "-n",
            "0x10",
            "--report_gbits",
            "-F",
            "server",
        ])
        .unwrap();
        assert_eq!(o.case.name, "write_lat");
        assert_eq!(
            (o.device.as_deref(), o.gid_index, o.size, o.iters),
            (Some("rxe0"), Some(1), 64, 16)
        );
        assert!(o.report_gbits);
        let o = p(&["erdma-perf", "-a", "write_bw", "-R", "--out_json"]).unwrap();
        assert_eq!(o.size, MAX_SIZE);
        assert_eq!(o.sizes().len(), 23);
        assert!(o.rdma_cm);
        assert_eq!(
            o.out_json.as_deref(),
            Some(std::path::Path::new(DEFAULT_JSON_FILE))
        );
    }

    #[test]
    fn bad_options_are_one_line_usage_errors() {
        for (args, needle) in [
            (&["erdma-perf"][..], "no test given"),
            (&["erdma-perf", "wrte_bw"], "unknown test"),
            (
                &["erdma-perf", "write_bw", "-n", "3"],
                "between 5 and 100000000",
            ),
            (&["erdma-perf", "write_bw", "-s", "0"], "between 1 and"),
            (&["erdma-perf", "write_bw", "-s", "12x"], "integer"),
            (&["erdma-perf", "write_bw", "-c", "UD"], "RC only"),
            (&["erdma-perf", "write_lat", "-q", "2"], "BW tests"),
            (&["erdma-perf", "write_lat", "-b"], "BW tests"),
            (&["erdma-perf", "read_bw", "-I", "64"], "inline"),
            (&["erdma-perf", "atomic_bw", "-s", "16"], "atomic"),
            (&["erdma-perf", "write_bw", "-e"], "events"),
            (&["erdma-perf", "write_bw", "--odp"], "not supported"),
            (
                &["erdma-perf", "write_bw", "--bogus"],
                "unrecognized option",
            ),
            (&["erdma-perf", "write_bw", "-D", "2", "-a"], "-a"),
            (
                &["erdma-perf", "write_lat", "--use_cuda=0"],
                "BW tests only",
            ),
            (
                &["erdma-perf", "write_bw", "--use_cuda_dmabuf"],
                "need --use_cuda",
            ),
            (
                &["erdma-perf", "write_bw", "a", "b"],
                "more than one server",
            ),
            (&["erdma-perf", "write_bw", "-m", "1000"], "MTU"),
            (&["erdma-perf", "write_bw", "h", "--persistent"], "server"),
            (&["erdma-perf", "write_bw", "-n"], "requires an argument"),
        ] {
            let e = p(args).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{args:?}");
            let m = e.to_string();
            assert!(m.contains(needle), "{args:?}: {m}");
            assert!(!m.contains('\n'), "{args:?}: {m}");
        }
    }

    #[test]
    fn c_integers_and_sizes() {
        assert_eq!(parse_c_int("0x10"), Some(16));
        assert_eq!(parse_c_int("010"), Some(8));
        assert_eq!(parse_c_int("-3"), Some(-3));
        assert_eq!(parse_c_int("1k"), None);
        assert_eq!(parse_c_int(""), None);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("2M").unwrap(), 2 << 20);
        assert!(parse_size("4096M").is_err());
        assert_eq!(atof_prefix("6.06"), 6.06);
        assert_eq!(atof_prefix("x"), 0.0);
    }

    #[test]
    fn help_and_version_print() {
        let v: Vec<String> = ["erdma-perf", "-h"].iter().map(|s| s.to_string()).collect();
        assert!(matches!(parse(&v).unwrap(), Parsed::Print(t) if t.contains("Exit status")));
        let v: Vec<String> = ["erdma-perf", "write_bw", "-V"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(matches!(parse(&v).unwrap(), Parsed::Print(t) if t.starts_with("Version: 6.06")));
    }
}
