//! Bookkeeping of posted work requests: the wr_id the device carries, and
//! the shares of memory regions ("leases") each request holds until its
//! completion is polled.
//!
//! Pure logic, no verbs: the unit tests here also run under Miri
//! (`cargo +nightly miri test -p erdma --lib pending`).
//!
//! A completion is matched to its request by the QP's *generation*, a number
//! unique to each queue pair the process creates (QP numbers are reused as
//! soon as a QP is destroyed, so a completion of a dropped QP left in a CQ
//! must never be taken for one of its successor), and a per-QP sequence
//! number. A completion whose generation is unknown is stale and releases
//! nothing.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use smallvec::SmallVec;

use crate::mr::Lease;

/// The shares of memory one request holds, released when it is dropped.
/// One region (nearly every request) is a plain share, cheap to take and to
/// drop; more are kept inline up to 4, so that posting does not allocate in
/// the steady state.
#[allow(dead_code, reason = "the shares are held only to be dropped")]
pub(crate) enum Leases {
    /// No memory (a zero-length request).
    None,
    /// One region.
    One(Arc<dyn Lease>),
    /// Two or more.
    Many(SmallVec<[Arc<dyn Lease>; 4]>),
}

impl FromIterator<Arc<dyn Lease>> for Leases {
    /// One share (nearly every request) without the SmallVec: building and
    /// moving the plain variant is what a post pays for.
    fn from_iter<I: IntoIterator<Item = Arc<dyn Lease>>>(iter: I) -> Leases {
        let mut it = iter.into_iter();
        let Some(first) = it.next() else {
            return Leases::None;
        };
        let Some(second) = it.next() else {
            return Leases::One(first);
        };
        let mut v: SmallVec<[Arc<dyn Lease>; 4]> = SmallVec::from_iter([first, second]);
        v.extend(it);
        Leases::Many(v)
    }
}

/// wr_id layout: bit 63 = receive queue, bit 62 = posted by the safe API
/// (user ids of raw posts must keep it clear), bits 32..62 = the QP's
/// generation, bits 0..32 = the low half of the request's sequence number.
const RECV_BIT: u64 = 1 << 63;
const TRACKED_BIT: u64 = 1 << 62;
const GEN_SHIFT: u32 = 32;
/// Generations are 30 bits: a process must create 2^30 queue pairs before one
/// repeats.
pub(crate) const GEN_MASK: u32 = (1 << 30) - 1;

/// A tracked wr_id, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WrId {
    /// Posted on the receive queue.
    pub(crate) recv: bool,
    /// The QP's generation.
    pub(crate) generation: u32,
    /// Low 32 bits of the request's sequence number.
    pub(crate) seq: u32,
}

impl WrId {
    pub(crate) fn encode(recv: bool, generation: u32, seq: u64) -> u64 {
        (if recv { RECV_BIT } else { 0 })
            | TRACKED_BIT
            | (u64::from(generation & GEN_MASK) << GEN_SHIFT)
            | (seq & u64::from(u32::MAX))
    }

    /// The fields of a tracked wr_id; `None` for a raw one (bit 62 clear).
    pub(crate) fn decode(wr_id: u64) -> Option<WrId> {
        (wr_id & TRACKED_BIT != 0).then_some(WrId {
            recv: wr_id & RECV_BIT != 0,
            generation: (wr_id >> GEN_SHIFT) as u32 & GEN_MASK,
            seq: wr_id as u32,
        })
    }
}

static NEXT_GENERATION: AtomicU32 = AtomicU32::new(1);

/// The generations in use, with how many holders each has: a live QP, and
/// each CQ that may still hold completions of it after it was dropped
/// (`CompletionQueue::retire`). A generation is handed out again only when
/// no one holds it (issue 34 hole 8: after 2^30 creations the counter wraps,
/// and a repeated generation let one QP's completion release another's live
/// request). Taken only when a QP is created or dropped and when a CQ
/// forgets a dropped QP, never while polling a live one.
static IN_USE: Mutex<BTreeMap<u32, u32>> = Mutex::new(BTreeMap::new());

