//! The churn scenario's events and what they add up to: the wait of every successful
//! acquisition, and the intervals during which a lock had no holder while a task waited
//! for it (the lock could have been taken, and was not).
//!
//! Every worker process appends its events to a file of its own as they happen, stamped
//! with `CLOCK_MONOTONIC` ([`crate::stats::monotonic_ns`]), one clock for all of them; the
//! parent merges the files after the run, with the moments it killed a process.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

/// What happened to one acquisition call (numbered per worker process).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum What {
    /// The call began: the task waits from here.
    Asked,
    /// The call returned a guard: the wait ends and the hold begins.
    Acquired,
    /// `try_lock_for` returned its timeout: the task waited until then, without the lock.
    TimedOut,
    /// The call's future was dropped (its `timeout` fired, its task was aborted, it
    /// failed): the task gave up, so its wait does not count as waiting.
    Cancelled,
    /// The hold ended: `unlock()` returned, the guard was dropped, or its explicit lease
    /// ran out first.
    Released,
}

/// One event of a worker process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// When, on the shared monotonic clock (ns).
    pub at: u64,
    /// The acquisition call it belongs to, numbered by the process.
    pub n: u64,
    /// Which hot lock.
    pub key: u8,
    /// What happened.
    pub what: What,
}

/// One run of one worker process, from its `GO` to its exit or its death.
#[derive(Clone, Debug, Default)]
pub struct Life {
    /// Its events, in the order it wrote them.
    pub events: Vec<Event>,
    /// How it ended, if it was killed.
    pub death: Option<Death>,
}

/// A worker process killed by the parent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Death {
    /// When it was dead (reaped), on the shared clock: its waits end here.
    pub at: u64,
    /// The hot locks its client still held in Redis then, each with the end of its lease
    /// (nobody releases them: they expire).
    pub leases: Vec<(u8, u64)>,
}

/// What the events of a run add up to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// The wait of every successful acquisition (ns), sorted.
    pub waits: Vec<u64>,
    /// The waits among them that no killed holder's lease overlapped (ns), sorted: what
    /// the hand-off costs, without the time a dead process' lock took to expire.
    pub waits_clear: Vec<u64>,
    /// The length (ns) of every interval in which a lock had no holder while a task waited
    /// for it, longest first.
    pub takeable: Vec<u64>,
    /// `try_lock_for` calls that returned their timeout.
    pub timed_out: u64,
    /// Acquisition calls given up (future dropped).
    pub cancelled: u64,
    /// Killed processes.
    pub kills: u64,
    /// Killed processes that were waiting for or holding a lock when they died.
    pub kills_busy: u64,
    /// Killed processes whose client still held a lock in Redis when they died.
    pub kills_holding: u64,
}

/// Merges the `lives` of all worker processes over the run `start..end`: events after
/// `end` are left out, and waits and holds still open then end there.
pub fn analyze(lives: &[Life], end: u64) -> Timeline {
    let mut spans = Spans::default();
    let mut out = Timeline::default();
    for life in lives {
        spans.add(life, end, &mut out);
    }
    out.waits_clear = spans
        .acquired
        .iter()
        .filter(|&&(key, from, to)| {
            !spans
                .dead_leases
                .iter()
                .any(|&(k, since, until)| k == key && since < to && from < until)
        })
        .map(|&(_, from, to)| to - from)
        .collect();
    out.waits.sort_unstable();
    out.waits_clear.sort_unstable();
    out.takeable = spans
        .by_key
        .values()
        .flat_map(|key| takeable(&key.holds, &key.waits))
        .collect();
    out.takeable.sort_unstable_by(|a, b| b.cmp(a));
    out
}

/// One lock's holds and counted waits, as `(from, to)` on the shared clock.
#[derive(Default)]
struct KeySpans {
    holds: Vec<(u64, u64)>,
    waits: Vec<(u64, u64)>,
}

#[derive(Default)]
struct Spans {
    by_key: BTreeMap<u8, KeySpans>,
    /// Every successful acquisition's wait: `(key, from, to)`.
    acquired: Vec<(u8, u64, u64)>,
    /// What killed processes still held: `(key, death, end of lease)`.
    dead_leases: Vec<(u8, u64, u64)>,
}

