//! What the commands print: serializable views of dlock-core's [`LockInfo`] (the JSON
//! output) and their text form.

use std::fmt::Write as _;
use std::time::Duration;

use dlock::inspect::{
    ClientDescription, LockHolder, LockInfo, OwnerHold, Participant, ReadWriteInfo, SemaphoreInfo,
};
use serde::Serialize;

use crate::error::CliError;
use crate::escape::shown_text;

/// One lock, as `inspect` and `list` print it. Fields are only ever added, never
/// renamed: scripts read this JSON.
#[derive(Debug, Serialize)]
pub(crate) struct LockView {
    pub name: String,
    /// `lock`, `fair`, `read_write` or `semaphore`.
    pub kind: &'static str,
    pub key: String,
    pub holders: Vec<HolderView>,
    /// Milliseconds until the lock expires; `null` when nobody holds it.
    pub remaining_lease_ms: Option<u64>,
    pub waiting_clients: Vec<ClientView>,
    /// Tasks waiting in their client's local line (not in Redis' registry), per client.
    pub local_lines: Vec<LocalLineView>,
    pub subscribers: u64,
    pub fair_queue: Vec<ClientView>,
    pub fencing_counter: Option<u64>,
    /// The finished holder whose `min_hold` keeps the lock taken until it expires.
    pub kept_for_min_hold: Option<ClientView>,
    /// A read-write lock's parts; `null` for other kinds.
    pub read_write: Option<ReadWriteView>,
    /// A semaphore's parts; `null` for other kinds.
    pub semaphore: Option<SemaphoreView>,
}

/// A client's tasks waiting in its local line for a lock.
#[derive(Debug, Serialize)]
pub(crate) struct LocalLineView {
    #[serde(flatten)]
    pub client: ClientView,
    pub tasks: u64,
}

/// A read-write lock's mode, readers, writer and waiting writers.
#[derive(Debug, Serialize)]
pub(crate) struct ReadWriteView {
    /// `read` or `write`.
    pub mode: &'static str,
    pub readers: Vec<OwnerHoldView>,
    pub writer: Option<OwnerHoldView>,
    pub waiting_writers: Vec<OwnerHoldView>,
}

/// A semaphore's capacity and grants.
#[derive(Debug, Serialize)]
pub(crate) struct SemaphoreView {
    pub capacity_key: String,
    pub capacity: Option<u64>,
    pub taken: u64,
    pub available: u64,
    pub grants: Vec<OwnerHoldView>,
}

/// One owner's part of a read-write lock, or one grant of a semaphore (`holds`: read
/// holds, write holds or permits).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct OwnerHoldView {
    #[serde(flatten)]
    pub owner: ClientView,
    pub holds: u64,
    pub remaining_lease_ms: u64,
    pub fence: Option<u64>,
}

impl From<&OwnerHold> for OwnerHoldView {
    fn from(h: &OwnerHold) -> Self {
        OwnerHoldView {
            owner: ClientView::from(&h.owner),
            holds: h.holds,
            remaining_lease_ms: millis(h.remaining_lease),
            fence: h.fence,
        }
    }
}

impl From<&ReadWriteInfo> for ReadWriteView {
    fn from(rw: &ReadWriteInfo) -> Self {
        ReadWriteView {
            mode: rw.mode.as_str(),
            readers: rw.readers.iter().map(OwnerHoldView::from).collect(),
            writer: rw.writer.as_ref().map(OwnerHoldView::from),
            waiting_writers: rw.waiting_writers.iter().map(OwnerHoldView::from).collect(),
        }
    }
}

impl From<&SemaphoreInfo> for SemaphoreView {
    fn from(sem: &SemaphoreInfo) -> Self {
        SemaphoreView {
            capacity_key: sem.capacity_key.clone(),
            capacity: sem.capacity,
            taken: sem.taken,
            available: sem.available,
            grants: sem.grants.iter().map(OwnerHoldView::from).collect(),
        }
    }
}

impl OwnerHoldView {
    /// `<owner> (...), 2 <unit>s, 29.9s left`.
    fn text(&self, unit: &str) -> String {
        let mut text = format!(
            "{}, {} {unit}{}, {} left",
            self.owner.text(),
            self.holds,
            plural(self.holds),
            shown(self.remaining_lease_ms)
        );
        if let Some(fence) = self.fence {
            let _ = write!(text, ", fence {fence}");
        }
        text
    }
}

