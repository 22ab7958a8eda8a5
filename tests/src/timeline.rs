//! Liveness and exclusion checked from the outside: every client (in the test process or
//! in a worker process) records what it asked for and what it got on one clock
//! (`CLOCK_MONOTONIC`, shared by every process of the machine, as in [`crate::overlap`]),
//! and [`Report::analyze`] merges the records and finds
//!
//! - every interval during which a lock was *takeable* (no live holder could be keeping
//!   it, by a conservative reckoning) while some client was waiting for it, and
//! - every pair of holds that excluded each other but overlapped.
//!
//! A record is one text line, `<ns> <who> <event> [fields]` (see [`Event`]), so that a
//! worker process can append its records to a file with one `write(2)` each, and lose at
//! most the line it was writing when it is killed with `SIGKILL`.
//!
//! # How holds are reckoned
//!
//! The reckoning errs on the side of "held" for liveness and on the side of "not held"
//! for exclusion, so that neither check can fire on a measurement artefact:
//!
//! - **Liveness** (what keeps a lock *busy*): a hold counts from the moment its acquirer
//!   saw the reply until the end of its release call (or the drop of its guard), cut at
//!   `acquired + lease` for an explicit lease (Redis expired it by then), stretched to the
//!   end of a `min_hold`, and cut at the end of a force unlock that started after the
//!   hold was seen. A process killed while holding keeps its holds until their leases
//!   end; one killed while waiting may have taken the lock with a reply it never read: a
//!   *phantom* hold from [`PHANTOM_WINDOW`] before the kill until the lease after it.
//! - **Exclusion** (what a holder was surely inside): from the reply to the *start* of the
//!   release call, cut at the guard's local deadline for an explicit lease and at the start
//!   of any force unlock that may have run after the hold's acquisition began.
//!
//! ```
//! use dlock_tests::timeline::{parse, Report};
//!
//! // `a` waits from 0 while `b` holds the lock until 100; the lock then sits free until
//! // `a` gets it at 900: free for 800 ms while `a` waited.
//! let text = "\
//! 0 b#0 wait lock k x -
//! 0 b#0 acquired -
//! 0 a#0 wait lock k x -
//! 100000000 b#0 release
//! 100000000 b#0 released
//! 900000000 a#0 acquired -
//! 950000000 a#0 release
//! 950000000 a#0 released
//! ";
//! let events = parse("records", text).unwrap();
//! let report = Report::analyze(&events, 0, std::time::Duration::from_millis(250));
//! assert_eq!(report.stalls.len(), 1);
//! assert_eq!(report.stalls[0].length(), std::time::Duration::from_millis(800));
//! assert!(report.overlaps.is_empty());
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

/// How far before a kill a waiting process may have taken a lock whose reply it never
/// read. A reply is read and recorded within a round trip plus a scheduling delay (a few
/// ms); a hold taken earlier would have been recorded as acquired.
pub const PHANTOM_WINDOW: Duration = Duration::from_millis(50);

/// The monotonic clock in nanoseconds: one clock for every process on the machine, unlike
/// `Instant`, which cannot be compared across processes.
pub fn monotonic_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // CLOCK_MONOTONIC counts from boot: never negative.
    u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(now.tv_nsec).unwrap_or(0)
}

/// `at` on the [`monotonic_ns`] clock. `std::time::Instant` is `CLOCK_MONOTONIC` on
/// Linux, but its value is opaque: this measures the distance to now on both clocks.
pub fn instant_ns(at: std::time::Instant) -> u64 {
    let (now, now_ns) = (std::time::Instant::now(), monotonic_ns());
    if at >= now {
        now_ns + duration_ns(at - now)
    } else {
        now_ns.saturating_sub(duration_ns(now - at))
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// What an acquisition asks of each of its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Need {
    /// The whole lock: a reentrant, fair or multi-lock, or the write side of a
    /// read-write lock. Written `x`.
    Exclusive,
    /// The read side of a read-write lock. Written `s`.
    Shared,
    /// `n` permits of a semaphore of capacity `of`. Written `p<n>/<of>`.
    Permits {
        /// Permits asked for.
        n: u32,
        /// The semaphore's capacity.
        of: u32,
    },
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Need::Exclusive => f.write_str("x"),
            Need::Shared => f.write_str("s"),
            Need::Permits { n, of } => write!(f, "p{n}/{of}"),
        }
    }
}

impl std::str::FromStr for Need {
    type Err = String;

    fn from_str(s: &str) -> Result<Need, String> {
        match s {
            "x" => Ok(Need::Exclusive),
            "s" => Ok(Need::Shared),
            _ => {
                let (n, of) = s
                    .strip_prefix('p')
                    .and_then(|rest| rest.split_once('/'))
                    .ok_or_else(|| format!("a need is x, s or p<n>/<of>, got {s:?}"))?;
                let n = n.parse().map_err(|_| format!("bad permits in {s:?}"))?;
                let of = of.parse().map_err(|_| format!("bad capacity in {s:?}"))?;
                Ok(Need::Permits { n, of })
            }
        }
    }
}

