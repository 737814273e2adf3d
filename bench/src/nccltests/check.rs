//! Data initialization and verification for one rank: the steps a
//! collective's `init` asks for are recorded as a [`Plan`], executed through
//! the backend in bounded chunks (inputs generated on the host and
//! uploaded), and results are compared with the expected segments chunk by
//! chunk, so no full-size host copy is ever held.

use super::backend::Ranks;
use super::colls::{InitSink, Target};
use super::errors::TestResult;
use super::types::{DataType, RedOp};
use super::verifiable::{Gen, count_wrong, tolerance};

/// Bytes generated, uploaded or compared at a time.
const CHUNK: usize = 16 << 20;

/// Where a range of expected elements comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Src {
    /// Zeros.
    Zero,
    /// Generated, starting at element `first` of the generator.
    Gen(Gen, usize),
}

/// A byte range of the expected output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg {
    /// Start (bytes).
    pub off: usize,
    /// Length (bytes).
    pub len: usize,
    /// Content.
    pub src: Src,
}

/// One rank's recorded initialization.
#[derive(Debug, Default)]
pub struct Plan {
    ws: usize,
    expected_bytes: usize,
    /// Bytes of the receive buffer to zero first.
    pub zero_recv: usize,
    /// Inputs to generate: (buffer, byte offset, element count, generator).
    pub inputs: Vec<(Target, usize, usize, Gen)>,
    /// The expected output, as sorted non-overlapping segments.
    pub expected: Vec<Seg>,
    recv_image: Vec<Seg>,
}

impl Plan {
    /// An empty plan for elements of `dt` and `expected_bytes` of output.
    pub fn new(dt: DataType, expected_bytes: usize) -> Plan {
        Plan {
            ws: dt.size(),
            expected_bytes,
            ..Plan::default()
        }
    }
}

/// Lays `new` over `segs`, splitting what it covers.
pub fn overlay(segs: &mut Vec<Seg>, new: Seg, ws: usize) {
    let (a, b) = (new.off, new.off + new.len);
    let mut out = Vec::with_capacity(segs.len() + 2);
    for s in segs.drain(..) {
        let (s0, s1) = (s.off, s.off + s.len);
        if s1 <= a || s0 >= b {
            out.push(s);
            continue;
        }
        if s0 < a {
            out.push(Seg {
                off: s0,
                len: a - s0,
                src: s.src,
            });
        }
        if s1 > b {
            let skip = (b - s0) / ws.max(1);
            let src = match s.src {
                Src::Gen(g, first) => Src::Gen(g, first + skip),
                z => z,
            };
            out.push(Seg {
                off: b,
                len: s1 - b,
                src,
            });
        }
    }
    if new.len > 0 {
        out.push(new);
    }
    out.sort_by_key(|s| s.off);
    *segs = out;
}

impl InitSink for Plan {
    fn zero_recv(&mut self, bytes: usize) {
        self.zero_recv = bytes;
        self.recv_image = vec![Seg {
            off: 0,
            len: bytes,
            src: Src::Zero,
        }];
    }
    fn input(&mut self, target: Target, byte_off: usize, count: usize, g: Gen) {
        self.inputs.push((target, byte_off, count, g));
        if target == Target::Recv {
            let seg = Seg {
                off: byte_off,
                len: count * self.ws,
                src: Src::Gen(g, 0),
            };
            overlay(&mut self.recv_image, seg, self.ws);
        }
    }
    fn expected_from_recv(&mut self) {
        let e = self.expected_bytes;
        self.expected = self
            .recv_image
            .iter()
            .filter(|s| s.off < e)
            .map(|s| Seg {
                len: s.len.min(e - s.off),
                ..*s
            })
            .collect();
    }
    fn expected(&mut self, byte_off: usize, count: usize, g: Gen) {
        let seg = Seg {
            off: byte_off,
            len: count * self.ws,
            src: Src::Gen(g, 0),
        };
        overlay(&mut self.expected, seg, self.ws);
    }
}

/// Fills `out` with elements of `g` starting at element `first`, on several
/// threads when large (generation is the slow part of a check).
pub fn generate(dt: DataType, g: &Gen, first: usize, out: &mut [u8]) {
    let ws = dt.size();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    if out.len() < (1 << 20) || threads == 1 {
        g.fill(dt, first, out);
        return;
    }
    let per = (out.len() / ws).div_ceil(threads) * ws;
    std::thread::scope(|s| {
        for (k, part) in out.chunks_mut(per).enumerate() {
            s.spawn(move || g.fill(dt, first + k * per / ws, part));
        }
    });
}

