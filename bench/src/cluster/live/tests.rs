use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::thread;

use super::*;

/// Messages in memory: (from, to, tag) -> queue.
type Boxes = Arc<Mutex<HashMap<(usize, usize, i32), VecDeque<Vec<u8>>>>>;

struct Memory {
    rank: usize,
    size: usize,
    boxes: Boxes,
}

impl Wire for Memory {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn post(&self, to: usize, tag: i32, bytes: Vec<u8>) -> Result<(), String> {
        let mut b = self.boxes.lock().unwrap();
        b.entry((self.rank, to, tag)).or_default().push_back(bytes);
        Ok(())
    }
    fn take(&self, from: usize, tag: i32) -> Result<Option<Vec<u8>>, String> {
        let mut b = self.boxes.lock().unwrap();
        Ok(b.get_mut(&(from, self.rank, tag))
            .and_then(VecDeque::pop_front))
    }
}

/// The ranks' timeout. The tests assert that an exchange that must not
/// wait for it ends under it: 1 s is far over what threads exchanging in
/// memory take, even with every core of a busy machine taken.
const T: Duration = Duration::from_secs(1);

fn world(n: usize) -> (Boxes, Vec<Live<Memory>>) {
    let boxes = Boxes::default();
    let lives = (0..n)
        .map(|rank| {
            let mut l = Live::new(
                Memory {
                    rank,
                    size: n,
                    boxes: boxes.clone(),
                },
                T,
            );
            l.grace = Duration::from_millis(200);
            l
        })
        .collect();
    (boxes, lives)
}

/// Runs `f` on every rank in `ranks` at once; the results by rank.
fn on<R: Send>(
    lives: &[Live<Memory>],
    ranks: &[usize],
    f: impl Fn(&Live<Memory>) -> R + Sync,
) -> Vec<R> {
    thread::scope(|s| {
        let f = &f;
        let hs: Vec<_> = ranks
            .iter()
            .map(|&r| s.spawn(move || f(&lives[r])))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn mine(r: usize) -> Vec<u8> {
    format!("rank {r}").into_bytes()
}

#[test]
fn every_rank_gets_every_rank_bytes() {
    let (_, lives) = world(4);
    let got = on(&lives, &[0, 1, 2, 3], |l| {
        l.gather(&mine(l.rank()), true, "testing").unwrap()
    });
    for g in got {
        assert_eq!(g, (0..4).map(|r| Some(mine(r))).collect::<Gathered>());
    }
    // To rank 0 only: the others learn who is live, not the bytes.
    let got = on(&lives, &[0, 2], |l| l.gather(&mine(l.rank()), false, "x"));
    assert_eq!(got[0].as_ref().unwrap()[2], Some(mine(2)));
    assert_eq!(got[1].as_ref().unwrap()[0], Some(Vec::new()));
}

#[test]
fn a_silent_rank_is_lost_and_the_others_go_on() {
    let (_, lives) = world(4);
    let t0 = Instant::now();
    let got = on(&lives, &[0, 1, 3], |l| {
        l.gather(&mine(l.rank()), true, "round 1").unwrap()
    });
    assert!(t0.elapsed() >= T, "rank 0 waited the timeout for rank 2");
    for g in &got {
        assert_eq!(g[2], None);
        assert_eq!(g[3], Some(mine(3)));
    }
    assert_eq!(lives[0].lost().len(), 1);
    assert!(lives[0].lost()[0].1.contains("while round 1"));
    assert!(lives[1].is_lost(2) && lives[3].is_lost(2));
    // The next exchange does not wait for it.
    let t1 = Instant::now();
    let got = on(&lives, &[0, 1, 3], |l| {
        l.gather(&mine(l.rank()), true, "round 2").unwrap()
    });
    assert!(t1.elapsed() < T, "{:?}", t1.elapsed());
    assert_eq!(got[2][2], None);
    // It wakes up late, in the first exchange: told it was lost.
    let e = lives[2].gather(&mine(2), true, "round 1").unwrap_err();
    assert!(
        matches!(&e, Ended::Excluded(m) if m.contains("declared this rank lost while round 1")),
        "{e:?}"
    );
}

#[test]
fn a_rank_declared_lost_is_not_waited_for() {
    let (_, lives) = world(4);
    // Only rank 0 declares; the others' word changes nothing.
    lives[3].declare_lost(2, "said by 3", "x");
    assert!(!lives[3].is_lost(2));
    lives[0].declare_lost(0, "itself", "x");
    lives[0].declare_lost(9, "no such rank", "x");
    lives[0].declare_lost(2, "silent in the census", "the NCCL stage");
    lives[0].declare_lost(2, "again", "later");
    assert_eq!(lives[0].lost(), [(2, "silent in the census".to_owned())]);
    // The next exchange goes on without it at once, and the others learn.
    let t = Instant::now();
    let got = on(&lives, &[0, 1, 3], |l| {
        l.gather(&mine(l.rank()), true, "after the runs").unwrap()
    });
    assert!(t.elapsed() < T, "{:?}", t.elapsed());
    assert_eq!(got[1][2], None);
    assert!(lives[1].is_lost(2) && lives[3].is_lost(2));
    // It wakes up: told it was lost where it was declared so.
    let e = lives[2]
        .gather(&mine(2), true, "after the runs")
        .unwrap_err();
    assert!(
        matches!(&e, Ended::Excluded(m) if m.contains("declared this rank lost while the NCCL stage")),
        "{e:?}"
    );
}

#[test]
fn without_rank_0_the_others_end() {
    let (_, lives) = world(3);
    let got = on(&lives, &[1, 2], |l| {
        l.gather(&mine(l.rank()), true, "the pairs")
    });
    for g in got {
        assert!(
            matches!(&g, Err(Ended::RootLost(m)) if m.contains("did not answer") && m.contains("while the pairs")),
            "{g:?}"
        );
    }
}

#[test]
fn garbage_from_rank_0_ends_a_rank() {
    let (boxes, lives) = world(2);
    boxes
        .lock()
        .unwrap()
        .entry((0, 1, FIRST_TAG + 3))
        .or_default()
        .push_back(vec![2, 0, 0, 0, 7]);
    let e = lives[1].gather(b"x", true, "a stage").unwrap_err();
    assert!(
        matches!(&e, Ended::RootLost(m) if m.contains("does not parse")),
        "{e:?}"
    );
}

#[test]
fn answers_round_trip_and_garbage_is_refused() {
    let g: Gathered = vec![Some(b"ab".to_vec()), None, Some(Vec::new())];
    let b = encode(&g);
    assert_eq!(decode(&b, 3), Some(g));
    assert_eq!(decode(&b, 2), None, "another rank count");
    for cut in 0..b.len() {
        assert_eq!(decode(&b[..cut], 3), None, "cut at {cut}");
    }
    let mut long = b.clone();
    long.push(0);
    assert_eq!(decode(&long, 3), None, "trailing bytes");
    let mut flag = b;
    flag[4] = 9;
    assert_eq!(decode(&flag, 3), None, "unknown presence byte");
}
