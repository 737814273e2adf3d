//! [`Output`]: writes stdout, JSON and CSV together, at the points where
//! nccl-tests' util.cu writes them. Only the printing thread (process 0,
//! thread 0) holds an enabled Output.

use std::fs::File;
use std::io::BufWriter;

use super::context::RunContext;
use super::csv::{CsvOut, CsvRow};
use super::file::{self, Pending};
use super::json::{self, JsonWriter};
use super::text::{self, DeviceLine};
use crate::nccltests::console;
use crate::nccltests::options::Options;

/// One placement's measured result.
#[derive(Clone, Copy, Debug)]
pub struct RowResult {
    /// Time per operation in microseconds (CPU time with `-C`).
    pub time_us: f64,
    /// Algorithm bandwidth, GB/s.
    pub algbw: f64,
    /// Bus bandwidth, GB/s.
    pub busbw: f64,
    /// Wrong elements summed over ranks; None when not checked.
    pub wrong: Option<i64>,
}

/// Per-iteration statistics (`-I`), in seconds.
#[derive(Clone, Debug, Default)]
pub struct IterReport {
    /// Minimum.
    pub min: f64,
    /// Maximum.
    pub max: f64,
    /// Mean.
    pub avg: f64,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Standard deviation.
    pub stdev: f64,
    /// Skipped leading samples.
    pub skipped: i32,
    /// Every iteration's time.
    pub times: Vec<f64>,
    /// Per-process rows (multi-process runs).
    pub per_process: Vec<Vec<f64>>,
}

#[derive(Default)]
struct RowCtx {
    size: u64,
    count: u64,
    type_name: String,
    op_name: String,
    root: i32,
    cycle: u64,
}

/// The run's outputs.
pub struct Output {
    print: bool,
    json: Option<JsonWriter<BufWriter<File>>>,
    /// Where the JSON goes when it is closed.
    json_file: Option<Pending>,
    csv: Option<CsvOut>,
    csv_error: Option<String>,
    row: RowCtx,
    cputime: bool,
    timestamps: bool,
    per_iter: bool,
    /// For CSV rows.
    pub collective: String,
    /// For CSV rows.
    pub backend: String,
    /// For CSV rows.
    pub nranks: usize,
}

impl Output {
    /// An Output that prints (main thread) or stays silent.
    pub fn new(print: bool, o: &Options) -> Output {
        Output {
            print,
            json: None,
            json_file: None,
            csv: None,
            csv_error: None,
            row: RowCtx::default(),
            cputime: o.report_cputime != 0,
            timestamps: o.report_timestamps != 0,
            per_iter: o.per_iter_timing != 0,
            collective: o.program_name.clone(),
            backend: o.backend.name().to_string(),
            nranks: 0,
        }
    }

    /// Whether this Output prints.
    pub fn is_printing(&self) -> bool {
        self.print
    }

    /// Prints to stdout when printing.
    pub fn print(&self, s: &str) {
        if self.print {
            console::out(s);
        }
    }

    /// `jsonOutputInit`: opens the file (never overwriting) and writes
    /// version, start time, arguments, environment and NCCL version. Only
    /// files ending in `.json` (any case) are written, as in nccl-tests.
    /// The file gets its name when it is closed ([`super::file`]).
    pub fn open_json(&mut self, path: &str, argv: &[String], nccl_version: i32) {
        if !self.print || !is_json_path(path) {
            return;
        }
        let (file, pending) = match file::create(path) {
            Ok(v) => v,
            Err(_) => {
                console::out(&format!("# skipping json output; {path} not accessible\n"));
                return;
            }
        };
        console::out(&format!("# Writing JSON output to {}\n", pending.dest));
        self.json_file = Some(pending);
        let mut w = JsonWriter::new(file);
        w.start_object();
        w.key("version");
        w.int(json::JSON_FILE_VERSION as i64);
        w.key("start_time");
        w.string(&crate::nccltests::cfmt::now_string());
        w.key("args");
        w.start_list();
        argv.iter().for_each(|a| w.string(a));
        w.finish_list();
        w.key("env");
        w.start_list();
        for kv in recorded_env(std::env::vars_os()) {
            w.string(&kv);
        }
        w.finish_list();
        w.key("nccl_version");
        w.int(nccl_version as i64);
        self.json = Some(w);
    }

    /// Opens the CSV file (rank 0 only; never overwriting, as `-J`).
    pub fn open_csv(&mut self, path: &str) -> Result<(), String> {
        if self.print {
            let c = CsvOut::create(path)?;
            console::out(&format!("# Writing CSV output to {}\n", c.name()));
            self.csv = Some(c);
        }
        Ok(())
    }

