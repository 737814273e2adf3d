//! The stdout text of nccl-tests 2.19.6 (`util.cu`), as pure functions so
//! that every line can be compared with a real output in unit tests.

use crate::nccltests::cfmt::{self, float_str};
use crate::nccltests::options::Options;

/// The nccl-tests version this tool reproduces.
pub const NCCL_TESTS_VERSION: &str = "2.19.6";

/// The preamble up to and including the `#` line before "# Using devices".
pub fn preamble(o: &Options, headers: i32, library: i32) -> String {
    let mut s = format!(
        "# nccl-tests version {NCCL_TESTS_VERSION} nccl-headers={headers} nccl-library={library}\n"
    );
    s += &format!("# Collective test starting: {}\n", o.program_name);
    let (step, kind) = if o.step_factor > 1 {
        (o.step_factor, "factor")
    } else {
        (o.step_bytes, "bytes")
    };
    s += &format!(
        "# nThread {} nGpus {} minBytes {} maxBytes {} step: {}({}) warmup iters: {} iters: {} agg iters: {} validation: {} graph: {} unalign: {}\n",
        o.nthreads,
        o.ngpus,
        o.min_bytes as i64,
        o.max_bytes as i64,
        step as i64,
        kind,
        o.warmup_iters,
        o.iters,
        o.agg_iters,
        o.datacheck,
        o.graph_launches,
        o.unalign
    );
    s += match o.blocking {
        1 => "# Blocking Enabled: wait and barrier after each inner iteration (-m) \n",
        2 => "# Blocking Enabled: wait after each inner iteration (-m), no barrier \n",
        3 => {
            "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier \n"
        }
        _ => "",
    };
    if o.per_iter_timing != 0 {
        s += "# Per-Iteration Report: CUDA event timing; i_* uses max over process rows";
        if o.per_iter_skip != 0 {
            s += &format!("; summary skips first {} iterations", o.per_iter_skip);
        }
        s += " \n";
    }
    if o.parallel_init != 0 {
        s += "# Parallel Init Enabled: threads call into NcclInitRank concurrently \n";
    }
    s + "#\n"
}

/// One device line (what each process contributes to "# Using devices").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceLine {
    /// Global rank.
    pub rank: i32,
    /// Split color.
    pub group: i32,
    /// Process id.
    pub pid: i32,
    /// Host name up to the first dot.
    pub hostname: String,
    /// Device index.
    pub device: i32,
    /// PCI domain, bus and device.
    pub pci: (u32, u32, u32),
    /// Device name.
    pub name: String,
}

impl DeviceLine {
    /// `"#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n"`.
    pub fn text(&self) -> String {
        format!(
            "#  Rank {:2} Group {:2} Pid {:6} on {:>10} device {:2} [{}] {}\n",
            self.rank,
            self.group,
            self.pid,
            self.hostname,
            self.device,
            self.pci_text(),
            self.name
        )
    }

    /// `%04x:%02x:%02x`.
    pub fn pci_text(&self) -> String {
        format!("{:04x}:{:02x}:{:02x}", self.pci.0, self.pci.1, self.pci.2)
    }
}

/// A process's device lines joined, truncated like nccl-tests' 2048-byte
/// buffer.
pub fn device_block(lines: &[DeviceLine]) -> String {
    const MAX_LINE: usize = 2048;
    let s: String = lines.iter().map(DeviceLine::text).collect();
    if s.len() >= MAX_LINE {
        let mut cut = MAX_LINE - 5;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        return format!("{}...\n", &s[..cut]);
    }
    s
}

/// The table header (`writeResultHeader`).
pub fn header(cputime: bool, timestamps: bool, per_iter: bool) -> String {
    let ts_lbl = if timestamps { "timestamp" } else { "" };
    let ts_pad = if timestamps { 19 } else { 0 };
    let ts_fmt = if timestamps { "%Y-%m-%d %H:%M:%S" } else { "" };
    let t = if cputime { "cputime" } else { "time" };
    let mut s = String::from("#\n");
    if per_iter {
        s += &format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}              out-of-place (+ per-iteration)                                in-place (+ per-iteration)\n",
            "", "", "", "", ""
        );
        s += &format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>7}  {:>7}  {:>7}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>7}  {:>7}  {:>7} {:>ts_pad$}\n",
            "size",
            "count",
            "type",
            "redop",
            "root",
            t,
            "algbw",
            "busbw",
            "#wrong",
            "i_min",
            "i_max",
            "i_p99",
            "i_cv%",
            t,
            "algbw",
            "busbw",
            "#wrong",
            "i_min",
            "i_max",
            "i_p99",
            "i_cv%",
            ts_lbl
        );
        s += &format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>7}  {:>7}  {:>7}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>7}  {:>7}  {:>7} {:>ts_pad$}\n",
            "(B)",
            "(elements)",
            "",
            "",
            "",
            "(us)",
            "(GB/s)",
            "(GB/s)",
            "",
            "(us)",
            "(us)",
            "(us)",
            "(%)",
            "(us)",
            "(GB/s)",
            "(GB/s)",
            "",
            "(us)",
            "(us)",
            "(us)",
            "(%)",
            ts_fmt
        );
    } else {
        s += &format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place          \n",
            "", "", "", "", ""
        );
        s += &format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} {:>ts_pad$}\n",
            "size",
            "count",
            "type",
            "redop",
            "root",
            t,
            "algbw",
            "busbw",
            "#wrong",
            t,
            "algbw",
            "busbw",
            "#wrong",
            ts_lbl
        );
        s += &format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} {:>ts_pad$}\n",
            "(B)",
            "(elements)",
            "",
            "",
            "",
            "(us)",
            "(GB/s)",
            "(GB/s)",
            "",
            "(us)",
            "(GB/s)",
            "(GB/s)",
            "",
            ts_fmt
        );
    }
    s
}

