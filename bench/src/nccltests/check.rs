//! Data initialization and verification for one rank: the steps a
//! collective's `init` asks for are recorded as a [`Plan`] and executed
//! through the backend. A backend that can (NCCL: kernels on the GPU, as
//! nccl-tests) generates inputs and counts wrong elements on the device
//! ([`Ranks::fill_on_device`], [`Ranks::start_check`]); for the others,
//! inputs are generated on the host and uploaded in bounded chunks, and
//! results are compared with the expected segments chunk by chunk, so no
//! full-size host copy is ever held. Expected values are never written
//! out: each element is compared with its formula in place. Host
//! generation and comparison run on [`Workers`] threads and overlap the
//! transfers ([`Checker`]).

use super::backend::{BufRef, CheckRange, Ranks};
use super::colls::{InitSink, Target};
use super::errors::TestResult;
use super::types::{DataType, ReduceOp};
use super::verifiable::{Gen, Kernel, tolerance};
use super::workers::Workers;

/// Bytes generated, uploaded or compared at a time: large enough that
/// starting the worker threads (per chunk) costs little beside the work,
/// small enough that two staging buffers per thread stay cheap.
const CHUNK: usize = 32 << 20;

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

/// Reusable state of one thread's data initialization and checks: the
/// host threads it may use and two staging buffers, kept between sizes
/// so that a sweep does not allocate (and page in) them again.
///
/// Transfers are pipelined: while the calling thread uploads (downloads)
/// one chunk, worker threads generate the next (check the previous), so a
/// GPU backend's copies overlap the host's work.
#[derive(Debug)]
pub struct Checker {
    workers: Workers,
    chunk: usize,
    bufs: [Vec<u8>; 2],
}

impl Checker {
    /// A checker splitting its work over `workers`.
    pub fn new(workers: Workers) -> Checker {
        Checker {
            workers,
            chunk: CHUNK,
            bufs: [Vec::new(), Vec::new()],
        }
    }

    /// Transfers of `bytes` at a time (tests: many chunks from little data).
    #[cfg(test)]
    fn with_chunk(self, bytes: usize) -> Checker {
        Checker {
            chunk: bytes.max(8),
            ..self
        }
    }

    /// Executes a plan's writes on local rank `i`; `base` is the unalign
    /// offset of both buffers.
    pub fn apply(
        &mut self,
        plan: &Plan,
        ranks: &mut dyn Ranks,
        i: usize,
        dt: DataType,
        base: usize,
    ) -> TestResult<()> {
        let mut left = plan.zero_recv;
        let mut off = 0;
        while left > 0 {
            let n = left.min(self.chunk);
            ranks.zero(i, Target::Recv, base + off, n)?;
            off += n;
            left -= n;
        }
        for &(target, byte_off, count, g) in &plan.inputs {
            let at = BufRef {
                buf: target,
                offset: base + byte_off,
            };
            if ranks.fill_on_device(i, at, count * dt.size(), &g.kernel(dt), g.ix0())? {
                continue;
            }
            self.upload_generated(ranks, i, at, &g, dt, count * dt.size())?;
        }
        Ok(())
    }

    /// Generates `bytes` of `g` and uploads them at `at`, chunk by chunk,
    /// generating chunk k+1 while chunk k is uploaded.
    fn upload_generated(
        &mut self,
        ranks: &mut dyn Ranks,
        i: usize,
        at: BufRef,
        g: &Gen,
        dt: DataType,
        bytes: usize,
    ) -> TestResult<()> {
        let (ws, kernel, ix0, workers) = (dt.size(), g.kernel(dt), g.ix0(), self.workers);
        let step = (self.chunk / ws * ws).max(ws);
        let generate = move |mut buf: Vec<u8>, pos: usize| {
            buf.resize(step.min(bytes - pos), 0);
            let first = ix0 + (pos / ws) as i64;
            workers.fill(&mut buf, ws, |k, part| kernel.fill(first + k as i64, part));
            buf
        };
        let [mut cur, mut next] = std::mem::take(&mut self.bufs);
        let result = std::thread::scope(|s| {
            if bytes > 0 {
                cur = generate(std::mem::take(&mut cur), 0);
            }
            let mut pos = 0;
            while pos < bytes {
                let after = pos + cur.len();
                let pending = (after < bytes).then(|| {
                    let buf = std::mem::take(&mut next);
                    s.spawn(move || generate(buf, after))
                });
                let sent = ranks.upload(i, at.buf, at.offset + pos, &cur);
                if let Some(h) = pending {
                    next = std::mem::replace(&mut cur, join(h));
                }
                sent?;
                pos = after;
            }
            Ok(())
        });
        self.bufs = [cur, next];
        result
    }