    /// `writeDeviceReport` (root side): preamble, JSON config, the device
    /// lines of every process, JSON devices (the first line of each
    /// process, as nccl-tests parses them).
    pub fn device_report(
        &mut self,
        o: &Options,
        headers: i32,
        library: i32,
        procs: &[Vec<DeviceLine>],
    ) {
        self.print(&text::preamble(o, headers, library));
        if self.json.is_some() || self.csv.is_some() {
            let ctx = RunContext::collect(&self.collective, &self.backend, &o.argv, library, procs);
            if let Some(c) = self.csv.as_mut() {
                c.set_context(&ctx);
            }
            if let Some(w) = self.json.as_mut() {
                ctx.write_json(w);
            }
        }
        if let Some(w) = self.json.as_mut() {
            json_config(w, o);
        }
        self.print("# Using devices\n");
        for lines in procs {
            self.print(&text::device_block(lines));
        }
        if let Some(w) = self.json.as_mut() {
            w.key("devices");
            w.start_list();
            for d in procs.iter().filter_map(|p| p.first()) {
                json_device(w, d);
            }
            w.finish_list();
            w.finish_object();
        }
    }

    /// `writeResultHeader`.
    pub fn result_header(&mut self) {
        self.print(&text::header(self.cputime, self.timestamps, self.per_iter));
        if let Some(w) = self.json.as_mut() {
            w.key("results");
            w.start_list();
        }
    }

    /// `writeBenchmarkLinePreamble`.
    pub fn line_preamble(
        &mut self,
        size: u64,
        count: u64,
        type_name: &str,
        op_name: &str,
        root: i32,
        cycle: u64,
    ) {
        self.print(&text::row_start(size, count, type_name, op_name, root));
        self.row = RowCtx {
            size,
            count,
            type_name: type_name.into(),
            op_name: op_name.into(),
            root,
            cycle,
        };
        if let Some(w) = self.json.as_mut() {
            w.start_object();
            w.key("size");
            w.uint(size);
            w.key("count");
            w.uint(count);
            w.key("type");
            w.string(type_name);
            w.key("redop");
            w.string(op_name);
            w.key("root");
            w.string(&text::root_text(root));
        }
    }

    /// `writeBenchmarkLineBody`.
    pub fn line_body(&mut self, r: &RowResult, out_of_place: bool) {
        self.print(&text::row_body(r.time_us, r.algbw, r.busbw, r.wrong));
        if !out_of_place && self.timestamps && !self.per_iter {
            self.print(&text::timestamp());
        }
        if let Some(w) = self.json.as_mut() {
            w.key(if out_of_place {
                "out_of_place"
            } else {
                "in_place"
            });
            w.start_object();
            w.key(if self.cputime { "cpu_time" } else { "time" });
            w.double(r.time_us);
            w.key("alg_bw");
            w.double(r.algbw);
            w.key("bus_bw");
            w.double(r.busbw);
            w.key("nwrong");
            match r.wrong {
                Some(n) => w.double(n as f64),
                None => w.null(),
            }
            w.finish_object();
        }
        self.csv_row(r, out_of_place);
    }

    fn csv_row(&mut self, r: &RowResult, out_of_place: bool) {
        let Some(c) = self.csv.as_mut() else { return };
        let row = CsvRow {
            collective: &self.collective,
            backend: &self.backend,
            nranks: self.nranks,
            size: self.row.size,
            count: self.row.count,
            type_name: &self.row.type_name,
            op_name: &self.row.op_name,
            root: self.row.root,
            placement: if out_of_place {
                "out-of-place"
            } else {
                "in-place"
            },
            time_us: r.time_us,
            time_kind: if self.cputime { "cputime" } else { "time" },
            algbw: r.algbw,
            busbw: r.busbw,
            wrong: r.wrong,
            cycle: self.row.cycle,
        };
        if let Err(e) = c.row(&row) {
            self.csv_error.get_or_insert(e.to_string());
        }
    }

    /// `writePerIterReport`.
    pub fn per_iter(&mut self, s: &IterReport, out_of_place: bool) {
        let cv = if s.avg > 0.0 {
            s.stdev / s.avg * 100.0
        } else {
            0.0
        };
        self.print(&text::per_iter_body(s.min, s.max, s.p99, cv));
        let Some(w) = self.json.as_mut() else { return };
        w.key(if out_of_place {
            "out_of_place_per_iter"
        } else {
            "in_place_per_iter"
        });
        w.start_object();
        w.key("skipped_iterations");
        w.int(s.skipped as i64);
        for (k, v) in [
            ("min_us", s.min),
            ("max_us", s.max),
            ("avg_us", s.avg),
            ("p50_us", s.p50),
            ("p95_us", s.p95),
            ("p99_us", s.p99),
            ("stdev_us", s.stdev),
        ] {
            w.key(k);
            w.double(v * 1e6);
        }
        w.key("cv_pct");
        w.double(cv);
        w.key("times_us");
        w.start_list();
        s.times.iter().for_each(|t| w.double(t * 1e6));
        w.finish_list();
        if s.per_process.len() > 1 {
            w.key("per_process_max_times_us");
            w.start_list();
            for row in &s.per_process {
                w.start_list();
                row.iter().for_each(|t| w.double(t * 1e6));
                w.finish_list();
            }
            w.finish_list();
        }
        w.finish_object();
    }