fn in_use() -> MutexGuard<'static, BTreeMap<u32, u32>> {
    // Plain inserts and removals: a panic cannot leave the map inconsistent.
    IN_USE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A generation for a new QP, held for it until [`release_generation`]:
/// never 0, and never one in use (a live QP's, or a dropped QP's whose
/// completions may still be in a CQ).
pub(crate) fn next_generation() -> u32 {
    let mut used = in_use();
    loop {
        let g = NEXT_GENERATION.fetch_add(1, Ordering::Relaxed) & GEN_MASK;
        if g != 0 && !used.contains_key(&g) {
            used.insert(g, 1);
            return g;
        }
    }
}

/// One more holder of generation `g` (a CQ that may still hold completions
/// of its dropped QP).
pub(crate) fn hold_generation(g: u32) {
    *in_use().entry(g).or_insert(0) += 1;
}

/// One holder of `g` fewer; free for a new QP when none is left.
pub(crate) fn release_generation(g: u32) {
    let mut used = in_use();
    if let Some(n) = used.get_mut(&g) {
        *n -= 1;
        if *n == 0 {
            used.remove(&g);
        }
    }
}

/// Makes the next generations start at `g` (feature `fault-injection`, for
/// tests only): with `g` near `2^30` a test reaches the wrap at once.
#[cfg(any(test, feature = "fault-injection"))]
pub(crate) fn start_generations_at(g: u32) {
    NEXT_GENERATION.store(g, Ordering::Relaxed);
}

/// A posted request: its sequence number, the caller's wr_id and what it holds.
struct Entry {
    seq: u64,
    user: u64,
    /// Posted signaled: the device reports its completion.
    signaled: bool,
    /// The caller asked for its completion (an unsignaled READ or atomic is
    /// posted signaled, and its successful completion is not reported).
    report: bool,
    _leases: Leases,
}

/// One queue (send or receive) of a QP: its outstanding requests in posting
/// order, at most `capacity`. Its storage is allocated once.
pub(crate) struct Queue {
    entries: VecDeque<Entry>,
    capacity: usize,
}

impl Queue {
    pub(crate) fn new(capacity: usize) -> Queue {
        Queue {
            entries: VecDeque::with_capacity(capacity),
            capacity,
        }
    }

    /// Requests posted and not completed.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The most requests that may be outstanding.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether one more request fits.
    pub(crate) fn has_room(&self) -> bool {
        self.entries.len() < self.capacity
    }

    /// Records a posted request (the caller checked [`Queue::has_room`]).
    pub(crate) fn push(&mut self, seq: u64, user: u64, signaled: bool, leases: Leases) {
        self.entries.push_back(Entry {
            seq,
            user,
            signaled,
            report: signaled,
            _leases: leases,
        });
    }

    /// Records a request the caller posted unsignaled but that was posted
    /// signaled because the device writes local memory for it (an RDMA READ's
    /// sink, an atomic's result): only its own completion releases that
    /// memory, since a later request's completion does not prove it written
    /// on every provider (issue 34 hole 1: siw completes a WRITE or SEND when
    /// it is sent, before an earlier READ's response has landed). Its
    /// completion is reported only when it failed.
    pub(crate) fn push_silent(&mut self, seq: u64, user: u64, leases: Leases) {
        self.entries.push_back(Entry {
            seq,
            user,
            signaled: true,
            report: false,
            _leases: leases,
        });
    }

    /// Forgets the newest `n` requests (they were not posted), releasing
    /// what they held.
    pub(crate) fn unpush(&mut self, n: usize) {
        // Every successful post calls this with 0: skip truncate's work.
        if n == 0 {
            return;
        }
        let keep = self.entries.len().saturating_sub(n);
        self.entries.truncate(keep);
    }