    /// Starts counting wrong elements of local rank `i`'s output at byte `at` on
    /// the device, when the backend can: `Ok(true)`, and [`Ranks::finish_check`]
    /// gives the count; `Ok(false)`: use [`Checker::verify`].
    #[allow(clippy::too_many_arguments)]
    pub fn start_device_check(
        &self,
        expected: &[Seg],
        ranks: &mut dyn Ranks,
        i: usize,
        at: usize,
        total_bytes: usize,
        dt: DataType,
        op: ReduceOp,
        corrupt: bool,
    ) -> TestResult<bool> {
        let ranges = check_ranges(expected, dt, total_bytes);
        ranks.start_check(i, at, dt, tolerance(dt, op), &ranges, corrupt)
    }

    /// Counts wrong elements of local rank `i`'s output at byte `at`
    /// against the expected segments, checking chunk k on worker threads
    /// while chunk k+1 is downloaded. `corrupt` alters the first element
    /// read (test hook).
    #[allow(clippy::too_many_arguments)]
    pub fn verify(
        &mut self,
        expected: &[Seg],
        ranks: &mut dyn Ranks,
        i: usize,
        at: usize,
        total_bytes: usize,
        dt: DataType,
        op: ReduceOp,
        corrupt: bool,
    ) -> TestResult<i64> {
        let (ws, tol, workers) = (dt.size(), tolerance(dt, op), self.workers);
        let step = (self.chunk / ws * ws).max(ws);
        let check = move |buf: &[u8], pos: usize| {
            workers.sum(buf, ws, |k, part| {
                count_range(expected, dt, tol, pos + k * ws, part)
            })
        };
        let mut download = |buf: &mut Vec<u8>, pos: usize| {
            buf.resize(step.min(total_bytes - pos), 0);
            ranks.download(i, Target::Recv, at + pos, buf)
        };
        let [mut cur, mut next] = std::mem::take(&mut self.bufs);
        let result = std::thread::scope(|s| {
            let mut wrong = 0u64;
            let mut pos = 0;
            if total_bytes > 0 {
                download(&mut cur, 0)?;
                if corrupt && !cur.is_empty() {
                    cur[0] ^= 0x5a;
                }
            }
            while pos < total_bytes {
                let after = pos + cur.len();
                let buf = std::mem::take(&mut cur);
                let h = s.spawn(move || {
                    let n = check(&buf, pos);
                    (buf, n)
                });
                let got = if after < total_bytes {
                    download(&mut next, after)
                } else {
                    Ok(())
                };
                let (buf, n) = join(h);
                wrong += n;
                cur = std::mem::replace(&mut next, buf);
                got?;
                pos = after;
            }
            Ok(wrong as i64)
        });
        self.bufs = [cur, next];
        result
    }
}

