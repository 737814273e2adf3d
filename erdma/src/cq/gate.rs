//! The concurrency of a completion queue without the device: who may poll
//! it ([`PollGate`]: a lane's dedication against polls already running,
//! issue 34 hole 9) and the room kept for dropped QPs' completions
//! ([`Depths`]: issue 34 hole 10). `CompletionQueue` runs this code around
//! its `ibv_poll_cq` calls; `cfg(loom)` builds the same code on loom's
//! atomics and locks, and the models at the end check every interleaving
//! of the threads that use it (`scripts/loom.sh`).

#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, Ordering};
#[cfg(loom)]
use loom::thread::yield_now;
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU32, Ordering};
#[cfg(not(loom))]
use std::thread::yield_now;

/// Whether a CQ serves a lane, and the [`CompletionQueue::poll`] calls in
/// progress on it: one atomic word, so that a poll's entry and a lane's
/// mark are ordered by the word's single modification order (a poll either
/// sees the mark, or the mark sees the poll and waits for it), with no
/// store-then-load pattern that needs sequential consistency.
///
/// [`CompletionQueue::poll`]: super::CompletionQueue::poll
pub(crate) struct PollGate {
    /// [`DEDICATED`]: the CQ serves a lane alone, for good (set under the
    /// CQ's `qps` lock): no other QP may use it and only the lane polls it.
    /// The other bits: polls in progress, which the mark waits for, so that
    /// none that began before takes a lane's completions.
    state: AtomicU32,
}

/// The mark of a lane's CQ in [`PollGate::state`].
const DEDICATED: u32 = 1 << 31;

impl PollGate {
    pub(crate) fn new() -> PollGate {
        PollGate {
            state: AtomicU32::new(0),
        }
    }

    /// A poll begins: counted, then refused (`false`, and counted out
    /// again) when the CQ serves a lane.
    #[inline]
    pub(crate) fn enter(&self) -> bool {
        if self.state.fetch_add(1, Ordering::Acquire) & DEDICATED != 0 {
            self.leave();
            return false;
        }
        true
    }

    /// A poll that [`PollGate::enter`] counted has returned.
    #[inline]
    pub(crate) fn leave(&self) {
        self.state.fetch_sub(1, Ordering::Release);
    }

    /// Whether the calling poll is the only one running (a sweep's test,
    /// made after it found the CQ empty: another poll could hold a
    /// completion it took before and has not translated yet; one that
    /// enters later finds no retired QP's completion).
    pub(crate) fn alone(&self) -> bool {
        self.state.load(Ordering::Acquire) & !DEDICATED == 1
    }

    /// Whether the CQ serves a lane.
    pub(crate) fn is_dedicated(&self) -> bool {
        self.state.load(Ordering::Acquire) & DEDICATED != 0
    }

    /// Marks the CQ as a lane's while `lock` (the CQ's `qps` guard, which
    /// new QPs and translations take) is held, releases the lock, then
    /// waits for the polls in progress to return. Waiting with the lock
    /// held would hang (issue 34 hole 9): a running poll takes it to
    /// translate what it polled. After this returns no poll takes a
    /// completion from the CQ.
    pub(crate) fn mark<G>(&self, lock: G) {
        self.state.fetch_or(DEDICATED, Ordering::AcqRel);
        drop(lock);
        while self.state.load(Ordering::Acquire) & !DEDICATED != 0 {
            yield_now();
        }
    }

    /// Undoes [`PollGate::mark`] (under the CQ's lock) for a lane that was
    /// not made.
    pub(crate) fn unmark(&self) {
        self.state.fetch_and(!DEDICATED, Ordering::Release);
    }

    /// The mark of issue 34 hole 9 as it was: waiting with the lock held.
    /// Only for the model that shows it hangs.
    #[cfg(all(test, loom))]
    fn mark_holding_the_lock<G>(&self, lock: G) {
        self.state.fetch_or(DEDICATED, Ordering::AcqRel);
        while self.state.load(Ordering::Acquire) & !DEDICATED != 0 {
            yield_now();
        }
        drop(lock);
    }
}

