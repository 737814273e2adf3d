//! The pictures of report.html as inline SVG: the pair heatmap with its
//! legend, and bus bandwidth against message size (log-x). Pure string
//! building; every label is escaped by the caller's [`super::esc`].

use std::fmt::Write as _;

use super::esc;

/// One cell of a heatmap (row: client, column: server).
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// Client and server are the same rank: nothing measured.
    Diagonal,
    /// The run failed or gave no value; `tip` says why.
    Failed {
        /// The hover text.
        tip: String,
    },
    /// No round of the schedule planned the cell (not a failure).
    NotMeasured {
        /// The hover text.
        tip: String,
    },
    /// A measured bandwidth.
    Value {
        /// Gb/s.
        gbps: f64,
        /// Against the reference (the median or the baseline); none when
        /// there is no reference for this cell.
        ratio: Option<f64>,
        /// The hover text.
        tip: String,
    },
}

/// The colour scale of the ratios: (ratio, RGB); below the first stop the
/// first colour, above the last the last one.
const STOPS: [(f64, [u8; 3]); 5] = [
    (0.5, [0xd7, 0x30, 0x27]),
    (0.75, [0xfc, 0x8d, 0x59]),
    (0.9, [0xfe, 0xe0, 0x8b]),
    (1.0, [0x91, 0xcf, 0x60]),
    (1.1, [0x1a, 0x98, 0x50]),
];

/// The fill of a failed cell.
pub const FAILED: &str = "#3d3d3d";
/// The fill of a cell no round planned.
pub const NOT_MEASURED: &str = "#ffffff";
/// The fill of a cell without a reference to compare with.
pub const NO_REFERENCE: &str = "#c9d3df";
/// The fill of a diagonal cell (a rank with itself).
pub const DIAGONAL: &str = "#f2f2f2";

/// The colour of a ratio, as `#rrggbb`.
pub fn ratio_colour(r: f64) -> String {
    let r = if r.is_finite() { r } else { 0.0 };
    let rgb = match STOPS.iter().position(|(x, _)| r <= *x) {
        Some(0) => STOPS[0].1,
        None => STOPS[STOPS.len() - 1].1,
        Some(i) => {
            let ((x0, c0), (x1, c1)) = (STOPS[i - 1], STOPS[i]);
            let t = (r - x0) / (x1 - x0);
            let mix = |k: usize| (c0[k] as f64 + (c1[k] as f64 - c0[k] as f64) * t).round() as u8;
            [mix(0), mix(1), mix(2)]
        }
    };
    format!("#{:02x}{:02x}{:02x}", rgb[0], rgb[1], rgb[2])
}

/// Dark text on light cells, white on dark ones.
pub fn ink(fill: &str) -> &'static str {
    let hex = |i: usize| u8::from_str_radix(fill.get(i..i + 2).unwrap_or("ff"), 16).unwrap_or(255);
    let luma = 0.299 * hex(1) as f64 + 0.587 * hex(3) as f64 + 0.114 * hex(5) as f64;
    if luma < 120.0 { "#ffffff" } else { "#1b1b1b" }
}

/// Cuts a label to `max` characters (an ellipsis marks the cut).
fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('\u{2026}');
        t
    }
}

/// The heatmap: `labels[i]` names rank i, `cells[client][server]`.
/// Every off-diagonal cell is one `<rect class="cell ...">` with its value
/// as a hover title.
pub fn heatmap(labels: &[String], cells: &[Vec<Cell>]) -> String {
    let n = cells.len();
    let cs = (640 / n.max(1)).clamp(14, 76) as f64;
    let longest = labels.iter().map(|l| l.chars().count().min(24)).max();
    let lw = (longest.unwrap_or(4) as f64 * 7.0 + 14.0).max(40.0);
    let top = lw * 0.72 + 12.0;
    // The last column's label leans right past the matrix.
    let (w, h) = (lw + n as f64 * cs + lw * 0.8, top + n as f64 * cs + 8.0);
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="heatmap" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" role="img">"#
    );
    for (i, l) in labels.iter().enumerate().take(n) {
        let y = top + (i as f64 + 0.5) * cs + 4.0;
        let x = lw + (i as f64 + 0.5) * cs;
        let l = esc(&short(l, 24));
        let _ = write!(
            s,
            r#"<text class="rowlabel" x="{:.1}" y="{y:.1}" text-anchor="end">{l}</text><text class="collabel" x="{x:.1}" y="{:.1}" transform="rotate(-40 {x:.1} {:.1})">{l}</text>"#,
            lw - 6.0,
            top - 6.0,
            top - 6.0
        );
    }
    for (i, row) in cells.iter().enumerate() {
        for (j, cell) in row.iter().enumerate().take(n) {
            let (x, y) = (lw + j as f64 * cs, top + i as f64 * cs);
            s.push_str(&cell_svg(cell, x, y, cs));
        }
    }
    s.push_str("</svg>");
    s
}

