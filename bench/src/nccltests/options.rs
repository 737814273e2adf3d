//! The command line of nccl-tests 2.19.6, option for option: the same
//! short and long spellings, defaults, C number parsing, diagnostics and exit
//! statuses (`-h` and getopt errors exit 0 after the usage text, bad sizes
//! exit 255), plus this tool's extensions (`--backend`, `--bootstrap`,
//! `--csv`) and a default timeout.

use super::cparse::{f64_to_size, parse_size, strtol};
use super::getopt::{Event, Getopt, HasArg, LongOpt};
use super::types::{DataType, Features, ReduceOp};

/// Timeout in seconds used when `-T` is not given (nccl-tests waits
/// forever; a hang is the most common complaint about it). `-T 0` restores
/// the wait-forever behaviour.
pub const DEFAULT_TIMEOUT_S: i32 = 600;

/// Which collective library runs the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// NCCL on GPUs (the default, as nccl-tests).
    Nccl,
    /// MPI collectives on host memory.
    Mpi,
    /// Collectives computed on the host from data exchanged through the
    /// launcher's bootstrap (no GPU, no MPI needed).
    Host,
}

impl BackendKind {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Nccl => "nccl",
            BackendKind::Mpi => "mpi",
            BackendKind::Host => "host",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "nccl" => Some(BackendKind::Nccl),
            "mpi" => Some(BackendKind::Mpi),
            "host" => Some(BackendKind::Host),
            _ => None,
        }
    }
}

/// How the processes of one run find each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootstrapKind {
    /// MPI when launched by mpirun/srun with PMI (and built with MPI), else
    /// TCP when rank variables are set, else a single process.
    Auto,
    /// MPI (`MPI_Init`).
    Mpi,
    /// TCP rendezvous at MASTER_ADDR:MASTER_PORT.
    Tcp,
    /// One process.
    None,
}

impl BootstrapKind {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "auto" => Some(BootstrapKind::Auto),
            "mpi" => Some(BootstrapKind::Mpi),
            "tcp" => Some(BootstrapKind::Tcp),
            "none" => Some(BootstrapKind::None),
            _ => None,
        }
    }
}

/// Every parsed option, with nccl-tests' variable types and defaults.
#[derive(Clone, Debug)]
pub struct Options {
    /// `argv[0]` after the last `/`.
    pub program_name: String,
    /// The full argument vector (for JSON `args`).
    pub argv: Vec<String>,
    /// `-t`.
    pub nthreads: i32,
    /// `-g`.
    pub ngpus: i32,
    /// `-b`.
    pub min_bytes: u64,
    /// `-e`.
    pub max_bytes: u64,
    /// `-i`.
    pub step_bytes: u64,
    /// `-f` (size_t in nccl-tests: a negative value wraps).
    pub step_factor: u64,
    /// `-n`.
    pub iters: i32,
    /// `-w`.
    pub warmup_iters: i32,
    /// `-m`.
    pub agg_iters: i32,
    /// `-N` (0 = forever).
    pub run_cycles: i32,
    /// `-p`.
    pub parallel_init: i32,
    /// `-c`.
    pub datacheck: i32,
    /// `-o` (None = all).
    pub op: Option<ReduceOp>,
    /// `-d` (None = all).
    pub dtype: Option<DataType>,
    /// `-r`.
    pub root: i32,
    /// `-z`.
    pub blocking: i32,
    /// `-y`.
    pub stream_null: i32,
    /// `-T` in seconds (<= 0: none); [`DEFAULT_TIMEOUT_S`] when not given.
    pub timeout: i32,
    /// `-G`.
    pub graph_launches: i32,
    /// `-C`.
    pub report_cputime: i32,
    /// `-S`.
    pub report_timestamps: i32,
    /// `-J`.
    pub output_file: Option<String>,
    /// `-a`: 0 rank 0, 1 mean, 2 min, 3 max.
    pub average: i32,
    /// `-R`: 1 ncclCommRegister, 2 symmetric window.
    pub local_register: i32,
    /// `-x` (-1 = not set).
    pub cta_policy: i32,
    /// `-D`.
    pub device_impl: i32,
    /// `-V`.
    pub device_cta_count: i32,
    /// `-M`.
    pub memory_report: i32,
    /// `-u`.
    pub unalign: i32,
    /// `-I`.
    pub per_iter_timing: i32,
    /// `-K`.
    pub per_iter_skip: i32,
    /// `--backend`.
    pub backend: BackendKind,
    /// `--bootstrap`.
    pub bootstrap: BootstrapKind,
    /// `--csv`.
    pub csv_file: Option<String>,
}