    /// The completion (`failed`: with an error status) of the request whose
    /// sequence number ends in `seq`: removes it, and the unsignaled
    /// requests posted before it (sends and WRITEs, whose memory the device
    /// only reads: the send queue processed them before this one), releasing
    /// what they held; returns the caller's wr_id when the completion is to
    /// be reported. Signaled requests before it stay: their own completions
    /// (polled by another thread) release them; so do READs and atomics,
    /// always posted signaled ([`Queue::push_silent`]). `None` when no
    /// outstanding request matches, or for the success of a request posted
    /// signaled only for its memory's sake.
    pub(crate) fn complete(&mut self, seq: u32, failed: bool) -> Option<u64> {
        let reported = |e: Entry| (e.report || failed).then_some(e.user);
        // The usual case: the oldest request (nothing before it to release).
        if self.entries.front().is_some_and(|e| e.seq as u32 == seq) {
            return self.entries.pop_front().and_then(reported);
        }
        let pos = self.entries.iter().position(|e| e.seq as u32 == seq)?;
        if self.entries.iter().take(pos).all(|e| !e.signaled) {
            self.entries.drain(..pos);
            return self.entries.pop_front().and_then(reported);
        }
        let e = &self.entries[pos];
        let user = (e.report || failed).then_some(e.user);
        let mut i = 0;
        self.entries.retain(|e| {
            let keep = i > pos || (i < pos && e.signaled);
            i += 1;
            keep
        });
        user
    }

    /// Gives up the requests without releasing what they hold: for a QP the
    /// device may still use (its destruction failed), leaking is the only
    /// safe choice.
    pub(crate) fn leak(&mut self) {
        for e in self.entries.drain(..) {
            std::mem::forget(e);
        }
    }
}

/// Both queues of a QP and its sequence counter.
pub(crate) struct Pending {
    pub(crate) sq: Queue,
    pub(crate) rq: Queue,
    next_seq: u64,
}

impl Pending {
    pub(crate) fn new(send: usize, recv: usize) -> Pending {
        Pending {
            sq: Queue::new(send),
            rq: Queue::new(recv),
            next_seq: 0,
        }
    }

    /// The queue of receives (`recv`) or of sends.
    pub(crate) fn queue(&self, recv: bool) -> &Queue {
        if recv { &self.rq } else { &self.sq }
    }