impl Spans {
    fn hold(&mut self, key: u8, from: u64, to: u64) {
        self.by_key
            .entry(key)
            .or_default()
            .holds
            .push((from, to.max(from)));
    }

    fn wait(&mut self, key: u8, from: u64, to: u64) {
        self.by_key
            .entry(key)
            .or_default()
            .waits
            .push((from, to.max(from)));
    }

    /// The spans of one process; its counts go to `out`.
    fn add(&mut self, life: &Life, end: u64, out: &mut Timeline) {
        let stop = life.death.as_ref().map_or(end, |death| death.at.min(end));
        // Open calls and holds by call number: (key, since).
        let mut waiting: HashMap<u64, (u8, u64)> = HashMap::new();
        let mut holding: HashMap<u64, (u8, u64)> = HashMap::new();
        // A call's events are written in the order they happened; calls interleave.
        for e in life.events.iter().filter(|e| e.at <= stop) {
            match e.what {
                What::Asked => {
                    waiting.insert(e.n, (e.key, e.at));
                }
                What::Acquired => {
                    if let Some((key, since)) = waiting.remove(&e.n) {
                        self.wait(key, since, e.at);
                        out.waits.push(e.at.saturating_sub(since));
                        self.acquired.push((key, since, e.at.max(since)));
                        holding.insert(e.n, (key, e.at));
                    }
                }
                What::TimedOut => {
                    if let Some((key, since)) = waiting.remove(&e.n) {
                        self.wait(key, since, e.at);
                        out.timed_out += 1;
                    }
                }
                What::Cancelled => {
                    if waiting.remove(&e.n).is_some() {
                        out.cancelled += 1;
                    }
                }
                What::Released => {
                    if let Some((key, since)) = holding.remove(&e.n) {
                        self.hold(key, since, e.at);
                    }
                }
            }
        }
        if let Some(death) = &life.death {
            out.kills += 1;
            if !(waiting.is_empty() && holding.is_empty()) {
                out.kills_busy += 1;
            }
            if !death.leases.is_empty() {
                out.kills_holding += 1;
            }
            for &(key, until) in &death.leases {
                self.hold(key, death.at, until.min(end));
                self.dead_leases.push((key, death.at, until.min(end)));
            }
        }
        // Still waiting or holding at the end of the run, or when the process died.
        for (key, since) in waiting.into_values() {
            self.wait(key, since, stop);
        }
        for (key, since) in holding.into_values() {
            self.hold(key, since, stop);
        }
    }
}