    /// Prints the `-S` timestamp column.
    pub fn timestamp(&self) {
        self.print(&text::timestamp());
    }

    /// `writeBenchmarkLineTerminator`.
    pub fn line_terminator(&mut self, iters: i32) {
        self.print("\n");
        if let Some(w) = self.json.as_mut() {
            w.key("actual_iterations");
            w.int(iters as i64);
            w.key("experiment_name");
            w.string("");
            w.finish_object();
        }
    }

    /// `writeResultFooter`.
    pub fn footer(&mut self, errors: i64, avg_bw: f64, check_avg_bw: f64, program: &str) {
        if let Some(w) = self.json.as_mut() {
            w.finish_list();
        }
        self.print(&text::footer(errors, avg_bw, check_avg_bw, program));
        if let Some(w) = self.json.as_mut() {
            w.key("out_of_bounds");
            w.start_object();
            w.key("count");
            w.int(errors);
            w.key("okay");
            w.boolean(errors == 0);
            w.finish_object();
            w.key("average_bus_bandwidth");
            w.start_object();
            w.key("bandwidth");
            w.double(avg_bw);
            w.key("okay");
            if check_avg_bw == -1.0 {
                w.string("unchecked");
            } else {
                w.boolean(avg_bw >= check_avg_bw * 0.9);
            }
            w.finish_object();
        }
    }

    /// `writeMemInfo`.
    pub fn mem_info(&self, init: i64, user: i64, coll: i64) {
        self.print(&text::mem_line(init, user, coll));
    }

    /// `finalizeFooter` then `writeErrors`.
    pub fn errors(&mut self, last_error: &str) {
        self.print("#\n");
        self.print(&text::errors_line(last_error));
        if let Some(w) = self.json.as_mut() {
            w.key("errors");
            w.start_list();
            w.string(last_error);
            w.finish_list();
        }
    }

    /// A run that fails: the JSON document is closed where it stands, its
    /// `errors` list holding `error` (the files are then closed by
    /// [`Output::finalize`], or when the Output is dropped).
    pub fn abandon(&mut self, error: &str) {
        if let Some(w) = self.json.as_mut() {
            w.close_to_top();
            w.key("errors");
            w.start_list();
            w.string(error);
            w.finish_list();
        }
    }

    /// `jsonOutputFinalize` and CSV flush; each file gets its final name.
    /// Returns the first write error.
    pub fn finalize(&mut self) -> Result<(), String> {
        let mut err = self.csv_error.take();
        if let Some(mut w) = self.json.take() {
            if w.at_top_level() {
                w.key("end_time");
                w.string(&crate::nccltests::cfmt::now_string());
            }
            w.finish_all();
            let flushed = w.flush();
            let pending = self.json_file.take();
            match (flushed, pending) {
                (Err(e), p) => {
                    err.get_or_insert(format!("JSON output: {e}"));
                    p.into_iter().for_each(Pending::discard);
                }
                (Ok(()), Some(p)) => {
                    let want = p.dest.clone();
                    match p.commit(w.into_inner()) {
                        Ok(used) if used != want => console::out(&format!(
                            "# JSON output written to {used} ({want} appeared meanwhile)\n"
                        )),
                        Ok(_) => {}
                        Err(e) => {
                            err.get_or_insert(format!("JSON output {want}: {e}"));
                        }
                    }
                }
                (Ok(()), None) => {}
            }
        }
        if let Some(c) = self.csv.take() {
            let want = c.name().to_string();
            match c.finish() {
                Ok(used) if used != want => console::out(&format!(
                    "# CSV output written to {used} ({want} appeared meanwhile)\n"
                )),
                Ok(_) => {}
                Err(e) => {
                    err.get_or_insert(format!("CSV output {want}: {e}"));
                }
            }
        }
        err.map_or(Ok(()), Err)
    }
}

impl Drop for Output {
    /// Every path closes the files: a run that returns early (an error, a
    /// signal) leaves a valid JSON document and CSV under their names.
    fn drop(&mut self) {
        let _ = self.finalize();
    }
}

