//! What the commands print: serializable views of dlock-core's [`LockInfo`] (the JSON
//! output) and their text form.

use std::fmt::Write as _;
use std::time::Duration;

use dlock_core::{ClientDescription, LockClientRef, LockHolder, LockInfo};
use serde::Serialize;

use crate::error::CliError;

/// One lock, as `inspect` and `list` print it.
#[derive(Debug, Serialize)]
pub struct LockView {
    pub name: String,
    pub key: String,
    pub holders: Vec<HolderView>,
    /// Milliseconds until the lock expires; `null` when nobody holds it.
    pub remaining_lease_ms: Option<u64>,
    pub reserved_for: Option<ClientView>,
    pub waiting_clients: Vec<ClientView>,
    pub subscribers: u64,
    pub fair_queue: Vec<ClientView>,
    pub fencing_counter: Option<u64>,
}

/// One owner of a lock.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HolderView {
    #[serde(flatten)]
    pub owner: ClientView,
    pub holds: u64,
    pub fence: Option<u64>,
}

/// An id found in a lock and its client's description.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClientView {
    pub id: String,
    pub client_id: String,
    pub client: Option<DescriptionView>,
}

/// What a client registered about itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DescriptionView {
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

impl From<&LockClientRef> for ClientView {
    fn from(r: &LockClientRef) -> Self {
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
        let clients = |refs: &[LockClientRef]| refs.iter().map(ClientView::from).collect();
        LockView {
            name: info.name.clone(),
            key: info.key.clone(),
            holders: info.holders.iter().map(HolderView::from).collect(),
            remaining_lease_ms: info.remaining_lease.map(millis),
            reserved_for: info.reserved_for.as_ref().map(ClientView::from),
            waiting_clients: clients(&info.waiting_clients),
            subscribers: info.subscribers,
            fair_queue: clients(&info.fair_queue),
            fencing_counter: info.fencing_counter,
        }
    }
}

/// `duration` in whole milliseconds (saturating).
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl ClientView {
    /// `<id> (billing on host-1, pid 42, dlock 0.1.0)`.
    pub fn text(&self) -> String {
        match &self.client {
            Some(c) => format!(
                "{} ({} on {}, pid {}, dlock {})",
                self.id, c.name, c.host, c.pid, c.version
            ),
            None => format!(
                "{} (no description: client gone or not registered)",
                self.id
            ),
        }
    }
}

impl HolderView {
    /// `<owner> (...), 2 holds, fence 17`.
    pub fn text(&self) -> String {
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
    pub fn text(&self) -> String {
        let mut out = format!("lock {} (key {})\n", self.name, self.key);
        if self.holders.is_empty() {
            out.push_str("holder: none (the lock is free)\n");
        }
        for holder in &self.holders {
            let _ = writeln!(out, "holder: {}", holder.text());
        }
        if let Some(ms) = self.remaining_lease_ms {
            let _ = writeln!(out, "lease: {} left", shown(ms));
        }
        if let Some(client) = &self.reserved_for {
            let _ = writeln!(out, "reserved for: {}", client.text());
        }
        let _ = writeln!(out, "waiting clients: {}", self.waiting_clients.len());
        for client in &self.waiting_clients {
            let _ = writeln!(out, "  {}", client.text());
        }
        let _ = writeln!(out, "unlock channel subscribers: {}", self.subscribers);
        if !self.fair_queue.is_empty() {
            let _ = writeln!(out, "fair queue: {}", self.fair_queue.len());
            for entry in &self.fair_queue {
                let _ = writeln!(out, "  {}", entry.text());
            }
        }
        match self.fencing_counter {
            Some(counter) => {
                let _ = writeln!(out, "fencing counter: {counter}");
            }
            None => out.push_str("fencing counter: none\n"),
        }
        out
    }

    /// The one line of `list`.
    pub fn line(&self) -> String {
        let holders = if self.holders.is_empty() {
            "free".to_owned()
        } else {
            let names: Vec<String> = self.holders.iter().map(HolderView::text).collect();
            format!("held by {}", names.join("; "))
        };
        let mut line = format!("{}  {holders}", self.name);
        if let Some(ms) = self.remaining_lease_ms {
            let _ = write!(line, ", {} left", shown(ms));
        }
        if !self.waiting_clients.is_empty() {
            let _ = write!(line, ", {} waiting", self.waiting_clients.len());
        }
        line
    }
}

/// Milliseconds as humans read them: `1.234s`, `250ms`.
fn shown(ms: u64) -> String {
    if ms >= 1000 {
        format!("{}.{:03}s", ms / 1000, ms % 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Prints `value` as one JSON document on stdout.
pub fn print_json(value: &impl Serialize) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| CliError::Io {
        what: "writing the JSON output",
        source: e.into(),
    })?;
    println!("{text}");
    Ok(())
}