/// The completions a CQ's queues may have outstanding at once, and the
/// dropped QPs whose completions may still be in it. Kept under the CQ's
/// `qps` lock.
#[derive(Default)]
pub(crate) struct Depths {
    /// Completions outstanding at most: the depths reserved by the queues
    /// attached, and the leftovers of the retired QPs.
    pub(crate) reserved: u64,
    /// QPs dropped (and destroyed) with requests outstanding on a queue
    /// using this CQ: their completions may still be here (issue 34 hole
    /// 10). Each keeps its generation held and `left` entries of
    /// `reserved`, until that many of its completions were polled or the
    /// CQ is seen empty.
    retired: Vec<Retired>,
}

/// A dropped QP whose completions may still be in a CQ.
struct Retired {
    generation: u32,
    /// The most completions of it that can still be in the CQ.
    left: u64,
}

impl Depths {
    /// Reserves room for `n` more outstanding completions on a CQ of
    /// `entries`; refused with the size the CQ would need.
    pub(crate) fn reserve(&mut self, n: u32, entries: u32) -> Result<(), u64> {
        let want = self.reserved + u64::from(n);
        if want > u64::from(entries) {
            return Err(want);
        }
        self.reserved = want;
        Ok(())
    }

    /// Gives back `n` reserved entries (a QP that was not created).
    pub(crate) fn unreserve(&mut self, n: u32) {
        self.reserved = self.reserved.saturating_sub(u64::from(n));
    }

    /// A QP of `generation`, destroyed, reserved `reserved` here and had
    /// `outstanding` requests: gives back its depth except the completions
    /// it can have left (none on a lane's CQ, which the lane drained).
    /// `true` when the generation is newly retired here, and must be held
    /// until [`Depths::stale`] or [`Depths::swept`] hands it back.
    pub(crate) fn retire(
        &mut self,
        generation: u32,
        reserved: u32,
        outstanding: usize,
        dedicated: bool,
    ) -> bool {
        let keep = (outstanding as u64).min(u64::from(reserved));
        self.reserved = self.reserved.saturating_sub(u64::from(reserved) - keep);
        if keep == 0 {
            return false;
        }
        if dedicated {
            self.reserved = self.reserved.saturating_sub(keep);
            return false;
        }
        match self.retired.iter_mut().find(|r| r.generation == generation) {
            // Both queues of the QP on this CQ.
            Some(r) => {
                r.left += keep;
                false
            }
            None => {
                self.retired.push(Retired {
                    generation,
                    left: keep,
                });
                true
            }
        }
    }

    /// A completion of the retired QP of `generation` was polled: one fewer
    /// can be left. Returns its generation once none can.
    pub(crate) fn stale(&mut self, generation: u32) -> Option<u32> {
        let i = self
            .retired
            .iter()
            .position(|r| r.generation == generation)?;
        self.reserved = self.reserved.saturating_sub(1);
        self.retired[i].left -= 1;
        if self.retired[i].left > 0 {
            return None;
        }
        self.retired.swap_remove(i);
        Some(generation)
    }

    /// The CQ was seen empty with no other poll running (or drained by a
    /// lane): no retired QP has a completion left. Gives back their room;
    /// calls `release` with each generation.
    pub(crate) fn swept(&mut self, mut release: impl FnMut(u32)) {
        for r in self.retired.drain(..) {
            self.reserved = self.reserved.saturating_sub(r.left);
            release(r.generation);
        }
    }

    /// Whether a retired QP may still have completions here.
    pub(crate) fn has_retired(&self) -> bool {
        !self.retired.is_empty()
    }

    /// The completions the retired QPs can still have here.
    pub(crate) fn retired_left(&self) -> u64 {
        self.retired.iter().map(|r| r.left).sum()
    }
}

#[cfg(all(test, loom))]
mod models {
    //! Every interleaving of the threads that use a CQ's gate and depths,
    //! with the device's CQ a queue of QP generations (`scripts/loom.sh`:
    //! `RUSTFLAGS="--cfg loom" cargo test -p erdma --lib --release cq::gate`).
    use super::*;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::{Arc, Mutex};
    use std::collections::VecDeque;

