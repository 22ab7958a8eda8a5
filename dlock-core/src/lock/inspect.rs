//! [`Lock::inspect`] and [`LockClient::list_locks`]: what Redis holds for a lock name,
//! read with read-only commands, for operators (the `dlock` command-line tool) and tests.
//!
//! The names come from `names.rs`, so a tool built on this never spells dlock's layout
//! itself. One name can stand for four kinds of primitive, told apart by what Redis holds:
//! - a lock or a fair lock: the lock hash (owner field `<client id>:<n>` → hold count,
//!   `<owner>:f` → fencing token, `!next` → the client a release reserved the lock for,
//!   `!held` → the finished holder whose `min_hold` keeps it taken), the waiter registry
//!   (a sorted set named like the unlock channel), the unlock channel's subscribers and,
//!   for a fair lock, its queue;
//! - a read-write lock: the same key with the read-write layout (`mode`, `<owner>` → read
//!   holds, `<owner>:w` → write holds, `<owner>:t` → server-time deadline, `<owner>:f` →
//!   fencing token) and the waiting writers' sorted set;
//! - a semaphore: keys of its own (the grants hash and the capacity, `names::SemKeys`).
//!
//! A field that fits no layout is an error, never a guess: the key is not dlock's, or
//! dlock's layout changed and this reader must learn it.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::future::try_join_all;

use super::Lock;
use crate::client::{ClientDescription, LockClient};
use crate::error::{LockError, Result};
use crate::names::{check_text, client_key, glob_escape, FairKeys, SemKeys};
use crate::redis::Tracking;

/// Which primitive a lock name's keys belong to, in [`LockInfo::kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// A reentrant [`Lock`] (also a free name: nothing in Redis says more).
    Lock,
    /// A [`FairLock`](crate::FairLock) with tasks in its queue. A fair lock nobody queues
    /// for keeps the lock's hash and shows as [`LockKind::Lock`].
    Fair,
    /// A [`ReadWriteLock`](crate::ReadWriteLock) held by readers or a writer.
    ReadWrite,
    /// A [`Semaphore`](crate::Semaphore): its capacity is stored (it stays while nobody
    /// holds a permit), and no lock hash of the same name exists.
    Semaphore,
}

impl LockKind {
    /// `lock`, `fair`, `read_write` or `semaphore`: the name tools print.
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Lock => "lock",
            LockKind::Fair => "fair",
            LockKind::ReadWrite => "read_write",
            LockKind::Semaphore => "semaphore",
        }
    }
}

/// A snapshot of one lock name in Redis, from [`Lock::inspect`]. Each part is read by its
/// own command, so a lock that changes meanwhile may show parts of two moments.
///
/// The fields every kind has (`holders`, `remaining_lease`, `subscribers`...) are filled
/// for each; [`read_write`](LockInfo::read_write) and [`semaphore`](LockInfo::semaphore)
/// add what only that kind has, so that a tool that knows only locks still shows who
/// holds a read-write lock or a semaphore's permits.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock name (without the key prefix).
    pub name: String,
    /// Which primitive the name's keys belong to.
    pub kind: LockKind,
    /// The Redis key of the lock hash (a semaphore's: its grants hash).
    pub key: String,
    /// Who holds the lock: one entry per owner (a reentrant lock has at most one; a
    /// read-write lock's readers and writer, holds = read + write holds; a semaphore's
    /// grants, holds = permits).
    pub holders: Vec<LockHolder>,
    /// Time until the lock expires; `None` when nobody holds it.
    pub remaining_lease: Option<Duration>,
    /// The client a release reserved the free lock for (for 100 ms), if any.
    pub reserved_for: Option<LockClientRef>,
    /// The finished holder whose `min_hold` (of `#[distributed_lock]`) keeps the lock
    /// taken until it expires, if any: the lock is busy though nobody holds it.
    pub kept_for_min_hold: Option<LockClientRef>,
    /// The clients registered as waiting for the lock, longest-waiting first (locks and
    /// fair locks; read-write locks and semaphores keep no registry).
    pub waiting_clients: Vec<LockClientRef>,
    /// How many connections listen on the lock's unlock channel (a semaphore's: its
    /// channel): one per waiting client (a client's waiters share its subscription), plus
    /// any watchers.
    pub subscribers: u64,
    /// A fair lock's queue of waiting tasks, in order: each entry's owner field and
    /// client. Empty for other locks.
    pub fair_queue: Vec<LockClientRef>,
    /// The last fencing token minted for this lock's counter, which every lock name with
    /// the same cluster slot anchor shares; `None` before the first one.
    pub fencing_counter: Option<u64>,
    /// A read-write lock's readers, writer and waiting writers; `None` for other kinds.
    pub read_write: Option<ReadWriteInfo>,
    /// A semaphore's capacity and grants; `None` for other kinds.
    pub semaphore: Option<SemaphoreInfo>,
}