/// One owner of a lock.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct HolderView {
    #[serde(flatten)]
    pub owner: ClientView,
    pub holds: u64,
    pub fence: Option<u64>,
}

/// An id found in a lock and its client's description.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ClientView {
    pub id: String,
    pub client_id: String,
    pub client: Option<DescriptionView>,
}

/// What a client registered about itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct DescriptionView {
    pub name: String,
    pub host: String,
    pub pid: u32,
    pub version: String,
}

impl From<&ClientDescription> for DescriptionView {
    fn from(d: &ClientDescription) -> Self {
        DescriptionView {
            name: d.name.clone(),
            host: d.host.clone(),
            pid: d.pid,
            version: d.version.clone(),
        }
    }
}

impl From<&Participant> for ClientView {
    fn from(r: &Participant) -> Self {
        ClientView {
            id: r.id.clone(),
            client_id: r.client_id.clone(),
            client: r.client.as_ref().map(DescriptionView::from),
        }
    }
}

impl From<&LockHolder> for HolderView {
    fn from(h: &LockHolder) -> Self {
        HolderView {
            owner: ClientView::from(&h.owner),
            holds: h.holds,
            fence: h.fence,
        }
    }
}

impl From<&LockInfo> for LockView {
    fn from(info: &LockInfo) -> Self {
        let clients = |refs: &[Participant]| refs.iter().map(ClientView::from).collect();
        LockView {
            name: info.name.clone(),
            kind: info.kind.as_str(),
            key: info.key.clone(),
            holders: info.holders.iter().map(HolderView::from).collect(),
            remaining_lease_ms: info.remaining_lease.map(millis),
            waiting_clients: clients(&info.waiting_clients),
            local_lines: info
                .local_lines
                .iter()
                .map(|line| LocalLineView {
                    client: ClientView::from(&line.client),
                    tasks: line.tasks,
                })
                .collect(),
            subscribers: info.subscribers,
            fair_queue: clients(&info.fair_queue),
            fencing_counter: info.fencing_counter,
            kept_for_min_hold: info.kept_for_min_hold.as_ref().map(ClientView::from),
            read_write: info.read_write.as_ref().map(ReadWriteView::from),
            semaphore: info.semaphore.as_ref().map(SemaphoreView::from),
        }
    }
}

/// `duration` in whole milliseconds (saturating).
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl ClientView {
    /// `<id> (billing on host-1, pid 42, dlock 0.1.0)`.
    pub(crate) fn text(&self) -> String {
        match &self.client {
            Some(c) => format!(
                "{} ({} on {}, pid {}, dlock {})",
                shown_text(&self.id),
                shown_text(&c.name),
                shown_text(&c.host),
                c.pid,
                shown_text(&c.version)
            ),
            None => format!(
                "{} (no description: client gone or not registered)",
                shown_text(&self.id)
            ),
        }
    }
}

