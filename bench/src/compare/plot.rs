//! `--plot FILE.svg|png`: bus bandwidth against message size, one line per
//! run (and per collective when the runs hold several), a log-2 size axis
//! labelled in bytes (8 B ... 8 GiB), a legend with each run's name and
//! what sets it apart, each line's peak marked.
//!
//! Drawn with plotters; text is set in DejaVu Sans, embedded (the `dejavu`
//! crate), so PNGs render the same on hosts without fonts.

use super::align::Table;
use super::context::Diff;
use super::model::{Run, human_size};
use plotters::coord::ranged1d::{
    KeyPointHint, KeyPointWeight, NoDefaultFormatting, Ranged, ValueFormatter,
};
use plotters::prelude::*;
use std::ops::Range;
use std::sync::Once;

/// The image formats, by file extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Scalable vector graphics.
    Svg,
    /// Portable network graphics.
    Png,
}

impl Kind {
    /// From the extension of `path` (`.svg`, `.png`, any case).
    pub fn of(path: &str) -> Option<Kind> {
        let ext = std::path::Path::new(path).extension()?.to_str()?;
        match ext.to_ascii_lowercase().as_str() {
            "svg" => Some(Kind::Svg),
            "png" => Some(Kind::Png),
            _ => None,
        }
    }
}

/// One line of the plot.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// (size in bytes, GB/s), ascending sizes.
    pub points: Vec<(u64, f64)>,
    /// Index of the run (its colour).
    pub run: usize,
}

/// What a legend says about a run beyond its name: the context values that
/// differ between the runs, the telling ones first, else a short summary.
fn legend_context(run: &Run, diff: &Diff) -> String {
    const TELLING: [&str; 10] = [
        "nccl",
        "ranks",
        "gpu",
        "net",
        "backend",
        "env",
        "hosts",
        "device",
        "cuda",
        "nccl-tests",
    ];
    let differs = |k: &str| diff.differs.iter().any(|(d, _)| d == k);
    let mut parts: Vec<String> = TELLING
        .iter()
        .filter(|k| differs(k))
        .filter_map(|k| run.context.get(k).map(|v| format!("{k} {v}")))
        .take(3)
        .collect();
    if parts.is_empty() {
        parts = TELLING
            .iter()
            .filter_map(|k| run.context.get(k).map(|v| format!("{k} {v}")))
            .take(3)
            .collect();
    }
    let mut s = parts.join(", ");
    if s.chars().count() > 70 {
        s = s.chars().take(67).collect::<String>() + "...";
    }
    s
}

/// The lines to draw: per group of the table and run, the bus bandwidth
/// (algorithm bandwidth where every bus bandwidth is 0, as on one rank).
/// Series without any bandwidth (latency tests) are left out.
pub fn series(runs: &[Run], table: &Table, diff: &Diff) -> Vec<Series> {
    let many_groups = table.groups.len() > 1;
    let mut out = Vec::new();
    for g in &table.groups {
        for (i, run) in runs.iter().enumerate() {
            let cells: Vec<(u64, &super::model::Measure)> = g
                .lines
                .iter()
                .filter_map(|l| l.cells[i].as_ref().map(|c| (l.size, &c.m)))
                .collect();
            let bus: Vec<(u64, f64)> = cells
                .iter()
                .filter_map(|(s, m)| m.busbw.filter(|v| v.is_finite()).map(|v| (*s, v)))
                .collect();
            let (points, alg) = if bus.iter().any(|p| p.1 > 0.0) {
                (bus, false)
            } else {
                let alg: Vec<(u64, f64)> = cells
                    .iter()
                    .filter_map(|(s, m)| m.algbw.filter(|v| v.is_finite()).map(|v| (*s, v)))
                    .collect();
                (alg, true)
            };
            if points.is_empty() || points.iter().all(|p| p.1 <= 0.0) {
                continue;
            }
            let mut label = format!("[{}] {}", i + 1, run.name);
            let ctx = legend_context(run, diff);
            if !ctx.is_empty() {
                label += &format!(" ({ctx})");
            }
            if many_groups {
                label += &format!(" - {}", g.key);
            }
            if alg {
                label += " [algbw: busbw is 0]";
            }
            out.push(Series {
                label,
                points,
                run: i,
            });
        }
    }
    out
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The embedded font is a valid TTF; a failure would only leave text
        // out of PNGs, which the tests would catch.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
    });
}