/// What happened, to one acquisition (`who`, e.g. `c1.t0#17`: client 1, task 0, its
/// 17th operation; or `w3#5`: worker process 3, its 5th) or, for force unlocks and kills,
/// to the lock of a third party.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    /// An acquisition began waiting: `wait <op> <key,key> <need> <lease ms|->`. `op` is
    /// a free-form name for reports (`lock`, `try_for`, `retry`...). A retry loop is one
    /// wait: the client waits from its first try to its last.
    Wait {
        /// How it waits, for reports.
        op: String,
        /// The keys it takes, all at once (more than one: a multi-lock).
        keys: Vec<String>,
        /// What it takes of each key.
        need: Need,
        /// Its explicit lease, if any.
        lease_ms: Option<u64>,
    },
    /// The wait ended without the lock (timeout, cancellation, error): `gaveup`.
    GaveUp,
    /// The wait ended with the lock, recorded right after the reply was seen:
    /// `acquired <deadline ns|->`, the guard's local deadline for an explicit lease.
    Acquired {
        /// `LockGuard::deadline` on the monotonic clock, for explicit leases.
        deadline_ns: Option<u64>,
    },
    /// The release call began, or the guard is about to be dropped: `release`. From here
    /// the lock may be free; the earliest of several counts.
    ReleaseStart,
    /// The release call returned (whatever it returned): `released`.
    Released,
    /// The guard was dropped without a release call (released in the background):
    /// `dropped`.
    Dropped,
    /// The lock stays taken until this instant after the hold ended (`min_hold`):
    /// `until <ns>`.
    HeldUntil {
        /// When the minimum hold ends, at the latest.
        until_ns: u64,
    },
    /// A force unlock of `key` began: `force <key>`.
    ForceStart {
        /// The key.
        key: String,
    },
    /// The force unlock of `key` returned: `forced <key>`.
    ForceEnd {
        /// The key.
        key: String,
    },
    /// Process `process` (the prefix of its acquisitions' `who` before `#`) was sent
    /// `SIGKILL` at this event's time and reaped at `after_ns`: `killed <process>
    /// <after ns>`.
    Killed {
        /// The process's name in `who`.
        process: String,
        /// When it was reaped.
        after_ns: u64,
    },
}

/// One record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Monotonic clock, ns.
    pub at_ns: u64,
    /// Which acquisition (or which third party) it is about.
    pub who: String,
    /// What happened.
    pub what: What,
}

fn opt_ns(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// The record format: one line, without a newline.
impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} ", self.at_ns, self.who)?;
        match &self.what {
            What::Wait {
                op,
                keys,
                need,
                lease_ms,
            } => write!(
                f,
                "wait {op} {} {need} {}",
                keys.join(","),
                opt_ns(*lease_ms)
            ),
            What::GaveUp => f.write_str("gaveup"),
            What::Acquired { deadline_ns } => write!(f, "acquired {}", opt_ns(*deadline_ns)),
            What::ReleaseStart => f.write_str("release"),
            What::Released => f.write_str("released"),
            What::Dropped => f.write_str("dropped"),
            What::HeldUntil { until_ns } => write!(f, "until {until_ns}"),
            What::ForceStart { key } => write!(f, "force {key}"),
            What::ForceEnd { key } => write!(f, "forced {key}"),
            What::Killed { process, after_ns } => write!(f, "killed {process} {after_ns}"),
        }
    }
}

fn parse_line(line: &str) -> Result<Event, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let number = |word: &str| -> Result<u64, String> {
        word.parse()
            .map_err(|_| format!("expected a number, got {word:?}"))
    };
    let optional = |word: &str| -> Result<Option<u64>, String> {
        if word == "-" {
            Ok(None)
        } else {
            number(word).map(Some)
        }
    };
    let (at, who, event, fields) = match words.as_slice() {
        [at, who, event, fields @ ..] => (number(at)?, (*who).to_owned(), *event, fields),
        _ => return Err("expected `<ns> <who> <event> ...`".to_owned()),
    };
    let what = match (event, fields) {
        ("wait", [op, keys, need, lease]) => What::Wait {
            op: (*op).to_owned(),
            keys: keys.split(',').map(str::to_owned).collect(),
            need: need.parse()?,
            lease_ms: optional(lease)?,
        },
        ("gaveup", []) => What::GaveUp,
        ("acquired", [deadline]) => What::Acquired {
            deadline_ns: optional(deadline)?,
        },
        ("release", []) => What::ReleaseStart,
        ("released", []) => What::Released,
        ("dropped", []) => What::Dropped,
        ("until", [until]) => What::HeldUntil {
            until_ns: number(until)?,
        },
        ("force", [key]) => What::ForceStart {
            key: (*key).to_owned(),
        },
        ("forced", [key]) => What::ForceEnd {
            key: (*key).to_owned(),
        },
        ("killed", [process, after]) => What::Killed {
            process: (*process).to_owned(),
            after_ns: number(after)?,
        },
        _ => return Err(format!("unknown event or wrong fields: {line:?}")),
    };
    Ok(Event {
        at_ns: at,
        who,
        what,
    })
}

/// The records in `text`, from `file` (named in errors). Blank lines are skipped, and so
/// is a malformed *last* line: the one a killed process was writing.
///
/// # Errors
///
/// `<file>:<line>: <what is wrong>` for a malformed line before the last.
pub fn parse(file: &str, text: &str) -> Result<Vec<Event>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut events = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse_line(line) {
            Ok(event) => events.push(event),
            Err(_) if index + 1 == lines.len() && !text.ends_with('\n') => {}
            Err(e) => return Err(format!("{file}:{}: {e}", index + 1)),
        }
    }
    Ok(events)
}

/// The records of the file at `path` (see [`parse`]); a file that does not exist holds
/// none (a worker killed before it wrote anything).
///
/// # Errors
///
/// An unreadable file or a malformed line.
pub fn read_file(path: &Path) -> Result<Vec<Event>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&path.display().to_string(), &text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Somewhere records go.
pub trait Record: Send + Sync {
    /// Records `what` about `who` at `at_ns`.
    fn record_at(&self, at_ns: u64, who: &str, what: What);