impl HolderView {
    /// `<owner> (...), 2 holds, fence 17`.
    pub(crate) fn text(&self) -> String {
        let mut text = format!(
            "{}, {} hold{}",
            self.owner.text(),
            self.holds,
            plural(self.holds)
        );
        if let Some(fence) = self.fence {
            let _ = write!(text, ", fence {fence}");
        }
        text
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

impl LockView {
    /// The multi-line text of `inspect`.
    pub(crate) fn text(&self) -> String {
        let mut out = format!(
            "{} {} (key {})\n",
            self.label(),
            shown_text(&self.name),
            shown_text(&self.key)
        );
        if let Some(rw) = &self.read_write {
            self.read_write_text(rw, &mut out);
        } else if let Some(sem) = &self.semaphore {
            self.semaphore_text(sem, &mut out);
        } else {
            self.lock_text(&mut out);
        }
        out
    }

    /// What the kind is called in text.
    fn label(&self) -> &'static str {
        match self.kind {
            "fair" => "fair lock",
            "read_write" => "read-write lock",
            "semaphore" => "semaphore",
            _ => "lock",
        }
    }

    fn read_write_text(&self, rw: &ReadWriteView, out: &mut String) {
        let _ = writeln!(out, "mode: {}", rw.mode);
        for reader in &rw.readers {
            let _ = writeln!(out, "reader: {}", reader.text("read hold"));
        }
        match &rw.writer {
            Some(writer) => {
                let _ = writeln!(out, "writer: {}", writer.text("write hold"));
            }
            None => out.push_str("writer: none\n"),
        }
        if let Some(ms) = self.remaining_lease_ms {
            let _ = writeln!(out, "lease: {} left", shown(ms));
        }
        let _ = writeln!(out, "waiting writers: {}", rw.waiting_writers.len());
        for writer in &rw.waiting_writers {
            let _ = writeln!(
                out,
                "  {} (entry lapses in {})",
                writer.owner.text(),
                shown(writer.remaining_lease_ms)
            );
        }
        let _ = writeln!(out, "unlock channel subscribers: {}", self.subscribers);
        self.fencing_text(out);
    }

    fn semaphore_text(&self, sem: &SemaphoreView, out: &mut String) {
        let capacity = sem
            .capacity
            .map_or("no capacity stored".to_owned(), |c| c.to_string());
        let _ = writeln!(
            out,
            "permits: {} of {capacity} taken, {} available",
            sem.taken, sem.available
        );
        for grant in &sem.grants {
            let _ = writeln!(out, "grant: {}", grant.text("permit"));
        }
        if let Some(ms) = self.remaining_lease_ms {
            let _ = writeln!(out, "lease: {} left", shown(ms));
        }
        let _ = writeln!(
            out,
            "channel subscribers (waiting clients): {}",
            self.subscribers
        );
    }

    fn fencing_text(&self, out: &mut String) {
        match self.fencing_counter {
            Some(counter) => {
                let _ = writeln!(out, "fencing counter: {counter}");
            }
            None => out.push_str("fencing counter: none\n"),
        }
    }

    fn lock_text(&self, out: &mut String) {
        if self.holders.is_empty() {
            match &self.kept_for_min_hold {
                Some(client) => {
                    let _ = writeln!(
                        out,
                        "holder: none, kept taken by min_hold of {}",
                        client.text()
                    );
                }
                None => out.push_str("holder: none (the lock is free)\n"),
            }
        }
        for holder in &self.holders {
            let _ = writeln!(out, "holder: {}", holder.text());
        }
        if let Some(ms) = self.remaining_lease_ms {
            let _ = writeln!(out, "lease: {} left", shown(ms));
        }
        let _ = writeln!(out, "waiters: {}", self.waiting_clients.len());
        for waiter in &self.waiting_clients {
            let _ = writeln!(out, "  {}", waiter.text());
        }
        if !self.local_lines.is_empty() {
            let lined: u64 = self.local_lines.iter().map(|line| line.tasks).sum();
            let _ = writeln!(out, "waiting in their clients' local lines: {lined}");
            for line in &self.local_lines {
                let _ = writeln!(out, "  {} of {}", line.tasks, line.client.text());
            }
        }
        let _ = writeln!(out, "subscribers: {}", self.subscribers);
        if !self.fair_queue.is_empty() {
            let _ = writeln!(out, "fair queue: {}", self.fair_queue.len());
            for entry in &self.fair_queue {
                let _ = writeln!(out, "  {}", entry.text());
            }
        }
        self.fencing_text(out);
    }

    /// The one line of `list`.
    pub(crate) fn line(&self) -> String {
        let holders = if self.holders.is_empty() && self.semaphore.is_some() {
            // Its capacity stays stored while nobody holds a permit.
            "idle (only its capacity is stored; `dlock set-permits` changes it)".to_owned()
        } else if self.holders.is_empty() {
            "free".to_owned()
        } else {
            let names: Vec<String> = self.holders.iter().map(HolderView::text).collect();
            format!("held by {}", names.join("; "))
        };
        let mut line = match (&self.read_write, &self.semaphore) {
            (Some(rw), _) => format!(
                "{}  [read-write, {}] {holders}",
                shown_text(&self.name),
                rw.mode
            ),
            (None, Some(sem)) => format!(
                "{}  [semaphore, {} of {} permits taken] {holders}",
                shown_text(&self.name),
                sem.taken,
                sem.capacity.map_or("?".to_owned(), |c| c.to_string())
            ),
            (None, None) => format!("{}  {holders}", shown_text(&self.name)),
        };
        if let Some(ms) = self.remaining_lease_ms {
            let _ = write!(line, ", {} left", shown(ms));
        }
        let lined: u64 = self.local_lines.iter().map(|line| line.tasks).sum();
        let waiting = self.waiting_clients.len() as u64 + lined;
        if waiting > 0 {
            let _ = write!(line, ", {waiting} waiting");
        }
        line
    }
}

/// One lock name over the servers of a RedLock: what each holds, and on how many the
/// lock is held and by whom.
#[derive(Debug, Serialize)]
pub(crate) struct RedLockView {
    pub name: String,
    /// How many servers the RedLock has.
    pub nodes: usize,
    /// How many must hold the lock (a majority).
    pub quorum: usize,
    /// The owner field holding the lock on at least `quorum` servers, if any.
    pub held_by: Option<String>,
    /// Each owner found, with on how many servers it holds the lock (most first).
    pub owners: Vec<OwnerCount>,
    /// Each server in the config's order.
    pub servers: Vec<ServerView>,
}

/// An owner of a RedLock and on how many servers it holds the lock.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct OwnerCount {
    pub id: String,
    pub servers: usize,
}

