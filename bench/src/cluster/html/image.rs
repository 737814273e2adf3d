//! The pair heatmap of a large cluster as one PNG, embedded in the page as a
//! `data:` URI: one SVG rect per cell is about 150 bytes, so at 1000 hosts
//! the SVG heatmap alone is 150 MB and takes Chromium minutes to paint.
//!
//! The image has the matrix (row: client, column: server) in the SVG
//! heatmap's colours, at most [`MAX_SIDE`] pixels a side: a pixel stands for
//! a block of cells when there are more hosts than that and shows the worst
//! of them (a failed cell, else the lowest ratio), so a single bad cell is
//! never averaged away. Purple ticks left of and above the matrix mark the
//! suspects' rows and columns; right of it two strips give each host's send
//! (its row's) and receive (its column's) median in the same colours.

use std::fmt::Write as _;

use super::svg;

/// Above this many ranks the heatmap is an image.
pub const IMAGE_ABOVE: usize = 300;
/// The matrix is at most this many pixels a side.
pub const MAX_SIDE: usize = 1000;

/// What one cell shows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Px {
    /// Client and server are the same rank.
    Diagonal,
    /// No round of the schedule planned it.
    NotMeasured,
    /// Measured, but no reference to compare it with.
    NoReference,
    /// Measured: the ratio to the reference.
    Ratio(f64),
    /// The run failed or gave no value.
    Failed,
}

/// Palette indices: the fixed colours, then [`LEVELS`] steps of the ratio
/// scale from 0.5 to 1.1.
const WHITE: u8 = 0;
const DIAGONAL: u8 = 1;
const NO_REFERENCE: u8 = 2;
const FAILED: u8 = 3;
const MARK: u8 = 4;
const FIRST_LEVEL: u8 = 5;
/// Ratio steps of 0.01 from 0.5 to 1.1.
const LEVELS: u8 = 61;
/// The colour of the suspects' marks (not on the ratio scale).
pub const MARK_COLOUR: &str = "#7b2cbf";

impl Px {
    /// Its palette index.
    fn index(self) -> u8 {
        match self {
            Px::Diagonal => DIAGONAL,
            Px::NotMeasured => WHITE,
            Px::NoReference => NO_REFERENCE,
            Px::Failed => FAILED,
            Px::Ratio(r) => {
                let r = if r.is_finite() { r } else { 0.0 };
                let level = ((r - 0.5) / 0.01).round().clamp(0.0, f64::from(LEVELS - 1));
                FIRST_LEVEL + level as u8
            }
        }
    }
}

/// How bad a palette index is: a block shows its worst cell.
fn badness(index: u8) -> u16 {
    match index {
        FAILED => 1000,
        NO_REFERENCE => 100,
        WHITE => 50,
        DIAGONAL => 0,
        // A lower ratio is worse.
        level => 200 + u16::from(FIRST_LEVEL + LEVELS - level),
    }
}

fn palette() -> Vec<u8> {
    let hex = |s: &str| -> [u8; 3] {
        let c = |i: usize| u8::from_str_radix(s.get(i..i + 2).unwrap_or("ff"), 16).unwrap_or(255);
        [c(1), c(3), c(5)]
    };
    let mut p = Vec::new();
    for c in [
        svg::NOT_MEASURED,
        svg::DIAGONAL,
        svg::NO_REFERENCE,
        svg::FAILED,
        MARK_COLOUR,
    ] {
        p.extend(hex(c));
    }
    for level in 0..LEVELS {
        p.extend(hex(&svg::ratio_colour(0.5 + f64::from(level) * 0.01)));
    }
    p
}

/// The picture's inputs.
pub struct Picture<'a> {
    /// Ranks.
    pub n: usize,
    /// Cell (client, server).
    pub cell: &'a dyn Fn(usize, usize) -> Px,
    /// Whether a rank's row and column are marked (a suspect).
    pub marked: &'a [bool],
    /// Each rank's send median against the reference (none: nothing measured
    /// or no reference).
    pub send: &'a [Option<f64>],
    /// Each rank's receive median against the reference.
    pub recv: &'a [Option<f64>],
}