impl Options {
    fn defaults(argv: &[String]) -> Options {
        let arg0 = argv.first().cloned().unwrap_or_default();
        let program_name = arg0.rsplit(['/', '\\']).next().unwrap_or("").to_string();
        Options {
            program_name,
            argv: argv.to_vec(),
            nthreads: 1,
            ngpus: 1,
            min_bytes: 32 << 20,
            max_bytes: 32 << 20,
            step_bytes: 1 << 20,
            step_factor: 1,
            iters: 20,
            warmup_iters: 1,
            agg_iters: 1,
            run_cycles: 1,
            parallel_init: 0,
            datacheck: 1,
            op: Some(ReduceOp::Sum),
            dtype: Some(DataType::Float32),
            root: 0,
            blocking: 0,
            stream_null: 0,
            timeout: DEFAULT_TIMEOUT_S,
            graph_launches: 0,
            report_cputime: 0,
            report_timestamps: 0,
            output_file: None,
            average: 1,
            local_register: 0,
            cta_policy: -1,
            device_impl: 0,
            device_cta_count: 16,
            memory_report: 0,
            unalign: 0,
            per_iter_timing: 0,
            per_iter_skip: 0,
            backend: BackendKind::Nccl,
            bootstrap: BootstrapKind::Auto,
            csv_file: None,
        }
    }

    /// The next size of the sweep, or None when it would overflow.
    pub fn next_size(&self, size: u64) -> Option<u64> {
        if self.step_factor > 1 {
            size.checked_mul(self.step_factor)
        } else {
            size.checked_add(self.step_bytes)
        }
    }

    /// The sizes of one sweep (`-b`..`-e` by `-f` or `-i`).
    pub fn sizes(&self) -> Vec<u64> {
        let mut out = Vec::new();
        let mut size = Some(self.min_bytes);
        while let Some(s) = size.filter(|&s| s <= self.max_bytes) {
            out.push(s);
            size = self.next_size(s).filter(|&n| n > s);
        }
        out
    }

    /// The warm-up sizes (nccl-tests doubles from `-b` to `-e`).
    pub fn warmup_sizes(&self) -> Vec<u64> {
        let mut out = Vec::new();
        let mut size = self.min_bytes;
        while size <= self.max_bytes && size > 0 {
            out.push(size);
            match size.checked_mul(2) {
                Some(n) => size = n,
                None => break,
            }
        }
        out
    }
}

/// The outcome of parsing: run, or exit with a status after printing.
#[derive(Debug)]
pub enum Parsed {
    /// Run with these options.
    Run(Box<Options>),
    /// Print and exit.
    Exit(i32),
}

/// Text the parser prints, kept apart so tests can inspect it.
#[derive(Default, Debug)]
pub struct Printed {
    /// What goes to stdout.
    pub stdout: String,
    /// What goes to stderr.
    pub stderr: String,
}

const SHORT: &str = "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:";
const OPT_BACKEND: i32 = 256;
const OPT_BOOTSTRAP: i32 = 257;
const OPT_CSV: i32 = 258;

const fn req(name: &'static str, c: u8) -> LongOpt {
    LongOpt {
        name,
        has_arg: HasArg::Required,
        val: c as i32,
    }
}

