//! The ranks' exchanges when one may be lost: every exchange goes through
//! rank 0 as point-to-point messages, each wait bounded by `--timeout`.
//! A rank that does not answer in time (stopped, hung, gone) is marked
//! lost, told so if it ever wakes, and left out of every later exchange;
//! the others go on. A collective over all ranks (MPI_Allgather, a
//! barrier) cannot do this: one silent rank holds every other one.
//!
//! Rank 0 collects and answers, so the others learn the same set of lost
//! ranks from the same message. If rank 0 is lost, nobody can write the
//! report: the others end ([`Ended::RootLost`]).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Point-to-point messages between the ranks (MPI in the job, memory in
/// the tests).
pub trait Wire {
    /// This rank.
    fn rank(&self) -> usize;
    /// How many ranks.
    fn size(&self) -> usize;
    /// Sends `bytes` to `to` with `tag`, without waiting for the receiver.
    fn post(&self, to: usize, tag: i32, bytes: Vec<u8>) -> Result<(), String>;
    /// A message from `from` with `tag`, if one has arrived.
    fn take(&self, from: usize, tag: i32) -> Result<Option<Vec<u8>>, String>;
}

/// Why an exchange could not go on for this rank.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    /// Rank 0 did not answer (or sent garbage): nobody can collect.
    RootLost(String),
    /// Rank 0 declared this rank lost (it answered too late).
    Excluded(String),
}

/// The tag of rank 0's notice to a rank it declared lost.
const OUT_TAG: i32 = 999;
/// Tags of the exchanges: two per exchange (data, answer), cycling below
/// MPI's smallest allowed tag bound (32767) and clear of other tags.
const FIRST_TAG: i32 = 1000;
const TAG_CYCLE: u32 = 8000;

/// The exchanges of one job, with the ranks lost so far.
pub struct Live<W: Wire> {
    wire: W,
    timeout: Duration,
    /// What a rank other than 0 waits beyond two timeouts: rank 0 may do
    /// work of its own between exchanges (write a round, the report).
    grace: Duration,
    state: Mutex<State>,
}

struct State {
    seq: u32,
    /// For each rank, the exchange in which it was lost.
    lost: Vec<Option<String>>,
}

/// Every rank's bytes in one exchange (`None`: lost, now or before).
pub type Gathered = Vec<Option<Vec<u8>>>;

