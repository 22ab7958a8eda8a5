//! What operators and dashboards read: who holds a lock, who waits, which kind of lock
//! a name is, which client is which ([`Lock::inspect`](crate::Lock::inspect),
//! [`LockClient::list_locks`](crate::LockClient::list_locks),
//! [`Lock::track`](crate::Lock::track)), and a client's own counters
//! ([`LockClient::stats`](crate::LockClient::stats)).
//!
//! Everything here is read with read-only commands, for operators (the `dlock`
//! command-line tool), dashboards and tests. The names come from each primitive's
//! `keys`, and each layout from its primitive's parser, so this module never spells
//! dlock's layout itself (docs/LAYOUT.md describes it). One name can stand for four kinds of primitive, told apart by what Redis holds:
//! - a lock or a fair lock: the lock hash (owner field `<client id>:<n>` → hold count,
//!   `<owner>:f` → fencing token, `!next` → beside a hold, the owner a release gave it to,
//!   `!held` → the finished holder whose `min_hold` keeps it taken), the waiter registry
//!   (a sorted set named like the unlock channel), the unlock channel's subscribers and,
//!   for a fair lock, its queue;
//! - a read-write lock: the same key with the read-write layout (`mode`, `<owner>` → read
//!   holds, `<owner>:w` → write holds, `<owner>:t` → server-time deadline, `<owner>:f` →
//!   fencing token) and the waiting writers' sorted set;
//! - a semaphore: keys of its own (the grants hash and the capacity, `semaphore::keys::SemKeys`).
//!
//! A field that fits no layout is an error, never a guess: the key is not dlock's, or
//! dlock's layout changed and this reader must learn it.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::future::try_join_all;

use crate::error::{LockError, Result};
use crate::lock::Lock;

use crate::fair::keys::FairKeys;
use crate::semaphore::keys::SemKeys;

mod info;
mod layout;
mod list;
mod track;

use crate::lock::layout::Fields;
use crate::rw::layout::{RwFields, RwOwner};
use crate::semaphore::layout::parse_grants;
use layout::{until, Layout};

pub use crate::client::ClientDescription;
pub use crate::kind::LockKind;
pub use crate::rw::layout::ReadWriteMode;
pub use crate::sync::metrics::{Stats, LATENCY_BOUNDS};
pub use info::{
    LocalLine, LockHolder, LockInfo, OwnerHold, Participant, ReadWriteInfo, SemaphoreInfo,
};
pub use list::LockListing;
pub use track::LockTracker;