/// One owner of a lock, in [`LockInfo::holders`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockHolder {
    /// The owner field (`<client id>:<n>`) and its client.
    pub owner: LockClientRef,
    /// How many holds the owner has (re-entries count).
    pub holds: u64,
    /// The fencing token of the owner's hold, when its client minted one.
    pub fence: Option<u64>,
}

/// The mode of a read-write lock, in [`ReadWriteInfo::mode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReadWriteMode {
    /// Held by readers (a writer may be among them after a downgrade, as a reader).
    Read,
    /// Held by one writer.
    Write,
}

impl ReadWriteMode {
    /// `read` or `write`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadWriteMode::Read => "read",
            ReadWriteMode::Write => "write",
        }
    }
}

/// What only a read-write lock has, in [`LockInfo::read_write`]. Owners whose deadline
/// passed (dropped by the next script that touches the lock) are left out, as every
/// script leaves them out.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadWriteInfo {
    /// Whether readers or a writer hold it.
    pub mode: ReadWriteMode,
    /// The owners with read holds; `holds` is their read holds.
    pub readers: Vec<OwnerHold>,
    /// The owner with write holds, if any; `holds` is its write holds.
    pub writer: Option<OwnerHold>,
    /// The writers waiting (new readers wait behind them), with the time until each
    /// entry lapses if its writer stops trying.
    pub waiting_writers: Vec<OwnerHold>,
}

/// One owner's part of a read-write lock or one grant of a semaphore, with its own lease:
/// in these primitives each owner's hold ends on its own server-time deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OwnerHold {
    /// The owner field (a semaphore's grant id) and its client.
    pub owner: LockClientRef,
    /// Read holds, write holds or permits, as the containing field says (0 for a waiting
    /// writer).
    pub holds: u64,
    /// Time until this owner's deadline (server time).
    pub remaining_lease: Duration,
    /// The fencing token of a writer's hold, when its client minted one.
    pub fence: Option<u64>,
}

/// What only a semaphore has, in [`LockInfo::semaphore`]. Grants whose deadline passed
/// (reclaimed by the next script that touches the semaphore) are left out and count as
/// free, as every script counts them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreInfo {
    /// The key of the capacity (the grants hash is [`LockInfo::key`]).
    pub capacity_key: String,
    /// The stored capacity; `None` while grants exist without it (someone deleted it).
    pub capacity: Option<u64>,
    /// The live grants: `holds` is each grant's permits.
    pub grants: Vec<OwnerHold>,
    /// The permits the live grants hold.
    pub taken: u64,
    /// Capacity − taken (0 while a shrink left more taken than the capacity).
    pub available: u64,
}

/// An id found in a lock (an owner field or a client id) and the description its client
/// registered, when it is still there.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockClientRef {
    /// The id as Redis holds it.
    pub id: String,
    /// The client id in it (the part before the first `:`).
    pub client_id: String,
    /// What the client says about itself; `None` when it never registered (a user
    /// without the `dlock:client:` key pattern) or is gone.
    pub client: Option<ClientDescription>,
}

/// The lock hash's fields, sorted into their meanings.
#[derive(Default)]
pub(crate) struct Fields {
    holds: Vec<(String, u64)>,
    fences: HashMap<String, u64>,
    reserved_for: Option<String>,
    min_hold: Option<String>,
}

/// The hash field that reserves a free lock for one client.
const RESERVATION: &str = "!next";
/// The hash field naming the finished holder whose `min_hold` keeps the lock taken.
const MIN_HOLD: &str = "!held";
/// The read-write lock's mode field.
const RW_MODE: &str = "mode";

