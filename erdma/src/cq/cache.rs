//! The QP a CQ's polls found last, kept between polls ([`QpCache`]): a poll
//! borrows it with one compare-and-swap and gives it back with another,
//! where looking the QP up takes the CQ's `qps` lock, a hash probe, a
//! `Weak::upgrade` and the `Arc`'s drop (callgrind in the rig: ~60
//! instructions per completion).
//!
//! The cache holds a strong share of the QP, and the QP holds its CQs: the
//! share must go when the QP's owner drops it, or the QP would never be
//! destroyed. So the owner marks the QP as closing ([`Closing`]) and
//! evicts it ([`QpCache::evict`]); a poll that borrowed it meanwhile finds
//! it evicted when it gives it back and drops the share itself, with no lock
//! held (the QP's drop takes the CQ's lock: issue 34 hole 8); a poll that
//! installs a QP looks at the mark after installing it, so that a QP is
//! never installed after its eviction. The mark is set and read with
//! read-modify-writes (acquire-release), never a store-then-load pair that
//! would need sequential consistency (which loom does not check): whichever
//! of the two comes second in the mark's modification order sees what the
//! other did before. No thread waits for another here.
//! `cfg(loom)` builds it on loom's atomics; the models at the end check
//! every interleaving of pollers against the owner's drop
//! (`scripts/loom.sh`), and its unit tests run under Miri.

use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;

#[cfg(loom)]
use loom::sync::atomic::{AtomicPtr, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicPtr, Ordering};

/// What the cache needs to know of what it holds.
pub(crate) trait Closing {
    /// Whether the owner dropped it: a read-modify-write of the mark
    /// (`fetch_or(false, AcqRel)`), made after the cache was changed; the
    /// owner sets it with a read-modify-write (`swap(true, AcqRel)`) before
    /// it evicts.
    fn closing(&self) -> bool;
}

/// The slot's states, in the low bits of its pointer (what it holds is
/// aligned to at least 4 bytes): null (empty); `p` (holds a share of `p`,
/// free to borrow); `p | BORROWED` (a poll uses `p`: the share is still
/// the slot's); `p | EVICTED` (evicted while borrowed: the borrower drops
/// the share and empties the slot).
const BORROWED: usize = 1;
const EVICTED: usize = 2;
const TAGS: usize = BORROWED | EVICTED;

fn tagged<T>(p: *mut T, tag: usize) -> *mut T {
    p.map_addr(|a| a | tag)
}

/// One cached share of a `T` (a QP), borrowed by one poll at a time.
/// `Send`/`Sync` as an `Arc<T>` is (`_owns`): when `T` is both.
pub(crate) struct QpCache<T: Closing> {
    slot: AtomicPtr<T>,
    _owns: PhantomData<Arc<T>>,
}

impl<T: Closing> QpCache<T> {
    pub(crate) fn new() -> QpCache<T> {
        const { assert!(std::mem::align_of::<T>() > TAGS) };
        QpCache {
            slot: AtomicPtr::new(std::ptr::null_mut()),
            _owns: PhantomData,
        }
    }

    /// The cached `T`, unless the cache is empty or another poll has it.
    #[inline]
    pub(crate) fn borrow(&self) -> Option<Borrowed<'_, T>> {
        let p = self.slot.load(Ordering::Relaxed);
        if p.is_null() || p.addr() & TAGS != 0 {
            return None;
        }
        // Acquire: what the installer (or the last borrower) did to `*p`
        // happened before.
        self.slot
            .compare_exchange(p, tagged(p, BORROWED), Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        Some(Borrowed { cache: self, p })
    }

    /// Ends a borrow of `p`: gives it back, or drops the share when it was
    /// evicted meanwhile.
    #[inline]
    fn give_back(&self, p: *mut T) {
        if self
            .slot
            .compare_exchange(tagged(p, BORROWED), p, Ordering::Release, Ordering::Acquire)
            .is_ok()
        {
            return;
        }
        self.evicted(p);
    }

    #[cold]
    fn evicted(&self, p: *mut T) {
        // Only `evict` changes a borrowed slot, to EVICTED; nothing but
        // this borrower changes that.
        debug_assert_eq!(self.slot.load(Ordering::Relaxed), tagged(p, EVICTED));
        self.slot.store(std::ptr::null_mut(), Ordering::Release);
        // SAFETY: the slot's share of `p` (from `Arc::into_raw` in
        // `install`), given to this borrower by `evict`; taken once.
        drop(unsafe { Arc::from_raw(p) });
    }

