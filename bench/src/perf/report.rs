//! Results from timestamps, with perftest's formulas (`print_report_bw`,
//! `print_report_lat`, `print_report_lat_duration`), so the numbers mean
//! what perftest's mean. One deliberate difference: the standard deviation
//! is computed in floating point (perftest truncates each deviation to an
//! integer number of microseconds).

/// What a bandwidth loop measured.
#[derive(Debug, Clone, Default)]
pub struct BwMeasure {
    /// Message size.
    pub size: u64,
    /// Messages counted (all QPs).
    pub iters: u64,
    /// Timestamp of each post, when the peak is computed (else empty).
    pub posted: Vec<u64>,
    /// Timestamp of each signaled completion at its request's index (0
    /// elsewhere), when the peak is computed.
    pub completed: Vec<u64>,
    /// Start and end of the counted span.
    pub start: u64,
    /// End of the counted span.
    pub end: u64,
    /// Ticks per second.
    pub hz: f64,
    /// CQ moderation (completions every `cq_mod` requests).
    pub cq_mod: u64,
    /// Bidirectional SEND duplex factor is not used: always 1.
    pub bytes_per_iter: u64,
}

/// One line of a bandwidth report, in the units asked for.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwReport {
    /// Message size.
    pub size: u64,
    /// Messages.
    pub iters: u64,
    /// Peak bandwidth (0 when not computed).
    pub bw_peak: f64,
    /// Average bandwidth.
    pub bw_avg: f64,
    /// Message rate, millions per second.
    pub msg_rate: f64,
    /// Whether the bandwidths are Gb/s (else MB/s = 2^20 B/s).
    pub gbits: bool,
}

impl BwReport {
    /// Bytes per second of a bandwidth in this report's units.
    pub fn to_bytes_per_sec(&self, v: f64) -> f64 {
        if self.gbits {
            v * 125_000_000.0
        } else {
            v * 1_048_576.0
        }
    }

    /// The bandwidths in Gb/s.
    pub fn gbps(&self, v: f64) -> f64 {
        self.to_bytes_per_sec(v) / 125_000_000.0
    }

    /// The bandwidths in MiB/s.
    pub fn mibps(&self, v: f64) -> f64 {
        self.to_bytes_per_sec(v) / 1_048_576.0
    }

    /// Sum of two sides (bidirectional tests print it).
    pub fn plus(&self, o: &BwReport) -> BwReport {
        BwReport {
            bw_peak: self.bw_peak + o.bw_peak,
            bw_avg: self.bw_avg + o.bw_avg,
            msg_rate: self.msg_rate + o.msg_rate,
            ..*self
        }
    }
}

/// perftest's `print_report_bw`.
pub fn bw_report(m: &BwMeasure, gbits: bool) -> BwReport {
    let format = if gbits { 125_000_000.0 } else { 1_048_576.0 };
    let n = m.iters as usize;
    let span = m.end.saturating_sub(m.start).max(1) as f64;
    let secs = span / m.hz;
    let bytes = m.bytes_per_iter as f64 * m.iters as f64;
    let mut peak = 0.0;
    if !m.posted.is_empty() && n > 0 && m.posted.len() >= n && m.completed.len() >= n {
        let cq = (m.cq_mod.max(1)) as usize;
        let mut opt = span;
        let ticks = |j: usize, i: usize| {
            m.completed[j].saturating_sub(m.posted[i]) as f64 / (j - i + 1) as f64
        };
        for i in 0..n {
            let mut j = (i + 1).div_ceil(cq) * cq - 1;
            while j < n {
                if m.completed[j] != 0 {
                    opt = opt.min(ticks(j, i));
                }
                j += cq;
            }
            if !n.is_multiple_of(cq) && m.completed[n - 1] != 0 {
                opt = opt.min(ticks(n - 1, i));
            }
        }
        if opt > 0.0 {
            peak = m.bytes_per_iter as f64 * m.hz / (opt * format);
        }
    }
    BwReport {
        size: m.size,
        iters: m.iters,
        bw_peak: peak,
        bw_avg: bytes / secs / format,
        msg_rate: m.iters as f64 / secs / 1e6,
        gbits,
    }
}

/// What a latency loop measured.
#[derive(Debug, Clone, Default)]
pub struct LatMeasure {
    /// Message size.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Timestamp of each post (iterations mode).
    pub posted: Vec<u64>,
    /// Ticks per second.
    pub hz: f64,
    /// 2 for ping-pong tests (one-way latency), 1 for READ/atomics.
    pub rtt_factor: u32,
    /// Duration mode: the sample span in ticks (and `iters` counted in it).
    pub span: Option<u64>,
}

/// One line of a latency report (microseconds).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LatReport {
    /// Message size.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Minimum.
    pub t_min: f64,
    /// perftest's maximum (after dropping the two largest samples).
    pub t_max: f64,
    /// Median.
    pub t_typical: f64,
    /// Average.
    pub t_avg: f64,
    /// Standard deviation.
    pub t_stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p99_9: f64,
    /// Duration mode: transactions per second (then only `t_avg` is set).
    pub tps: Option<f64>,
}