impl Fields {
    /// Sorts `hash` (from `HGETALL`) into holds, fences and the reservation; `None` when
    /// a field fits none of them (not a lock of this layout).
    fn parse(hash: HashMap<String, String>) -> Option<Fields> {
        let mut fields = Fields::default();
        for (field, value) in hash {
            if field == RESERVATION {
                fields.reserved_for = Some(value);
            } else if field == MIN_HOLD {
                fields.min_hold = Some(value);
            } else if let Some(owner) = field.strip_suffix(":f").filter(|o| is_owner(o)) {
                fields.fences.insert(owner.to_owned(), value.parse().ok()?);
            } else if is_owner(&field) {
                fields.holds.push((field, value.parse().ok()?));
            } else {
                return None;
            }
        }
        fields.holds.sort();
        Some(fields)
    }
}

/// A read-write lock hash's fields (layout in `rw/scripts/common.lua`).
pub(crate) struct RwFields {
    mode: ReadWriteMode,
    /// Owner → (read holds, write holds, deadline in server ms, fence).
    owners: HashMap<String, RwOwner>,
}

#[derive(Default)]
struct RwOwner {
    reads: u64,
    writes: u64,
    deadline: Option<u64>,
    fence: Option<u64>,
}

impl RwFields {
    /// `None` when a field fits none of the read-write layout's, a number does not parse,
    /// or an owner holds nothing or has no deadline.
    fn parse(hash: HashMap<String, String>) -> Option<RwFields> {
        let mode = match hash.get(RW_MODE)?.as_str() {
            "read" => ReadWriteMode::Read,
            "write" => ReadWriteMode::Write,
            _ => return None,
        };
        let mut owners: HashMap<String, RwOwner> = HashMap::new();
        for (field, value) in hash {
            if field == RW_MODE {
                continue;
            }
            let number: u64 = value.parse().ok()?;
            let (owner, slot): (&str, fn(&mut RwOwner, u64)) = if is_owner(&field) {
                (&field, |o, n| o.reads = n)
            } else if let Some(owner) = field.strip_suffix(":w").filter(|o| is_owner(o)) {
                (owner, |o, n| o.writes = n)
            } else if let Some(owner) = field.strip_suffix(":t").filter(|o| is_owner(o)) {
                (owner, |o, n| o.deadline = Some(n))
            } else if let Some(owner) = field.strip_suffix(":f").filter(|o| is_owner(o)) {
                (owner, |o, n| o.fence = Some(n))
            } else {
                return None;
            };
            slot(owners.entry(owner.to_owned()).or_default(), number);
        }
        if owners.values().any(|o| o.deadline.is_none()) {
            return None;
        }
        Some(RwFields { mode, owners })
    }
}

/// A semaphore's grants hash (layout in `semaphore/scripts/common.lua`): grant → (permits,
/// deadline in server ms); `None` when a field fits neither or a grant lacks one of them.
fn parse_grants(hash: HashMap<String, String>) -> Option<Vec<(String, u64, u64)>> {
    let mut permits: HashMap<String, u64> = HashMap::new();
    let mut deadlines: HashMap<String, u64> = HashMap::new();
    for (field, value) in hash {
        let number: u64 = value.parse().ok()?;
        if let Some(grant) = field.strip_suffix(":t").filter(|g| is_owner(g)) {
            deadlines.insert(grant.to_owned(), number);
        } else if is_owner(&field) {
            permits.insert(field, number);
        } else {
            return None;
        }
    }
    if permits.len() != deadlines.len() {
        return None;
    }
    let mut grants = permits
        .into_iter()
        .map(|(grant, n)| Some((deadlines.remove(&grant)?, grant, n)))
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .map(|(deadline, grant, n)| (grant, n, deadline))
        .collect::<Vec<_>>();
    grants.sort();
    Some(grants)
}

/// What the lock key's hash holds.
pub(crate) enum Layout {
    Lock(Fields),
    ReadWrite(RwFields),
}

impl Layout {
    /// The layout `hash` has; `None` when it fits neither (an empty hash is a free lock).
    fn parse(hash: HashMap<String, String>) -> Option<Layout> {
        if hash.contains_key(RW_MODE) {
            RwFields::parse(hash).map(Layout::ReadWrite)
        } else {
            Fields::parse(hash).map(Layout::Lock)
        }
    }
}

/// Whether `field` is an owner field: `<client id>:<number>`.
fn is_owner(field: &str) -> bool {
    field.split_once(':').is_some_and(|(client, n)| {
        !client.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    })
}