    /// Records `what` about `who` now.
    fn record(&self, who: &str, what: What) {
        self.record_at(monotonic_ns(), who, what);
    }
}

/// Records kept in memory, for the clients of the test process.
#[derive(Debug, Default)]
pub struct Timeline {
    events: Mutex<Vec<Event>>,
}

impl Timeline {
    /// An empty timeline.
    pub fn new() -> Timeline {
        Timeline::default()
    }

    /// The records so far.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Record for Timeline {
    fn record_at(&self, at_ns: u64, who: &str, what: What) {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Event {
                at_ns,
                who: who.to_owned(),
                what,
            });
    }
}

/// Records appended to a file, one `write(2)` per line and no buffer, so that a process
/// killed with `SIGKILL` loses nothing it recorded before.
#[derive(Debug)]
pub struct RecordFile {
    file: std::fs::File,
}

impl RecordFile {
    /// Appends to (creates) the file at `path`.
    ///
    /// # Errors
    ///
    /// When the file cannot be opened.
    pub fn create(path: &Path) -> std::io::Result<RecordFile> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(RecordFile { file })
    }
}

impl Record for RecordFile {
    fn record_at(&self, at_ns: u64, who: &str, what: What) {
        let line = format!(
            "{}\n",
            Event {
                at_ns,
                who: who.to_owned(),
                what
            }
        );
        // A record that cannot be written is a broken test setup: say so loudly.
        (&self.file)
            .write_all(line.as_bytes())
            .expect("writing a timeline record");
    }
}

/// A half-open interval of the monotonic clock, `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Span {
    /// ns.
    pub start: u64,
    /// ns, not before `start`.
    pub end: u64,
}

impl Span {
    fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }
}

/// Sorted, disjoint, non-empty spans covering the same time as `spans`.
fn union(mut spans: Vec<Span>) -> Vec<Span> {
    spans.retain(|s| s.end > s.start);
    spans.sort();
    let mut out: Vec<Span> = Vec::new();
    for s in spans {
        match out.last_mut() {
            Some(last) if s.start <= last.end => last.end = last.end.max(s.end),
            _ => out.push(s),
        }
    }
    out
}

/// The parts of `within` outside the sorted, disjoint `busy`.
fn subtract(within: Span, busy: &[Span]) -> Vec<Span> {
    let mut out = Vec::new();
    let mut from = within.start;
    for b in busy {
        if b.end <= from {
            continue;
        }
        if b.start >= within.end {
            break;
        }
        if b.start > from {
            out.push(Span {
                start: from,
                end: b.start,
            });
        }
        from = from.max(b.end);
        if from >= within.end {
            break;
        }
    }
    if from < within.end {
        out.push(Span {
            start: from,
            end: within.end,
        });
    }
    out
}

/// One acquisition's wait.
#[derive(Debug, Clone)]
struct WaitRec {
    who: String,
    op: String,
    keys: Vec<String>,
    need: Need,
    lease_ms: Option<u64>,
    start: u64,
    end: Option<u64>,
    /// How it ended, for reports.
    outcome: &'static str,
}

/// One hold of one key.
#[derive(Debug, Clone)]
struct HoldRec {
    who: String,
    key: String,
    need: Need,
    /// When its acquisition began waiting.
    wait_start: u64,
    /// When its reply was seen (for a phantom: the earliest it could have been taken).
    start: u64,
    lease_ms: Option<u64>,
    deadline_ns: Option<u64>,
    release_start: Option<u64>,
    /// End of the release call or drop of the guard.
    end: Option<u64>,
    until_ns: Option<u64>,
    /// A process killed while holding or waiting: the hold lasts its lease from here.
    killed_after: Option<u64>,
    phantom: bool,
    how_ended: &'static str,
}

impl HoldRec {
    /// The liveness interval and how it ended (see the module docs).
    fn busy(&self, forces: &[(u64, u64)], horizon: u64) -> (Span, String) {
        let lease = self.lease_ms.map(|ms| ms * 1_000_000);
        let (mut end, mut how) = match (self.end, self.killed_after) {
            (Some(end), _) => (end, self.how_ended.to_owned()),
            (None, Some(after)) if self.phantom => (
                lease.map_or(horizon, |lease| after + lease),
                "phantom (killed while waiting) until its lease".to_owned(),
            ),
            (None, Some(_)) => (u64::MAX / 2, "killed while holding".to_owned()),
            (None, None) => (horizon, "still held at the end".to_owned()),
        };
        if let Some(lease) = lease {
            let expiry = self.start.saturating_add(lease);
            if expiry < end && !self.phantom {
                end = expiry;
                how = "lease ran out".to_owned();
            }
        }
        if end == u64::MAX / 2 {
            end = horizon;
        }
        if let Some(until) = self.until_ns
            && until > end
        {
            end = until;
            how = "min_hold ended".to_owned();
        }
        if !self.phantom {
            // A force unlock that started after the hold was seen deleted it by its end.
            if let Some(&(_, forced)) = forces
                .iter()
                .filter(|(fs, fe)| *fs >= self.start && *fe < end)
                .min_by_key(|(_, fe)| *fe)
            {
                end = forced;
                how = "force-unlocked".to_owned();
            }
        }
        (
            Span {
                start: self.start,
                end: end.max(self.start),
            },
            how,
        )
    }