const LONG: &[LongOpt] = &[
    req("nthreads", b't'),
    req("ngpus", b'g'),
    req("minbytes", b'b'),
    req("maxbytes", b'e'),
    req("stepbytes", b'i'),
    req("stepfactor", b'f'),
    req("iters", b'n'),
    req("agg_iters", b'm'),
    req("warmup_iters", b'w'),
    req("run_cycles", b'N'),
    req("parallel_init", b'p'),
    req("check", b'c'),
    req("op", b'o'),
    req("datatype", b'd'),
    req("root", b'r'),
    req("blocking", b'z'),
    req("stream_null", b'y'),
    req("timeout", b'T'),
    req("cudagraph", b'G'),
    req("report_cputime", b'C'),
    req("report_timestamps", b'S'),
    req("output_file", b'J'),
    req("average", b'a'),
    req("local_register", b'R'),
    req("cta_policy", b'x'),
    req("device_implementation", b'D'),
    req("device_cta_count", b'V'),
    req("memory", b'M'),
    req("unalign", b'u'),
    req("per_iter_timing", b'I'),
    req("per_iter_skip", b'K'),
    LongOpt {
        name: "help",
        has_arg: HasArg::No,
        val: b'h' as i32,
    },
    LongOpt {
        name: "backend",
        has_arg: HasArg::Required,
        val: OPT_BACKEND,
    },
    LongOpt {
        name: "bootstrap",
        has_arg: HasArg::Required,
        val: OPT_BOOTSTRAP,
    },
    LongOpt {
        name: "csv",
        has_arg: HasArg::Required,
        val: OPT_CSV,
    },
];

/// Finds `--backend` without printing anything, so the backend's supported
/// types and ops are known before `-d`/`-o` are parsed (nccl-tests likewise
/// calls ncclGetVersion before parsing). Invalid values are diagnosed later.
pub fn prescan_backend(argv: &[String]) -> BackendKind {
    let mut g = Getopt::new(argv, SHORT, LONG);
    let mut kind = BackendKind::Nccl;
    while let Some(ev) = g.next_event() {
        if let Event::Opt(OPT_BACKEND, Some(v)) = ev
            && let Some(k) = BackendKind::parse(&v)
        {
            kind = k;
        }
    }
    kind
}

/// The options in `words` (no program name) as [`parse`] reads them,
/// however spelled (`-g2`, `-g 2`, `--ngpus=2`, `--ngp 2`): each as its
/// short name (`-g`; `--backend`, `--bootstrap`, `--csv` for the long-only
/// ones) with its value; then the operands, words that are no option
/// (nccl-tests ignores them). An unknown option or a missing value is an
/// error, in getopt's words.
pub type OptionsIn = (Vec<(String, String)>, Vec<String>);

/// [`OptionsIn`] of `words`.
pub fn options_in(words: &[String]) -> Result<OptionsIn, String> {
    let argv: Vec<String> = std::iter::once("options".to_string())
        .chain(words.iter().cloned())
        .collect();
    let mut g = Getopt::new(&argv, SHORT, LONG);
    let mut opts = Vec::new();
    while let Some(ev) = g.next_event() {
        match ev {
            Event::Opt(c, v) => {
                let name = match c {
                    OPT_BACKEND => "--backend".to_string(),
                    OPT_BOOTSTRAP => "--bootstrap".to_string(),
                    OPT_CSV => "--csv".to_string(),
                    c => format!("-{}", u8::try_from(c).map(char::from).unwrap_or('?')),
                };
                opts.push((name, v.unwrap_or_default()));
            }
            Event::Error(m) => return Err(m.trim_start_matches("options: ").to_string()),
        }
    }
    Ok((opts, g.operands()))
}