/// Time from server time `now` (ms) to `deadline` (ms), none when passed.
fn until(deadline: u64, now: u64) -> Option<Duration> {
    deadline
        .checked_sub(now)
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
}

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
    /// # async fn main() -> dlock_core::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// use dlock_core::{LockKind, ReadWriteMode};
    ///
    /// let client = dlock_core::LockClient::builder()
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
            .query("inspect", redis::cmd("GET").arg(&keys.fence))
            .await?;
        let mut info = LockInfo {
            name: self.name().to_owned(),
            kind: LockKind::Lock,
            key: keys.key.clone(),
            holders: Vec::new(),
            remaining_lease: None,
            reserved_for: None,
            kept_for_min_hold: None,
            waiting_clients: Vec::new(),
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
        info.subscribers = self.subscribers(&keys.channel).await?;
        info.reserved_for = match fields.reserved_for.clone() {
            Some(id) => Some(describe(id).await?),
            None => None,
        };
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
        info.subscribers = self.subscribers(&keys.channel).await?;
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
        let grants = parse_grants(hash).ok_or_else(|| self.wrong_type("hash".to_owned()))?;
        let now = self.server_time(&sem.grants).await?;
        let client = self.client();
        let grants = try_join_all(
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
        .await?;
        let ttl: i64 = self
            .query("inspect", redis::cmd("PTTL").arg(&sem.grants))
            .await?;
        let taken = grants.iter().map(|g| g.holds).sum();
        info.kind = LockKind::Semaphore;
        info.key = sem.grants.clone();
        info.remaining_lease = u64::try_from(ttl).ok().map(Duration::from_millis);
        info.subscribers = self.subscribers(&sem.grants).await?;
        info.holders = grants
            .iter()
            .map(|g| LockHolder {
                owner: g.owner.clone(),
                holds: g.holds,
                fence: None,
            })
            .collect();
        info.semaphore = Some(SemaphoreInfo {
            capacity_key: sem.capacity,
            available: capacity.unwrap_or(0).saturating_sub(taken),
            capacity,
            grants,
            taken,
        });
        Ok(true)
    }

    /// How many connections listen on `channel` (in its slot's master in a cluster).
    async fn subscribers(&self, channel: &str) -> Result<u64> {
        let numsub = if self.client().inner.backend.is_cluster() {
            "SHARDNUMSUB"
        } else {
            "NUMSUB"
        };
        let counts: HashMap<String, u64> = self
            .client()
            .inner
            .backend
            .query_in_slot_of(redis::cmd("PUBSUB").arg(numsub).arg(channel), channel)
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
    /// Who holds the lock now ([`LockInfo::holders`] alone, for a lock, a fair lock or a
    /// read-write lock; a semaphore's grants are not read): the one read a watcher
    /// repeats, `TYPE` and `HGETALL` (and `TIME` for a read-write lock) and a `GET` of
    /// each holder's description.
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
        self.holders_in(layout).await
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

/// One lock watched through a connection on which Redis itself reports each change of
/// the lock hash, from [`Lock::track`]: a watcher that only polled would miss a hold
/// shorter than its interval.
///
/// The connection is dedicated to this tracker: RESP3, `CLIENT TRACKING ON`, to the
/// server that owns the lock key (the one server, the Sentinel's current master, or the
/// master of the key's cluster slot). Each [`holders`](LockTracker::holders) reads the
/// hash on it, which asks Redis to report the next change; [`changed`](LockTracker::changed)
/// waits for that report. Read-write locks are tracked too; a semaphore's grants are not
/// (they live under other keys).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> dlock_core::Result<()> {
/// # let server = dlock_tests::RedisServer::start();
/// # let client = dlock_core::LockClient::connect(&server.url()).await?;
/// let lock = client.lock("job");
/// let mut tracker = lock.track().await?;
/// assert!(tracker.holders().await?.is_empty()); // also arms the next report
/// let guard = lock.lock().await?;
/// tracker.changed().await?; // Redis reported the acquisition
/// assert_eq!(tracker.holders().await?.len(), 1);
/// # guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
pub struct LockTracker {
    lock: Lock,
    tracking: Tracking,
}

impl std::fmt::Debug for LockTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockTracker")
            .field("name", &self.lock.name())
            .finish_non_exhaustive()
    }
}

impl Lock {
    /// A [`LockTracker`] for this lock: opens its connection and turns tracking on.
    ///
    /// # Errors
    ///
    /// [`LockError::Redis`] with `NOPERM` for a user without `+client|tracking` (a
    /// watcher can fall back to polling [`holders`](Lock::holders)); connection errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call closes the connection it opened.
    pub async fn track(&self) -> Result<LockTracker> {
        self.check_name()?;
        let tracking = self
            .client()
            .inner
            .backend
            .tracking(&self.keys().key)
            .await
            .map_err(|e| e.into_lock_error(self.name(), "track"))?;
        Ok(LockTracker {
            lock: self.clone(),
            tracking,
        })
    }
}