/// One RedLock server's part: its lock, or why it could not be read.
#[derive(Debug, Serialize)]
pub(crate) struct ServerView {
    /// The address, password hidden.
    pub server: String,
    pub lock: Option<LockView>,
    pub error: Option<String>,
}

impl RedLockView {
    /// The view of `name` from each server's inspection.
    pub(crate) fn new(name: &str, quorum: usize, servers: Vec<ServerView>) -> RedLockView {
        let mut owners: Vec<OwnerCount> = Vec::new();
        for lock in servers.iter().filter_map(|s| s.lock.as_ref()) {
            for holder in &lock.holders {
                match owners.iter_mut().find(|o| o.id == holder.owner.id) {
                    Some(owner) => owner.servers += 1,
                    None => owners.push(OwnerCount {
                        id: holder.owner.id.clone(),
                        servers: 1,
                    }),
                }
            }
        }
        owners.sort_by(|a, b| b.servers.cmp(&a.servers).then(a.id.cmp(&b.id)));
        RedLockView {
            name: name.to_owned(),
            nodes: servers.len(),
            quorum,
            held_by: owners
                .first()
                .filter(|o| o.servers >= quorum)
                .map(|o| o.id.clone()),
            owners,
            servers,
        }
    }

    /// `held on 3 of 3 servers (quorum 2) by <owner>`, or why it is not held.
    pub(crate) fn summary(&self) -> String {
        let (n, q) = (self.nodes, self.quorum);
        match self.owners.first() {
            None => format!("held on no server of {n} (quorum {q}): free"),
            Some(top) if top.servers >= q => {
                format!(
                    "held on {} of {n} servers (quorum {q}) by {}",
                    top.servers,
                    shown_text(&top.id)
                )
            }
            Some(top) => format!(
                "held on at most {} of {n} servers (quorum {q}, by {}): not held",
                top.servers,
                shown_text(&top.id)
            ),
        }
    }

    /// The multi-line text of `inspect`: each server's part, then the summary.
    pub(crate) fn text(&self) -> String {
        let mut out = format!(
            "redlock {} over {} servers (quorum {})\n",
            shown_text(&self.name),
            self.nodes,
            self.quorum
        );
        for server in &self.servers {
            let _ = writeln!(out, "server {}:", server.server);
            match (&server.lock, &server.error) {
                (Some(lock), _) => {
                    for line in lock.text().lines() {
                        let _ = writeln!(out, "  {line}");
                    }
                }
                (None, Some(error)) => {
                    let _ = writeln!(out, "  error: {}", shown_text(error));
                }
                (None, None) => {}
            }
        }
        let _ = writeln!(out, "{}", self.summary());
        out
    }

    /// The one line of `list`.
    pub(crate) fn line(&self) -> String {
        format!("{}  {}", shown_text(&self.name), self.summary())
    }
}

/// Milliseconds as humans read them: `1.234s`, `250ms`.
pub(crate) fn shown(ms: u64) -> String {
    if ms >= 1000 {
        format!("{}.{:03}s", ms / 1000, ms % 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Prints `value` as one JSON document on stdout.
pub(crate) fn print_json(value: &impl Serialize) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| CliError::Io {
        what: "writing the JSON output",
        source: e.into(),
    })?;
    println!("{text}");
    Ok(())
}