/// Parses `argv` as nccl-tests 2.19.6 does. `features` lists the types and
/// ops of the library in use and `nccl_version` its `ncclGetVersion` code
/// (0 when not NCCL: every version-gated option is then accepted).
pub fn parse(argv: &[String], features: Features, nccl_version: i32, out: &mut Printed) -> Parsed {
    let mut o = Options::defaults(argv);
    let lib = if nccl_version == 0 {
        i32::MAX
    } else {
        nccl_version
    };
    let mut g = Getopt::new(argv, SHORT, LONG);
    while let Some(ev) = g.next_event() {
        let (c, arg) = match ev {
            Event::Opt(c, arg) => (c, arg.unwrap_or_default()),
            Event::Error(msg) => {
                out.stderr.push_str(&format!("{msg}\n"));
                out.stdout.push_str("invalid option '?'\n");
                out.stdout.push_str(&usage(&o.program_name));
                return Parsed::Exit(0);
            }
        };
        if let Some(status) = apply(&mut o, c, &arg, features, lib, out) {
            return Parsed::Exit(status);
        }
    }
    match validate(&mut o, out) {
        Some(status) => Parsed::Exit(status),
        None => Parsed::Run(Box::new(o)),
    }
}

/// Applies one option; Some(status) ends parsing.
fn apply(
    o: &mut Options,
    c: i32,
    arg: &str,
    f: Features,
    lib: i32,
    out: &mut Printed,
) -> Option<i32> {
    let int = || strtol(arg, 0) as i32;
    match u8::try_from(c).map(char::from).unwrap_or('\0') {
        't' => o.nthreads = int(),
        'g' => o.ngpus = int(),
        'b' => match size_arg(arg, "minbytes", out) {
            Some(v) => o.min_bytes = v,
            None => return Some(255),
        },
        'e' => match size_arg(arg, "maxbytes", out) {
            Some(v) => o.max_bytes = v,
            None => return Some(255),
        },
        'i' => match size_arg(arg, "stepBytes", out) {
            Some(v) => o.step_bytes = v,
            None => return Some(255),
        },
        'f' => o.step_factor = strtol(arg, 0) as u64,
        'n' => o.iters = int(),
        'm' => o.agg_iters = int(),
        'w' => o.warmup_iters = int(),
        'N' => o.run_cycles = int(),
        'c' => o.datacheck = int(),
        'p' => o.parallel_init = int(),
        'o' => o.op = parse_op(arg, f, out),
        'd' => o.dtype = parse_type(arg, f, out),
        'r' => o.root = int(),
        'z' => o.blocking = int(),
        'y' => o.stream_null = int(),
        'T' => o.timeout = int(),
        'G' => o.graph_launches = int(),
        'C' => o.report_cputime = int(),
        'J' => o.output_file = Some(arg.to_string()),
        'S' => o.report_timestamps = int(),
        'a' => o.average = int(),
        'R' => {
            o.local_register = int();
            if o.local_register == 2 && lib < 22700 {
                out.stdout.push_str("Option -R 2 (symmetric) is not supported before NCCL 2.27. Defaulting to local registration\n");
                o.local_register = 1;
            }
        }
        'M' => o.memory_report = int(),
        'I' => o.per_iter_timing = int(),
        'K' => o.per_iter_skip = int(),
        'x' => {
            o.cta_policy = int();
            if o.cta_policy > 1 && lib < 22800 {
                out.stdout.push_str(&format!(
                    "Option -x (cta_policy) {} is not supported before NCCL 2.28. Ignoring\n",
                    o.cta_policy
                ));
                o.cta_policy = -1;
            }
        }
        'D' => {
            if lib < 22800 {
                out.stderr
                    .push_str("Option -D (device implementation) requires NCCL >= 2.28.0\n");
                return Some(255);
            }
            o.device_impl = int();
        }
        'V' => {
            if lib < 22800 {
                out.stderr
                    .push_str("Option -V (device CTA count) requires NCCL >= 2.28.0\n");
                return Some(255);
            }
            o.device_cta_count = int();
            if o.device_cta_count <= 0 || o.device_cta_count > 128 {
                out.stderr.push_str(&format!(
                    "device_cta_count (-V) must be positive and less than 128, got {}. Using default value 16.\n",
                    o.device_cta_count
                ));
                o.device_cta_count = 16;
            }
        }
        'u' => o.unalign = int(),
        'h' => {
            out.stdout.push_str(&usage(&o.program_name));
            return Some(0);
        }
        _ => return apply_extension(o, c, arg, out),
    }
    None
}