/// nccl-tests writes JSON only for a `.json` extension (any case).
fn is_json_path(path: &str) -> bool {
    let last_slash = path.rfind('/');
    match path.rfind('.') {
        Some(dot) if Some(dot) > last_slash || last_slash.is_none() => {
            dot + 1 < path.len() && path[dot + 1..].eq_ignore_ascii_case("json")
        }
        _ => false,
    }
}

fn json_config(w: &mut JsonWriter<BufWriter<File>>, o: &Options) {
    w.key("config");
    w.start_object();
    w.key("nthreads");
    w.int(o.nthreads as i64);
    w.key("ngpus");
    w.int(o.ngpus as i64);
    w.key("minimum_bytes");
    w.uint(o.min_bytes);
    w.key("maximum_bytes");
    w.uint(o.max_bytes);
    if o.step_factor > 1 {
        w.key("step_factor");
        w.uint(o.step_factor);
    } else {
        w.key("step_bytes");
        w.uint(o.step_bytes);
    }
    for (k, v) in [
        ("warmup_iters", o.warmup_iters),
        ("iterations", o.iters),
        ("aggregated_iterations", o.agg_iters),
        ("validation", o.datacheck),
        ("graph", o.graph_launches),
    ] {
        w.key(k);
        w.int(v as i64);
    }
    w.key("blocking_collectives");
    w.boolean(o.blocking != 0);
    w.key("per_iter_timing");
    w.boolean(o.per_iter_timing != 0);
    w.key("per_iter_skip");
    w.int(o.per_iter_skip as i64);
    w.key("parallel_init");
    w.boolean(o.parallel_init != 0);
}

fn json_device(w: &mut JsonWriter<BufWriter<File>>, d: &DeviceLine) {
    w.start_object();
    w.key("rank");
    w.int(d.rank as i64);
    w.key("group");
    w.int(d.group as i64);
    w.key("pid");
    w.int(d.pid as i64);
    w.key("hostname");
    w.string(&d.hostname);
    w.key("device");
    w.int(d.device as i64);
    w.key("device_hex");
    w.string(&d.pci_text());
    w.key("device_info");
    w.string(&d.name);
    w.finish_object();
}

/// The prefixes of the variables a `-J` document's `env` keeps: those that
/// change what the run does (NCCL, CUDA, the MPI and its launcher, the RDMA
/// providers, threads), never the rest of the environment, which may hold
/// tokens and ends up in files shared with others (erdma-cluster's
/// `nccl-*.json` beside report.html).
pub const RECORDED_ENV_PREFIXES: [&str; 14] = [
    "NCCL_", "CUDA_", "NVIDIA_", "UCX_", "OMPI_", "PMIX_", "SLURM_", "ERDMA_", "RDMAV_", "MLX5_",
    "FI_", "HWLOC_", "OMP_", "LD_",
];

/// `NAME=VALUE` of each variable of `vars` a `-J` document keeps
/// ([`RECORDED_ENV_PREFIXES`], less any whose name says it holds a secret),
/// sorted.
pub fn recorded_env(
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Vec<String> {
    let secret = ["TOKEN", "SECRET", "PASSW", "CREDENTIAL", "KEY", "AUTH"];
    let mut kept: Vec<String> = vars
        .into_iter()
        .filter_map(|(k, v)| {
            let k = k.to_string_lossy();
            let keep = RECORDED_ENV_PREFIXES.iter().any(|p| k.starts_with(p))
                && !secret.iter().any(|s| k.to_ascii_uppercase().contains(s));
            keep.then(|| format!("{k}={}", v.to_string_lossy()))
        })
        .collect();
    kept.sort();
    kept
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_variables_that_matter_are_recorded() {
        let vars = [
            ("NCCL_DEBUG", "INFO"),
            ("GITHUB_TOKEN", "ghp_x"),
            ("HOME", "/root"),
            ("CUDA_VISIBLE_DEVICES", "0,1"),
            ("SLURM_JOB_ID", "7"),
            ("OMPI_MCA_btl", "self"),
            ("NCCL_API_KEY", "x"),
            ("LD_LIBRARY_PATH", "/usr/lib"),
        ]
        .map(|(k, v)| (k.into(), v.into()));
        assert_eq!(
            recorded_env(vars),
            [
                "CUDA_VISIBLE_DEVICES=0,1",
                "LD_LIBRARY_PATH=/usr/lib",
                "NCCL_DEBUG=INFO",
                "OMPI_MCA_btl=self",
                "SLURM_JOB_ID=7"
            ]
        );
    }

    use super::{is_json_path, recorded_env};

    #[test]
    fn json_extension_rules() {
        assert!(is_json_path("a.json"));
        assert!(is_json_path("dir.x/out.JSON"));
        assert!(!is_json_path("a.json/x"));
        assert!(!is_json_path("out"));
        assert!(!is_json_path("out."));
        assert!(!is_json_path("a.txt"));
    }
}
