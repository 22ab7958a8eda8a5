//! The one error type of dlock-core.

use std::time::Duration;

use humantime::format_duration;

use crate::kind::LockKind;

/// What went wrong with a lock operation.
///
/// A variant about one lock names it (as given to [`LockClient::lock`](crate::LockClient::lock),
/// without the key prefix) so a log line says which resource was affected; one about the
/// client, its settings or its server names those instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The wait budget ran out before the lock (or a semaphore's permits) could be
    /// acquired.
    #[error("{}", busy(.name, *.waited, .permits))]
    Timeout {
        /// The lock's name.
        name: String,
        /// How long the caller was prepared to wait.
        waited: Duration,
        /// For a semaphore, how many permits were asked of how many; `None` for the
        /// other kinds, which one owner at a time holds.
        permits: Option<PermitsAsked>,
    },

    /// A release or check found that this owner does not hold the lock: its lease ran out,
    /// it was force-unlocked, or it was never acquired by this owner. Another owner's lock
    /// is never touched in this case.
    #[error("lock \"{name}\" is not held by this owner: its lease expired, it was force-unlocked, or another owner holds it")]
    NotHeld {
        /// The lock's name.
        name: String,
    },

    /// The lock was lost while its guard was alive: the key vanished, or the lease ran out
    /// before a renewal could be confirmed. The critical section is no longer protected.
    #[error("lock \"{name}\" was lost while held: {reason}")]
    Lost {
        /// The lock's name.
        name: String,
        /// Why the guard considers the lock lost.
        reason: LossReason,
    },

    /// Redis refused or failed a command (connection, protocol or script error).
    #[error("Redis{} failed while trying to {action} lock \"{name}\": {source}", at(.server))]
    Redis {
        /// The lock's name (empty for client-wide operations such as connecting).
        name: String,
        /// What dlock was doing: "acquire", "release", "renew", "connect to"...
        action: &'static str,
        /// The deployment that failed, as the client names it (passwords replaced by
        /// `***`); `None` when the failure is dlock's reading of an answer (a reply of another
        /// dlock version, say).
        server: Option<String>,
        /// The error reported by the `redis` crate.
        #[source]
        source: redis::RedisError,
    },

    /// The client could not reach Redis when it was built.
    #[error("could not connect to Redis at {address}: {}", match .source {
        Some(e) => e.to_string(),
        None => "no answer within the connect timeout".to_owned(),
    })]
    Connect {
        /// The address, with any password replaced by `***`.
        address: String,
        /// The connection error, `None` when the connect timeout elapsed.
        #[source]
        source: Option<redis::RedisError>,
    },

    /// The client was told to call dlock's function library
    /// ([`ScriptMode::Functions`](crate::ScriptMode::Functions)), or may not load scripts,
    /// and the server does not have this version's library.
    #[error("dlock's function library {library} is not loaded on {address} ({detail}); load it once with an administrator's credentials (LockClientBuilder::load_functions, or FUNCTION LOAD REPLACE with FunctionLibrary::code()), or let this client load scripts (ScriptMode::Eval)")]
    FunctionLibraryMissing {
        /// The deployment, with any password replaced by `***`.
        address: String,
        /// The library this client calls: `dlock_<version>`.
        library: String,
        /// What the server answered.
        detail: String,
    },

    /// The Redis deployment records another layout version for this key prefix: clients
    /// of another dlock version, which name or fill their keys differently, use (or
    /// used) it, and the two would not see each other's locks. The client refused to
    /// start; nothing was written.
    #[error("{address} records dlock layout version {recorded:?} for key prefix {key_prefix:?} (in {key:?}), but this client lays out locks as version {ours}: two layouts must never lock the same names, so it refuses to start. Stop every client of the other version first (a rolling deploy cannot mix them), then delete {key:?}; or give this version its own key_prefix")]
    LayoutMismatch {
        /// The deployment, with any password replaced by `***`.
        address: String,
        /// The client's key prefix.
        key_prefix: String,
        /// Where the version is recorded: `dlock:layout:<key prefix>`.
        key: String,
        /// The layout version of this client.
        ours: u32,
        /// The version recorded in Redis.
        recorded: String,
    },

    /// The client's Redis user may not run commands dlock's scripts (or the client) need
    /// there. A script refused half-way keeps what it wrote before (a grant refused
    /// `PEXPIREAT` would leave a hold that never expires), so the client refused to start.
    #[error("the Redis user of {address} may not run {}, which dlock needs; the client refused to start. Give the user the rule of docs/SECURITY.md (\"A least-privilege ACL user\") for this deployment and script mode", missing.join(", "))]
    MissingCommands {
        /// The deployment, with any password replaced by `***`.
        address: String,
        /// The commands refused (`hset`, `pubsub|numsub`...).
        missing: Vec<String>,
    },

    /// The acquire script took the lock on the master, but fewer replicas than the client's
    /// [`replica_acks`](crate::LockClientBuilder::replica_acks) confirmed it in time: a
    /// failover could have lost it. dlock released it again.
    #[error("lock \"{name}\" was taken on the master but only {acked} of {wanted} replicas confirmed it within {}; it was released, since a failover could lose it", format_duration(*.within))]
    NotReplicated {
        /// The lock's name.
        name: String,
        /// How many replicas confirmed the write.
        acked: u64,
        /// How many were required.
        wanted: u32,
        /// How long dlock waited for them.
        within: Duration,
    },

    /// Redis did not answer within the client's command timeout.
    #[error("Redis{} did not answer within {} while trying to {action} lock \"{name}\"; check that the server is reachable or raise `command_timeout`", at(.server), format_duration(*.timeout))]
    CommandTimeout {
        /// The lock's name.
        name: String,
        /// What dlock was doing.
        action: &'static str,
        /// The deployment that did not answer, as the client names it (passwords replaced
        /// by `***`).
        server: Option<String>,
        /// The command timeout that elapsed.
        timeout: Duration,
    },

    /// A lease, wait or other duration setting is outside what dlock and Redis can honour.
    #[error("invalid {what} {}: {reason}", format_duration(*.value))]
    InvalidDuration {
        /// Which setting: "lease", "watchdog_timeout"...
        what: &'static str,
        /// The value given.
        value: Duration,
        /// Why it is rejected and what is accepted.
        reason: &'static str,
    },

    /// A lock name or key prefix is not usable: empty (names only), longer than
    /// [`MAX_NAME_LEN`](crate::limits::MAX_NAME_LEN) bytes, or containing an ASCII control
    /// character.
    ///
    /// A rejected name may be huge, so `name` holds at most its first 64 characters
    /// (followed by `…` when cut) and the message adds the full length in bytes.
    #[error("invalid {what} {name:?}{}: {reason}", shown_len(name, *len))]
    InvalidName {
        /// `"lock name"` or `"key prefix"`.
        what: &'static str,
        /// The name given, cut to its first 64 characters plus `…` when longer.
        name: String,
        /// Length in bytes of the whole name given.
        len: usize,
        /// Why it is rejected.
        reason: String,
    },

    /// The lock's key holds a value of another type (a string, a list...): the name is
    /// used by application data, not by a lock. Nothing was written. Give the lock
    /// another name, or the client a `key_prefix` that keeps locks apart from data.
    #[error("lock \"{name}\": its key holds a Redis {found}, not a lock; use another name or a key prefix")]
    WrongType {
        /// The lock's name.
        name: String,
        /// The Redis type found at the key (`string`, `list`...).
        found: String,
    },

    /// The lock name is held as another kind of lock. Locks (and multi-locks), fair locks
    /// and read-write locks share their names: a name is held as one of them at a time,
    /// and an acquisition (or force unlock) of another kind is refused at once rather
    /// than waiting for a release it would not be told of, or taking the other kind's
    /// lock over. Nothing was written. Use one kind per name, or names that keep kinds
    /// apart (see [`LockKind`](crate::inspect::LockKind)).
    #[error("lock \"{name}\" is held as a {found}; a {requested} of the same name cannot take it: locks, fair locks and read-write locks share names, so use one kind per name")]
    KindMismatch {
        /// The lock's name.
        name: String,
        /// The kind this call asked for.
        requested: LockKind,
        /// The kind that holds the name.
        found: LockKind,
    },

    /// [`LockClient::shutdown`](crate::LockClient::shutdown) found background releases
    /// (of dropped guards, cleanups of acquisitions that ended without a guard) that Redis
    /// did not answer: still running after its bound (they go on while the process runs),
    /// or given up after their retries. What they would have given back lapses with its
    /// lease (a lock, a grant) or is passed over (a waiter's registration).
    #[error("shutdown: {failed} of the client's background releases gave up without Redis' answer and {pending} were still unanswered after {}; what they would have given back lapses with its lease", format_duration(*.waited))]
    ShutdownIncomplete {
        /// Background releases still queued or running.
        pending: usize,
        /// Releases of dropped guards that gave up without Redis' answer (a cleanup of
        /// an acquisition that ended without a guard is not counted: nothing is owed).
        failed: usize,
        /// How long shutdown waited.
        waited: Duration,
    },

    /// A `#[distributed_lock]` function without `client = ...` ran before a process-wide
    /// client was registered (or [`global_client`](crate::global_client) was asked for
    /// one). Found at the first call, so check at start-up with `global_client()`.
    #[error("no LockClient registered for #[distributed_lock]{}: call dlock::set_global(client) at start-up (and check it there with dlock::global_client()), or pass `client = ...` to the attribute", needed_by(*.function))]
    NoClient {
        /// The annotated function that needed the client (`module::function`), `None`
        /// when [`global_client`](crate::global_client) was called directly.
        function: Option<&'static str>,
    },

    /// The client could not be configured (bad address, bad option).
    #[error("invalid configuration: {0}")]
    Config(String),

    /// A write lock was asked for by a call chain that holds the read lock of the same
    /// [`ReadWriteLock`](crate::ReadWriteLock) (inside a read guard's `scope`) and no write
    /// lock. Upgrading is refused at once: two readers upgrading together would each wait
    /// for the other's read hold forever. Nothing was sent to Redis.
    #[error("read-write lock \"{name}\": this call chain holds the read lock and asked for the write lock; upgrading is not supported (two upgraders would deadlock). Release the read hold first, or take the write lock from the start (a writer may take the read lock too)")]
    UpgradeNotSupported {
        /// The lock's name.
        name: String,
    },

    /// A fenced write was refused: the storage has already seen a higher fencing token
    /// for this record, so another holder of the lock wrote after this one's lock was
    /// lost (its lease ran out while it was paused, or a failover lost it). Nothing was
    /// written. Do not retry with the same token: the critical section is over.
    #[error("fenced write to {key:?} refused: it presented fencing token {presented}, but token {seen} has already written there (a later holder of the lock); this holder lost its lock and must stop")]
    StaleToken {
        /// The record written to.
        key: String,
        /// The highest token the record has seen.
        seen: u64,
        /// The token this write presented.
        presented: u64,
    },

    /// A fenced write ([`FencedWrites`](crate::fencing::FencedWrites)) found a value of another
    /// type where it reads or writes: at the application key (a hash, a list... where a
    /// string or nothing is expected) or at its bookkeeping key. Nothing was written. The
    /// key is used by other data: write another key.
    #[error("fenced write to {key:?} refused: {at:?} holds a Redis {found}, where the fenced writes need {}; nothing was written", if at == key { "a string (or no value)" } else { "their bookkeeping hash" })]
    FencedWrongType {
        /// The application key written to.
        key: String,
        /// The key that holds the other type: `key` itself, or its bookkeeping key.
        at: String,
        /// The Redis type found there (`hash`, `list`...).
        found: String,
    },

    /// A fenced write (or [`highest_fence`](crate::fencing::FencedWrites::highest_fence))
    /// found no fencing token where the key's highest token is recorded: something other
    /// than dlock wrote its bookkeeping hash. Nothing was written. Once no holder of an
    /// older token can still write the key, delete the bookkeeping hash (the next fenced
    /// write records its own token); until then, write the highest token issued back.
    #[error("fenced write to {key:?} refused: its bookkeeping {at:?} records {found:?}, which is no fencing token (something else wrote it); nothing was written. Once no holder of an older token can still write {key:?}, delete {at:?}; until then, put the highest token issued back in its `fence` field")]
    FencedRecordCorrupt {
        /// The application key written to.
        key: String,
        /// The bookkeeping hash.
        at: String,
        /// What its `fence` field holds (its first 64 characters).
        found: String,
    },

    /// A same-slot [`MultiLock`](crate::MultiLock) was asked for over keys in more than
    /// one Redis Cluster slot: one script cannot take them atomically (the cluster refuses
    /// scripts across slots, and a single server would allow what a cluster would refuse
    /// later). Nothing was sent to Redis. Give the names a common hash tag
    /// (`order:{42}:items`, `order:{42}:payment`), or use `MultiLock::sequential`.
    #[error("same-slot multi-lock over keys in different cluster slots: {}; give the names a common hash tag ({{tag}}) or use MultiLock::sequential", shown_slots(keys))]
    CrossSlot {
        /// Every key of the set (key prefix + name) with its cluster slot.
        keys: Vec<(String, u16)>,
    },

    /// A [`MultiGuard`](crate::MultiGuard)'s unlock could not release every lock, and not
    /// because every hold was gone (that is [`LockError::NotHeld`]): the locks it does not
    /// list were released. Each failure is what that lock's own unlock reported: a
    /// [`LockError::NotHeld`] means its lease ran out or it was force-unlocked before the
    /// unlock, a Redis error means its release is retried in the background.
    #[error("multi-lock unlock failed for {} lock(s): {}", failures.len(), shown_failures(failures))]
    PartialUnlock {
        /// The name of every lock that failed to release, with its error.
        failures: Vec<(String, LockError)>,
    },

    /// A [`RedLock`](crate::redlock::RedLock) acquisition ended without a majority of its servers
    /// granting the lock, and too many of them failed or did not answer in time (within
    /// the per-server timeout, 5 % of the lease) for the lock to be merely busy. Everything
    /// granted was released. Check that a majority of the servers is up and reachable.
    #[error("RedLock \"{name}\": only {granted} of {nodes} servers granted the lock in the last round, {unreachable} failed or did not answer in time, and a majority of {quorum} is needed; gave up after {}. Check that a majority of the servers is reachable", format_duration(*.waited))]
    NoQuorum {
        /// The lock's name.
        name: String,
        /// Servers that granted the lock in the last round.
        granted: usize,
        /// Servers that failed or did not answer within the per-server timeout.
        unreachable: usize,
        /// Servers in the RedLock.
        nodes: usize,
        /// The majority needed.
        quorum: usize,
        /// How long the acquisition tried.
        waited: Duration,
    },

    /// A majority of a [`RedLock`](crate::redlock::RedLock)'s servers granted the lock, but the
    /// round took so long that no validity was left (lease − elapsed − clock-drift
    /// allowance ≤ 0): the lock could already have expired on some servers. It was released
    /// on every server instead of handing out an expired guard. The lease is too short for
    /// the network: use one far longer than the servers' round trip.
    #[error("RedLock \"{name}\": a majority granted the lock but the round took {} of the {} lease (less the clock-drift allowance), so no validity was left; it was released on every server. Use a lease far longer than the round trip to the servers", format_duration(*.elapsed), format_duration(*.lease))]
    ValidityExpired {
        /// The lock's name.
        name: String,
        /// The lease asked for.
        lease: Duration,
        /// How long the last round took.
        elapsed: Duration,
    },

    /// A [`Semaphore`](crate::Semaphore) was asked for a number of permits it can never
    /// grant: 0, more than its capacity, or any at all from a handle created with 0
    /// permits. Reported at once, so that no wait can go on forever; nothing was sent to
    /// Redis.
    #[error("semaphore \"{name}\": {}", permits_problem(*asked, *capacity))]
    InvalidPermits {
        /// The semaphore's name.
        name: String,
        /// The permits asked for (for a handle created with 0 permits, 0).
        asked: u32,
        /// The capacity the handle was created with.
        capacity: u32,
    },

    /// The capacity stored in Redis for a [`Semaphore`](crate::Semaphore) differs from
    /// the one its handle was created with: two processes disagree on the configuration,
    /// or [`set_permits`](crate::Semaphore::set_permits) changed it. Nothing was granted;
    /// the stored capacity stays until `set_permits` changes it.
    #[error("semaphore \"{name}\": this handle was created with {handle} permits but Redis stores a capacity of {stored}; create the handle with {stored} permits, or call set_permits({handle}) if {handle} is the intended capacity")]
    CapacityMismatch {
        /// The semaphore's name.
        name: String,
        /// The capacity the handle was created with.
        handle: u32,
        /// The capacity stored in Redis.
        stored: u32,
    },

    /// A [`Semaphore`](crate::Semaphore) or [`ReadWriteLock`](crate::ReadWriteLock)
    /// already has [`MAX_HOLDERS`](crate::limits::MAX_HOLDERS) holders (grants, or
    /// readers) and one more was refused at once, without waiting: each call counts
    /// every holder, and the bound keeps it short for everyone sharing the server. Try
    /// again when holders have left, or spread the holders over several names. Nothing
    /// was written.
    #[error("\"{name}\" has {limit} holders already, the most a semaphore or read-write lock takes; try again after some leave, or spread them over several names")]
    TooManyHolders {
        /// The semaphore's or read-write lock's name.
        name: String,
        /// The bound: [`MAX_HOLDERS`](crate::limits::MAX_HOLDERS).
        limit: usize,
    },
}