fn apply_extension(o: &mut Options, c: i32, arg: &str, out: &mut Printed) -> Option<i32> {
    match c {
        OPT_BACKEND => match BackendKind::parse(arg) {
            Some(k) => o.backend = k,
            None => {
                out.stderr.push_str(&format!(
                    "invalid backend '{arg}': expected nccl, mpi or host\n"
                ));
                return Some(255);
            }
        },
        OPT_BOOTSTRAP => match BootstrapKind::parse(arg) {
            Some(k) => o.bootstrap = k,
            None => {
                out.stderr.push_str(&format!(
                    "invalid bootstrap '{arg}': expected auto, mpi, tcp or none\n"
                ));
                return Some(255);
            }
        },
        OPT_CSV => o.csv_file = Some(arg.to_string()),
        _ => {
            out.stdout.push_str(&format!(
                "invalid option '{}'\n",
                char::from_u32(c as u32).unwrap_or('?')
            ));
            out.stdout.push_str(&usage(&o.program_name));
            return Some(0);
        }
    }
    None
}

fn size_arg(arg: &str, what: &str, out: &mut Printed) -> Option<u64> {
    let parsed = parse_size(arg);
    if parsed < 0.0 {
        out.stderr
            .push_str(&format!("invalid size specified for '{what}'\n"));
        return None;
    }
    Some(f64_to_size(parsed))
}

fn parse_type(arg: &str, f: Features, out: &mut Printed) -> Option<DataType> {
    if let Some(t) = f.types().iter().find(|t| t.name() == arg) {
        return Some(*t);
    }
    if arg == "all" {
        return None;
    }
    out.stdout
        .push_str(&format!("invalid type {arg}, defaulting to float .. \n"));
    Some(DataType::Float32)
}

fn parse_op(arg: &str, f: Features, out: &mut Printed) -> Option<ReduceOp> {
    if let Some(op) = f.ops().iter().find(|o| o.name() == arg) {
        return Some(*op);
    }
    if arg == "all" {
        return None;
    }
    out.stdout
        .push_str(&format!("invalid op {arg}, defaulting to sum .. \n"));
    Some(ReduceOp::Sum)
}

/// nccl-tests' post-parse checks, then ours (which reject inputs on which
/// nccl-tests would loop forever or crash). Some(status) means exit.
fn validate(o: &mut Options, out: &mut Printed) -> Option<i32> {
    if o.min_bytes > o.max_bytes {
        out.stderr.push_str(&format!(
            "invalid sizes for 'minbytes' and 'maxbytes': {} > {}\n",
            o.min_bytes, o.max_bytes
        ));
        return Some(255);
    }
    if o.device_impl > 0 && o.local_register != 2 {
        out.stderr.push_str("device implementation (-D > 0) requires enabling symmetric memory registration (-R 2)\n");
        return Some(255);
    }
    if o.per_iter_timing != 0 && o.per_iter_timing != 1 {
        out.stderr
            .push_str("per-iteration timing (-I) only supports 0=off or 1=on. Disabling.\n");
        o.per_iter_timing = 0;
    }
    if o.per_iter_timing != 0 && o.graph_launches >= 1 {
        out.stderr.push_str(
            "per-iteration timing (-I) is incompatible with CUDA graph mode (-G). Disabling.\n",
        );
        o.per_iter_timing = 0;
    }
    if o.blocking == 3 && o.graph_launches >= 1 {
        out.stderr.push_str(
            "blocking mode (-z 3) is incompatible with CUDA graph mode (-G). Disabling.\n",
        );
        o.blocking = 0;
    }
    if o.per_iter_skip < 0 || o.per_iter_skip >= o.iters {
        out.stderr.push_str(&format!(
            "per-iteration skip (-K) must be between 0 and {}. Disabling.\n",
            o.iters.wrapping_sub(1)
        ));
        o.per_iter_skip = 0;
    }
    if o.per_iter_skip != 0 && o.per_iter_timing == 0 {
        out.stderr
            .push_str("per-iteration skip (-K) requires per-iteration timing (-I 1). Disabling.\n");
        o.per_iter_skip = 0;
    }
    validate_extra(o, out)
}