impl LockTracker {
    /// Who holds the lock now, as [`Lock::holders`], read on the tracking connection:
    /// Redis reports the next change of the hash after this read.
    ///
    /// # Errors
    ///
    /// As [`Lock::holders`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads (a dropped read may leave the next report unarmed; read
    /// again).
    pub async fn holders(&mut self) -> Result<Vec<LockHolder>> {
        let key = self.lock.keys().key.clone();
        let name = self.lock.name().to_owned();
        let found: String = self
            .tracking
            .query(redis::cmd("TYPE").arg(&key))
            .await
            .map_err(|e| e.into_lock_error(&name, "track"))?;
        if found != "hash" && found != "none" {
            return Err(self.lock.wrong_type(found));
        }
        let hash: HashMap<String, String> = self
            .tracking
            .query(redis::cmd("HGETALL").arg(&key))
            .await
            .map_err(|e| e.into_lock_error(&name, "track"))?;
        let layout = self.lock.parse_layout(hash)?;
        self.lock.holders_in(layout).await
    }

    /// Waits until Redis reports a change of the lock hash since the last
    /// [`holders`](LockTracker::holders) (a write, its expiry or deletion, or a flush).
    ///
    /// # Errors
    ///
    /// [`LockError::Redis`] when the connection is lost: reports may be missing from then
    /// on; track again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a report that arrives meanwhile is kept for the next call.
    pub async fn changed(&mut self) -> Result<()> {
        let key = self.lock.keys().key.clone();
        if self.tracking.changed(&key).await {
            return Ok(());
        }
        Err(crate::redis::CallError::Redis(redis::RedisError::from((
            redis::ErrorKind::Io,
            "the tracking connection closed",
        )))
        .into_lock_error(self.lock.name(), "track"))
    }
}