    /// The exclusion interval: surely held in Redis throughout.
    fn inside(&self, forces: &[(u64, u64)]) -> Option<Span> {
        if self.phantom {
            return None;
        }
        // Killed while holding: inside until its lease ran out.
        let killed = self.killed_after.and(self.deadline_ns);
        let mut end = self.release_start.or(self.end).or(killed)?;
        if let Some(deadline) = self.deadline_ns {
            end = end.min(deadline);
        }
        // Any force unlock that may have run after the acquisition's script.
        if let Some(fs) = forces
            .iter()
            .filter(|(_, fe)| *fe >= self.wait_start)
            .map(|(fs, _)| *fs)
            .min()
        {
            end = end.min(fs);
        }
        (end > self.start).then_some(Span {
            start: self.start,
            end,
        })
    }
}

/// An interval during which a lock was takeable while someone waited for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    /// What the waiters wanted: the keys (joined by `+`) and, for a semaphore, the
    /// permits.
    pub wanted: String,
    /// When it began (ns).
    pub start_ns: u64,
    /// When it ended (ns): someone took the lock, or the last waiter stopped waiting.
    pub end_ns: u64,
    /// The waiters, with when they waited and how their wait ended.
    pub waiters: Vec<String>,
    /// How the lock became free: the last hold that ended before the stall, per key.
    pub freed_by: Vec<String>,
    /// What ended it.
    pub ended_by: String,
}

impl Stall {
    /// How long the lock was takeable.
    pub fn length(&self) -> Duration {
        Duration::from_nanos(self.end_ns - self.start_ns)
    }
}

/// Two holds that should have excluded each other, inside at the same time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The key.
    pub key: String,
    /// The holders (two for a lock; every holder for a semaphore over its capacity).
    pub holders: Vec<String>,
    /// When the overlap began (ns).
    pub start_ns: u64,
    /// How long it lasted.
    pub length: Duration,
}

/// What the merged records of one run show.
#[derive(Debug, Clone)]
pub struct Report {
    /// The run's start, for relative times in the display.
    pub origin_ns: u64,
    /// The bound: stalls longer than it.
    pub bound: Duration,
    /// Every stall longer than `bound`, longest first.
    pub stalls: Vec<Stall>,
    /// The longest stall within the bound, for calibration.
    pub longest_within: Duration,
    /// How many takeable intervals (of any length) there were.
    pub takeable_intervals: usize,
    /// Overlapping exclusive holds.
    pub overlaps: Vec<Overlap>,
    /// Holds whose exclusion interval was checked against the others (the rest were
    /// cut to nothing by a force unlock that may have hit them, or were phantoms).
    pub inside_checked: usize,
    /// Waits, holds and kills recorded.
    pub waits: usize,
    /// Holds recorded (one per key of a multi-lock).
    pub holds: usize,
    /// Processes killed.
    pub kills: usize,
    /// Records that do not fit (an acquisition that acquired twice, say): a broken
    /// recorder, listed so that it is not mistaken for a lock bug.
    pub anomalies: Vec<String>,
}