/// perftest's `print_report_lat` (or `_duration`).
pub fn lat_report(m: &LatMeasure) -> LatReport {
    let q = m.hz / 1e6 * f64::from(m.rtt_factor.max(1));
    if let Some(span) = m.span {
        let secs = span as f64 / m.hz;
        let iters = m.iters.max(1) as f64;
        return LatReport {
            size: m.size,
            iters: m.iters,
            t_avg: span as f64 / q / iters,
            tps: Some(m.iters as f64 / secs),
            ..LatReport::default()
        };
    }
    let mut delta: Vec<u64> = m
        .posted
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .collect();
    delta.sort_unstable();
    // perftest drops the two largest samples (LAT_MEASURE_TAIL).
    let cnt = delta.len().saturating_sub(2);
    if cnt == 0 {
        return LatReport {
            size: m.size,
            iters: m.iters,
            ..LatReport::default()
        };
    }
    let median = if (cnt - 1) % 2 == 1 {
        (delta[cnt / 2] + delta[cnt / 2 - 1]) / 2
    } else {
        delta[cnt / 2]
    };
    let us: Vec<f64> = delta.iter().map(|&d| d as f64 / q).collect();
    let avg = us[..cnt].iter().sum::<f64>() / cnt as f64;
    let var = us[..cnt].iter().map(|v| (avg - v).powi(2)).sum::<f64>() / cnt as f64;
    let i99 = ((cnt as f64) * 0.99).ceil() as usize;
    let i999 = ((cnt as f64) * 0.999).ceil() as usize;
    LatReport {
        size: m.size,
        iters: m.iters,
        t_min: us[0],
        t_max: us[cnt.min(us.len() - 1)],
        t_typical: median as f64 / q,
        t_avg: avg,
        t_stdev: var.sqrt(),
        p99: us[i99.min(us.len() - 1)],
        p99_9: us[i999.min(us.len() - 1)],
        tps: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_average_and_rate() {
        // 1000 messages of 1 MiB in one second (1e9 ticks at 1 GHz).
        let m = BwMeasure {
            size: 1 << 20,
            iters: 1000,
            start: 0,
            end: 1_000_000_000,
            hz: 1e9,
            cq_mod: 1,
            bytes_per_iter: 1 << 20,
            ..Default::default()
        };
        let r = bw_report(&m, false);
        assert!((r.bw_avg - 1000.0).abs() < 1e-9);
        assert!((r.msg_rate - 0.001).abs() < 1e-12);
        let g = bw_report(&m, true);
        assert!((g.bw_avg - 1000.0 * 1048576.0 * 8.0 / 1e9).abs() < 1e-9);
        assert!((g.gbps(g.bw_avg) - g.bw_avg).abs() < 1e-12);
        assert!((g.mibps(g.bw_avg) - 1000.0).abs() < 1e-9);
    }

    #[test]
    fn peak_is_the_best_window() {
        // Posts every 10 ticks, completions 5 ticks later, one burst faster.
        let n = 8;
        let posted: Vec<u64> = (0..n).map(|i| 100 + 10 * i).collect();
        let mut completed: Vec<u64> = posted.iter().map(|p| p + 5).collect();
        completed[3] = posted[3] + 1;
        let m = BwMeasure {
            size: 100,
            iters: n,
            posted,
            completed,
            start: 100,
            end: 185,
            hz: 1e9,
            cq_mod: 1,
            bytes_per_iter: 100,
        };
        let r = bw_report(&m, false);
        // Best: request 3 alone, 1 tick.
        let want = 100.0 * 1e9 / 1048576.0;
        assert!((r.bw_peak - want).abs() / want < 1e-9, "{}", r.bw_peak);
    }

    #[test]
    fn latency_statistics_follow_perftest() {
        // 12 posts 2 us apart (ping-pong: 1 us one-way), one slow sample.
        let mut t = 0u64;
        let mut posted = vec![];
        for i in 0..12 {
            posted.push(t);
            t += if i == 5 { 40_000 } else { 2_000 };
        }
        let m = LatMeasure {
            size: 2,
            iters: 12,
            posted,
            hz: 1e9,
            rtt_factor: 2,
            span: None,
        };
        let r = lat_report(&m);
        assert!((r.t_min - 1.0).abs() < 1e-9);
        assert!((r.t_typical - 1.0).abs() < 1e-9);
        // The slow sample is among the two dropped.
        assert!((r.t_max - 1.0).abs() < 1e-9, "{r:?}");
        assert!(r.t_stdev.abs() < 1e-9);
        let d = lat_report(&LatMeasure {
            size: 2,
            iters: 1000,
            posted: vec![],
            hz: 1e9,
            rtt_factor: 1,
            span: Some(1_000_000_000),
        });
        assert!((d.t_avg - 1000.0).abs() < 1e-9);
        assert_eq!(d.tps, Some(1000.0));
    }
}