impl LockClient {
    /// The names (without the key prefix) of the locks whose name starts with
    /// `name_prefix`, sorted: every hash under this client's key prefix laid out as a
    /// lock, a fair lock or a read-write lock, and every semaphore (its capacity key, which
    /// stays while no permit is held), found with `SCAN` on every master of the
    /// deployment (never `KEYS`, which would block Redis) and read with `HGETALL`. A lock
    /// taken or released meanwhile may or may not be listed; a name used by a lock and a
    /// semaphore at once is listed once.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock_core::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock_core::LockClient::connect(&server.url()).await?;
    /// let guard = client.lock("invoice:7").lock().await?;
    /// let _other = client.lock("stock:1").lock().await?;
    /// let reader = client.rw_lock("invoice:8").read().lock().await?;
    /// let permit = client.semaphore("invoice:9", 2).acquire(1).await?;
    /// assert_eq!(
    ///     client.list_locks("invoice:").await?,
    ///     ["invoice:7", "invoice:8", "invoice:9"]
    /// );
    /// # guard.unlock().await?;
    /// # reader.unlock().await?;
    /// # permit.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`] for a prefix over [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)
    /// bytes or with a control character; Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn list_locks(&self, name_prefix: &str) -> Result<Vec<String>> {
        check_text("name prefix", name_prefix)?;
        let prefix = self.key_prefix();
        let pattern = format!("{}*", glob_escape(&format!("{prefix}{name_prefix}")));
        let backend = &self.inner.backend;
        let keys = backend
            .scan(&pattern, "hash")
            .await
            .map_err(|e| e.into_lock_error(name_prefix, "list"))?;
        let mut names = Vec::new();
        for key in keys {
            let hash: HashMap<String, String> = backend
                .query(redis::cmd("HGETALL").arg(&key))
                .await
                .map_err(|e| e.into_lock_error(&key, "list"))?;
            // Gone since the scan, or someone else's hash.
            if hash.is_empty() || Layout::parse(hash).is_none() {
                continue;
            }
            if let Some(name) = key.strip_prefix(prefix) {
                names.push(name.to_owned());
            }
        }
        let capacities = backend
            .scan(&SemKeys::capacity_pattern(prefix, name_prefix), "string")
            .await
            .map_err(|e| e.into_lock_error(name_prefix, "list"))?;
        names.extend(
            capacities
                .iter()
                .filter_map(|key| SemKeys::name_of_capacity(prefix, key)),
        );
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// `id` (an owner field or a client id) with the description its client registered.
    pub(crate) async fn describe(&self, id: String) -> Result<LockClientRef> {
        let client_id = id
            .split_once(':')
            .map_or(id.as_str(), |(c, _)| c)
            .to_owned();
        let key = client_key(self.key_prefix(), &client_id);
        let text: Option<String> = self
            .inner
            .backend
            .query(redis::cmd("GET").arg(&key))
            .await
            .map_err(|e| e.into_lock_error(&key, "inspect"))?;
        Ok(LockClientRef {
            client: text.as_deref().and_then(ClientDescription::decode),
            id,
            client_id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_fields_are_sorted_into_holds_fences_and_the_reservation() {
        let hash = HashMap::from([
            ("c1:1".to_owned(), "2".to_owned()),
            ("c1:1:f".to_owned(), "17".to_owned()),
            ("!next".to_owned(), "c2".to_owned()),
        ]);
        let fields = Fields::parse(hash).unwrap();
        let held = HashMap::from([("!held".to_owned(), "c3:4".to_owned())]);
        assert_eq!(
            Fields::parse(held).unwrap().min_hold.as_deref(),
            Some("c3:4")
        );
        assert_eq!(fields.holds, [("c1:1".to_owned(), 2)]);
        assert_eq!(fields.fences.get("c1:1"), Some(&17));
        assert_eq!(fields.reserved_for.as_deref(), Some("c2"));
        for foreign in [
            ("mode", "read"),
            ("c1:1:w", "1"),
            ("c1:x", "1"),
            ("c1:1", "x"),
        ] {
            let hash = HashMap::from([(foreign.0.to_owned(), foreign.1.to_owned())]);
            assert!(Fields::parse(hash).is_none(), "{foreign:?}");
        }
    }

    #[test]
    fn read_write_fields_are_sorted_into_owners() {
        let hash = HashMap::from([
            ("mode".to_owned(), "write".to_owned()),
            ("c1:1".to_owned(), "1".to_owned()),
            ("c1:1:w".to_owned(), "2".to_owned()),
            ("c1:1:t".to_owned(), "1000".to_owned()),
            ("c1:1:f".to_owned(), "9".to_owned()),
        ]);
        let Some(Layout::ReadWrite(rw)) = Layout::parse(hash) else {
            panic!("not read as a read-write lock");
        };
        assert_eq!(rw.mode, ReadWriteMode::Write);
        let owner = &rw.owners["c1:1"];
        assert_eq!(
            (owner.reads, owner.writes, owner.deadline, owner.fence),
            (1, 2, Some(1000), Some(9))
        );
        for foreign in [
            vec![("mode", "read"), ("c1:1", "1")],
            vec![("mode", "both"), ("c1:1", "1"), ("c1:1:t", "5")],
            vec![("mode", "read"), ("c1:1", "1"), ("c1:1:t", "5"), ("x", "1")],
            vec![("mode", "read"), ("c1:1:t", "x")],
            vec![("mode", "read"), ("!next", "c2")],
        ] {
            let hash: HashMap<String, String> = foreign
                .iter()
                .map(|(f, v)| ((*f).to_owned(), (*v).to_owned()))
                .collect();
            assert!(Layout::parse(hash).is_none(), "{foreign:?}");
        }
    }

    #[test]
    fn semaphore_grants_pair_permits_with_deadlines() {
        let hash = HashMap::from([
            ("c1:2".to_owned(), "2".to_owned()),
            ("c1:2:t".to_owned(), "500".to_owned()),
            ("c2:1".to_owned(), "1".to_owned()),
            ("c2:1:t".to_owned(), "700".to_owned()),
        ]);
        assert_eq!(
            parse_grants(hash).unwrap(),
            [("c1:2".to_owned(), 2, 500), ("c2:1".to_owned(), 1, 700)]
        );
        for foreign in [
            vec![("c1:2", "2")],
            vec![("c1:2:t", "2")],
            vec![("c1:2", "2"), ("c1:3:t", "2")],
            vec![("c1:2", "x"), ("c1:2:t", "2")],
            vec![("mode", "read")],
        ] {
            let hash: HashMap<String, String> = foreign
                .iter()
                .map(|(f, v)| ((*f).to_owned(), (*v).to_owned()))
                .collect();
            assert!(parse_grants(hash).is_none(), "{foreign:?}");
        }
    }
}