impl<W: Wire> Live<W> {
    /// Exchanges over `wire`; rank 0 waits up to `timeout` for each rank.
    pub fn new(wire: W, timeout: Duration) -> Live<W> {
        let n = wire.size();
        Live {
            wire,
            timeout,
            grace: Duration::from_secs(10),
            state: Mutex::new(State {
                seq: 0,
                lost: vec![None; n],
            }),
        }
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.wire.rank()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Each rank lost so far, with the exchange it was lost in (rank 0
    /// knows the exchange; the others say "an earlier exchange").
    pub fn lost(&self) -> Vec<(usize, String)> {
        let s = self.state();
        s.lost
            .iter()
            .enumerate()
            .filter_map(|(r, l)| l.clone().map(|l| (r, l)))
            .collect()
    }

    /// Whether `rank` was lost.
    pub fn is_lost(&self, rank: usize) -> bool {
        self.state().lost.get(rank).is_some_and(Option::is_some)
    }

    /// Rank 0: marks `rank` lost for `why` without waiting for it (what
    /// another wait already proved, e.g. the collectives' timeout census),
    /// so that the next exchange goes on without it; it is told so if it
    /// wakes, as in [`Live::gather`]. `stage` names where it was lost.
    /// Elsewhere, or for rank 0 itself or a rank lost already: nothing.
    pub fn declare_lost(&self, rank: usize, why: &str, stage: &str) {
        if self.rank() != 0 || rank == 0 || rank >= self.wire.size() {
            return;
        }
        let mut s = self.state();
        if s.lost[rank].is_none() {
            s.lost[rank] = Some(why.to_owned());
            let _ = self.wire.post(rank, OUT_TAG, stage.as_bytes().to_vec());
        }
    }

    /// Every live rank's `mine`: on every rank if `everyone`, else on
    /// rank 0 only (the others get `Some(empty)` for each live rank: the
    /// list of who is live, not the bytes). `stage` names the exchange.
    pub fn gather(&self, mine: &[u8], everyone: bool, stage: &str) -> Result<Gathered, Ended> {
        let tag = {
            let mut s = self.state();
            s.seq = s.seq.wrapping_add(1);
            FIRST_TAG + 2 * (s.seq % TAG_CYCLE) as i32
        };
        if self.rank() == 0 {
            Ok(self.collect(mine, tag, everyone, stage))
        } else {
            self.ask(mine, tag, stage)
        }
    }

    /// Rank 0: waits up to the timeout for every live rank's message,
    /// marks the silent ones lost, answers the others.
    fn collect(&self, mine: &[u8], tag: i32, everyone: bool, stage: &str) -> Gathered {
        let n = self.wire.size();
        let mut got: Gathered = vec![None; n];
        got[0] = Some(mine.to_vec());
        let mut waiting: Vec<usize> = (1..n).filter(|&r| !self.is_lost(r)).collect();
        let until = Instant::now() + self.timeout;
        let mut pause = Pause::default();
        while !waiting.is_empty() && Instant::now() < until {
            // A rank whose messages fail (MPI reports it gone) is lost too.
            waiting.retain(|&r| match self.wire.take(r, tag) {
                Ok(Some(b)) => {
                    got[r] = Some(b);
                    false
                }
                Ok(None) => true,
                Err(_) => false,
            });
            pause.wait();
        }
        let why = format!(
            "no answer within --timeout {} s while {stage} (stopped, hung or gone)",
            self.timeout.as_secs()
        );
        {
            let mut s = self.state();
            for (r, b) in got.iter().enumerate() {
                if b.is_none() && s.lost[r].is_none() {
                    s.lost[r] = Some(why.clone());
                    // Read only if it wakes up: it then ends, not waits.
                    let _ = self.wire.post(r, OUT_TAG, stage.as_bytes().to_vec());
                }
            }
        }
        let answer = if everyone {
            encode(&got)
        } else {
            let who: Gathered = got.iter().map(|b| b.as_ref().map(|_| Vec::new())).collect();
            encode(&who)
        };
        for r in (1..n).filter(|&r| got[r].is_some()) {
            if self.wire.post(r, tag + 1, answer.clone()).is_err() {
                // It learns nothing; it ends as lost at its next wait.
                self.state().lost[r] = Some(format!("its answer could not be sent while {stage}"));
            }
        }
        got
    }

    /// Not rank 0: sends `mine`, waits for rank 0's answer (rank 0 may
    /// itself wait a timeout for another rank first).
    fn ask(&self, mine: &[u8], tag: i32, stage: &str) -> Result<Gathered, Ended> {
        let gone = |what: &str| {
            Ended::RootLost(format!(
                "rank 0 (which collects the results and writes the report) {what} while {stage}"
            ))
        };
        self.wire
            .post(0, tag, mine.to_vec())
            .map_err(|e| gone(&format!("could not be reached ({e})")))?;
        let until = Instant::now() + 2 * self.timeout + self.grace;
        let mut pause = Pause::default();
        loop {
            if let Ok(Some(b)) = self.wire.take(0, tag + 1) {
                let got = decode(&b, self.wire.size())
                    .ok_or_else(|| gone("sent an answer that does not parse"))?;
                let mut s = self.state();
                for (r, b) in got.iter().enumerate() {
                    if b.is_none() && s.lost[r].is_none() {
                        s.lost[r] = Some(format!("lost while {stage} (rank 0 says)"));
                    }
                }
                return Ok(got);
            }
            if let Ok(Some(b)) = self.wire.take(0, OUT_TAG) {
                return Err(Ended::Excluded(format!(
                    "rank 0 declared this rank lost while {} (it did not answer within --timeout {} s); the others went on",
                    String::from_utf8_lossy(&b),
                    self.timeout.as_secs()
                )));
            }
            if Instant::now() > until {
                return Err(gone(&format!(
                    "did not answer within {} s",
                    (2 * self.timeout + self.grace).as_secs()
                )));
            }
            pause.wait();
        }
    }
}

/// Polling that yields at first and then sleeps a millisecond, so that a
/// rank waiting for the others does not take a CPU their runs need.
#[derive(Default)]
struct Pause(u32);

impl Pause {
    fn wait(&mut self) {
        self.0 += 1;
        if self.0 < 200 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// `[ranks: u32][per rank: present u8, then len u32 + bytes]`, little endian.
fn encode(g: &Gathered) -> Vec<u8> {
    let mut v = (g.len() as u32).to_le_bytes().to_vec();
    for b in g {
        match b {
            None => v.push(0),
            Some(b) => {
                v.push(1);
                v.extend((b.len() as u32).to_le_bytes());
                v.extend_from_slice(b);
            }
        }
    }
    v
}

/// [`encode`]'s inverse; `None` for anything else than `ranks` entries.
fn decode(b: &[u8], ranks: usize) -> Option<Gathered> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Option<&[u8]> {
        let h = b.get(at..at.checked_add(n)?)?;
        at += n;
        Some(h)
    };
    let n = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
    if n != ranks {
        return None;
    }
    let mut g = Vec::with_capacity(n);
    for _ in 0..n {
        g.push(match take(1)?[0] {
            0 => None,
            1 => {
                let len = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
                Some(take(len)?.to_vec())
            }
            _ => return None,
        });
    }
    (at == b.len()).then_some(g)
}

#[cfg(test)]
mod tests;