impl Report {
    /// Analyzes the records of one run (in any order) that began at `origin_ns`; stalls
    /// longer than `bound` are listed.
    pub fn analyze(events: &[Event], origin_ns: u64, bound: Duration) -> Report {
        let mut events = events.to_vec();
        events.sort_by_key(|e| e.at_ns);
        let horizon = events.last().map_or(origin_ns, |e| e.at_ns);
        let mut anomalies = Vec::new();
        let mut waits: BTreeMap<String, WaitRec> = BTreeMap::new();
        let mut holds: BTreeMap<String, Vec<HoldRec>> = BTreeMap::new();
        let mut force_started: BTreeMap<(String, String), u64> = BTreeMap::new();
        // Per key: (start, end) of every force unlock.
        let mut forces: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
        let mut kills = 0;
        for event in &events {
            let who = &event.who;
            let at = event.at_ns;
            match &event.what {
                What::Wait {
                    op,
                    keys,
                    need,
                    lease_ms,
                } => {
                    if waits.contains_key(who) || holds.contains_key(who) {
                        anomalies.push(format!("{who} waits twice"));
                        continue;
                    }
                    waits.insert(
                        who.clone(),
                        WaitRec {
                            who: who.clone(),
                            op: op.clone(),
                            keys: keys.clone(),
                            need: *need,
                            lease_ms: *lease_ms,
                            start: at,
                            end: None,
                            outcome: "",
                        },
                    );
                }
                What::GaveUp | What::Acquired { .. } => {
                    let Some(wait) = waits.get_mut(who).filter(|w| w.end.is_none()) else {
                        anomalies.push(format!("{who}: {} without a wait", event.what_name()));
                        continue;
                    };
                    wait.end = Some(at);
                    if let What::Acquired { deadline_ns } = event.what {
                        wait.outcome = "acquired";
                        let hold = |key: &String| HoldRec {
                            who: who.clone(),
                            key: key.clone(),
                            need: wait.need,
                            wait_start: wait.start,
                            start: at,
                            lease_ms: wait.lease_ms,
                            deadline_ns,
                            release_start: None,
                            end: None,
                            until_ns: None,
                            killed_after: None,
                            phantom: false,
                            how_ended: "",
                        };
                        holds.insert(who.clone(), wait.keys.iter().map(hold).collect());
                    } else {
                        wait.outcome = "gave up";
                    }
                }
                What::ReleaseStart | What::Released | What::Dropped | What::HeldUntil { .. } => {
                    let Some(each) = holds.get_mut(who) else {
                        anomalies.push(format!("{who}: {} without a hold", event.what_name()));
                        continue;
                    };
                    for hold in each {
                        match event.what {
                            // The earliest counts: a task aborted while it released
                            // is recorded again by whoever aborted it.
                            What::ReleaseStart => {
                                hold.release_start.get_or_insert(at);
                            }
                            What::Released | What::Dropped if hold.end.is_none() => {
                                hold.end = Some(at);
                                hold.how_ended = if event.what == What::Released {
                                    "released"
                                } else {
                                    "dropped"
                                };
                            }
                            What::HeldUntil { until_ns } => hold.until_ns = Some(until_ns),
                            _ => anomalies.push(format!("{who}: ended twice")),
                        }
                    }
                }
                What::ForceStart { key } => {
                    force_started.insert((who.clone(), key.clone()), at);
                }
                What::ForceEnd { key } => match force_started.remove(&(who.clone(), key.clone())) {
                    Some(start) => forces.entry(key.clone()).or_default().push((start, at)),
                    None => anomalies.push(format!("{who}: forced {key} without force")),
                },
                What::Killed { process, after_ns } => {
                    kills += 1;
                    let mine = |w: &str| w.split('#').next() == Some(process.as_str());
                    for wait in waits
                        .values_mut()
                        .filter(|w| mine(&w.who) && w.end.is_none())
                    {
                        wait.end = Some(at);
                        wait.outcome = "killed";
                        let phantom = |key: &String| HoldRec {
                            who: wait.who.clone(),
                            key: key.clone(),
                            need: wait.need,
                            wait_start: wait.start,
                            start: wait
                                .start
                                .max(at.saturating_sub(duration_ns(PHANTOM_WINDOW))),
                            lease_ms: wait.lease_ms,
                            deadline_ns: None,
                            release_start: None,
                            end: None,
                            until_ns: None,
                            killed_after: Some(*after_ns),
                            phantom: true,
                            how_ended: "",
                        };
                        holds.insert(wait.who.clone(), wait.keys.iter().map(phantom).collect());
                    }
                    for hold in holds
                        .values_mut()
                        .flatten()
                        .filter(|h| mine(&h.who) && h.end.is_none())
                    {
                        hold.killed_after = Some(*after_ns);
                    }
                }
            }
        }
        for wait in waits.values_mut().filter(|w| w.end.is_none()) {
            anomalies.push(format!("{}: still waiting at the end", wait.who));
            wait.end = Some(horizon);
            wait.outcome = "still waiting";
        }
        for (who, key) in force_started.keys() {
            anomalies.push(format!("{who}: force of {key} never returned"));
        }

        // Per key: each hold's liveness span and exclusion span.
        let no_forces = Vec::new();
        let mut busy: BTreeMap<&str, Vec<(Span, &HoldRec, String)>> = BTreeMap::new();
        let mut inside: BTreeMap<&str, Vec<(Span, &HoldRec)>> = BTreeMap::new();
        let hold_count = holds.values().map(Vec::len).sum();
        for hold in holds.values().flatten() {
            let key_forces = forces.get(&hold.key).unwrap_or(&no_forces);
            let (span, how) = hold.busy(key_forces, horizon);
            busy.entry(&hold.key).or_default().push((span, hold, how));
            if let Some(span) = hold.inside(key_forces) {
                inside.entry(&hold.key).or_default().push((span, hold));
            }
        }

        let overlaps = overlaps(&inside);
        let inside_checked = inside.values().map(Vec::len).sum();

        // Busy time of each key for a waiter that needs `need`.
        let busy_for = |key: &str, need: Need| -> Vec<Span> {
            let Some(spans) = busy.get(key) else {
                return Vec::new();
            };
            match need {
                Need::Permits { n, of } => over_capacity(spans, of.saturating_sub(n)),
                // Reentrant, fair, multi and write holds exclude everyone; for the
                // read-write lock, a reader counts only an idle lock as takeable (a
                // waiting writer may rightly hold readers back), so every hold is busy.
                Need::Exclusive | Need::Shared => union(spans.iter().map(|s| s.0).collect()),
            }
        };

        // Takeable spans per wanted set, with the waiter each belongs to.
        let mut takeable: BTreeMap<String, Vec<(Span, &WaitRec)>> = BTreeMap::new();
        let mut cache: BTreeMap<(String, Need), Vec<Span>> = BTreeMap::new();
        for wait in waits.values() {
            let end = wait.end.unwrap_or(horizon);
            let mut keys = wait.keys.clone();
            keys.sort();
            let permits = match wait.need {
                Need::Permits { n, .. } => format!(" ({n} permits)"),
                _ => String::new(),
            };
            let wanted = format!("{}{permits}", keys.join("+"));
            let class = match wait.need {
                Need::Shared => Need::Exclusive,
                other => other,
            };
            let busy_all = cache
                .entry((keys.join("+"), class))
                .or_insert_with(|| union(keys.iter().flat_map(|k| busy_for(k, class)).collect()))
                .clone();
            for span in subtract(
                Span {
                    start: wait.start,
                    end,
                },
                &busy_all,
            ) {
                takeable
                    .entry(wanted.clone())
                    .or_default()
                    .push((span, wait));
            }
        }

        let mut stalls = Vec::new();
        let mut longest_within = 0;
        let mut takeable_intervals = 0;
        let bound_ns = duration_ns(bound);
        for (wanted, mut spans) in takeable {
            spans.sort_by_key(|(s, _)| *s);
            let mut merged: Vec<(Span, Vec<&WaitRec>)> = Vec::new();
            for (span, wait) in spans {
                match merged.last_mut() {
                    Some((last, who)) if span.start <= last.end => {
                        last.end = last.end.max(span.end);
                        who.push(wait);
                    }
                    _ => merged.push((span, vec![wait])),
                }
            }
            for (span, who) in merged {
                takeable_intervals += 1;
                if span.len() <= bound_ns {
                    longest_within = longest_within.max(span.len());
                    continue;
                }
                let keys: BTreeSet<&str> = who
                    .iter()
                    .flat_map(|w| w.keys.iter().map(String::as_str))
                    .collect();
                let describe = |w: &WaitRec| {
                    format!(
                        "{} {} {} from {} to {} ({})",
                        w.who,
                        w.op,
                        w.need,
                        rel(w.start, origin_ns),
                        rel(w.end.unwrap_or(horizon), origin_ns),
                        w.outcome
                    )
                };
                let mut waiters: Vec<String> = who.iter().map(|w| describe(w)).collect();
                waiters.dedup();
                let freed_by = keys
                    .iter()
                    .filter_map(|key| {
                        busy.get(key)?
                            .iter()
                            .filter(|(s, _, _)| s.end <= span.start)
                            .max_by_key(|(s, _, _)| s.end)
                            .map(|(s, hold, how)| {
                                format!("{key}: {} {} at {}", hold.who, how, rel(s.end, origin_ns))
                            })
                    })
                    .collect();
                let taker = keys.iter().find_map(|key| {
                    busy.get(key)?
                        .iter()
                        .find(|(s, _, _)| s.start == span.end)
                        .map(|(_, hold, _)| format!("{} took {key}", hold.who))
                });
                let ended_by = taker.unwrap_or_else(|| "every waiter stopped waiting".to_owned());
                stalls.push(Stall {
                    wanted: wanted.clone(),
                    start_ns: span.start,
                    end_ns: span.end,
                    waiters,
                    freed_by,
                    ended_by,
                });
            }
        }
        stalls.sort_by_key(|s| std::cmp::Reverse(s.end_ns - s.start_ns));
        Report {
            origin_ns,
            bound,
            stalls,
            longest_within: Duration::from_nanos(longest_within),
            takeable_intervals,
            overlaps,
            inside_checked,
            waits: waits.len(),
            holds: hold_count,
            kills,
            anomalies,
        }
    }