/// The geometry: `block` cells a pixel (a side), `scale` pixels a block.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layout {
    /// Cells per pixel, a side.
    pub block: usize,
    /// Pixels per block, a side.
    pub scale: usize,
    /// Blocks a side.
    pub blocks: usize,
}

/// Left and top margin: the marks, then a gap.
const MARGIN: usize = 8;
const MARK_W: usize = 6;
/// Right of the matrix: a gap, the send strip, a gap, the receive strip.
const STRIP_GAP: usize = 6;
const STRIP_W: usize = 10;

impl Layout {
    /// The layout for `n` ranks.
    pub fn of(n: usize) -> Layout {
        let n = n.max(1);
        if n <= MAX_SIDE {
            Layout {
                block: 1,
                scale: MAX_SIDE / n,
                blocks: n,
            }
        } else {
            let block = n.div_ceil(MAX_SIDE);
            Layout {
                block,
                scale: 1,
                blocks: n.div_ceil(block),
            }
        }
    }

    /// The matrix's side in pixels.
    pub fn side(&self) -> usize {
        self.blocks * self.scale
    }

    /// The image's (width, height).
    pub fn size(&self) -> (usize, usize) {
        (
            MARGIN + self.side() + STRIP_GAP + 2 * STRIP_W + 2,
            MARGIN + self.side(),
        )
    }

    /// The x of the send strip (the receive strip is `STRIP_W + 2` right).
    fn strip_x(&self) -> usize {
        MARGIN + self.side() + STRIP_GAP
    }
}

/// The worst of some values (the median of a block of hosts is the
/// lowest of their medians, as the matrix's blocks show their worst cell).
fn worst(v: impl Iterator<Item = u8>) -> u8 {
    v.max_by_key(|&i| badness(i)).unwrap_or(WHITE)
}

/// The image's pixels, one palette index each, row by row.
pub fn pixels(p: &Picture) -> (Layout, Vec<u8>) {
    let l = Layout::of(p.n);
    let (w, h) = l.size();
    let mut buf = vec![WHITE; w * h];
    let strip = |v: &[Option<f64>], b: usize| {
        worst((b * l.block..((b + 1) * l.block).min(p.n)).map(|i| {
            v.get(i)
                .copied()
                .flatten()
                .map_or(WHITE, |r| Px::Ratio(r).index())
        }))
    };
    let mut row = vec![WHITE; l.blocks];
    for bi in 0..l.blocks {
        let rows = bi * l.block..((bi + 1) * l.block).min(p.n);
        row.fill(DIAGONAL);
        for i in rows.clone() {
            for j in 0..p.n {
                let bj = j / l.block;
                let idx = (p.cell)(i, j).index();
                if badness(idx) > badness(row[bj]) {
                    row[bj] = idx;
                }
            }
        }
        let mark_row = rows.clone().any(|i| p.marked.get(i) == Some(&true));
        let (send, recv) = (strip(p.send, bi), strip(p.recv, bi));
        for y in bi * l.scale..(bi + 1) * l.scale {
            let line = &mut buf[(MARGIN + y) * w..(MARGIN + y + 1) * w];
            if mark_row {
                line[..MARK_W].fill(MARK);
            }
            for (bj, &idx) in row.iter().enumerate() {
                line[MARGIN + bj * l.scale..MARGIN + (bj + 1) * l.scale].fill(idx);
            }
            let sx = l.strip_x();
            line[sx..sx + STRIP_W].fill(send);
            line[sx + STRIP_W + 2..sx + 2 * STRIP_W + 2].fill(recv);
        }
    }
    // The columns' marks above the matrix.
    for bj in 0..l.blocks {
        let cols = bj * l.block..((bj + 1) * l.block).min(p.n);
        if cols.into_iter().any(|j| p.marked.get(j) == Some(&true)) {
            for y in 0..MARK_W {
                buf[y * w + MARGIN + bj * l.scale..y * w + MARGIN + (bj + 1) * l.scale].fill(MARK);
            }
        }
    }
    (l, buf)
}