    /// Runs `f` under loom with at most `preemptions` forced thread
    /// switches per run (loom's bound for models too large to explore
    /// whole; the bugs these models stand for need one or two).
    fn check(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(preemptions);
        b.check(f);
    }

    /// What the CQ's `qps` lock guards, and the device's CQ.
    struct Cq {
        gate: PollGate,
        depths: Mutex<Depths>,
        /// Completions in the device's CQ, by generation.
        device: Mutex<VecDeque<u32>>,
        entries: u32,
        /// Completions a poll holds, not yet translated, by generation.
        in_hand: Mutex<Vec<u32>>,
        /// Generations given back (free for a new QP).
        released: Mutex<Vec<u32>>,
        /// Set once the lane's dedication returned.
        lane_owns: AtomicBool,
        /// The sweep as it was: no other poll running tested before the
        /// CQ was polled empty.
        sweep_tests_first: bool,
    }

    impl Cq {
        fn new(entries: u32) -> Arc<Cq> {
            Arc::new(Cq {
                gate: PollGate::new(),
                depths: Mutex::new(Depths::default()),
                device: Mutex::new(VecDeque::new()),
                entries,
                in_hand: Mutex::new(Vec::new()),
                released: Mutex::new(Vec::new()),
                lane_owns: AtomicBool::new(false),
                sweep_tests_first: false,
            })
        }

        /// The device adds a completion: never more than the CQ holds.
        fn complete(&self, generation: u32) {
            let mut d = self.device.lock().unwrap();
            d.push_back(generation);
            assert!(
                d.len() <= self.entries as usize,
                "CQ overrun: {} completions in {} entries",
                d.len(),
                self.entries
            );
        }

        /// `CompletionQueue::poll` for one completion: the gate, the
        /// device's poll, the translation under the lock (a stale
        /// completion of a retired QP counted), and the sweep when the CQ
        /// came back empty.
        fn poll(&self) {
            if !self.gate.enter() {
                return;
            }
            let got = {
                // Taken from the CQ into the poll's hands in one step.
                let mut device = self.device.lock().unwrap();
                let got = device.pop_front();
                if let Some(g) = got {
                    self.in_hand.lock().unwrap().push(g);
                }
                got
            };
            match got {
                Some(g) => {
                    assert!(
                        !self.lane_owns.load(Ordering::SeqCst),
                        "a poll took a completion from a lane's CQ"
                    );
                    // translate: the lock, as `lookup` and `stale` take it.
                    let mut d = self.depths.lock().unwrap();
                    if let Some(g) = d.stale(g) {
                        self.release(g, 1);
                    }
                    let mut h = self.in_hand.lock().unwrap();
                    let i = h.iter().position(|&x| x == g).unwrap();
                    h.swap_remove(i);
                }
                None => {
                    // `sweep`: under the lock, the device polled once more,
                    // and only then the test that no other poll runs (one
                    // that took a completion before this poll found the CQ
                    // empty is still counted then).
                    let mut d = self.depths.lock().unwrap();
                    if d.has_retired() {
                        let alone_before = self.gate.alone();
                        let empty = self.device.lock().unwrap().is_empty();
                        let alone = if self.sweep_tests_first {
                            alone_before
                        } else {
                            self.gate.alone()
                        };
                        if empty && alone {
                            d.swept(|g| self.release(g, 0));
                        }
                    }
                }
            }
            self.gate.leave();
        }

        /// A generation is given back by a poll that holds `own` of its
        /// completions (the one it translates): no other may be left, in
        /// the CQ or in another poll's hands (it could release another
        /// QP's request once the generation is reused).
        fn release(&self, g: u32, own: usize) {
            let device = self.device.lock().unwrap();
            let in_hand = self
                .in_hand
                .lock()
                .unwrap()
                .iter()
                .filter(|&&x| x == g)
                .count();
            assert!(
                !device.contains(&g) && in_hand <= own,
                "generation {g} given back while its completions remain (in the CQ: {:?}, in hand: {in_hand}, own {own})",
                *device
            );
            drop(device);
            self.released.lock().unwrap().push(g);
        }
    }