impl Lock {
    /// What Redis holds for this lock name now, whichever primitive uses it: its
    /// [`kind`](LockInfo::kind), holders with their hold counts, fencing tokens and
    /// clients, the remaining lease, the waiting clients, the subscribers of the unlock
    /// channel, a fair lock's queue, the fencing counter, and for a read-write lock its
    /// readers, writer and waiting writers, for a semaphore its capacity and grants.
    /// Read-only (`TYPE`, `HGETALL`, `PTTL`, `ZRANGE`, `PUBSUB NUMSUB` or `SHARDNUMSUB`,
    /// `GET`, `TIME`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// use dlock::{inspect::{LockKind, ReadWriteMode}};
    ///
    /// let client = dlock::LockClient::builder()
    ///     .client_name("billing")
    ///     .connect(&server.url())
    ///     .await?;
    /// let lock = client.lock("invoice:7");
    /// let guard = lock.lock().await?;
    /// # tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    /// let info = lock.inspect().await?;
    /// assert_eq!(info.kind, LockKind::Lock);
    /// assert_eq!(info.holders[0].holds, 1);
    /// let holder = info.holders[0].owner.client.as_ref().map(|c| c.name.as_str());
    /// assert_eq!(holder, Some("billing"));
    /// guard.unlock().await?;
    /// assert!(lock.inspect().await?.holders.is_empty());
    ///
    /// // The same call reads a read-write lock...
    /// let prices = client.rw_lock("prices");
    /// let (a, b) = (prices.read().lock().await?, prices.read().lock().await?);
    /// let info = client.lock("prices").inspect().await?;
    /// let rw = info.read_write.as_ref().unwrap();
    /// assert_eq!((info.kind, rw.mode), (LockKind::ReadWrite, ReadWriteMode::Read));
    /// assert_eq!((rw.readers.len(), info.holders.len()), (2, 2));
    /// # a.unlock().await?;
    /// # b.unlock().await?;
    ///
    /// // ... and a semaphore.
    /// let uploads = client.semaphore("uploads", 3);
    /// let two = uploads.acquire(2).await?;
    /// let info = client.lock("uploads").inspect().await?;
    /// let sem = info.semaphore.as_ref().unwrap();
    /// assert_eq!(info.kind, LockKind::Semaphore);
    /// assert_eq!((sem.capacity, sem.taken, sem.available), (Some(3), 2, 1));
    /// # two.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::WrongType`] when a key holds something other than one of dlock's
    /// layouts (application data, or a field no layout has); Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn inspect(&self) -> Result<LockInfo> {
        let layout = self.layout().await?;
        let keys = self.keys();
        let fencing_counter: Option<u64> = self
            .query("inspect", redis::cmd("GET").arg(&*keys.fence))
            .await?;
        let mut info = LockInfo {
            name: self.name().to_owned(),
            kind: LockKind::Lock,
            key: keys.key.clone(),
            holders: Vec::new(),
            remaining_lease: None,
            kept_for_min_hold: None,
            waiting_clients: Vec::new(),
            local_lines: Vec::new(),
            subscribers: 0,
            fair_queue: Vec::new(),
            fencing_counter,
            read_write: None,
            semaphore: None,
        };
        match layout {
            Some(Layout::ReadWrite(rw)) => self.fill_read_write(&mut info, rw).await?,
            Some(Layout::Lock(fields)) => self.fill_lock(&mut info, fields).await?,
            None => {
                if !self.fill_semaphore(&mut info).await? {
                    self.fill_lock(&mut info, Fields::default()).await?;
                }
            }
        }
        Ok(info)
    }

    /// A lock's or fair lock's parts.
    async fn fill_lock(&self, info: &mut LockInfo, fields: Fields) -> Result<()> {
        let keys = self.keys();
        let client = self.client();
        let describe = |id: String| async move { client.describe(id).await };
        let waiting: Vec<String> = self
            .query(
                "inspect",
                redis::cmd("ZRANGE").arg(&keys.channel).arg(0).arg(-1),
            )
            .await?;
        let fair = FairKeys::new(self.client().key_prefix(), self.name());
        let queued: Vec<String> = self
            .query(
                "inspect",
                redis::cmd("ZRANGE").arg(&fair.queue).arg(0).arg(-1),
            )
            .await?;
        info.remaining_lease = self.remaining_lease().await?;
        // Waiters listen on their client's wake channel; watchers of other kinds on the
        // unlock channel.
        let mut clients: Vec<&str> = waiting
            .iter()
            .chain(fields.holds.iter().map(|(owner, _)| owner))
            .map(|owner| {
                owner
                    .split_once(':')
                    .map_or(owner.as_str(), |(client, _)| client)
            })
            .collect();
        clients.sort_unstable();
        clients.dedup();
        let mut channels = vec![keys.channel.clone()];
        channels.extend(clients.iter().map(|client| keys.wake_channel(client)));
        info.subscribers = self.subscribers(&channels).await?;
        // A local line waits behind a task of its client that holds or waits in Redis.
        info.local_lines = self.local_lines(&clients).await?;
        if fields.fair {
            info.kind = LockKind::Fair;
        }
        info.kept_for_min_hold = match fields.min_hold.clone() {
            Some(id) => Some(describe(id).await?),
            None => None,
        };
        info.holders = self.described(fields).await?;
        info.waiting_clients = try_join_all(waiting.into_iter().map(describe)).await?;
        info.fair_queue = try_join_all(queued.into_iter().map(describe)).await?;
        if !info.fair_queue.is_empty() {
            info.kind = LockKind::Fair;
        }
        Ok(())
    }

    /// The local lines of `clients` that reported waiting tasks (see
    /// `sync::line`).
    async fn local_lines(&self, clients: &[&str]) -> Result<Vec<LocalLine>> {
        if clients.is_empty() {
            return Ok(Vec::new());
        }
        let keys = self.keys();
        // One GET each (a read-only operator's rule has no MGET): a lock has a client or
        // three that hold or wait in Redis, rarely more.
        let tasks: Vec<Option<u64>> = try_join_all(clients.iter().map(|client| {
            let report = keys.line_report(client);
            async move { self.query("inspect", redis::cmd("GET").arg(report)).await }
        }))
        .await?;
        let mut lines = Vec::new();
        for (client, tasks) in clients.iter().zip(tasks) {
            if let Some(tasks) = tasks.filter(|&tasks| tasks > 0) {
                let client = self.client().describe((*client).to_owned()).await?;
                lines.push(LocalLine { client, tasks });
            }
        }
        Ok(lines)
    }

    /// A read-write lock's parts.
    async fn fill_read_write(&self, info: &mut LockInfo, rw: RwFields) -> Result<()> {
        let keys = self.keys();
        let client = self.client();
        let now = self.server_time(&keys.key).await?;
        let waiting: Vec<(String, f64)> = self
            .query(
                "inspect",
                redis::cmd("ZRANGE")
                    .arg(keys.waiting_writers())
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES"),
            )
            .await?;
        info.kind = LockKind::ReadWrite;
        info.remaining_lease = self.remaining_lease().await?;
        info.subscribers = self
            .subscribers(std::slice::from_ref(&keys.channel))
            .await?;
        info.holders = self.rw_holders(&rw, now).await?;
        let hold = |owner: String, holds: u64, deadline: u64, fence: Option<u64>| async move {
            Ok::<_, LockError>(OwnerHold {
                owner: client.describe(owner).await?,
                holds,
                remaining_lease: until(deadline, now).unwrap_or_default(),
                fence,
            })
        };
        let mut live: Vec<(&String, &RwOwner)> = rw
            .owners
            .iter()
            .filter(|(_, o)| o.deadline.is_some_and(|d| d > now))
            .collect();
        live.sort_by(|a, b| a.0.cmp(b.0));
        let deadline = |o: &RwOwner| o.deadline.unwrap_or_default();
        let readers = try_join_all(
            live.iter()
                .filter(|(_, o)| o.reads > 0)
                .map(|(owner, o)| hold((*owner).clone(), o.reads, deadline(o), None)),
        )
        .await?;
        let writer = match live.iter().find(|(_, o)| o.writes > 0) {
            Some((owner, o)) => Some(hold((*owner).clone(), o.writes, deadline(o), o.fence).await?),
            None => None,
        };
        let waiting_writers = try_join_all(
            waiting
                .into_iter()
                .filter(|(_, lapses)| *lapses > now as f64)
                .map(|(owner, lapses)| hold(owner, 0, lapses as u64, None)),
        )
        .await?;
        info.read_write = Some(ReadWriteInfo {
            mode: rw.mode,
            readers,
            writer,
            waiting_writers,
        });
        Ok(())
    }

    /// A semaphore's parts, when its keys exist (`false`: no semaphore of this name).
    async fn fill_semaphore(&self, info: &mut LockInfo) -> Result<bool> {
        let sem = SemKeys::new(self.client().key_prefix(), self.name());
        for (key, expected) in [(&sem.capacity, "string"), (&sem.grants, "hash")] {
            let found: String = self.query("inspect", redis::cmd("TYPE").arg(key)).await?;
            if found != expected && found != "none" {
                return Err(self.wrong_type(found));
            }
        }
        let capacity: Option<String> = self
            .query("inspect", redis::cmd("GET").arg(&sem.capacity))
            .await?;
        let hash: HashMap<String, String> = self
            .query("inspect", redis::cmd("HGETALL").arg(&sem.grants))
            .await?;
        if capacity.is_none() && hash.is_empty() {
            return Ok(false);
        }
        let capacity = match capacity {
            Some(text) => Some(
                text.parse::<u64>()
                    .map_err(|_| self.wrong_type("string".to_owned()))?,
            ),
            None => None,
        };
        let grants = self.live_grants(hash).await?;
        let ttl: i64 = self
            .query("inspect", redis::cmd("PTTL").arg(&sem.grants))
            .await?;
        let taken = grants.iter().map(|g| g.holds).sum();
        info.kind = LockKind::Semaphore;
        info.key = sem.grants.clone();
        info.remaining_lease = u64::try_from(ttl).ok().map(Duration::from_millis);
        info.subscribers = self.subscribers(std::slice::from_ref(&sem.grants)).await?;
        info.holders = holders_of(grants.clone());
        info.semaphore = Some(SemaphoreInfo {
            capacity_key: sem.capacity,
            available: capacity.unwrap_or(0).saturating_sub(taken),
            capacity,
            grants,
            taken,
        });
        Ok(true)
    }

    /// How many connections listen on `channels` (all in one slot: asked at its master in
    /// a cluster), summed.
    async fn subscribers(&self, channels: &[String]) -> Result<u64> {
        let numsub = if self.client().inner.backend.is_cluster() {
            "SHARDNUMSUB"
        } else {
            "NUMSUB"
        };
        let Some(first) = channels.first() else {
            return Ok(0);
        };
        let counts: HashMap<String, u64> = self
            .client()
            .inner
            .backend
            .query_in_slot_of(redis::cmd("PUBSUB").arg(numsub).arg(channels), first)
            .await
            .map_err(|e| e.into_lock_error(self.name(), "inspect"))?;
        Ok(counts.values().sum())
    }

    /// The server time in ms of the master that owns `key` (whose clock the deadlines
    /// of the read-write lock and the semaphore come from).
    async fn server_time(&self, key: &str) -> Result<u64> {
        let (seconds, micros): (u64, u64) = self
            .client()
            .inner
            .backend
            .query_in_slot_of(&redis::cmd("TIME"), key)
            .await
            .map_err(|e| e.into_lock_error(self.name(), "inspect"))?;
        Ok(seconds * 1000 + micros / 1000)
    }
}