/// The most ranks (`-t` x `-g`) one process may hold: checked before any
/// per-rank record exists (`-g 2147483647` would otherwise allocate one per
/// requested device and abort).
pub const MAX_RANKS_PER_PROCESS: i64 = 1 << 16;

/// The most threads (`-t`) per CPU this process may use (its affinity
/// and cgroup quota, as `std::thread::available_parallelism` counts them):
/// each thread drives its ranks and polls, so far more threads than CPUs
/// only measure the scheduler; a few per CPU still run the tests of a
/// 2-CPU machine.
pub const THREADS_PER_CPU: i64 = 4;

/// The most threads this process may start: the kernel's threads-max and
/// `ulimit -u`, whichever is lower (None when neither is known).
fn thread_limit() -> Option<i64> {
    let kernel = crate::input::read_text("/proc/sys/kernel/threads-max")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok());
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the rlimit it is given.
    let user = (unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut rl) } == 0
        && rl.rlim_cur != libc::RLIM_INFINITY)
        .then(|| i64::try_from(rl.rlim_cur).unwrap_or(i64::MAX));
    [kernel, user].into_iter().flatten().min()
}

/// Checks nccl-tests lacks; each rejects an input that would make it hang
/// or crash.
fn validate_extra(o: &Options, out: &mut Printed) -> Option<i32> {
    let mut fail = |msg: String| {
        out.stderr.push_str(&msg);
        Some(255)
    };
    if o.nthreads < 1 || o.ngpus < 1 {
        return fail(format!(
            "invalid number of threads ({}) or GPUs per thread ({}): both must be at least 1\n",
            o.nthreads, o.ngpus
        ));
    }
    let per_proc = i64::from(o.nthreads) * i64::from(o.ngpus);
    if per_proc > MAX_RANKS_PER_PROCESS {
        return fail(format!(
            "invalid number of threads ({}) x GPUs per thread ({}): {per_proc} ranks in one process, at most {MAX_RANKS_PER_PROCESS} (start more processes)\n",
            o.nthreads, o.ngpus
        ));
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as i64;
    if i64::from(o.nthreads) > cpus * THREADS_PER_CPU
        && !super::hooks::Hooks::from_env().skip_cpu_check
    {
        return fail(format!(
            "invalid number of threads ({}): this process may use {cpus} CPUs, at most {} threads ({THREADS_PER_CPU} per CPU): use fewer threads or start more processes\n",
            o.nthreads,
            cpus * THREADS_PER_CPU
        ));
    }
    if let Some(max) = thread_limit().filter(|&m| i64::from(o.nthreads) > m) {
        return fail(format!(
            "invalid number of threads ({}): this machine allows {max} (kernel.threads-max, ulimit -u)\n",
            o.nthreads
        ));
    }
    if o.min_bytes == 0 {
        return fail(
            "invalid size specified for 'minbytes': 0 never grows (use 1 or more)\n".into(),
        );
    }
    if o.step_factor <= 1 && o.step_bytes == 0 {
        return fail("invalid step: 'stepbytes' is 0 and 'stepfactor' <= 1, the size sweep would never end\n".into());
    }
    if !(0..=3).contains(&o.average) {
        return fail(format!(
            "invalid average mode {} (-a): expected 0, 1, 2 or 3\n",
            o.average
        ));
    }
    if o.unalign < 0 {
        return fail(format!(
            "invalid unalign {} (-u): must be 0 or more\n",
            o.unalign
        ));
    }
    None
}

/// The `-h` text: nccl-tests' usage, plus this tool's extensions.
pub fn usage(program: &str) -> String {
    let lines = [
        "[-t,--nthreads <num threads>] ",
        "[-g,--ngpus <gpus per thread>] ",
        "[-b,--minbytes <min size in bytes>] ",
        "[-e,--maxbytes <max size in bytes>] ",
        "[-i,--stepbytes <increment size>] ",
        "[-f,--stepfactor <increment factor>] ",
        "[-n,--iters <iteration count>] ",
        "[-m,--agg_iters <aggregated iteration count>] ",
        "[-w,--warmup_iters <warmup iteration count>] ",
        "[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)] ",
        "[-p,--parallel_init <0/1>] ",
        "[-c,--check <check iteration count>] ",
        "[-o,--op <sum/prod/min/max/avg/mulsum/all>] ",
        "[-d,--datatype <nccltype/all>] ",
        "[-r,--root <root>] ",
        "[-z,--blocking <0/1/2/3> 1=barrier after each inner iter (-m), 2=no barrier, 3=wait and barrier after each outer iter (-n)] ",
        "[-y,--stream_null <0/1>] ",
        "[-T,--timeout <time in seconds>] ",
        "[-G,--cudagraph <num graph launches>] ",
        "[-C,--report_cputime <0/1>] ",
        "[-S,--report_timestamps <0/1> report timestamps (default 0)] ",
        "[-J,--output_file <file> write output to filepath, if accessible. Infer type from suffix (only json supported presently.)] ",
        "[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>] ",
        "[-R,--local_register <0/1/2> enable local (1) or symmetric (2) buffer registration on send/recv buffers (default: disable (0))] ",
        "[-x,--cta_policy <0/1/2> set CTA policy (NCCL_CTA_POLICY_DEFAULT (0), NCCL_CTA_POLICY_EFFICIENCY (1), NCCL_CTA_POLICY_ZERO (2)) (default: do not set)] ",
        "[-D,--device_implementation <implementation number> enable device implementation (default: 0, use NCCL implementation; requires -R 2 if > 0)] ",
        "[-V,--device_cta_count <number> set number of CTAs for device implementation (default: 16)] ",
        "[-M,--memory <0/1> enable memory usage report (default: 0)] ",
        "[-u,--unalign <index of first element> Misalign source and destination buffers (default: 0)] ",
        "[-I,--per_iter_timing <0/1> per-iteration CUDA event timing",
        "    (best with -z 0, -z 2, or -z 3; with -z 1 includes barrier wait;",
        "    i_p99 uses nearest-rank percentile and may equal i_max",
        "    with <100 samples) (default: 0)] ",
        "[-K,--per_iter_skip <count> exclude leading samples from -I summary stats (default: 0)] ",
        "[--backend <nccl/mpi/host> collective library: NCCL on GPUs, MPI or host-computed collectives on host memory (default: nccl)] ",
        "[--bootstrap <auto/mpi/tcp/none> how processes meet: mpirun, TCP at MASTER_ADDR:MASTER_PORT with RANK/WORLD_SIZE (or SLURM_*, OMPI_COMM_WORLD_*), or one process (default: auto)] ",
        "[--csv <file> also write one CSV row per size and placement] ",
        "[   without -T a collective that does not finish in 600 s aborts the run (exit 4); -T 0 waits forever] ",
    ];
    let mut s = format!("USAGE: {program} \n\t");
    for l in lines {
        s.push_str(l);
        s.push_str("\n\t");
    }
    s.push_str("[-h,--help]\n");
    s
}

#[cfg(test)]
mod tests;