    /// Keeps a share of `t` when the cache is empty. A `t` marked closing
    /// meanwhile is evicted again (its owner may have evicted before this).
    pub(crate) fn install(&self, t: &Arc<T>) {
        if !self.slot.load(Ordering::Relaxed).is_null() {
            return;
        }
        let p = Arc::into_raw(t.clone()).cast_mut();
        if self
            .slot
            .compare_exchange(std::ptr::null_mut(), p, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            // SAFETY: `p` came from `Arc::into_raw` above and was not
            // stored.
            drop(unsafe { Arc::from_raw(p) });
            return;
        }
        // Installed, then the mark read by a read-modify-write, against the
        // owner's mark (another) then `evict`: when this one comes first in
        // the mark's order, the owner's acquires it, and its `evict` sees
        // the share installed; else this sees the mark.
        if t.closing() {
            self.evict(t);
        }
    }

    /// Takes the cache's share of `t` out, or has its borrower drop it. The
    /// caller marked `t` closing (see [`Closing`]) first, and holds a share
    /// of it.
    pub(crate) fn evict(&self, t: &T) {
        let p = std::ptr::from_ref(t).cast_mut();
        loop {
            let cur = self.slot.load(Ordering::Acquire);
            if cur == p {
                // `p` (from `t`) only names the QP: the share is rebuilt
                // from the pointer the slot held (from `Arc::into_raw`).
                if let Ok(held) = self.slot.compare_exchange(
                    cur,
                    std::ptr::null_mut(),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    // SAFETY: the slot held a share of `t`, installed by
                    // `Arc::into_raw`; the exchange took it out, once.
                    drop(unsafe { Arc::from_raw(held) });
                    return;
                }
            } else if cur == tagged(p, BORROWED) {
                if self
                    .slot
                    .compare_exchange(cur, tagged(p, EVICTED), Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return;
                }
            } else {
                // Empty, or another T's, or already evicted.
                return;
            }
        }
    }
}

impl<T: Closing> Drop for QpCache<T> {
    fn drop(&mut self) {
        // No borrow outlives the cache (it borrows `&self`).
        let p = self.slot.load(Ordering::Acquire);
        if !p.is_null() && p.addr() & TAGS == 0 {
            // SAFETY: the slot's share, from `Arc::into_raw`.
            drop(unsafe { Arc::from_raw(p) });
        }
    }
}

/// A borrowed cached `T`, given back when dropped.
pub(crate) struct Borrowed<'a, T: Closing> {
    cache: &'a QpCache<T>,
    p: *mut T,
}

impl<T: Closing> Deref for Borrowed<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the slot's share keeps `*p` alive until this borrow ends:
        // nothing but this borrower drops a borrowed (or evicted-while-
        // borrowed) share.
        unsafe { &*self.p }
    }
}

impl<T: Closing> Drop for Borrowed<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.cache.give_back(self.p);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize};

    struct Qp {
        closing: AtomicBool,
        drops: Arc<AtomicUsize>,
    }

    impl Closing for Qp {
        fn closing(&self) -> bool {
            self.closing.fetch_or(false, Ordering::AcqRel)
        }
    }

    impl Drop for Qp {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn qp() -> (Arc<Qp>, Arc<AtomicUsize>) {
        let drops = Arc::new(AtomicUsize::new(0));
        let qp = Arc::new(Qp {
            closing: AtomicBool::new(false),
            drops: drops.clone(),
        });
        (qp, drops)
    }

    /// The owner's drop: mark, evict, drop its share.
    fn close(cache: &QpCache<Qp>, qp: Arc<Qp>) {
        qp.closing.swap(true, Ordering::AcqRel);
        cache.evict(&qp);
        drop(qp);
    }

    #[test]
    fn installed_qp_is_borrowed_once_at_a_time_and_evicted_by_its_owner() {
        let cache = QpCache::new();
        let (a, drops) = qp();
        assert!(cache.borrow().is_none());
        cache.install(&a);
        assert_eq!(Arc::strong_count(&a), 2);
        {
            let b = cache.borrow().expect("installed");
            assert!(std::ptr::eq(&*b, &*a));
            assert!(cache.borrow().is_none(), "one borrower at a time");
        }
        assert!(cache.borrow().is_some(), "given back");
        close(&cache, a);
        assert_eq!(drops.load(Ordering::SeqCst), 1, "the cache's share went");
        assert!(cache.borrow().is_none());
    }

    #[test]
    fn evicted_while_borrowed_is_dropped_by_the_borrower() {
        let cache = QpCache::new();
        let (a, drops) = qp();
        cache.install(&a);
        let b = cache.borrow().expect("installed");
        close(&cache, a);
        // The borrower's share keeps it alive while it is used.
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        assert!(b.closing.load(Ordering::SeqCst));
        drop(b);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        // The slot is free for another QP.
        let (c, drops_c) = qp();
        cache.install(&c);
        assert!(cache.borrow().is_some());
        drop(cache);
        assert_eq!(drops_c.load(Ordering::SeqCst), 0);
        assert_eq!(
            Arc::strong_count(&c),
            1,
            "the cache's drop gave its share back"
        );
    }

    #[test]
    fn closing_qp_is_not_kept_and_another_qp_waits_for_room() {
        let cache = QpCache::new();
        let (a, drops) = qp();
        a.closing.swap(true, Ordering::AcqRel);
        cache.install(&a);
        assert_eq!(
            Arc::strong_count(&a),
            1,
            "installed after its mark: taken out again"
        );
        assert!(cache.borrow().is_none());
        let (b, _) = qp();
        let (c, _) = qp();
        cache.install(&b);
        cache.install(&c);
        assert_eq!(Arc::strong_count(&c), 1, "a full cache keeps what it has");
        // Evicting a QP the cache does not hold changes nothing.
        cache.evict(&c);
        assert!(std::ptr::eq(&*cache.borrow().expect("b"), &*b));
        drop(a);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        close(&cache, b);
        assert!(cache.borrow().is_none());
    }
}