impl Lock {
    /// Who holds the lock now ([`LockInfo::holders`] alone: a lock's, a fair lock's or a
    /// read-write lock's owners, or a semaphore's grants with their permits as holds): the
    /// one read a watcher repeats, `TYPE` and `HGETALL` (the grants' `HGETALL` too when
    /// the lock key does not exist, and `TIME` for a read-write lock or live grants) and
    /// a `GET` of each holder's description.
    ///
    /// # Errors
    ///
    /// As for [`inspect`](Lock::inspect).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn holders(&self) -> Result<Vec<LockHolder>> {
        let layout = self.layout().await?;
        if layout.is_some() {
            return self.holders_in(layout).await;
        }
        let grants: HashMap<String, String> = self
            .query("inspect", redis::cmd("HGETALL").arg(self.grants_key()))
            .await?;
        Ok(holders_of(self.live_grants(grants).await?))
    }

    /// The name of the grants hash a semaphore of this name keeps.
    pub(crate) fn grants_key(&self) -> String {
        SemKeys::new(self.client().key_prefix(), self.name()).grants
    }

    /// A semaphore's live grants (deadline after server time) in `hash` (`HGETALL` of the
    /// grants hash), each with its client's description; `WrongType` for a field no grant
    /// has.
    pub(crate) async fn live_grants(
        &self,
        hash: HashMap<String, String>,
    ) -> Result<Vec<OwnerHold>> {
        if hash.is_empty() {
            return Ok(Vec::new());
        }
        let grants = parse_grants(hash).ok_or_else(|| self.wrong_type("hash".to_owned()))?;
        let now = self.server_time(&self.grants_key()).await?;
        let client = self.client();
        try_join_all(
            grants
                .into_iter()
                .filter(|(_, _, deadline)| *deadline > now)
                .map(|(grant, permits, deadline)| async move {
                    Ok::<_, LockError>(OwnerHold {
                        owner: client.describe(grant).await?,
                        holds: permits,
                        remaining_lease: until(deadline, now).unwrap_or_default(),
                        fence: None,
                    })
                }),
        )
        .await
    }

    /// The holders `layout` names, each with its client's description.
    pub(crate) async fn holders_in(&self, layout: Option<Layout>) -> Result<Vec<LockHolder>> {
        match layout {
            None => Ok(Vec::new()),
            Some(Layout::Lock(fields)) => self.described(fields).await,
            Some(Layout::ReadWrite(rw)) => {
                let now = self.server_time(&self.keys().key).await?;
                self.rw_holders(&rw, now).await
            }
        }
    }

    /// The lock hash's layout; `None` when the key does not exist, `WrongType` for a key
    /// of another type or layout.
    async fn layout(&self) -> Result<Option<Layout>> {
        self.check_name()?;
        let key = &self.keys().key;
        let found: String = self.query("inspect", redis::cmd("TYPE").arg(key)).await?;
        if found != "hash" && found != "none" {
            return Err(self.wrong_type(found));
        }
        let hash: HashMap<String, String> = self
            .query("inspect", redis::cmd("HGETALL").arg(key))
            .await?;
        self.parse_layout(hash)
    }

    /// The layout of the lock hash's fields `hash` (`HGETALL`; empty: no key).
    pub(crate) fn parse_layout(&self, hash: HashMap<String, String>) -> Result<Option<Layout>> {
        if hash.is_empty() {
            return Ok(None);
        }
        Layout::parse(hash)
            .map(Some)
            .ok_or_else(|| self.wrong_type("hash".to_owned()))
    }

    /// The holders in `fields`, each with its client's description.
    async fn described(&self, fields: Fields) -> Result<Vec<LockHolder>> {
        let client = self.client();
        try_join_all(fields.holds.into_iter().map(|(owner, holds)| {
            let fence = fields.fences.get(&owner).copied();
            async move {
                Ok::<_, LockError>(LockHolder {
                    owner: client.describe(owner).await?,
                    holds,
                    fence,
                })
            }
        }))
        .await
    }

    /// A read-write lock's live owners (deadline after server time `now`), sorted, each
    /// with read + write holds.
    async fn rw_holders(&self, rw: &RwFields, now: u64) -> Result<Vec<LockHolder>> {
        let client = self.client();
        let mut live: Vec<(&String, &RwOwner)> = rw
            .owners
            .iter()
            .filter(|(_, o)| o.deadline.is_some_and(|d| d > now) && o.reads + o.writes > 0)
            .collect();
        live.sort_by(|a, b| a.0.cmp(b.0));
        try_join_all(live.into_iter().map(|(owner, o)| async move {
            Ok::<_, LockError>(LockHolder {
                owner: client.describe(owner.clone()).await?,
                holds: o.reads + o.writes,
                fence: o.fence,
            })
        }))
        .await
    }
}

/// A semaphore's grants as holders: permits as holds, no fencing token.
pub(super) fn holders_of(grants: Vec<OwnerHold>) -> Vec<LockHolder> {
    grants
        .into_iter()
        .map(|grant| LockHolder {
            owner: grant.owner,
            holds: grant.holds,
            fence: None,
        })
        .collect()
}