    /// Hole 9: a lane's dedication while a poll is running, with a
    /// completion of a dropped QP in the CQ that the poll translates under
    /// the lock. Neither hangs, and after the dedication no poll takes a
    /// completion.
    #[test]
    fn dedication_waits_for_running_polls_without_the_lock() {
        check(3, || {
            let cq = Cq::new(4);
            cq.complete(1);
            let poller = {
                let cq = cq.clone();
                loom::thread::spawn(move || {
                    cq.poll();
                    cq.poll();
                })
            };
            let guard = cq.depths.lock().unwrap();
            cq.gate.mark(guard);
            cq.lane_owns.store(true, Ordering::SeqCst);
            // The lane drains what is left, raw.
            cq.device.lock().unwrap().clear();
            poller.join().unwrap();
        });
    }

    /// The same with the wait under the lock (the code before the fix):
    /// the model finds the interleaving where both threads wait for each
    /// other.
    #[test]
    #[should_panic]
    fn dedication_holding_the_lock_hangs() {
        let mut b = loom::model::Builder::new();
        b.max_branches = 2_000;
        b.check(|| {
            let cq = Cq::new(4);
            cq.complete(1);
            let poller = {
                let cq = cq.clone();
                loom::thread::spawn(move || cq.poll())
            };
            let guard = cq.depths.lock().unwrap();
            cq.gate.mark_holding_the_lock(guard);
            poller.join().unwrap();
        });
    }

    /// Hole 10: a QP of generation 1 dropped with 2 requests outstanding
    /// (their completions in the CQ or still to come) while two threads
    /// poll and a new QP reserves the CQ's room and fills it. The CQ never
    /// overruns, and generation 1 is given back only once none of its
    /// completions is left anywhere.
    fn dropped_qp(sweep_tests_first: bool) {
        let mut cq = Cq::new(4);
        Arc::get_mut(&mut cq).unwrap().sweep_tests_first = sweep_tests_first;
        cq.depths.lock().unwrap().reserve(4, 4).unwrap();
        // One completion of the doomed QP is in the CQ already.
        cq.complete(1);
        let dropper = {
            let cq = cq.clone();
            loom::thread::spawn(move || {
                // Its last request completes, then the QP is destroyed
                // (no completion after that) and retired.
                cq.complete(1);
                let held = cq.depths.lock().unwrap().retire(1, 4, 2, false);
                assert!(held);
            })
        };
        let poller = {
            let cq = cq.clone();
            loom::thread::spawn(move || {
                cq.poll();
                cq.poll();
            })
        };
        // A new QP reserves what it may and uses all of it.
        let got = cq.depths.lock().unwrap().reserve(2, 4);
        cq.poll();
        if got.is_ok() {
            cq.complete(2);
            cq.complete(2);
        }
        dropper.join().unwrap();
        poller.join().unwrap();
        // Drain everything; generation 1 is then given back.
        for _ in 0..4 {
            cq.poll();
        }
        assert!(cq.released.lock().unwrap().contains(&1));
    }

    #[test]
    fn dropped_qps_keep_room_and_generation_until_their_completions_are_gone() {
        check(3, || dropped_qp(false));
    }

    /// The sweep as it was (issue 34's fix of hole 10 tested for other
    /// polls before polling the CQ empty): a poll that enters between the
    /// two takes the dropped QP's last completion, and the generation is
    /// given back while it holds it. Found by this model.
    #[test]
    #[should_panic(expected = "given back while its completions remain")]
    fn sweep_testing_for_other_polls_first_gives_a_generation_back_early() {
        check(3, || dropped_qp(true));
    }

    /// The accounting of hole 10 as it was: the whole depth given back at
    /// the drop. The model finds the overrun.
    #[test]
    #[should_panic(expected = "CQ overrun")]
    fn giving_the_whole_depth_back_at_the_drop_overruns() {
        check(2, || {
            let cq = Cq::new(4);
            cq.depths.lock().unwrap().reserve(4, 4).unwrap();
            cq.complete(1);
            cq.complete(1);
            cq.depths.lock().unwrap().unreserve(4);
            cq.depths.lock().unwrap().reserve(4, 4).unwrap();
            for _ in 0..4 {
                cq.complete(2);
            }
        });
    }
}