/// Executes a plan's writes on local rank `i`; `base` is the unalign
/// offset of both buffers.
pub fn apply(
    plan: &Plan,
    ranks: &mut dyn Ranks,
    i: usize,
    dt: DataType,
    base: usize,
) -> TestResult<()> {
    let mut left = plan.zero_recv;
    let mut off = 0;
    while left > 0 {
        let n = left.min(CHUNK);
        ranks.zero(i, Target::Recv, base + off, n)?;
        off += n;
        left -= n;
    }
    let ws = dt.size();
    let mut buf = Vec::new();
    for &(target, byte_off, count, g) in &plan.inputs {
        let mut done = 0;
        while done < count {
            let n = (count - done).min(CHUNK / ws);
            buf.resize(n * ws, 0);
            generate(dt, &g, done, &mut buf);
            ranks.upload(i, target, base + byte_off + done * ws, &buf)?;
            done += n;
        }
    }
    Ok(())
}

/// Counts wrong elements of local rank `i`'s output at byte `at` against
/// the expected segments. `corrupt` alters the first element read (test
/// hook).
#[allow(clippy::too_many_arguments)]
pub fn verify(
    expected: &[Seg],
    ranks: &mut dyn Ranks,
    i: usize,
    at: usize,
    total_bytes: usize,
    dt: DataType,
    op: RedOp,
    corrupt: bool,
) -> TestResult<i64> {
    let ws = dt.size();
    let tol = tolerance(dt, op);
    let (mut got, mut want) = (Vec::new(), Vec::new());
    let mut wrong = 0i64;
    let mut pos = 0;
    while pos < total_bytes {
        let n = (total_bytes - pos).min(CHUNK / ws * ws);
        got.resize(n, 0);
        ranks.download(i, Target::Recv, at + pos, &mut got)?;
        if corrupt && pos == 0 && n > 0 {
            got[0] ^= 0x5a;
        }
        want.resize(n, 0);
        expected_range(expected, dt, pos, &mut want);
        wrong += count_wrong(dt, tol, &got, &want) as i64;
        pos += n;
    }
    Ok(wrong)
}

/// Fills `out` with expected bytes `[pos, pos + out.len())` (zeros where
/// no segment applies).
fn expected_range(segs: &[Seg], dt: DataType, pos: usize, out: &mut [u8]) {
    let ws = dt.size();
    let end = pos + out.len();
    out.fill(0);
    for s in segs {
        let (a, b) = (s.off.max(pos), (s.off + s.len).min(end));
        if a >= b {
            continue;
        }
        if let Src::Gen(g, first) = s.src {
            let first_elem = first + (a - s.off) / ws;
            generate(dt, &g, first_elem, &mut out[a - pos..b - pos]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(seed: u64) -> Gen {
        Gen::Input {
            op: RedOp::Sum,
            rank_n: 1,
            rank_me: 0,
            seed,
            ix0: 0,
        }
    }

    #[test]
    fn overlay_splits_and_shifts() {
        let mut segs = vec![Seg {
            off: 0,
            len: 64,
            src: Src::Gen(g(1), 0),
        }];
        overlay(
            &mut segs,
            Seg {
                off: 16,
                len: 16,
                src: Src::Zero,
            },
            4,
        );
        assert_eq!(
            segs,
            vec![
                Seg {
                    off: 0,
                    len: 16,
                    src: Src::Gen(g(1), 0)
                },
                Seg {
                    off: 16,
                    len: 16,
                    src: Src::Zero
                },
                Seg {
                    off: 32,
                    len: 32,
                    src: Src::Gen(g(1), 8)
                },
            ]
        );
    }

    #[test]
    fn expected_from_recv_keeps_in_place_input() {
        let mut p = Plan::new(DataType::Float, 64);
        p.zero_recv(64);
        p.input(Target::Recv, 32, 4, g(2));
        p.expected_from_recv();
        let mut out = vec![1u8; 64];
        expected_range(&p.expected, DataType::Float, 0, &mut out);
        assert!(out[..32].iter().all(|&b| b == 0));
        let mut want = vec![0u8; 16];
        g(2).fill(DataType::Float, 0, &mut want);
        assert_eq!(&out[32..48], &want[..]);
        // A window that starts inside a segment continues its elements.
        let mut tail = vec![0u8; 8];
        expected_range(&p.expected, DataType::Float, 40, &mut tail);
        assert_eq!(&tail[..], &want[8..16]);
    }

    #[test]
    fn parallel_generation_equals_serial() {
        let mut a = vec![0u8; 3 << 20];
        let mut b = vec![0u8; 3 << 20];
        generate(DataType::Half, &g(3), 5, &mut a);
        g(3).fill(DataType::Half, 5, &mut b);
        assert!(a == b);
    }
}