    /// The sequence number of one more request on that queue, or `None`
    /// when it is full (the request must not be posted).
    pub(crate) fn claim(&mut self, recv: bool) -> Option<u64> {
        if !self.queue(recv).has_room() {
            return None;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        Some(seq)
    }

    /// The completion of a tracked request of this QP (see [`Queue::complete`]).
    pub(crate) fn complete(&mut self, id: WrId, failed: bool) -> Option<u64> {
        if id.recv {
            self.rq.complete(id.seq, failed)
        } else {
            self.sq.complete(id.seq, failed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A lease that counts how many of its kind are alive.
    struct Counted(Arc<AtomicUsize>);
    impl Lease for Counted {}
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::Release);
        }
    }

    fn lease(live: &Arc<AtomicUsize>) -> Leases {
        live.fetch_add(1, Ordering::Relaxed);
        let l: Arc<dyn Lease> = Arc::new(Counted(live.clone()));
        Leases::from_iter([l])
    }

    fn queue(signaled: &[bool], live: &Arc<AtomicUsize>) -> Queue {
        let mut q = Queue::new(16);
        for (i, s) in signaled.iter().enumerate() {
            q.push(i as u64, 100 + i as u64, *s, lease(live));
        }
        q
    }

    #[test]
    fn leases_of_any_count_are_all_released() {
        let live = Arc::new(AtomicUsize::new(0));
        for n in [0, 1, 2, 4, 5] {
            let held: Leases = (0..n)
                .map(|_| {
                    live.fetch_add(1, Ordering::Relaxed);
                    Arc::new(Counted(live.clone())) as Arc<dyn Lease>
                })
                .collect();
            assert_eq!(live.load(Ordering::Acquire), n, "{n} held");
            drop(held);
            assert_eq!(live.load(Ordering::Acquire), 0, "{n} released");
        }
    }

    #[test]
    fn wr_id_round_trip() {
        let id = WrId::encode(true, 0x2bcd_ef01, 0x1_2345_6789);
        assert_eq!(
            WrId::decode(id),
            Some(WrId {
                recv: true,
                generation: 0x2bcd_ef01 & GEN_MASK,
                seq: 0x2345_6789
            })
        );
        let id = WrId::encode(false, GEN_MASK, u64::MAX);
        let d = WrId::decode(id).unwrap();
        assert!(!d.recv);
        assert_eq!((d.generation, d.seq), (GEN_MASK, u32::MAX));
        assert_eq!(WrId::decode(12345), None, "raw ids pass through");
        assert_eq!(WrId::decode(u64::MAX >> 2), None);
    }

    /// The tests that move the generation counter run one at a time.
    fn generations() -> std::sync::MutexGuard<'static, ()> {
        static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[test]
    fn generations_are_unique_and_nonzero() {
        let _g = generations();
        let a = next_generation();
        let b = next_generation();
        assert_ne!(a, 0);
        assert_ne!(a, b);
        assert!(a <= GEN_MASK && b <= GEN_MASK);
        release_generation(a);
        release_generation(b);
    }

    /// Issue 34 hole 8: at the wrap, a generation still held (a live QP, or
    /// a dropped one whose completions a CQ may hold) is skipped, and so is
    /// 0; it is handed out again once every holder released it.
    #[test]
    fn generations_in_use_are_skipped_at_the_wrap() {
        let _g = generations();
        start_generations_at(GEN_MASK - 1);
        let live = next_generation();
        let retired = next_generation();
        assert_eq!((live, retired), (GEN_MASK - 1, GEN_MASK));
        hold_generation(retired); // a CQ keeps the dropped QP's generation
        release_generation(retired); // the QP itself is dropped
        // The counter comes round to the same numbers (2^30 creations later).
        start_generations_at(GEN_MASK - 1);
        let next = next_generation();
        assert!(next != live && next != retired && next != 0, "{next:#x}");
        assert_eq!(next, 1, "after GEN_MASK - 1, GEN_MASK (held) and 0");
        release_generation(retired); // the CQ forgot the dropped QP
        start_generations_at(GEN_MASK);
        assert_eq!(next_generation(), GEN_MASK, "free again");
        for g in [live, next, GEN_MASK] {
            release_generation(g);
        }
        assert!(!in_use().contains_key(&GEN_MASK));
        start_generations_at(1);
    }

    /// Issue 34 hole 1: a READ (or atomic) the caller posted unsignaled is
    /// posted signaled and kept until its own completion: a later WRITE's
    /// completion (which siw reports when the WRITE is sent, before the
    /// READ's response has landed) releases the unsignaled sends before it,
    /// not the READ's sink. The READ's own success is not reported, its
    /// failure is.
    #[test]
    fn reads_are_released_only_by_their_own_completion() {
        let live = Arc::new(AtomicUsize::new(0));
        let mut q = Queue::new(16);
        q.push(0, 100, false, lease(&live)); // unsignaled SEND
        q.push_silent(1, 101, lease(&live)); // unsignaled READ
        q.push(2, 102, false, lease(&live)); // unsignaled WRITE
        q.push(3, 103, true, lease(&live)); // signaled WRITE
        assert_eq!(q.complete(3, false), Some(103));
        assert_eq!(q.len(), 1, "the READ stays");
        assert_eq!(live.load(Ordering::Acquire), 1, "its sink is still held");
        assert_eq!(q.complete(1, false), None, "its success is not reported");
        assert_eq!((q.len(), live.load(Ordering::Acquire)), (0, 0));
        q.push_silent(4, 104, lease(&live));
        assert_eq!(q.complete(4, true), Some(104), "a failure is reported");
        assert_eq!(live.load(Ordering::Acquire), 0);
    }

    #[test]
    fn in_order_completion_releases() {
        let live = Arc::new(AtomicUsize::new(0));
        let mut q = queue(&[true, true, true, true], &live);
        assert_eq!(q.complete(0, false), Some(100));
        assert_eq!(q.complete(1, false), Some(101));
        assert_eq!(q.len(), 2);
        assert_eq!(live.load(Ordering::Acquire), 2);
    }

    #[test]
    fn unsignaled_complete_with_next_signaled() {
        let live = Arc::new(AtomicUsize::new(0));
        let mut q = queue(&[false, false, true, false], &live);
        assert_eq!(q.complete(2, false), Some(102));
        assert_eq!(q.len(), 1);
        assert_eq!(live.load(Ordering::Acquire), 1, "the three done released");
    }

    #[test]
    fn out_of_order_processing_keeps_signaled() {
        // Two pollers: seq 2's completion handled before seq 0's.
        let live = Arc::new(AtomicUsize::new(0));
        let mut q = queue(&[true, false, true, true], &live);
        assert_eq!(q.complete(2, false), Some(102));
        assert_eq!(live.load(Ordering::Acquire), 2, "seq 1 went with seq 2");
        assert_eq!(q.complete(0, false), Some(100));
        assert_eq!(q.complete(0, false), None, "a duplicate matches nothing");
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn unknown_sequence_releases_nothing() {
        let live = Arc::new(AtomicUsize::new(0));
        let mut q = queue(&[false, true], &live);
        assert_eq!(q.complete(7, false), None);
        assert_eq!(live.load(Ordering::Acquire), 2);
    }

    #[test]
    fn sequence_wraps_at_32_bits() {
        let live = Arc::new(AtomicUsize::new(0));
        let mut q = Queue::new(4);
        let base = u64::from(u32::MAX) - 1;
        for i in 0..4 {
            q.push(base + i, i, true, lease(&live));
        }
        // base+2 is 2^32 = seq 0 on the wire.
        assert_eq!(q.complete(0, false), Some(2));
        assert_eq!(q.complete(u32::MAX - 1, false), Some(0));
        assert_eq!(q.complete(1, false), Some(3));
        assert_eq!(q.complete(u32::MAX, false), Some(1));
        assert_eq!(live.load(Ordering::Acquire), 0);
    }

    #[test]
    // The leak is the point of the test: Miri's leak check would report it.
    #[cfg_attr(miri, ignore)]
    fn room_unpush_and_leak() {
        let live = Arc::new(AtomicUsize::new(0));
        let mut q = Queue::new(2);
        assert!(q.has_room());
        q.push(0, 0, false, lease(&live));
        q.push(1, 1, true, lease(&live));
        assert!(!q.has_room());
        assert_eq!(q.capacity(), 2);
        q.unpush(1);
        assert_eq!((q.len(), live.load(Ordering::Acquire)), (1, 1));
        q.leak();
        assert_eq!(q.len(), 0);
        assert_eq!(live.load(Ordering::Acquire), 1, "leaked, not released");
    }

    #[test]
    fn periodic_signaled_loop_never_fills() {
        // perftest-style: 15 unsignaled, then one signaled, its completion polled.
        let live = Arc::new(AtomicUsize::new(0));
        let mut p = Pending::new(16, 0);
        for round in 0..100u64 {
            for i in 0..16 {
                assert!(p.sq.has_room(), "round {round} request {i}");
                let seq = p.next_seq;
                p.next_seq += 1;
                p.sq.push(seq, seq, i == 15, lease(&live));
            }
            let last = WrId::decode(WrId::encode(false, 5, p.next_seq - 1)).unwrap();
            assert_eq!(p.complete(last, false), Some(p.next_seq - 1));
            assert_eq!(p.sq.len(), 0);
        }
        assert_eq!(live.load(Ordering::Acquire), 0);
    }
}