/// A scoped thread's result, re-raising its panic (a bug) here.
fn join<T>(h: std::thread::ScopedJoinHandle<'_, T>) -> T {
    h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// The formulas of expected bytes `[0, total)`: generated where a segment
/// says so, zero elsewhere (`segs` sorted and not overlapping), as
/// consecutive ranges covering all of it.
fn check_ranges(segs: &[Seg], dt: DataType, total: usize) -> Vec<CheckRange> {
    let ws = dt.size();
    let zero = |off, len| CheckRange {
        off,
        len,
        kernel: Kernel::zeros(ws),
        ix0: 0,
    };
    let mut out = Vec::with_capacity(2 * segs.len() + 1);
    let mut cur = 0;
    for s in segs {
        let (a, b) = (s.off.max(cur), (s.off + s.len).min(total));
        if a >= b {
            continue;
        }
        if cur < a {
            out.push(zero(cur, a - cur));
        }
        out.push(match s.src {
            Src::Zero => zero(a, b - a),
            Src::Gen(g, first) => CheckRange {
                off: a,
                len: b - a,
                kernel: g.kernel(dt),
                ix0: g.ix0() + (first + (a - s.off) / ws) as i64,
            },
        });
        cur = b;
    }
    if cur < total {
        out.push(zero(cur, total - cur));
    }
    out
}

/// Counts wrong elements of `got`, which holds expected bytes
/// `[pos, pos + got.len())`: generated where a segment says so, zero
/// elsewhere. `segs` are sorted and do not overlap.
fn count_range(segs: &[Seg], dt: DataType, tol: u64, pos: usize, got: &[u8]) -> u64 {
    let (ws, end) = (dt.size(), pos + got.len());
    let zeros = Kernel::zeros(ws);
    let count =
        |a: usize, b: usize, k: &Kernel, ix0: i64| k.count_wrong(ix0, tol, &got[a - pos..b - pos]);
    let mut wrong = 0;
    let mut cur = pos;
    for s in segs {
        let (a, b) = (s.off.max(cur), (s.off + s.len).min(end));
        if a >= b {
            continue;
        }
        if cur < a {
            wrong += count(cur, a, &zeros, 0);
        }
        wrong += match s.src {
            Src::Zero => count(a, b, &zeros, 0),
            Src::Gen(g, first) => {
                let ix0 = g.ix0() + (first + (a - s.off) / ws) as i64;
                count(a, b, &g.kernel(dt), ix0)
            }
        };
        cur = b;
    }
    if cur < end {
        wrong += count(cur, end, &zeros, 0);
    }
    wrong
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccltests::types::{DataType, ReduceOp};

    fn g(seed: u64) -> Gen {
        Gen::Input {
            op: ReduceOp::Sum,
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

    /// The expected bytes `[pos, pos + out.len())`, written out element
    /// by element (the reference `count_range` must agree with).
    fn expected_range(segs: &[Seg], dt: DataType, pos: usize, out: &mut [u8]) {
        let ws = dt.size();
        let end = pos + out.len();
        out.fill(0);
        for s in segs {
            let (a, b) = (s.off.max(pos), (s.off + s.len).min(end));
            if let (Src::Gen(g, first), true) = (s.src, a < b) {
                let first_elem = first + (a - s.off) / ws;
                for (k, e) in out[a - pos..b - pos].chunks_exact_mut(ws).enumerate() {
                    e.copy_from_slice(&g.element(dt, first_elem + k).to_le_bytes()[..ws]);
                }
            }
        }
    }

    #[test]
    fn expected_from_recv_keeps_in_place_input() {
        let mut p = Plan::new(DataType::Float32, 64);
        p.zero_recv(64);
        p.input(Target::Recv, 32, 4, g(2));
        p.expected_from_recv();
        let mut out = vec![1u8; 64];
        expected_range(&p.expected, DataType::Float32, 0, &mut out);
        assert!(out[..32].iter().all(|&b| b == 0));
        let mut want = vec![0u8; 16];
        g(2).fill(DataType::Float32, 0, &mut want);
        assert_eq!(&out[32..48], &want[..]);
        // A window that starts inside a segment continues its elements.
        let mut tail = vec![0u8; 8];
        expected_range(&p.expected, DataType::Float32, 40, &mut tail);
        assert_eq!(&tail[..], &want[8..16]);
        assert_eq!(count_range(&p.expected, DataType::Float32, 0, 40, &tail), 0);
    }

    #[test]
    fn counting_in_place_equals_comparing_written_bytes() {
        let dt = DataType::Float16;
        let e = Gen::Expected {
            op: ReduceOp::Sum,
            rank_n: 3,
            seed: 7,
            ix0: 5,
        };
        // Zero gap, generated, explicit zeros, generated again, zero tail.
        let segs = vec![
            Seg {
                off: 10,
                len: 300,
                src: Src::Gen(e, 0),
            },
            Seg {
                off: 310,
                len: 40,
                src: Src::Zero,
            },
            Seg {
                off: 350,
                len: 100,
                src: Src::Gen(g(9), 3),
            },
        ];
        let mut want = vec![0u8; 512];
        expected_range(&segs, dt, 0, &mut want);
        let mut got = want.clone();
        for (k, at) in [0usize, 11, 200, 309, 320, 351, 449, 450, 511]
            .iter()
            .enumerate()
        {
            got[*at] ^= 1 << (k % 8);
        }
        for tol in [0, 2] {
            let reference = crate::nccltests::verifiable::count_wrong(dt, tol, &got, &want);
            for (pos, end) in [(0, 512), (10, 300), (300, 512), (2, 4)] {
                let window = &got[pos..end];
                let by_walk = count_range(&segs, dt, tol, pos, window);
                let by_bytes =
                    crate::nccltests::verifiable::count_wrong(dt, tol, window, &want[pos..end]);
                assert_eq!(by_walk, by_bytes, "window {pos}..{end} tol {tol}");
            }
            // The device path's ranges cover the output and count the same.
            let ranges = check_ranges(&segs, dt, 512);
            assert_eq!(ranges.first().map(|r| r.off), Some(0));
            assert!(ranges.windows(2).all(|w| w[0].off + w[0].len == w[1].off));
            assert_eq!(ranges.last().map(|r| r.off + r.len), Some(512));
            let by_ranges: u64 = ranges
                .iter()
                .map(|r| r.kernel.count_wrong(r.ix0, tol, &got[r.off..r.off + r.len]))
                .sum();
            assert_eq!(by_ranges, reference, "ranges, tol {tol}");
            for n in [1, 2, 5] {
                let w = Workers::new(n).with_min_part(2);
                let total = w.sum(&got, 2, |k, part| count_range(&segs, dt, tol, k * 2, part));
                assert_eq!(total, reference, "{n} workers, tol {tol}");
            }
        }
    }

    /// Generates `n` elements of `gn` element by element, then in parallel
    /// with each of `threads`, and checks the parallel count of wrong
    /// elements against the byte comparison.
    fn assert_parallel_matches(
        dt: DataType,
        gn: Gen,
        n: usize,
        threads: &[usize],
        min_part: usize,
    ) {
        let ws = dt.size();
        let mut seq = vec![0u8; n * ws];
        for (i, e) in seq.chunks_exact_mut(ws).enumerate() {
            e.copy_from_slice(&gn.element(dt, i).to_le_bytes()[..ws]);
        }
        let kernel = gn.kernel(dt);
        let mut par = vec![0u8; n * ws];
        for &t in threads {
            par.fill(0xa5);
            let w = Workers::new(t).with_min_part(min_part);
            w.fill(&mut par, ws, |k, part| {
                kernel.fill(gn.ix0() + k as i64, part)
            });
            assert!(seq == par, "{dt:?} {gn:?} with {t} threads");
        }
        let segs = [Seg {
            off: 0,
            len: n * ws,
            src: Src::Gen(gn, 0),
        }];
        par[ws * (n / 2)] ^= 0x40;
        par[ws * (n - 1)] ^= 0x01;
        let op = match gn {
            Gen::Input { op, .. } | Gen::Expected { op, .. } => op,
        };
        let tol = tolerance(dt, op);
        let reference = crate::nccltests::verifiable::count_wrong(dt, tol, &par, &seq);
        for &t in threads {
            let w = Workers::new(t).with_min_part(min_part);
            let wrong = w.sum(&par, ws, |k, part| {
                count_range(&segs, dt, tol, k * ws, part)
            });
            assert_eq!(wrong, reference, "{dt:?} {gn:?} with {t} threads");
        }
    }

    fn input(op: ReduceOp, rank_n: i32, rank_me: i32) -> Gen {
        Gen::Input {
            op,
            rank_n,
            rank_me,
            seed: 11,
            ix0: 17,
        }
    }

    fn expected(op: ReduceOp, rank_n: i32) -> Gen {
        Gen::Expected {
            op,
            rank_n,
            seed: 11,
            ix0: 17,
        }
    }

    /// Chunked, parallel generation and checking equal the element-by-element
    /// formulas for every type, op and side (input, expected; one rank and
    /// several), at an odd length cut unevenly among several thread counts.
    #[test]
    fn parallel_generation_equals_sequential_for_every_type_and_op() {
        for dt in DataType::ALL {
            for op in ReduceOp::ALL {
                for gn in [input(op, 3, 1), expected(op, 3), input(op, 1, 0)] {
                    assert_parallel_matches(dt, gn, 20_011, &[2, 3, 7], 1);
                }
            }
        }
    }

    /// The same at a million odd elements with the real part size, once per
    /// element width.
    #[test]
    fn parallel_generation_equals_sequential_at_a_million_elements() {
        let cases = [
            (DataType::Int8, expected(ReduceOp::Max, 5)),
            (DataType::Bfloat16, input(ReduceOp::Sum, 1, 0)),
            (DataType::Float32, expected(ReduceOp::PreMulSum, 4)),
            (DataType::Uint64, input(ReduceOp::Prod, 8, 7)),
        ];
        for (dt, gn) in cases {
            assert_parallel_matches(dt, gn, 1_000_003, &[2, 3, 7, 16], 64 << 10);
        }
    }

    /// One host-backend rank with `bytes` in each buffer.
    fn host_rank(bytes: usize) -> Box<dyn Ranks> {
        use crate::nccltests::backend::{Backend, RankSlot, host::HostBackend};
        use crate::nccltests::bootstrap::single::Single;
        use crate::nccltests::options::{Parsed, Printed, parse};
        use crate::nccltests::types::Features;
        let argv: Vec<String> = ["all_reduce_perf", "--backend", "host"]
            .map(String::from)
            .to_vec();
        let Parsed::Run(o) = parse(&argv, Features::ALL, 0, &mut Printed::default()) else {
            panic!("options");
        };
        let boot: std::sync::Arc<dyn crate::nccltests::bootstrap::Bootstrap> =
            std::sync::Arc::new(Single);
        let be = HostBackend::new(&boot, &o, None).expect("host backend");
        let slot = RankSlot { rank: 0, device: 0 };
        let mut r = be
            .init_ranks(&[], 1, &[vec![slot]])
            .expect("ranks")
            .remove(0);
        r.alloc(bytes, bytes).expect("alloc");
        r
    }

    /// Upload and check through many small chunks: generation overlapping
    /// uploads and checks overlapping downloads give the element-exact
    /// result, and the buffers are reused between calls.
    #[test]
    fn pipelined_chunks_upload_and_check_exactly() {
        let dt = DataType::Float16;
        let (count, base) = (25_003usize, 6usize);
        let total = count * 2;
        let mut r = host_rank(total + 64);
        let mut plan = Plan::new(dt, total);
        plan.zero_recv(total);
        let g_in = input(ReduceOp::Sum, 1, 0);
        plan.input(Target::Recv, 100, count - 50, g_in);
        plan.expected_from_recv();
        let mut c = Checker::new(Workers::new(3).with_min_part(256)).with_chunk(4000);
        c.apply(&plan, r.as_mut(), 0, dt, base).expect("apply");
        let mut verify = |r: &mut dyn Ranks, corrupt| {
            c.verify(
                &plan.expected,
                r,
                0,
                base,
                total,
                dt,
                ReduceOp::Sum,
                corrupt,
            )
            .expect("verify")
        };
        assert_eq!(verify(r.as_mut(), false), 0);
        assert_eq!(
            verify(r.as_mut(), true),
            1,
            "the corrupt hook alters one element"
        );
        // Wrong bytes in the zero prefix, in chunk interiors and on chunk
        // boundaries, and in the last element.
        for at in [0usize, 98, 3999, 4000, 4003, 17_777, total - 1] {
            let mut b = [0u8; 1];
            r.download(0, Target::Recv, base + at, &mut b)
                .expect("read");
            b[0] ^= 0x10;
            r.upload(0, Target::Recv, base + at, &b).expect("write");
        }
        assert_eq!(verify(r.as_mut(), false), 7);
        assert!(c.bufs.iter().all(|b| b.capacity() >= 4000), "buffers kept");
    }
}