/// The picture as a PNG file's bytes (8-bit indexed colour).
pub fn png(p: &Picture) -> Result<(Layout, Vec<u8>), String> {
    let (l, buf) = pixels(p);
    let (w, h) = l.size();
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w as u32, h as u32);
    enc.set_color(png::ColorType::Indexed);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_palette(palette());
    enc.set_compression(png::Compression::Best);
    enc.write_header()
        .and_then(|mut wr| wr.write_image_data(&buf))
        .map_err(|e| format!("encoding the heatmap as PNG: {e}"))?;
    Ok((l, out))
}

/// Bytes as base64 (RFC 4648, padded), for a `data:` URI.
pub fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let v = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= c.len() {
                s.push(ABC[(v >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// The `<img>` of the picture with its caption (HTML), or a line saying why
/// there is none.
pub fn img(p: &Picture, alt: &str) -> String {
    match png(p) {
        Ok((l, bytes)) => {
            let (w, h) = l.size();
            let mut s = format!(
                "<img class=\"heatmap-img\" width=\"{w}\" height=\"{h}\" alt=\"{}\" src=\"data:image/png;base64,{}\"/>",
                super::esc(alt),
                base64(&bytes)
            );
            let _ = write!(
                s,
                "<p class=\"meta\">{} host{} a side{}; <span class=\"swatch\" style=\"background:{MARK_COLOUR};height:8px;width:10px;margin-left:0\"></span>\
                 marks the suspects' rows (left) and columns (top); right of the matrix, each host's \
                 send (its row's) and receive (its column's) median.</p>",
                p.n,
                if p.n == 1 { "" } else { "s" },
                if l.block > 1 {
                    format!(
                        ", one pixel per {b} x {b} cells showing the worst of them (a failed cell, \
                         else the lowest ratio); the strips show the lowest median of {b} hosts",
                        b = l.block
                    )
                } else {
                    String::new()
                }
            );
            s
        }
        Err(e) => format!(
            "<p>The heatmap image could not be drawn: {}.</p>",
            super::esc(&e)
        ),
    }
}

/// A source of values that can be read again: it calls its sink with each.
pub type Values<'a> = &'a dyn Fn(&mut dyn FnMut(f64));

/// The median of the finite values a function gives, exactly, without
/// holding them all: a histogram finds the middle values' bucket, then that
/// bucket's values are sorted. `each` is called three times with a sink.
pub fn median_of(each: Values) -> Option<f64> {
    let (mut count, mut lo, mut hi) = (0usize, f64::INFINITY, f64::NEG_INFINITY);
    each(&mut |x| {
        if x.is_finite() {
            count += 1;
            lo = lo.min(x);
            hi = hi.max(x);
        }
    });
    if count == 0 {
        return None;
    }
    if lo == hi {
        return Some(lo);
    }
    const BUCKETS: usize = 1 << 16;
    let bucket = |x: f64| (((x - lo) / (hi - lo) * BUCKETS as f64) as usize).min(BUCKETS - 1);
    let mut hist = vec![0usize; BUCKETS];
    each(&mut |x| {
        if x.is_finite() {
            hist[bucket(x)] += 1;
        }
    });
    // The ranks of the middle values (one when the count is odd).
    let (k1, k2) = ((count - 1) / 2, count / 2);
    let mut below = 0;
    let mut first = None;
    let mut b1 = 0;
    for (b, &c) in hist.iter().enumerate() {
        if first.is_none() && below + c > k1 {
            first = Some(below);
            b1 = b;
        }
        if below + c > k2 {
            let b2 = b;
            let mut v = Vec::new();
            each(&mut |x| {
                if x.is_finite() && (b1..=b2).contains(&bucket(x)) {
                    v.push(x);
                }
            });
            v.sort_by(f64::total_cmp);
            let base = first.unwrap_or(below);
            let at = |k: usize| v.get(k - base).copied();
            return Some((at(k1)? + at(k2)?) / 2.0);
        }
        below += c;
    }
    None
}