    /// No stall over the bound, no overlap, no anomaly.
    pub fn is_clean(&self) -> bool {
        self.stalls.is_empty() && self.overlaps.is_empty() && self.anomalies.is_empty()
    }
}

impl Event {
    fn what_name(&self) -> &'static str {
        match self.what {
            What::Wait { .. } => "wait",
            What::GaveUp => "gaveup",
            What::Acquired { .. } => "acquired",
            What::ReleaseStart => "release",
            What::Released => "released",
            What::Dropped => "dropped",
            What::HeldUntil { .. } => "until",
            What::ForceStart { .. } => "force",
            What::ForceEnd { .. } => "forced",
            What::Killed { .. } => "killed",
        }
    }
}

/// Where the held permits exceed `free_below`: busy for a waiter needing the rest.
fn over_capacity(spans: &[(Span, &HoldRec, String)], free_below: u32) -> Vec<Span> {
    let mut points: Vec<(u64, i64)> = Vec::new();
    for (span, hold, _) in spans {
        let n = match hold.need {
            Need::Permits { n, .. } => i64::from(n),
            _ => 1,
        };
        points.push((span.start, n));
        points.push((span.end, -n));
    }
    // Ends before starts at the same instant: back-to-back grants do not add up.
    points.sort_by_key(|&(at, delta)| (at, delta));
    let mut out = Vec::new();
    let mut held = 0i64;
    let mut since = None;
    for (at, delta) in points {
        held += delta;
        let over = held > i64::from(free_below);
        match (over, since) {
            (true, None) => since = Some(at),
            (false, Some(start)) => {
                out.push(Span { start, end: at });
                since = None;
            }
            _ => {}
        }
    }
    union(out)
}

/// Holds that were inside together although their needs exclude each other.
fn overlaps(inside: &BTreeMap<&str, Vec<(Span, &HoldRec)>>) -> Vec<Overlap> {
    let mut found = Vec::new();
    for (key, spans) in inside {
        let mut spans = spans.clone();
        spans.sort_by_key(|(s, _)| *s);
        if let Some(Need::Permits { of, .. }) = spans.first().map(|(_, h)| h.need) {
            // A semaphore: the permits held at once never exceed the capacity.
            let mut points: Vec<(u64, i64, &str)> = Vec::new();
            for (span, hold) in &spans {
                let n = match hold.need {
                    Need::Permits { n, .. } => i64::from(n),
                    _ => 1,
                };
                points.push((span.start, n, &hold.who));
                points.push((span.end, -n, &hold.who));
            }
            points.sort_by_key(|&(at, delta, _)| (at, delta));
            let mut held = 0i64;
            let mut holders: Vec<&str> = Vec::new();
            for (at, delta, who) in points {
                held += delta;
                if delta > 0 {
                    holders.push(who);
                } else {
                    holders.retain(|h| *h != who);
                }
                if held > i64::from(of) {
                    let next_end = spans
                        .iter()
                        .filter(|(s, _)| s.start <= at && s.end > at)
                        .map(|(s, _)| s.end)
                        .min()
                        .unwrap_or(at);
                    found.push(Overlap {
                        key: (*key).to_owned(),
                        holders: holders.iter().map(|h| (*h).to_owned()).collect(),
                        start_ns: at,
                        length: Duration::from_nanos(next_end - at),
                    });
                }
            }
            continue;
        }
        for (i, (a, ha)) in spans.iter().enumerate() {
            for (b, hb) in &spans[i + 1..] {
                if b.start >= a.end {
                    break;
                }
                let shared = ha.need == Need::Shared && hb.need == Need::Shared;
                if shared || ha.who == hb.who {
                    continue;
                }
                found.push(Overlap {
                    key: (*key).to_owned(),
                    holders: vec![ha.who.clone(), hb.who.clone()],
                    start_ns: b.start,
                    length: Duration::from_nanos(a.end.min(b.end) - b.start),
                });
            }
        }
    }
    found
}