/// `"%6i"` of the root, as both the table and JSON print it.
pub fn root_text(root: i32) -> String {
    format!("{root:6}")
}

/// The start of a row: `"%12li  %12li  %8s  %6s  %6s"`.
pub fn row_start(bytes: u64, elems: u64, type_name: &str, op_name: &str, root: i32) -> String {
    format!(
        "{:12}  {:12}  {:>8}  {:>6}  {:>6}",
        bytes as i64,
        elems as i64,
        type_name,
        op_name,
        root_text(root)
    )
}

/// One placement's columns: time, algbw, busbw and #wrong (or N/A).
pub fn row_body(time_us: f64, alg: f64, bus: f64, wrong: Option<i64>) -> String {
    let head = format!(
        "  {}  {}  {}",
        float_str(time_us, 7),
        float_str(alg, 6),
        float_str(bus, 6)
    );
    match wrong {
        Some(w) => head + "  " + &cfmt::f64_with(c"%6g", w as f64),
        None => head + "    N/A",
    }
}

/// The four per-iteration columns (`-I`).
pub fn per_iter_body(min_s: f64, max_s: f64, p99_s: f64, cv_pct: f64) -> String {
    format!(
        "  {}  {}  {}  {}",
        float_str(min_s * 1e6, 7),
        float_str(max_s * 1e6, 7),
        float_str(p99_s * 1e6, 7),
        float_str(cv_pct, 7)
    )
}

/// `"%21s"` of the current local time.
pub fn timestamp() -> String {
    format!("{:>21}", cfmt::now_string())
}

/// The footer lines up to "Collective test concluded".
pub fn footer(errors: i64, avg_bw: f64, check_avg_bw: f64, program: &str) -> String {
    let bw_verdict = if check_avg_bw == -1.0 {
        ""
    } else if avg_bw < check_avg_bw * 0.9 {
        "FAILED"
    } else {
        "OK"
    };
    format!(
        "# {:<20} : {} {}\n# {:<20} : {} {}\n#\n# Collective test concluded: {}\n",
        "Out of bounds values",
        errors,
        if errors != 0 { "FAILED" } else { "OK" },
        "Avg bus bandwidth",
        cfmt::g(avg_bw),
        bw_verdict,
        program
    )
}

/// `getMemString`: a byte count with a binary unit and 2/1/0 decimals.
pub fn mem_string(bytes: i64) -> String {
    let mut amount = bytes as f64;
    let mut unit = " B";
    for (scale, u) in [
        (1024.0 * 1024.0 * 1024.0, " GB"),
        (1024.0 * 1024.0, " MB"),
        (1024.0, " KB"),
    ] {
        if amount.abs() >= scale {
            amount /= scale;
            unit = u;
            break;
        }
    }
    let text = if amount.abs() < 10.0 {
        cfmt::f64_with(c"%.2f", amount)
    } else if amount.abs() < 100.0 {
        cfmt::f64_with(c"%.1f", amount)
    } else {
        cfmt::f64_with(c"%.0f", amount)
    };
    text + unit
}

/// The `-M` line.
pub fn mem_line(init: i64, user: i64, coll: i64) -> String {
    let total = init.wrapping_add(user).wrapping_add(coll);
    format!(
        "# {:<20} : Initialization {} | User-Allocated {} | Collective {} | Total  {}\n",
        "GPU memory usage",
        mem_string(init),
        mem_string(user),
        mem_string(coll),
        mem_string(total as u64 as i64)
    )
}

/// The last line: the library's last error, or an empty line.
pub fn errors_line(last_error: &str) -> String {
    if last_error.is_empty() {
        "\n".into()
    } else {
        format!("# error: {last_error}\n")
    }
}

#[cfg(test)]
mod tests;