fn cell_svg(cell: &Cell, x: f64, y: f64, cs: f64) -> String {
    let (class, fill, tip, lines) = match cell {
        Cell::Diagonal => {
            return format!(
                r##"<rect class="diag" x="{x:.1}" y="{y:.1}" width="{cs:.1}" height="{cs:.1}" fill="{DIAGONAL}" stroke="#ffffff"/>"##
            );
        }
        Cell::Failed { tip } => (
            "cell failed",
            FAILED.to_owned(),
            tip,
            vec!["failed".to_owned()],
        ),
        Cell::NotMeasured { tip } => {
            return format!(
                r##"<rect class="cell unmeasured" x="{x:.1}" y="{y:.1}" width="{cs:.1}" height="{cs:.1}" fill="{NOT_MEASURED}" stroke="#d0d0d0"><title>{}</title></rect>"##,
                esc(tip)
            );
        }
        Cell::Value { gbps, ratio, tip } => {
            let fill = ratio.map_or(NO_REFERENCE.to_owned(), ratio_colour);
            let mut lines = vec![gbps_text(*gbps)];
            lines.extend(ratio.map(|r| format!("{r:.2}x")));
            ("cell", fill, tip, lines)
        }
    };
    let mut s = format!(
        r##"<rect class="{class}" x="{x:.1}" y="{y:.1}" width="{cs:.1}" height="{cs:.1}" fill="{fill}" stroke="#ffffff"><title>{}</title></rect>"##,
        esc(tip)
    );
    // Numbers only where they fit; the hover title always has them.
    if cs >= 44.0 {
        let shown = if cs >= 56.0 { lines.len() } else { 1 };
        let colour = ink(&fill);
        for (k, line) in lines.iter().take(shown).enumerate() {
            let dy = (k as f64 - (shown as f64 - 1.0) / 2.0) * 14.0 + 4.0;
            let _ = write!(
                s,
                r#"<text class="cellv" x="{:.1}" y="{:.1}" text-anchor="middle" style="fill:{colour}">{}</text>"#,
                x + cs / 2.0,
                y + cs / 2.0 + dy,
                esc(line)
            );
        }
    }
    s
}

/// A bandwidth with three significant digits or so (rig links move
/// hundredths of a Gb/s, eRDMA hundreds).
pub fn gbps_text(g: f64) -> String {
    let a = g.abs();
    if a >= 100.0 {
        format!("{g:.0}")
    } else if a >= 10.0 {
        format!("{g:.1}")
    } else if a >= 1.0 {
        format!("{g:.2}")
    } else {
        format!("{g:.3}")
    }
}

/// The heatmap's legend: the colour scale from 0.5 to 1.1 and the
/// swatches for failed, unreferenced and unmeasured cells.
pub fn legend(reference: &str) -> String {
    let steps = 30;
    let (x0, bw) = (24.0, 300.0);
    let mut s = String::from(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="legend" width="710" height="58" viewBox="0 0 710 58">"#,
    );
    for k in 0..steps {
        let r = 0.5 + 0.6 * (k as f64 + 0.5) / steps as f64;
        let _ = write!(
            s,
            r#"<rect x="{:.1}" y="8" width="{:.1}" height="16" fill="{}"/>"#,
            x0 + bw * k as f64 / steps as f64,
            bw / steps as f64 + 0.5,
            ratio_colour(r)
        );
    }
    for t in [0.5, 0.75, 0.9, 1.0, 1.1] {
        let x = x0 + bw * (t - 0.5) / 0.6;
        let label = if t >= 1.1 {
            "1.1x+".to_owned()
        } else {
            format!("{t}x")
        };
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" y1="24" x2="{x:.1}" y2="29" stroke="#333"/><text x="{x:.1}" y="41" text-anchor="middle">{label}</text>"##
        );
    }
    let _ = write!(
        s,
        r#"<text x="{x0}" y="55" class="muted">ratio to {}</text>"#,
        esc(reference)
    );
    for (k, (fill, what)) in [
        (FAILED, "failed"),
        (NO_REFERENCE, "no reference"),
        (NOT_MEASURED, "not measured"),
    ]
    .iter()
    .enumerate()
    {
        let x = 360.0 + k as f64 * 110.0;
        let _ = write!(
            s,
            r##"<rect x="{x}" y="8" width="16" height="16" fill="{fill}" stroke="#d0d0d0"/><text x="{}" y="21">{what}</text>"##,
            x + 22.0
        );
    }
    s.push_str("</svg>");
    s
}

/// One curve of the bandwidth chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// What the legend calls it.
    pub name: String,
    /// Its colour.
    pub colour: &'static str,
    /// (size in bytes, GB/s), in the order drawn.
    pub points: Vec<(f64, f64)>,
    /// A baseline curve: dashed, class `baseline-curve` (else `curve`).
    pub baseline: bool,
}

/// The colours of the stages, in order (cycled).
pub const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
];

/// A byte count for an axis: `8 B`, `64 KiB`, `1 GiB`.
pub fn size_label(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A step of 1, 2 or 5 times a power of ten giving about 5 ticks up to `max`.
fn nice_step(max: f64) -> f64 {
    let raw = max / 5.0;
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p)
}