/// `at` relative to `origin`, e.g. `+1.234s`.
fn rel(at: u64, origin: u64) -> String {
    if at >= origin {
        format!("+{:.3}s", (at - origin) as f64 / 1e9)
    } else {
        format!("-{:.3}s", (origin - at) as f64 / 1e9)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} waits, {} holds, {} kills; {} takeable intervals while someone waited, {} over {:?} (longest within: {:?}); {} overlaps among {} holds checked",
            self.waits,
            self.holds,
            self.kills,
            self.takeable_intervals,
            self.stalls.len(),
            self.bound,
            self.longest_within,
            self.overlaps.len(),
            self.inside_checked
        )?;
        for stall in &self.stalls {
            writeln!(
                f,
                "  STALL {}: takeable from {} for {:?}, ended: {}",
                stall.wanted,
                rel(stall.start_ns, self.origin_ns),
                stall.length(),
                stall.ended_by
            )?;
            for freed in &stall.freed_by {
                writeln!(f, "      freed by {freed}")?;
            }
            for waiter in &stall.waiters {
                writeln!(f, "      waiting: {waiter}")?;
            }
        }
        for overlap in &self.overlaps {
            writeln!(
                f,
                "  OVERLAP {}: {} inside together from {} for {:?}",
                overlap.key,
                overlap.holders.join(" and "),
                rel(overlap.start_ns, self.origin_ns),
                overlap.length
            )?;
        }
        for anomaly in &self.anomalies {
            writeln!(f, "  ANOMALY (a recording bug, not a lock bug): {anomaly}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn ev(at_ms: u64, who: &str, what: What) -> Event {
        Event {
            at_ns: at_ms * MS,
            who: who.to_owned(),
            what,
        }
    }

    fn wait(key: &str, need: Need, lease_ms: Option<u64>) -> What {
        What::Wait {
            op: "lock".to_owned(),
            keys: key.split('+').map(str::to_owned).collect(),
            need,
            lease_ms,
        }
    }

    fn acquired() -> What {
        What::Acquired { deadline_ns: None }
    }

    fn analyze(events: &[Event]) -> Report {
        Report::analyze(events, 0, Duration::from_millis(250))
    }

    #[test]
    fn records_read_back_as_written() {
        let events = [
            ev(
                1,
                "c0.t1#2",
                wait("{a}:x+{a}:y", Need::Exclusive, Some(300)),
            ),
            ev(
                2,
                "c0.t1#2",
                What::Acquired {
                    deadline_ns: Some(9),
                },
            ),
            ev(3, "w1#0", wait("sem", Need::Permits { n: 2, of: 3 }, None)),
            ev(4, "w1#0", What::GaveUp),
            ev(5, "c0.t1#2", What::HeldUntil { until_ns: 77 }),
            ev(6, "force", What::ForceStart { key: "k".into() }),
            ev(7, "force", What::ForceEnd { key: "k".into() }),
            ev(
                8,
                "killer",
                What::Killed {
                    process: "w1".into(),
                    after_ns: 99,
                },
            ),
            ev(9, "c0.t1#2", What::ReleaseStart),
            ev(10, "c0.t1#2", What::Released),
            ev(11, "c0.t1#3", What::Dropped),
        ];
        let text: String = events.iter().map(|e| format!("{e}\n")).collect();
        assert_eq!(parse("f", &text).unwrap(), events);
        // A torn last line (a killed writer) is skipped; a torn line before it is not.
        assert_eq!(parse("f", "5 a#0 gaveup\n6 a#0 wai").unwrap().len(), 1);
        assert!(parse("f", "6 a#0 wai\n5 a#0 gaveup\n").is_err());
    }

    #[test]
    fn a_prompt_hand_off_is_no_stall() {
        let report = analyze(&[
            ev(0, "a#0", wait("k", Need::Exclusive, None)),
            ev(1, "a#0", acquired()),
            ev(10, "b#0", wait("k", Need::Exclusive, None)),
            ev(500, "a#0", What::Released),
            ev(600, "b#0", acquired()),
            ev(700, "b#0", What::Released),
        ]);
        assert!(report.is_clean(), "{report}");
        assert_eq!(report.longest_within, Duration::from_millis(100));
    }

    #[test]
    fn a_lock_left_free_while_someone_waits_is_a_stall() {
        let report = analyze(&[
            ev(0, "a#0", wait("k", Need::Exclusive, None)),
            ev(1, "a#0", acquired()),
            ev(10, "b#0", wait("k", Need::Exclusive, None)),
            ev(500, "a#0", What::Released),
            ev(2500, "b#0", What::GaveUp),
        ]);
        assert_eq!(report.stalls.len(), 1, "{report}");
        let stall = &report.stalls[0];
        assert_eq!(stall.length(), Duration::from_secs(2));
        assert_eq!(stall.ended_by, "every waiter stopped waiting");
        assert_eq!(stall.freed_by, ["k: a#0 released at +0.500s"]);
        assert!(
            report
                .to_string()
                .contains("STALL k: takeable from +0.500s for 2s"),
            "{report}"
        );
    }

    #[test]
    fn an_explicit_lease_ends_the_hold_and_min_hold_stretches_it() {
        let lease = analyze(&[
            ev(0, "a#0", wait("k", Need::Exclusive, Some(100))),
            ev(0, "a#0", acquired()),
            ev(10, "b#0", wait("k", Need::Exclusive, None)),
            ev(1000, "a#0", What::Dropped),
            ev(1000, "b#0", acquired()),
        ]);
        assert_eq!(lease.stalls.len(), 1, "{lease}");
        assert_eq!(lease.stalls[0].length(), Duration::from_millis(900));
        assert_eq!(
            lease.stalls[0].freed_by,
            ["k: a#0 lease ran out at +0.100s"]
        );
        assert_eq!(lease.stalls[0].ended_by, "b#0 took k");

        let min_hold = analyze(&[
            ev(0, "a#0", wait("k", Need::Exclusive, None)),
            ev(0, "a#0", acquired()),
            ev(10, "b#0", wait("k", Need::Exclusive, None)),
            ev(20, "a#0", What::HeldUntil { until_ns: 900 * MS }),
            ev(20, "a#0", What::Released),
            ev(1000, "b#0", acquired()),
        ]);
        assert!(min_hold.is_clean(), "{min_hold}");
    }

    #[test]
    fn a_force_unlock_after_the_acquisition_frees_the_lock() {
        let report = analyze(&[
            ev(0, "a#0", wait("k", Need::Exclusive, None)),
            ev(0, "a#0", acquired()),
            ev(10, "b#0", wait("k", Need::Exclusive, None)),
            ev(100, "f", What::ForceStart { key: "k".into() }),
            ev(101, "f", What::ForceEnd { key: "k".into() }),
            ev(2000, "b#0", acquired()),
            ev(2100, "a#0", What::Released),
        ]);
        assert_eq!(report.stalls.len(), 1, "{report}");
        assert_eq!(report.stalls[0].length(), Duration::from_millis(1899));
        // `a` believed it held the lock until 2100, but the force ended it: no overlap.
        assert!(report.overlaps.is_empty(), "{report}");
    }

    #[test]
    fn a_killed_process_keeps_its_holds_until_their_lease_and_maybe_the_lock_it_waited_for() {
        let report = analyze(&[
            ev(0, "w1#0", wait("k", Need::Exclusive, Some(400))),
            ev(0, "w1#0", acquired()),
            ev(10, "c#0", wait("k", Need::Exclusive, None)),
            ev(
                100,
                "killer",
                What::Killed {
                    process: "w1".into(),
                    after_ns: 105 * MS,
                },
            ),
            ev(450, "c#0", acquired()),
            ev(460, "c#0", What::Released),
            // Killed while waiting for `j`: it may hold it until 1000 + 500 ms.
            ev(400, "e#0", wait("j", Need::Exclusive, None)),
            ev(400, "e#0", acquired()),
            ev(500, "w2#0", wait("j", Need::Exclusive, Some(500))),
            ev(900, "e#0", What::Released),
            ev(700, "d#0", wait("j", Need::Exclusive, None)),
            ev(
                1000,
                "killer",
                What::Killed {
                    process: "w2".into(),
                    after_ns: 1000 * MS,
                },
            ),
            ev(1600, "d#0", acquired()),
            ev(1700, "d#0", What::Released),
        ]);
        // Free 400..450 (k) and, for `j`, 900..950 (before the phantom window) and
        // 1500..1600: all within the bound.
        assert!(report.is_clean(), "{report}");
        assert_eq!(report.kills, 2);
    }

    #[test]
    fn multi_lock_waiters_wait_for_every_key() {
        let report = analyze(&[
            ev(0, "a#0", wait("x", Need::Exclusive, None)),
            ev(0, "a#0", acquired()),
            ev(10, "m#0", wait("x+y", Need::Exclusive, None)),
            // `y` is free all along, `x` until 1000: the set is takeable from 1000.
            ev(1000, "a#0", What::Released),
            ev(1500, "m#0", What::GaveUp),
        ]);
        assert_eq!(report.stalls.len(), 1, "{report}");
        assert_eq!(report.stalls[0].wanted, "x+y");
        assert_eq!(report.stalls[0].length(), Duration::from_millis(500));
    }

    #[test]
    fn overlapping_exclusive_holds_are_reported_shared_ones_are_not() {
        let report = analyze(&[
            ev(0, "a#0", wait("k", Need::Exclusive, None)),
            ev(0, "a#0", acquired()),
            ev(0, "b#0", wait("k", Need::Exclusive, None)),
            ev(50, "b#0", acquired()),
            ev(100, "a#0", What::ReleaseStart),
            ev(101, "a#0", What::Released),
            ev(200, "b#0", What::Released),
            ev(300, "r#0", wait("rw", Need::Shared, None)),
            ev(300, "r#0", acquired()),
            ev(300, "s#0", wait("rw", Need::Shared, None)),
            ev(310, "s#0", acquired()),
            ev(400, "r#0", What::Released),
            ev(400, "s#0", What::Released),
        ]);
        assert_eq!(report.overlaps.len(), 1, "{report}");
        assert_eq!(report.overlaps[0].length, Duration::from_millis(50));
        assert_eq!(report.overlaps[0].holders, ["a#0", "b#0"]);
    }

    #[test]
    fn semaphores_count_permits() {
        let p = |n| Need::Permits { n, of: 2 };
        let report = analyze(&[
            ev(0, "a#0", wait("s", p(1), None)),
            ev(0, "a#0", acquired()),
            // One permit is free: a waiter for one is stalled, one for two is not.
            ev(10, "b#0", wait("s", p(2), None)),
            ev(10, "c#0", wait("s", p(1), None)),
            ev(1000, "c#0", What::GaveUp),
            ev(1000, "b#0", What::GaveUp),
            ev(1000, "a#0", What::Released),
        ]);
        assert_eq!(report.stalls.len(), 1, "{report}");
        assert_eq!(report.stalls[0].wanted, "s (1 permits)");
        assert!(report.overlaps.is_empty());
    }
}