/// How many of a semaphore's permits a [`LockError::Timeout`] did not get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PermitsAsked {
    /// The permits asked for.
    pub asked: u32,
    /// The semaphore's capacity, as the handle knew it.
    pub capacity: u32,
}

/// The message of [`LockError::Timeout`]: for a semaphore, what the permits say about the
/// other owners (fewer than `asked` were free, so they held at least the rest).
fn busy(name: &str, waited: Duration, permits: &Option<PermitsAsked>) -> String {
    let waited = format_duration(waited);
    match permits {
        None => format!("lock \"{name}\" not acquired within {waited}: another owner still holds it"),
        Some(PermitsAsked { asked, capacity }) => format!(
            "semaphore \"{name}\": {asked} of its {capacity} permits not acquired within {waited}: other owners held at least {} of them",
            capacity.saturating_sub(*asked).saturating_add(1)
        ),
    }
}

/// ` at <server>` when the server that failed is known, for [`LockError::Redis`] and
/// [`LockError::CommandTimeout`].
fn at(server: &Option<String>) -> String {
    server
        .as_deref()
        .map(|server| format!(" at {server}"))
        .unwrap_or_default()
}

/// `a (slot 1), b (slot 2)` for [`LockError::CrossSlot`].
fn shown_slots(keys: &[(String, u16)]) -> String {
    keys.iter()
        .map(|(key, slot)| format!("{key:?} (slot {slot})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `"a": why; "b": why` for [`LockError::PartialUnlock`].
fn shown_failures(failures: &[(String, LockError)]) -> String {
    failures
        .iter()
        .map(|(name, error)| format!("{name:?}: {error}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// What is wrong with asking a semaphore of `capacity` permits for `asked` of them.
fn permits_problem(asked: u32, capacity: u32) -> String {
    if capacity == 0 {
        "the handle was created with 0 permits, which can never be granted; create it with at least 1".to_owned()
    } else if asked == 0 {
        format!("asked for 0 permits; ask for 1 to {capacity}")
    } else {
        format!("asked for {asked} permits but its capacity is {capacity}, so the wait could never end; ask for 1 to {capacity}, or raise the capacity with set_permits")
    }
}

/// Characters of a rejected name kept in [`LockError::InvalidName`].
const SHOWN_NAME_CHARS: usize = 64;

impl LockError {
    /// An [`LockError::InvalidName`] that does not carry a huge name into messages.
    pub(crate) fn invalid_name(what: &'static str, name: &str, reason: String) -> LockError {
        let shown = match name.char_indices().nth(SHOWN_NAME_CHARS) {
            Some((cut, _)) => format!("{}…", &name[..cut]),
            None => name.to_owned(),
        };
        LockError::InvalidName {
            what,
            name: shown,
            len: name.len(),
            reason,
        }
    }
}

/// ` (N bytes)` when the shown name was cut, so the reader knows how big the whole is.
fn shown_len(shown: &str, len: usize) -> String {
    if shown.chars().count() > SHOWN_NAME_CHARS {
        format!(" ({len} bytes)")
    } else {
        String::new()
    }
}

/// Why a held lock is considered lost. See [`LockError::Lost`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// A renewal reached Redis and found the lock no longer held by this owner.
    NotHeldOnRenewal,
    /// A check found the lock no longer held by this owner: after an unlock message (it was
    /// force-unlocked, or expired and was taken over), or when a re-entry found it gone.
    NotHeldOnCheck,
    /// The local deadline (last confirmed acquire or renewal + lease) passed: an explicit
    /// lease, which is never renewed, ended while its guard was still held, or a watchdog
    /// renewal was not confirmed in time (Redis unreachable or too slow).
    LeaseExpired,
    /// The lock's key now holds another type of value (`found`): something overwrote it.
    WrongType {
        /// The Redis type found at the key (`string`, `list`...).
        found: &'static str,
    },
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LossReason::NotHeldOnRenewal => {
                f.write_str("a renewal found it no longer held by this owner")
            }
            LossReason::NotHeldOnCheck => f.write_str(
                "a check found it no longer held by this owner (force-unlocked, or expired and taken over)",
            ),
            LossReason::LeaseExpired => f.write_str(
                "its lease ran out while it was held (an explicit lease ended, or no renewal was confirmed in time)",
            ),
            LossReason::WrongType { found } => write!(
                f,
                "its key now holds a Redis {found}: something overwrote it"
            ),
        }
    }
}

impl LockError {
    /// `true` for [`LockError::Timeout`]: the lock is busy, trying again later may succeed.
    pub fn is_timeout(&self) -> bool {
        matches!(self, LockError::Timeout { .. })
    }

    /// `true` for [`LockError::NotHeld`].
    pub fn is_not_held(&self) -> bool {
        matches!(self, LockError::NotHeld { .. })
    }

    /// `true` when a Redis deployment failed or did not answer: [`ErrorKind::Unavailable`]
    /// and [`ErrorKind::NotReplicated`]. A RedLock without a majority
    /// ([`ErrorKind::NoQuorum`]) is not counted: it says which servers answered, and may
    /// be merely contended.
    pub fn is_redis(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::Unavailable | ErrorKind::NotReplicated
        )
    }

    /// What kind of failure this is, to match on or to label a metric with
    /// ([`ErrorKind::as_str`]) without reading the variant's fields.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dlock::{ErrorKind, LockError};
    ///
    /// fn outcome(result: &dlock::Result<()>) -> &'static str {
    ///     match result {
    ///         Ok(()) => "ok",
    ///         Err(error) => error.kind().as_str(),
    ///     }
    /// }
    /// let busy = LockError::Timeout {
    ///     name: "goods:42".into(),
    ///     waited: Duration::from_secs(2),
    ///     permits: None,
    /// };
    /// assert_eq!(busy.kind(), ErrorKind::Timeout);
    /// assert_eq!(outcome(&Err(busy)), "timeout");
    /// ```
    pub fn kind(&self) -> ErrorKind {
        match self {
            LockError::Timeout { .. } => ErrorKind::Timeout,
            LockError::NotHeld { .. } => ErrorKind::NotHeld,
            LockError::Lost { .. } => ErrorKind::Lost,
            LockError::Redis { .. }
            | LockError::Connect { .. }
            | LockError::CommandTimeout { .. }
            | LockError::ShutdownIncomplete { .. } => ErrorKind::Unavailable,
            LockError::NotReplicated { .. } => ErrorKind::NotReplicated,
            LockError::NoQuorum { .. } | LockError::ValidityExpired { .. } => ErrorKind::NoQuorum,
            LockError::InvalidDuration { .. }
            | LockError::InvalidName { .. }
            | LockError::InvalidPermits { .. }
            | LockError::CrossSlot { .. }
            | LockError::UpgradeNotSupported { .. }
            | LockError::Config(_) => ErrorKind::InvalidInput,
            LockError::WrongType { .. }
            | LockError::KindMismatch { .. }
            | LockError::FencedWrongType { .. }
            | LockError::FencedRecordCorrupt { .. }
            | LockError::CapacityMismatch { .. }
            | LockError::TooManyHolders { .. } => ErrorKind::Conflict,
            LockError::StaleToken { .. } => ErrorKind::StaleToken,
            LockError::PartialUnlock { .. } => ErrorKind::PartialUnlock,
            LockError::FunctionLibraryMissing { .. }
            | LockError::NoClient { .. }
            | LockError::LayoutMismatch { .. }
            | LockError::MissingCommands { .. } => ErrorKind::Setup,
        }
    }
}

/// The kind of a [`LockError`] ([`LockError::kind`]): what a caller decides on. Each
/// kind groups variants that call for the same reaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The lock stayed busy for the whole wait ([`LockError::Timeout`]): try later.
    Timeout,
    /// This owner no longer holds the lock it tried to give back or check
    /// ([`LockError::NotHeld`]).
    NotHeld,
    /// A held lock was lost while its guard lived ([`LockError::Lost`]): stop the critical
    /// section.
    Lost,
    /// Redis failed, did not answer, or could not be reached ([`LockError::Redis`],
    /// [`LockError::Connect`], [`LockError::CommandTimeout`],
    /// [`LockError::ShutdownIncomplete`]).
    Unavailable,
    /// The master took the lock but too few replicas confirmed it
    /// ([`LockError::NotReplicated`]).
    NotReplicated,
    /// A RedLock got no usable majority ([`LockError::NoQuorum`],
    /// [`LockError::ValidityExpired`]).
    NoQuorum,
    /// The call was refused before anything was written: a bad name, duration, permit
    /// count, key set or configuration, or an upgrade from read to write.
    InvalidInput,
    /// The name is in use by something else: application data of another type, another
    /// kind of lock, a semaphore of another capacity, as many holders as it takes.
    Conflict,
    /// A fenced write presented a token older than one the record has seen
    /// ([`LockError::StaleToken`]): this holder lost its lock.
    StaleToken,
    /// A multi-lock's unlock failed for some of its locks
    /// ([`LockError::PartialUnlock`]).
    PartialUnlock,
    /// The application or the server is not set up for the call: no global client
    /// registered ([`LockError::NoClient`]), dlock's function library missing
    /// ([`LockError::FunctionLibraryMissing`]), another dlock version's layout in use
    /// ([`LockError::LayoutMismatch`]), or a Redis user without a command the scripts
    /// need ([`LockError::MissingCommands`]).
    Setup,
}

impl ErrorKind {
    /// A stable snake_case name (`"timeout"`, `"not_held"`, `"unavailable"`...), for logs
    /// and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Timeout => "timeout",
            ErrorKind::NotHeld => "not_held",
            ErrorKind::Lost => "lost",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::NotReplicated => "not_replicated",
            ErrorKind::NoQuorum => "no_quorum",
            ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::Conflict => "conflict",
            ErrorKind::StaleToken => "stale_token",
            ErrorKind::PartialUnlock => "partial_unlock",
            ErrorKind::Setup => "setup",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// For functions returning `std::io::Result`, e.g. under `#[distributed_lock]`.
impl From<LockError> for std::io::Error {
    fn from(error: LockError) -> Self {
        let kind = match &error {
            LockError::Timeout { .. } | LockError::CommandTimeout { .. } => {
                std::io::ErrorKind::TimedOut
            }
            LockError::Connect { .. } => std::io::ErrorKind::ConnectionRefused,
            LockError::InvalidDuration { .. }
            | LockError::InvalidName { .. }
            | LockError::CrossSlot { .. }
            | LockError::InvalidPermits { .. }
            | LockError::Config(_) => std::io::ErrorKind::InvalidInput,
            _ => std::io::ErrorKind::Other,
        };
        std::io::Error::new(kind, error)
    }
}

/// " (needed by `f`)" for [`LockError::NoClient`]: the function to look at in the message.
fn needed_by(function: Option<&'static str>) -> String {
    function.map_or_else(String::new, |f| format!(" (needed by `{f}`)"))
}

/// `Result` with [`LockError`].
pub type Result<T, E = LockError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redlock_without_a_majority_is_no_redis_failure() {
        let no_quorum = LockError::NoQuorum {
            name: "invoice:7".into(),
            granted: 1,
            unreachable: 2,
            nodes: 5,
            quorum: 3,
            waited: Duration::from_secs(1),
        };
        assert_eq!(no_quorum.kind(), ErrorKind::NoQuorum);
        assert!(!no_quorum.is_redis());
        let unanswered = LockError::CommandTimeout {
            name: "invoice:7".into(),
            action: "acquire",
            server: Some("redis://127.0.0.1:6390".into()),
            timeout: Duration::from_secs(1),
        };
        assert_eq!(unanswered.kind(), ErrorKind::Unavailable);
        assert!(unanswered.is_redis());
        assert_eq!(
            unanswered.to_string(),
            "Redis at redis://127.0.0.1:6390 did not answer within 1s while trying to acquire \
             lock \"invoice:7\"; check that the server is reachable or raise `command_timeout`"
        );
    }

    #[test]
    fn kinds_have_distinct_stable_names() {
        let kinds = [
            ErrorKind::Timeout,
            ErrorKind::NotHeld,
            ErrorKind::Lost,
            ErrorKind::Unavailable,
            ErrorKind::NotReplicated,
            ErrorKind::NoQuorum,
            ErrorKind::InvalidInput,
            ErrorKind::Conflict,
            ErrorKind::StaleToken,
            ErrorKind::PartialUnlock,
            ErrorKind::Setup,
        ];
        let names: std::collections::BTreeSet<&str> =
            kinds.iter().map(|kind| kind.as_str()).collect();
        assert_eq!(names.len(), kinds.len());
        assert_eq!(ErrorKind::NotHeld.to_string(), "not_held");
    }

    fn shown(name: &str) -> String {
        LockError::invalid_name("lock name", name, "why".to_owned()).to_string()
    }

    #[test]
    fn names_up_to_64_characters_are_shown_whole() {
        let name = "ü".repeat(64);
        assert_eq!(shown(&name), format!("invalid lock name \"{name}\": why"));
    }

    #[test]
    fn longer_names_are_cut_on_a_character_boundary_with_their_size() {
        let name = format!("{}🔒🔒", "ü".repeat(63));
        assert_eq!(
            shown(&name),
            format!(
                "invalid lock name \"{}🔒…\" (134 bytes): why",
                "ü".repeat(63)
            )
        );
        // A 65-character name ending in `…` is shown as itself, and still gets its size.
        let name = format!("{}…", "a".repeat(64));
        assert_eq!(
            shown(&name),
            format!("invalid lock name \"{name}\" (67 bytes): why")
        );
    }
}