/// The lengths of the maximal intervals that `waits` cover and `holds` do not.
fn takeable(holds: &[(u64, u64)], waits: &[(u64, u64)]) -> Vec<u64> {
    // (time, change in holds, change in waits)
    let mut edges: Vec<(u64, i64, i64)> = holds
        .iter()
        .flat_map(|&(from, to)| [(from, 1, 0), (to, -1, 0)])
        .chain(
            waits
                .iter()
                .flat_map(|&(from, to)| [(from, 0, 1), (to, 0, -1)]),
        )
        .collect();
    edges.sort_unstable();
    let (mut held, mut waited) = (0i64, 0i64);
    let mut since: Option<u64> = None;
    let mut out = Vec::new();
    let mut edges = edges.into_iter().peekable();
    while let Some((at, hold, wait)) = edges.next() {
        held += hold;
        waited += wait;
        // Judge the state once every edge at this instant is applied.
        if edges.peek().is_some_and(|next| next.0 == at) {
            continue;
        }
        match (since, held == 0 && waited > 0) {
            (None, true) => since = Some(at),
            (Some(from), false) => {
                out.push(at - from);
                since = None;
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(at: u64, n: u64, what: What) -> Event {
        Event {
            at,
            n,
            key: 0,
            what,
        }
    }

    #[test]
    fn a_free_lock_while_a_task_waits_is_takeable() {
        // Call 1 holds 0..100; call 2 waits from 50, gets it at 130 (30 free while it
        // waited), holds until 200; call 3 waits 210..260 and times out with nobody
        // holding: 50 more.
        let life = Life {
            events: vec![
                ev(0, 1, What::Asked),
                ev(0, 1, What::Acquired),
                ev(50, 2, What::Asked),
                ev(100, 1, What::Released),
                ev(130, 2, What::Acquired),
                ev(200, 2, What::Released),
                ev(210, 3, What::Asked),
                ev(260, 3, What::TimedOut),
            ],
            death: None,
        };
        let t = analyze(&[life], 1_000);
        assert_eq!(t.takeable, [50, 30]);
        assert_eq!(t.waits, [0, 80]);
        assert_eq!((t.timed_out, t.cancelled), (1, 0));
    }

    #[test]
    fn cancelled_waits_do_not_count_and_other_processes_do() {
        // Process A holds 0..100 and 150..300; process B's call waits 50..200 but is
        // cancelled; process C waits 120..150: the lock was free 120..150 for C only.
        let a = Life {
            events: vec![
                ev(0, 1, What::Asked),
                ev(0, 1, What::Acquired),
                ev(100, 1, What::Released),
                ev(150, 2, What::Asked),
                ev(150, 2, What::Acquired),
                ev(300, 2, What::Released),
            ],
            death: None,
        };
        let b = Life {
            events: vec![ev(50, 1, What::Asked), ev(200, 1, What::Cancelled)],
            death: None,
        };
        let c = Life {
            events: vec![ev(120, 1, What::Asked), ev(150, 1, What::Acquired)],
            death: None,
        };
        let t = analyze(&[a, b, c], 1_000);
        assert_eq!(t.takeable, [30]);
        assert_eq!(t.cancelled, 1);
    }

    #[test]
    fn a_killed_process_keeps_its_lease_and_stops_waiting() {
        // The victim holds key 0 from 10 and waits for key 1 from 20; it dies at 100 with
        // its hold of key 0 leased until 400. A survivor waits for key 0 from 50 and for
        // key 1 from 60, both until the end (1,000), and nobody else holds either.
        let victim = Life {
            events: vec![
                ev(10, 1, What::Asked),
                ev(10, 1, What::Acquired),
                Event {
                    key: 1,
                    ..ev(20, 2, What::Asked)
                },
            ],
            death: Some(Death {
                at: 100,
                leases: vec![(0, 400)],
            }),
        };
        let survivor = Life {
            events: vec![
                ev(50, 1, What::Asked),
                Event {
                    key: 1,
                    ..ev(60, 2, What::Asked)
                },
            ],
            death: None,
        };
        let t = analyze(&[victim, survivor], 1_000);
        // Key 0: free 400..1,000; key 1: nobody ever held it, 20..1,000.
        assert_eq!(t.takeable, [980, 600]);
        assert_eq!((t.kills, t.kills_busy, t.kills_holding), (1, 1, 1));
    }

    #[test]
    fn a_wait_behind_a_killed_holder_s_lease_is_not_clear() {
        // The victim holds key 0 and dies at 100, leased until 400. One survivor's call
        // waits 50..420 (behind the lease), another's 500..510 (after it).
        let victim = Life {
            events: vec![ev(10, 1, What::Asked), ev(10, 1, What::Acquired)],
            death: Some(Death {
                at: 100,
                leases: vec![(0, 400)],
            }),
        };
        let survivor = Life {
            events: vec![
                ev(50, 1, What::Asked),
                ev(420, 1, What::Acquired),
                ev(430, 1, What::Released),
                ev(500, 2, What::Asked),
                ev(510, 2, What::Acquired),
                ev(520, 2, What::Released),
            ],
            death: None,
        };
        let t = analyze(&[victim, survivor], 1_000);
        // The victim's own acquisition (no wait) came before its death.
        assert_eq!(t.waits, [0, 10, 370]);
        assert_eq!(t.waits_clear, [0, 10]);
    }

    #[test]
    fn events_after_the_end_are_left_out() {
        let life = Life {
            events: vec![
                ev(10, 1, What::Asked),
                ev(90, 1, What::Acquired),
                ev(150, 1, What::Released),
                ev(200, 2, What::Asked),
            ],
            death: None,
        };
        let t = analyze(&[life], 100);
        assert_eq!(t.takeable, [80]);
        assert_eq!(t.waits, [80]);
    }
}