/// Writes the plot of `series` to `path`.
pub fn draw(path: &str, kind: Kind, title: &str, series: &[Series]) -> Result<(), String> {
    if series.is_empty() {
        return Err("nothing to plot: no run has bandwidth numbers (latency tests only?)".into());
    }
    register_font();
    let size = (1200, 700);
    match kind {
        Kind::Svg => render(
            SVGBackend::new(path, size).into_drawing_area(),
            title,
            series,
        ),
        Kind::Png => render(
            BitMapBackend::new(path, size).into_drawing_area(),
            title,
            series,
        ),
    }
}

/// Log-2 positions of the size labels: at most `max`, on a regular step.
fn key_points(lo: i32, hi: i32, max: usize) -> Vec<f64> {
    let span = (hi - lo).max(1) as usize;
    let max = max.max(2);
    let step = [1, 2, 3, 4, 5, 10, 20]
        .into_iter()
        .find(|s| span / s < max)
        .unwrap_or(span);
    (lo..=hi).step_by(step).map(f64::from).collect()
}

/// The x axis: log2 of the size, labelled as sizes (`8 B`, `1 KiB`, ...).
struct SizeAxis {
    lo: i32,
    hi: i32,
}

impl Ranged for SizeAxis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let f = (v - f64::from(self.lo)) / f64::from(self.hi - self.lo);
        limit.0 + (f * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        let max = match hint.weight() {
            KeyPointWeight::Bold => hint.bold_points().min(16),
            KeyPointWeight::Any => hint.max_num_points().min(64),
        };
        key_points(self.lo, self.hi, max)
    }

    fn range(&self) -> Range<f64> {
        f64::from(self.lo)..f64::from(self.hi)
    }
}

impl ValueFormatter<f64> for SizeAxis {
    fn format(v: &f64) -> String {
        human_size(2f64.powf(*v).round() as u64)
    }
}

fn render<DB: DrawingBackend>(
    area: DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    series: &[Series],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    area.fill(&WHITE).map_err(err)?;
    let all = series.iter().flat_map(|s| s.points.iter());
    let (mut lo, mut hi, mut top) = (u64::MAX, 1u64, 0f64);
    for &(size, bw) in all {
        lo = lo.min(size.max(1));
        hi = hi.max(size);
        top = top.max(bw);
    }
    let lo2 = (lo as f64).log2().floor() as i32;
    let hi2 = ((hi as f64).log2().ceil() as i32).max(lo2 + 1);
    let top = if top > 0.0 { top * 1.12 } else { 1.0 };
    let x = SizeAxis { lo: lo2, hi: hi2 };
    // Enough decimals that the y labels differ (perftest over Soft-RoCE
    // moves a few MB/s).
    let decimals = if top >= 10.0 {
        0
    } else {
        (1.0 - top.log10()).ceil().clamp(1.0, 6.0) as usize
    };
    let mut chart = ChartBuilder::on(&area)
        .caption(title, ("sans-serif", 26))
        .margin(20)
        .x_label_area_size(55)
        .y_label_area_size(80)
        .build_cartesian_2d(x, 0f64..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("message size (log2 scale)")
        .y_desc("bus bandwidth (GB/s)")
        .y_label_formatter(&|v| format!("{v:.decimals$}"))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 18))
        .draw()
        .map_err(err)?;
    for s in series {
        let color = Palette99::pick(s.run).to_rgba();
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|&(size, bw)| ((size.max(1) as f64).log2(), bw))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 2, color.filled())))
            .map_err(err)?;
        if let Some(&(px, py)) = pts.iter().max_by(|a, b| a.1.total_cmp(&b.1)) {
            let peak_size = s
                .points
                .iter()
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map_or(0, |p| p.0);
            let text = format!(
                "peak {} GB/s @ {}",
                super::report::bw_str(Some(py)),
                human_size(peak_size)
            );
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at((px, py))
                        + Circle::new((0, 0), 6, color.stroke_width(2))
                        + Text::new(
                            text,
                            (-150, -18),
                            ("sans-serif", 14).into_font().color(&color),
                        ),
                ))
                .map_err(err)?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(err)?;
    area.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_labels_stay_few_and_regular() {
        assert_eq!(key_points(3, 6, 16), [3.0, 4.0, 5.0, 6.0]);
        let k = key_points(3, 33, 16);
        assert!(k.len() <= 16, "{k:?}");
        assert_eq!(k.first(), Some(&3.0));
        assert_eq!(human_size(2f64.powf(k[0]) as u64), "8 B");
        assert_eq!(Kind::of("a/b.SVG"), Some(Kind::Svg));
        assert_eq!(Kind::of("b.png"), Some(Kind::Png));
        assert_eq!(Kind::of("b.pdf"), None);
    }
}