/// Bus bandwidth (GB/s) against size (bytes, log scale): one polyline per
/// series (`class="curve"` or `"baseline-curve"`), dots at the points,
/// `expected`: dotted horizontal lines (GB/s, colour).
pub fn busbw_chart(series: &[Series], expected: &[(f64, &'static str)]) -> String {
    let (w, h) = (820.0, 380.0);
    let (l, r, t, b) = (64.0, 20.0, 16.0, 52.0);
    let pts = || {
        series
            .iter()
            .flat_map(|s| &s.points)
            .filter(|(x, y)| usable(*x, *y))
    };
    let lx = |x: f64| x.log2();
    let (mut xmin, mut xmax) = pts().fold((f64::MAX, f64::MIN), |(a, b), p| {
        (a.min(lx(p.0)), b.max(lx(p.0)))
    });
    if xmin > xmax {
        (xmin, xmax) = (3.0, 30.0);
    }
    if xmax - xmin < 1.0 {
        (xmin, xmax) = (xmin - 1.0, xmax + 1.0);
    }
    let ymax_data = pts()
        .map(|p| p.1)
        .chain(expected.iter().map(|e| e.0).filter(|v| usable(1.0, *v)))
        .fold(0.0f64, f64::max);
    let step = nice_step(if ymax_data > 0.0 {
        ymax_data * 1.08
    } else {
        1.0
    });
    let ymax = ((ymax_data * 1.08) / step).ceil().max(1.0) * step;
    let px = |x: f64| l + (lx(x) - xmin) / (xmax - xmin) * (w - l - r);
    let py = |y: f64| t + (1.0 - y.max(0.0) / ymax) * (h - t - b);
    let mut s = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" class="busbw" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img"><rect x="{l}" y="{t}" width="{}" height="{}" fill="#fbfbfb" stroke="#bbbbbb"/>"##,
        w - l - r,
        h - t - b
    );
    // Size ticks on powers of two, at most about 10 of them.
    let span = (xmax.ceil() - xmin.floor()).max(1.0);
    let every = ((span / 10.0).ceil() as i64).max(1);
    let mut e = xmin.ceil() as i64;
    while (e as f64) <= xmax {
        if e.rem_euclid(every) == 0 {
            let x = px(2f64.powi(e as i32));
            let _ = write!(
                s,
                r##"<line x1="{x:.1}" y1="{t}" x2="{x:.1}" y2="{:.1}" stroke="#e4e4e4"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                h - b,
                h - b + 16.0,
                size_label(2f64.powi(e as i32))
            );
        }
        e += 1;
    }
    let mut y = 0.0;
    for _ in 0..12 {
        if y > ymax + step / 2.0 {
            break;
        }
        let yy = py(y);
        let _ = write!(
            s,
            r##"<line x1="{l}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            w - r,
            l - 6.0,
            yy + 4.0,
            trim_num(y)
        );
        y += step;
    }
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="axis">message size (bytes, log scale)</text><text x="14" y="{:.1}" text-anchor="middle" class="axis" transform="rotate(-90 14 {:.1})">busbw (GB/s)</text>"#,
        (l + w - r) / 2.0,
        h - 10.0,
        (t + h - b) / 2.0,
        (t + h - b) / 2.0
    );
    for (v, colour) in expected.iter().filter(|e| usable(1.0, e.0) && e.0 > 0.0) {
        let yy = py(*v);
        let _ = write!(
            s,
            r#"<line class="expected" x1="{l}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="{colour}" stroke-dasharray="2 4" stroke-width="1.5"/>"#,
            w - r
        );
    }
    for se in series {
        let ok: Vec<(f64, f64)> = se
            .points
            .iter()
            .copied()
            .filter(|(x, y)| usable(*x, *y))
            .collect();
        let coords: Vec<String> = ok
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        let (class, dash) = if se.baseline {
            ("baseline-curve", r#" stroke-dasharray="7 5""#)
        } else {
            ("curve", "")
        };
        let _ = write!(
            s,
            r#"<polyline class="{class}" fill="none" stroke="{}" stroke-width="2.2"{dash} points="{}"><title>{}</title></polyline>"#,
            se.colour,
            coords.join(" "),
            esc(&se.name)
        );
        if !se.baseline {
            for (x, y) in &ok {
                let _ = write!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{}"><title>{}: {} {} GB/s</title></circle>"#,
                    px(*x),
                    py(*y),
                    se.colour,
                    esc(&se.name),
                    size_label(*x),
                    trim_num(*y)
                );
            }
        }
    }
    s.push_str("</svg>");
    s
}

/// A point the chart can place: a positive size and a bandwidth within
/// reason (a document's nonsense is left out rather than drawn).
fn usable(size: f64, gbs: f64) -> bool {
    size > 0.0 && size < 1e18 && gbs.is_finite() && gbs.abs() < 1e9
}

/// A number with at most two decimals, trailing zeros dropped.
pub fn trim_num(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.into() }
}