#[cfg(all(test, loom))]
mod models {
    //! Every interleaving of polls that borrow or install the cached QP
    //! against its owner's drop (`scripts/loom.sh`). What is checked: the
    //! QP is never dropped while a poll uses it, and once its owner dropped
    //! it and the polls returned, it is gone (the cache kept no share).
    use super::*;
    use loom::sync::atomic::{AtomicBool, AtomicUsize};

    struct Qp {
        closing: AtomicBool,
        drops: Arc<AtomicUsize>,
    }

    impl Closing for Qp {
        fn closing(&self) -> bool {
            self.closing.fetch_or(false, Ordering::AcqRel)
        }
    }

    impl Drop for Qp {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// `CompletionQueue::translate`'s use: the cached QP when it is there
    /// and free, else the QP looked up (a share the poll holds: `owned`,
    /// `None` once its owner dropped it), installed for the next poll.
    fn poll(cache: &QpCache<Qp>, lookup: &loom::sync::Mutex<Option<std::sync::Weak<Qp>>>) {
        if let Some(b) = cache.borrow() {
            assert_eq!(
                b.drops.load(Ordering::SeqCst),
                0,
                "a borrowed QP was dropped"
            );
            return;
        }
        let owned = lookup.lock().unwrap().as_ref().and_then(|w| w.upgrade());
        if let Some(qp) = owned {
            cache.install(&qp);
            assert_eq!(qp.drops.load(Ordering::SeqCst), 0);
        }
    }

    fn model(pollers: usize, polls: usize) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(move || {
            let drops = Arc::new(AtomicUsize::new(0));
            let qp = Arc::new(Qp {
                closing: AtomicBool::new(false),
                drops: drops.clone(),
            });
            let cache = Arc::new(QpCache::new());
            let lookup = Arc::new(loom::sync::Mutex::new(Some(Arc::downgrade(&qp))));
            let threads: Vec<_> = (0..pollers)
                .map(|_| {
                    let (cache, lookup) = (cache.clone(), lookup.clone());
                    loom::thread::spawn(move || {
                        for _ in 0..polls {
                            poll(&cache, &lookup);
                        }
                    })
                })
                .collect();
            // The owner's drop (QueuePair::drop): mark, evict, drop. Its
            // share goes under the lookup's lock, so that loom sees the
            // drop against a poll's upgrade (std's `Arc` counts are not
            // loom's: without the lock the model would not order them).
            qp.closing.swap(true, Ordering::AcqRel);
            cache.evict(&qp);
            {
                let _detach = lookup.lock().unwrap();
                drop(qp);
            }
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(
                drops.load(Ordering::SeqCst),
                1,
                "the cache kept a share of a QP its owner dropped"
            );
            assert!(cache.borrow().is_none());
        });
    }

    /// One poll installing then borrowing, against the owner's drop.
    #[test]
    fn owner_drop_against_one_poller() {
        model(1, 2);
    }

    /// Two polls: one borrows while the other finds it taken and looks up.
    #[test]
    fn owner_drop_against_two_pollers() {
        model(2, 2);
    }
}
