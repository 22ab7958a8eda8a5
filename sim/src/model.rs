//! The world the explorer moves: two locks in one slot of the simulated Redis, clients
//! that each take one of them a few times with fresh owners (one after another, or at once
//! in the client's local line) or both at once with the same-slot multi-lock's script,
//! re-entering what they hold, the network between them, and the faults the run may still inject. Each client decides with dlock's own sans-IO core where the client has
//! one (`dlock::protocol`: a message's reading, asks, a grant's take-up, the cohort bound)
//! and as dlock's client does elsewhere (docs/PROTOCOL.md, "Where an owner is in its
//! client"); the scripts decide in Redis.
//!
//! The network is instantaneous in simulated time but its order is free: any connection's
//! next request may run, any reply or message may arrive, in any order across connections
//! (each connection keeps its own order, as TCP and Redis do). Time moves only when the
//! network is quiet, to the next timer; a fault can hold a message, a reply or a request
//! back past it.

use std::collections::VecDeque;
use std::time::Duration;

use dlock::protocol::{self, Call, GrantReader, Message, Phase, Step, TakeUp, Wait};

use crate::lua::Scripts;
use crate::redis::{Redis, Reply, Value};

/// The two locks' hashes, in one slot (a tagged name: every helper in it too), as
/// `LockKeys` names them: a client takes one of them, or both at once with the same-slot
/// multi-lock's script (see [`Takes`]).
pub const KEYS: [&str; 2] = ["{l}", "{l}b"];
/// Each lock's waiter registry.
pub const REGISTRIES: [&str; 2] = ["dlock:unlock:{l}:{l}", "dlock:unlock:{l}:{l}b"];
/// What each lock's waiters were told they may sleep until.
pub const NAPS: [&str; 2] = ["dlock:unlock:{l}!{l}", "dlock:unlock:{l}!{l}b"];
/// The fencing counter, one per slot and so shared by both locks (their tokens still
/// increase lock by lock).
pub const FENCE: &str = "dlock:fence:{l}";

/// A grant's length, in ms (the client's [`protocol::GRANT`]).
pub const GRANT_MS: u64 = protocol::GRANT.as_millis() as u64;

/// How long a stalled client's commands do not reach Redis (see [`Config::stalls`]):
/// longer than a watchdog's renewal period and than a short lease.
pub const STALL_MS: u64 = 200;

/// How late a delayed message arrives at most: a slow network's delivery, the round trip
/// the liveness bound allows.
pub const DELAY_MS: u64 = 10;

/// The longest the lock may sit takeable while a live owner waits: a grant's lapse, the millisecond after it in which Redis expires the key (its
/// expiry is a time the clock must be past), and the delays the run injected (the
/// network is instantaneous otherwise).
pub fn takeable_bound_ms(config: &Config) -> u64 {
    // Two processes frozen with their connections open can be a grant's owner and its
    // runner-up: nobody acts on the grant's lapse, and the waiters behind them try at the
    // end of their nap, their recheck or the lease they found (docs/PROTOCOL.md, "What
    // always holds": liveness).
    let lapse_told = if config.freezes >= 2 {
        let longest_lease = config.leases_ms.iter().max().copied().unwrap_or(0);
        GRANT_MS.max(config.recheck_ms.min(longest_lease))
    } else {
        GRANT_MS
    };
    lapse_told
        + 1
        + u64::from(config.delays + config.late_replies + config.late_requests) * DELAY_MS
}

/// The wake channel of `client` for lock `lock`.
pub fn wake_channel(client: usize, lock: usize) -> String {
    format!("dlock:unlock:{{l}}#c{client}:{}", KEYS[lock])
}

/// The lock whose wake channel `channel` is (of whichever client).
fn lock_of_channel(channel: &str) -> u8 {
    u8::from(channel.ends_with(KEYS[1]))
}

/// What a client's owners take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// One lock (an index of [`KEYS`]) with the lock's own acquisition.
    Lock(u8),
    /// Both locks at once, with the same-slot multi-lock's script: registered with the
    /// lock that blocked it, it listens on both locks' wake channels and takes a grant of
    /// either with a try (`multi/acquire.rs`); its guard releases lock by lock.
    Both,
}

impl Takes {
    /// The locks taken, in the order their releases are sent.
    pub fn locks(self) -> &'static [u8] {
        match self {
            Takes::Lock(0) => &[0],
            Takes::Lock(1) => &[1],
            Takes::Lock(other) => panic!("a world has two locks, 0 and 1, not {other}"),
            Takes::Both => &[0, 1],
        }
    }
}

/// A run's shape.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Clients, each a process with a command connection and a subscriber.
    pub clients: usize,
    /// Acquisitions each client makes (each a fresh owner): one after another, or all at
    /// once in its local line (see `lined`).
    pub acquisitions: usize,
    /// A client's acquisitions start whenever the explorer says, each while the others
    /// may still run, and line up in the client's local line: one at a time in Redis, the
    /// release of the one holding naming the next, whom its script may give the lock to
    /// (docs/PROTOCOL.md, "Where an owner is in its client").
    pub lined: bool,
    /// The explicit lease of each client's holds, in ms (client `c` takes
    /// `leases_ms[c % 4]`).
    pub leases_ms: [u64; 4],
    /// How long each client's holders keep the lock before they release (past the lease:
    /// they keep the guard past it, and Redis lets the lock expire).
    pub holds_ms: [u64; 4],
    /// Each client's `min_hold` (0: none): its release keeps the lock this long (a
    /// client that takes one lock).
    pub min_holds_ms: [u64; 4],
    /// What each client's owners take (client `c`: `takes[c % 4]`). A client that takes
    /// both locks is not `lined` (the same-slot multi-lock has no local line).
    pub takes: [Takes; 4],
    /// How long a waiter sleeps without a message: long, so that relying on it shows.
    pub recheck_ms: u64,
    /// How many faults of each kind a run may inject.
    /// Waiting owners that give up (a timeout, a dropped future).
    pub cancels: u8,
    /// Processes that die.
    pub crashes: u8,
    /// Processes that freeze for good with their connections open: the server still
    /// counts their subscriber, and messages to them go unanswered.
    pub freezes: u8,
    /// Messages that arrive late (up to [`DELAY_MS`]).
    pub delays: u8,
    /// Force unlocks of the first lock by an operator.
    pub force_unlocks: u8,
    /// Failovers to a replica that has every write (no write is lost): each client's
    /// commands move to the new master at once (its route moves), its subscriber stays on
    /// the demoted one, now a replica, until it connects again: it hears what the new
    /// master publishes, which counts it nowhere. After a failover each client sends the
    /// releases it made again (dlock's release log, replayed on the new master).
    pub failovers: u8,
    /// Failovers to a replica that missed the writes of the last script run (Redis'
    /// asynchronous replication), otherwise as above. A hold in Redis at that moment is
    /// no longer its owner's to keep: the new master may have lost it, or kept it with
    /// an earlier expiry, and its guard learns at its deadline (dlock's at a renewal;
    /// `replica_acks` is what closes that window). The lost script's tokens may be
    /// minted again; they increase from there.
    pub lossy_failovers: u8,
    /// How far the new master's clock is ahead of the old one's at a failover that keeps
    /// every write (0: the same). Its expiries are the old master's, so every key lives
    /// that much less: the holds of that moment are no longer their owners' to keep (a
    /// lease assumes one clock), and a grant's length read off two clocks is overstated.
    pub failover_clock_ahead_ms: u64,
    /// Replies lost with their connection: the client sends the request again.
    pub lost_replies: u8,
    /// Replies that arrive late (up to [`DELAY_MS`], with the connection's replies behind
    /// them): the client counts a hold from the send, not from the answer.
    pub late_replies: u8,
    /// Requests that reach Redis late (up to [`DELAY_MS`], with the connection's requests
    /// behind them): Redis runs them, and their locks' expiries count, from then; the
    /// client counts from the send.
    pub late_requests: u8,
    /// Clients start without listening on their wake channel: a client subscribes when
    /// its first owner waits, and until Redis confirms the subscription a release tells it
    /// nothing (its script counts no receiver and takes the waiter out of the registry).
    /// An owner whose busy try was sent before the confirmation asks Redis, once
    /// confirmed, whether it is still registered (`ZSCORE`), and tries again if not. A
    /// client none of whose owners waits may give its subscription up (it lingers a
    /// while in dlock); its next waiter subscribes again.
    pub cold: bool,
    /// A holder may re-enter its lock once (a multi-lock's holder, its first lock: an
    /// inner guard in its `scope`, the acquire script with the re-entry's marker, answered
    /// `nil` or `notheld`), gives the inner hold back (a `one` release with its memo),
    /// then releases its own. A cancel may abandon the re-entry while its try is on its
    /// way: its `undo` follows.
    pub reentries: bool,
    /// Client `c`'s holds have no explicit lease (client `c`: `watchdog[c % 4]`): its
    /// `leases_ms` is the watchdog's timeout, and the watchdog renews each hold
    /// (`renew.lua`, a multi-lock's locks in one call) a third of it after the send of
    /// the call that took or last renewed it, until its release; a renewal that finds
    /// the hold gone loses it, and a hold past its deadline is never renewed.
    pub watchdog: [bool; 4],
    /// Every client runs with `replica_acks`: a try, a re-entry, a renewal and a release
    /// that names a next task count only once the replica confirmed their writes (`WAIT`);
    /// a grant is taken with a try. A confirmed write is on the replica, so a failover
    /// that loses the last script run's writes takes no lock from a holder.
    pub replica_acks: bool,
    /// Confirmations that do not come in time (with `replica_acks`): the call's writes
    /// are applied but not yet on the replica, and the client takes the call as not done
    /// (`CallError::NotReplicated`).
    pub unconfirmed: u8,
    /// Stalls of a client's command connection (a network partition from Redis): its
    /// requests reach Redis only [`STALL_MS`] later; its subscriber still hears.
    pub stalls: u8,
    /// The client's side of the protocol as built; a mutation test turns a part off to
    /// show the explorer finds what it prevents.
    pub client: ClientRules,
}

/// Decisions of dlock's client that a mutation test can undo.
#[derive(Debug, Clone, Copy)]
pub struct ClientRules {
    /// A grant to an owner whose lease is shorter than a grant is taken with a try.
    pub short_lease_grant_is_tried: bool,
    /// A granted hold whose extension finds it gone leaves the waiters.
    pub lost_extension_leaves: bool,
    /// The local line gives back a lock a release gave to a task that stopped waiting.
    pub unwanted_local_grant_given_back: bool,
    /// A release goes into the client's release log (replayed after a failover) as it is
    /// sent, not once it is answered: a reply that comes after the master moved still
    /// has its release replayed.
    pub release_logged_when_sent: bool,
    /// An owner whose busy try was sent before its client listened asks Redis, once it
    /// listens, whether it is still registered (`Acquisition::missed`).
    pub unheard_try_checked: bool,
    /// A release whose hand-off stopped at its bound with waiters left untold is followed
    /// by the owner's `leave`, which goes on (`sync::release::pass_on`).
    pub untold_passed_on: bool,
    /// A grant read after the client's route moved since the owner's first send is taken
    /// with a try: its length may be read off two servers' clocks (V29).
    pub moved_route_grant_is_tried: bool,
    /// A hold counts from the send of the call that took it, not from its answer.
    pub hold_counted_from_send: bool,
    /// A client whose owners take both locks at once listens on both locks' wake
    /// channels (each try may register its owner with either lock), not on the first's
    /// alone.
    pub multi_listens_on_every_lock: bool,
    /// A re-entry abandoned while its try was on its way is undone (`undo`: its hold
    /// given back if its marker shows the try applied).
    pub abandoned_reentry_undone: bool,
    /// A cleanup (a withdraw, an undo) goes into the release log as it is sent, like a
    /// guard's release, whether the acquisition that gave up sends it or the background
    /// does (`TryStep::give_up` records it).
    pub cleanups_logged: bool,
    /// With `replica_acks`, a try's grant counts only once the replica confirmed it
    /// (`TryStep::replicated`).
    pub tries_wait_for_replicas: bool,
    /// With `replica_acks`, a renewal moves its guard's deadline only once the replica
    /// confirmed it, as an acquisition counts only then (`sync::watchdog`).
    pub renewals_wait_for_replicas: bool,
    /// With `replica_acks`, a release whose local grant the replica did not confirm is
    /// an unknown outcome for the task it named (`NextHolder::Unconfirmed`): a task that
    /// left meanwhile gets the hold given back.
    pub unconfirmed_local_grant_settled: bool,
}

impl Default for ClientRules {
    fn default() -> Self {
        ClientRules {
            short_lease_grant_is_tried: true,
            lost_extension_leaves: true,
            unwanted_local_grant_given_back: true,
            release_logged_when_sent: true,
            unheard_try_checked: true,
            untold_passed_on: true,
            moved_route_grant_is_tried: true,
            hold_counted_from_send: true,
            multi_listens_on_every_lock: true,
            abandoned_reentry_undone: true,
            cleanups_logged: true,
            tries_wait_for_replicas: true,
            renewals_wait_for_replicas: true,
            unconfirmed_local_grant_settled: true,
        }
    }
}

impl Config {
    /// Client `c`'s lease.
    pub fn lease(&self, c: usize) -> u64 {
        self.leases_ms[c % 4]
    }

    /// What client `c`'s owners take.
    pub fn takes(&self, c: usize) -> Takes {
        self.takes[c % 4]
    }

    /// The locks on whose wake channels client `c` listens.
    fn listens(&self, c: usize) -> &'static [u8] {
        match self.client.multi_listens_on_every_lock {
            true => self.takes(c).locks(),
            false => &self.takes(c).locks()[..1],
        }
    }

    /// The one lock client `c`'s owners take (the first of both, for a multi-lock's).
    fn lock(&self, c: usize) -> u8 {
        self.takes(c).locks()[0]
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            clients: 2,
            acquisitions: 1,
            lined: false,
            leases_ms: [300; 4],
            holds_ms: [50; 4],
            min_holds_ms: [0; 4],
            takes: [Takes::Lock(0); 4],
            recheck_ms: 10_000,
            cancels: 0,
            crashes: 0,
            freezes: 0,
            delays: 0,
            force_unlocks: 0,
            failovers: 0,
            lossy_failovers: 0,
            failover_clock_ahead_ms: 0,
            lost_replies: 0,
            late_replies: 0,
            late_requests: 0,
            cold: false,
            reentries: false,
            watchdog: [false; 4],
            replica_acks: false,
            unconfirmed: 0,
            stalls: 0,
            client: ClientRules::default(),
        }
    }
}

/// One request of a client, as its command connection carries it. A request without a
/// `lock` is for the client's one lock (or, a try, for both).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Request {
    /// `acquire.lua` (`multi/scripts/acquire.lua` for both locks); `registered`: an
    /// earlier send may have registered the owner.
    Try { owner: u32, registered: bool },
    /// `extend.lua`, for a grant.
    Extend { owner: u32 },
    /// `release.lua` of `lock` in `mode`; `next`: the client's next task in its local
    /// line, which the release may give the lock to (`keep`: even while others wait);
    /// `retried`: a send after one whose reply was lost.
    Release {
        owner: u32,
        lock: u8,
        mode: &'static str,
        next: Option<u32>,
        keep: bool,
        retried: bool,
    },
    /// `hold_until.lua`, keeping the lock `ms` more.
    HoldUntil { owner: u32, ms: u64 },
    /// A release the client made (a guard's or a cleanup's), sent again on a new master
    /// after a failover (as a retry: an earlier send applied it, at least on the old
    /// master); its reply changes nothing in the client.
    Replay(Box<Request>),
    /// `acquire.lua` of the client's one lock as a re-entry of the owner's hold, with
    /// its marker.
    Reenter { owner: u32 },
    /// `release.lua` `one` of the owner's inner hold, with the memo a retry reads.
    ReleaseInner { owner: u32, retried: bool },
    /// `release.lua` `undo` of the owner's abandoned re-entry, by its marker.
    Undo { owner: u32 },
    /// `release.lua` `leave` of `lock`, sent by a release call whose hand-off left waiters
    /// untold, as part of that call (`sync::release::pass_on`): not in the release log.
    PassOn { owner: u32, lock: u8 },
    /// `renew.lua` of the owner's holds (the watchdog's renewal).
    Renew { owner: u32 },
    /// `ZSCORE` of the owner in `lock`'s registry: whether a release passed it over
    /// while its client did not listen yet (`Lock::still_registered`).
    Check { owner: u32, lock: u8 },
}

impl Request {
    /// Whether the client waits for the replica after this call (`replica_acks`).
    fn waits_for_replicas(&self, config: &Config) -> bool {
        config.replica_acks
            && match self {
                Request::Try { .. } => config.client.tries_wait_for_replicas,
                Request::Reenter { .. } => true,
                Request::Release { next, .. } => next.is_some(),
                Request::Renew { .. } => config.client.renewals_wait_for_replicas,
                _ => false,
            }
    }

    /// This request sent again after an earlier send that may have been applied: a
    /// release says so (it looks for its memo).
    fn sent_again(&self) -> Request {
        let mut again = self.clone();
        if let Request::Release { retried, .. } | Request::ReleaseInner { retried, .. } = &mut again
        {
            *retried = true;
        }
        again
    }

    /// A release of `lock` in `mode` that names no next task, sent for the first time.
    pub fn release(owner: u32, lock: u8, mode: &'static str) -> Request {
        Request::Release {
            owner,
            lock,
            mode,
            next: None,
            keep: false,
            retried: false,
        }
    }
}

/// Where an owner is (docs/PROTOCOL.md).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Owner {
    /// Not started yet.
    Idle,
    /// In its client's local line behind the owner whose turn it is; nothing of it in
    /// Redis.
    Lined,
    /// A try is on its way; `first_sent_ms`: the acquisition's first send; `woken`: what
    /// messages asked meanwhile; `unheard`: sent before its client's subscription was
    /// confirmed.
    #[allow(missing_docs)]
    Trying {
        first_sent_ms: u64,
        registered: bool,
        woken: Wake,
        unheard: bool,
    },
    /// Registered with `lock` (the one that blocked it), in the wait the client's core
    /// keeps ([`protocol::Wait`]).
    #[allow(missing_docs)]
    Waiting {
        first_sent_ms: u64,
        lock: u8,
        wait: Wait<Duration>,
    },
    /// It holds the lock as far as it knows, until `deadline_ms`; it releases at
    /// `release_at_ms`; `token`: its fencing token (0 for a grant without one); the
    /// watchdog renews it at `renew_at_ms` (`None`: an explicit lease, a renewal on its
    /// way, or a grant not extended yet).
    #[allow(missing_docs)]
    Holding {
        deadline_ms: u64,
        release_at_ms: u64,
        extending: bool,
        token: i64,
        renew_at_ms: Option<u64>,
    },
    /// Its release is on its way.
    Releasing,
    /// Done: nothing of it should be left in Redis (beyond what expires by itself).
    Done,
    /// Its process died.
    Dead,
}

/// What messages asked of an owner while a try of it was on its way, applied once the
/// try's answer is busy: the client's own [`Call`], on the simulated clock (time since the
/// run began), merged as the client merges it ([`Call::then`]).
pub type Wake = Option<Call<Duration>>;

/// `release.lua`'s call for `owner` of lock `lock` in `mode`, with `third` as its third
/// key (a memo or a marker), naming no next task; `retried`: a send after a lost reply.
fn release_call(
    lock: usize,
    owner: &str,
    mode: &str,
    third: &str,
    retried: bool,
) -> (&'static str, Vec<String>, Vec<String>) {
    let keys = [KEYS[lock], REGISTRIES[lock], third, NAPS[lock], FENCE];
    let flag = if retried { "1" } else { "0" };
    let args = [owner, mode, "5000", "publish", &GRANT_MS.to_string(), flag];
    (
        "lock_release",
        keys.map(str::to_owned).to_vec(),
        args.map(str::to_owned).to_vec(),
    )
}

/// What the client reads when the replica did not confirm a call in time.
const NOT_REPLICATED: &str = "dlock-sim:not-replicated";

/// Whether `reply` to `request` gives its owner a hold (a try's or a re-entry's grant, a
/// renewal, a release's local grant): the answers `replica_acks` waits for the replica on.
fn gives_a_hold(request: &Request, reply: &Reply) -> bool {
    let word = |items: &[Reply], at: usize| match items.get(at) {
        Some(Reply::Bulk(word) | Reply::Status(word)) => Some(word.clone()),
        _ => None,
    };
    match (request, reply) {
        (Request::Try { .. } | Request::Reenter { .. }, Reply::Nil) => true,
        (Request::Try { .. }, Reply::Array(items)) => word(items, 0) != Some("busy".to_owned()),
        (Request::Renew { .. }, Reply::Array(items)) => items.contains(&Reply::Int(1)),
        (Request::Release { .. }, Reply::Array(items)) => {
            matches!(word(items, 1).as_deref(), Some("given" | "kept"))
        }
        _ => false,
    }
}

/// Whether a script's answer says its hand-off stopped at its bound with waiters left
/// untold (`'untold'` after the answer).
fn untold(reply: &Reply) -> bool {
    matches!(reply, Reply::Array(items) if matches!(items.last(), Some(Reply::Bulk(w) | Reply::Status(w)) if w == "untold"))
}

/// A try's answer, as the client reads it.
enum TryAnswer {
    /// Busy: `lock` blocked the owner, registered with it, for `ttl` ms; `untold`: the
    /// multi-lock's try passed a lock on and that hand-off left waiters untold.
    Busy { lock: u8, ttl: i64, untold: bool },
    /// Every lock taken, the first with `token`.
    Granted { token: i64 },
}

impl TryAnswer {
    /// Reads the answer of `acquire.lua` (a number: busy; nil or the token: taken) or, for
    /// both locks, of `multi/scripts/acquire.lua` (`{'busy', i, ttl[, 'untold']}` or
    /// `{'ok', token...}`).
    fn read(reply: &Reply, takes: Takes) -> Option<TryAnswer> {
        let word = |item: Option<&Reply>| match item {
            Some(Reply::Bulk(word) | Reply::Status(word)) => Some(word.clone()),
            _ => None,
        };
        let int = |item: Option<&Reply>| match item {
            Some(Reply::Int(n)) => Some(*n),
            _ => None,
        };
        match (takes, reply) {
            (Takes::Lock(lock), Reply::Int(ttl)) => Some(TryAnswer::Busy {
                lock,
                ttl: *ttl,
                untold: false,
            }),
            (Takes::Lock(_), Reply::Nil) => Some(TryAnswer::Granted { token: 0 }),
            (Takes::Lock(_), Reply::Array(items)) => Some(TryAnswer::Granted {
                token: int(items.first()).unwrap_or(0),
            }),
            (Takes::Both, Reply::Array(items)) => match word(items.first())?.as_str() {
                "ok" => Some(TryAnswer::Granted {
                    token: int(items.get(1))?,
                }),
                "busy" => Some(TryAnswer::Busy {
                    lock: u8::try_from(int(items.get(1))? - 1).ok()?,
                    ttl: int(items.get(2))?,
                    untold: untold(reply),
                }),
                _ => None,
            },
            _ => None,
        }
    }
}

/// `ms` on the clock the client's core reads.
fn at_ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// One client: its owners (an acquisition each, in order), its connections' queues.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client {
    /// Its acquisitions, in order.
    pub owners: Vec<Owner>,
    /// Requests on their way to Redis, in order, each with the ms it was sent at.
    pub requests: VecDeque<(Request, u64)>,
    /// Its requests reach Redis from this ms on, after a fault held them back.
    pub requests_held_until: Option<u64>,
    /// Its requests reach Redis from this ms on, after a stall (see [`Config::stalls`]).
    pub stalled_until: Option<u64>,
    /// Replies on their way back, with the request each answers.
    pub replies: VecDeque<(Request, Reply, u64)>,
    /// Its replies arrive from this ms on, after a fault held them back.
    pub replies_held_until: Option<u64>,
    /// Messages on their way to the subscriber, each with the lock whose wake channel
    /// carries it.
    pub messages: VecDeque<(u8, String)>,
    /// Messages a fault holds back, each until the ms it arrives at.
    pub held_back: Vec<((u8, String), u64)>,
    /// Its process died.
    pub dead: bool,
    /// The owner whose turn it is in the local line: the one that tries, waits or holds.
    pub turn: Option<u32>,
    /// Local grants in a row while others waited (the client's cohort bound).
    pub run: u32,
    /// Its subscriber is still on a demoted master, after a failover.
    pub stale: bool,
    /// How often its route to Redis moved (`sync::pubsub::Route`).
    pub route: u32,
    /// Its route when each owner's acquisition first sent.
    pub first_routes: Vec<u32>,
    /// The releases it sent (a guard's, a cleanup's), which it sends again after a
    /// failover (kept only while a failover may still come).
    pub released: Vec<Request>,
    /// Whether it listens on its wake channel (see [`Config::cold`]).
    pub listening: Listening,
    /// Where each owner's re-entry is (see [`Config::reentries`]).
    pub inner: Vec<Inner>,
}

/// Where a holder's re-entry of its lock is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Inner {
    /// Not made (yet).
    None,
    /// Its try is on its way.
    Entering,
    /// It holds; its release is on its way.
    Releasing,
    /// Given back, or never held (the outer hold was gone): the outer guard may release.
    Done,
    /// Abandoned while its try was on its way; its `undo` follows it.
    Abandoned,
}

impl Inner {
    /// Whether the inner guard's scope is still running: the outer guard releases after.
    fn running(self) -> bool {
        matches!(self, Inner::Entering | Inner::Releasing)
    }
}

/// Where a client's subscription to its wake channel is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Listening {
    /// Not asked for yet.
    No,
    /// Asked for, not confirmed yet.
    Asked,
    /// Confirmed: a release tells the client's owners.
    Yes,
}

/// The explorer's moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// Client `c` starts its next acquisition.
    Start(usize),
    /// Redis runs client `c`'s next request.
    Exec(usize),
    /// Client `c` reads its next reply.
    Reply(usize),
    /// Client `c` reads its next message.
    Message(usize),
    /// The clock moves to the next timer.
    Tick,
    /// Owner `o` of client `c`, waiting in Redis or in its local line, gives up (a
    /// timeout, a dropped future).
    Cancel(usize, usize),
    /// Owner `o` of client `c`, holding its lock, re-enters it (see
    /// [`Config::reentries`]).
    Reenter(usize, usize),
    /// Owner `o` of client `c` abandons its re-entry while the try is on its way (a
    /// timeout, a dropped future).
    AbandonReentry(usize, usize),
    /// Client `c`'s process dies.
    Crash(usize),
    /// Client `c`'s process freezes with its connections open.
    Freeze(usize),
    /// Client `c`'s next message arrives late: after [`DELAY_MS`] at most, or with the
    /// next timer before that.
    Delay(usize),
    /// Client `c`'s next reply is lost with its connection: the request is sent again.
    LoseReply(usize),
    /// Client `c`'s next reply arrives late: after [`DELAY_MS`] at most, or with the next
    /// timer before that.
    DelayReply(usize),
    /// Redis runs client `c`'s next request, a replicated one, and the replica does not
    /// confirm it in time (see [`Config::unconfirmed`]).
    ExecUnconfirmed(usize),
    /// Client `c`'s command connection stalls: its requests reach Redis [`STALL_MS`] from
    /// now.
    Stall(usize),
    /// Client `c`'s next request reaches Redis late: after [`DELAY_MS`] at most, or with
    /// the next timer before that.
    DelayRequest(usize),
    /// An operator force-unlocks the lock.
    ForceUnlock,
    /// The master fails over to a replica with every write.
    Failover,
    /// The master fails over to a replica without the last script run's writes.
    LossyFailover,
    /// Client `c`'s subscriber, on a demoted master, connects to the new one.
    Reconnect(usize),
    /// Redis runs client `c`'s subscription to its wake channel, and confirms it.
    Subscribe(usize),
    /// Client `c`, none of whose owners waits, gives its subscription up.
    Unsubscribe(usize),
}

/// The whole world at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub struct World {
    /// The server.
    pub redis: Redis,
    /// The clients.
    pub clients: Vec<Client>,
    /// Faults left to inject (see [`Config`]).
    pub cancels: u8,
    pub crashes: u8,
    pub freezes: u8,
    pub delays: u8,
    pub force_unlocks: u8,
    pub failovers: u8,
    pub lossy_failovers: u8,
    pub lost_replies: u8,
    pub late_replies: u8,
    pub late_requests: u8,
    pub unconfirmed: u8,
    pub stalls: u8,
    /// The keys and expiries as the replica has them, while a lossy failover may still
    /// come: as they were before the last script run.
    pub replica: Option<Box<Replica>>,
    /// How far the server's clock is ahead of the clients' (ms), after failovers to a
    /// master whose clock is ahead.
    pub server_ahead_ms: u64,
    /// Since when each lock has been takeable while a live owner of it waited, and both
    /// while a multi-lock's owner waited (ms).
    pub takeable_since: [Option<u64>; 3],
    /// The last fencing token a holder got in Redis, and that holder, lock by lock.
    pub last_token: [i64; 2],
    pub last_holder: [Option<String>; 2],
    /// Until when (ms) the last `hold until` keeps each lock from everybody.
    pub kept_until: [u64; 2],
    /// The owners a force unlock or a lossy failover took the lock from: exclusion is not
    /// theirs to keep.
    pub forced: std::collections::BTreeSet<String>,
    /// The owners that held when a lossy failover came: the failover may bring back their
    /// registration or promise from before their last script run, which they no longer
    /// clean up (they hold, as far as they know). Those lapse by themselves (a grant in its
    /// 100 ms, a promise at its time, the registry three recheck intervals
    /// and a second after its last waiter's registration), and the liveness bound still
    /// holds meanwhile; they are not counted as left behind.
    pub failed_over: std::collections::BTreeSet<String>,
    /// The last release op id (each release's memo names one).
    pub op: u32,
}

/// What a replica has of the master's data.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Replica {
    /// Every key's value.
    pub keys: std::collections::BTreeMap<String, Value>,
    /// Key → the ms at which it expires.
    pub expiries: std::collections::BTreeMap<String, u64>,
}

impl World {
    /// The starting world of `config`: every client subscribed, nothing held.
    pub fn new(config: &Config) -> World {
        let mut redis = Redis {
            now_us: 1_000_000_000_000,
            ..Redis::default()
        };
        for c in (0..config.clients).filter(|_| !config.cold) {
            for &lock in config.listens(c) {
                redis
                    .subscribers
                    .entry(wake_channel(c, lock.into()))
                    .or_default()
                    .insert(c as u32);
            }
        }
        World {
            redis,
            clients: (0..config.clients)
                .map(|_| Client {
                    owners: vec![Owner::Idle; config.acquisitions],
                    requests: VecDeque::new(),
                    requests_held_until: None,
                    stalled_until: None,
                    replies: VecDeque::new(),
                    replies_held_until: None,
                    messages: VecDeque::new(),
                    held_back: Vec::new(),
                    dead: false,
                    turn: None,
                    run: 0,
                    stale: false,
                    route: 0,
                    first_routes: vec![0; config.acquisitions],
                    released: Vec::new(),
                    listening: match config.cold {
                        true => Listening::No,
                        false => Listening::Yes,
                    },
                    inner: vec![Inner::None; config.acquisitions],
                })
                .collect(),
            cancels: config.cancels,
            crashes: config.crashes,
            freezes: config.freezes,
            delays: config.delays,
            force_unlocks: config.force_unlocks,
            failovers: config.failovers,
            lossy_failovers: config.lossy_failovers,
            lost_replies: config.lost_replies,
            late_replies: config.late_replies,
            late_requests: config.late_requests,
            unconfirmed: config.unconfirmed,
            stalls: config.stalls,
            replica: None,
            server_ahead_ms: 0,
            takeable_since: [None; 3],
            last_token: [0; 2],
            last_holder: [None, None],
            kept_until: [0; 2],
            forced: std::collections::BTreeSet::new(),
            failed_over: std::collections::BTreeSet::new(),
            op: 0,
        }
    }

    /// The clients' clock in ms (the server's, less how far it is ahead).
    pub fn now_ms(&self) -> u64 {
        self.redis.now_ms() - self.server_ahead_ms
    }

    /// Whether the lock hash `key` has a hold of client `c`'s acquisition `o`.
    fn holds(&self, key: &str, c: usize, o: u32) -> bool {
        matches!(self.redis.keys.get(key), Some(Value::Hash(hash))
            if hash.contains_key(&World::field(c, o)))
    }

    /// The owner field of client `c`'s acquisition `o`.
    pub fn field(c: usize, o: u32) -> String {
        format!("c{c}:{o}")
    }

    /// The marker of the re-entry of client `c`'s acquisition `o`.
    fn marker(c: usize, o: u32) -> String {
        format!("dlock:release:{{l}}:{}:acq:1", World::field(c, o))
    }

    fn network_busy(&self) -> bool {
        self.clients.iter().any(|client| {
            !client.dead
                && (!client.requests.is_empty()
                    && client.requests_held_until.is_none()
                    && client.stalled_until.is_none()
                    || !client.replies.is_empty() && client.replies_held_until.is_none()
                    || !client.messages.is_empty()
                    || client.listening == Listening::Asked && !client.stale)
        })
    }

    /// Every move possible now.
    pub fn events(&self, config: &Config) -> Vec<Event> {
        let mut events = Vec::new();
        for (c, client) in self.clients.iter().enumerate() {
            if client.dead {
                continue;
            }
            // One after another: the first owner not done starts once the one before is
            // done; in a line: the first idle one, whenever.
            let startable = match config.lined {
                true => client.owners.iter().position(|o| *o == Owner::Idle),
                false => client
                    .owners
                    .iter()
                    .position(|o| *o != Owner::Done)
                    .filter(|&o| client.owners[o] == Owner::Idle),
            };
            if startable.is_some() {
                events.push(Event::Start(c));
            }
            if self.cancels > 0 {
                for (o, owner) in client.owners.iter().enumerate() {
                    if matches!(
                        owner,
                        Owner::Waiting { .. } | Owner::Trying { .. } | Owner::Lined
                    ) {
                        events.push(Event::Cancel(c, o));
                    }
                }
            }
            // (A multi-lock's holder re-enters its first lock: a lock's re-entry inside the
            // multi-lock's scope, of the hold the same-slot script wrote.)
            if config.reentries {
                for (o, owner) in client.owners.iter().enumerate() {
                    let now = self.now_ms();
                    match (owner, client.inner[o]) {
                        // (Also while a grant's extension is on its way: dlock sends
                        // the re-entry's try at once, and its guard waits for the
                        // extension's answer after.)
                        (
                            Owner::Holding {
                                deadline_ms,
                                release_at_ms,
                                ..
                            },
                            Inner::None,
                        ) if *deadline_ms > now && *release_at_ms > now => {
                            events.push(Event::Reenter(c, o))
                        }
                        (_, Inner::Entering) if self.cancels > 0 => {
                            events.push(Event::AbandonReentry(c, o))
                        }
                        _ => {}
                    }
                }
            }
            if self.stalls > 0 && client.stalled_until.is_none() {
                events.push(Event::Stall(c));
            }
            if !client.requests.is_empty()
                && client.requests_held_until.is_none()
                && client.stalled_until.is_none()
            {
                if self.late_requests > 0 {
                    events.push(Event::DelayRequest(c));
                }
                events.push(Event::Exec(c));
                if self.unconfirmed > 0
                    && client
                        .requests
                        .front()
                        .is_some_and(|(request, _)| request.waits_for_replicas(config))
                {
                    events.push(Event::ExecUnconfirmed(c));
                }
            }
            if !client.replies.is_empty() && client.replies_held_until.is_none() {
                if self.late_replies > 0 {
                    events.push(Event::DelayReply(c));
                }
                events.push(Event::Reply(c));
                if self.lost_replies > 0 {
                    events.push(Event::LoseReply(c));
                }
            }
            if !client.messages.is_empty() {
                events.push(Event::Message(c));
                if self.delays > 0 {
                    events.push(Event::Delay(c));
                }
            }
            if self.crashes > 0 {
                events.push(Event::Crash(c));
            }
            if self.freezes > 0 {
                events.push(Event::Freeze(c));
            }
            if client.stale {
                events.push(Event::Reconnect(c));
            }
            // (While the subscriber is on a demoted master, its reconnection subscribes.)
            if client.listening == Listening::Asked && !client.stale {
                events.push(Event::Subscribe(c));
            }
            let nobody_waits = !client.owners.iter().any(|o| {
                matches!(
                    o,
                    Owner::Waiting { .. } | Owner::Trying { .. } | Owner::Lined
                )
            });
            if config.cold && client.listening == Listening::Yes && !client.stale && nobody_waits {
                events.push(Event::Unsubscribe(c));
            }
        }
        if self.force_unlocks > 0 {
            events.push(Event::ForceUnlock);
        }
        if self.failovers > 0 {
            events.push(Event::Failover);
        }
        if self.lossy_failovers > 0 {
            events.push(Event::LossyFailover);
        }
        if !self.network_busy() && self.next_timer(config).is_some() {
            events.push(Event::Tick);
        }
        events
    }

    /// When the next timer fires: an owner's nap or release, a holder's deadline, a key's
    /// expiry, or a held-back message's arrival.
    fn next_timer(&self, _config: &Config) -> Option<u64> {
        let now = self.now_ms();
        let mut next: Option<u64> = None;
        let mut at = |t: u64| {
            if t > now {
                next = Some(next.map_or(t, |n: u64| n.min(t)));
            }
        };
        for client in self.clients.iter().filter(|c| !c.dead) {
            for owner in &client.owners {
                match owner {
                    Owner::Waiting { wait, .. } => {
                        if let Some(until) = wait.timer_at() {
                            at(until.as_millis() as u64);
                        }
                    }
                    Owner::Holding {
                        deadline_ms,
                        release_at_ms,
                        renew_at_ms,
                        ..
                    } => {
                        at(*release_at_ms);
                        at(*deadline_ms);
                        if let Some(renew_at) = renew_at_ms {
                            at(*renew_at);
                        }
                    }
                    _ => {}
                }
            }
        }
        // A key expires once the server's clock is past its time.
        for &expiry in self.redis.expiries.values() {
            at((expiry + 1).saturating_sub(self.server_ahead_ms));
        }
        // A held-back message or reply arrives with the next timer, or at its time.
        for client in self.clients.iter().filter(|c| !c.dead) {
            let replies = client.replies_held_until.iter();
            let requests = client.requests_held_until.iter();
            let stalled = client.stalled_until.iter();
            let held_back = client.held_back.iter().map(|(_, at)| at);
            for arrives in held_back.chain(replies).chain(requests).chain(stalled) {
                next = Some(next.map_or(*arrives, |n: u64| n.min(*arrives)));
            }
        }
        next
    }

    /// Applies `event`; `Err` describes a broken invariant.
    pub fn step(&mut self, event: Event, config: &Config, scripts: &Scripts) -> Result<(), String> {
        match event {
            Event::Start(c) => {
                let o = self.clients[c]
                    .owners
                    .iter()
                    .position(|o| *o == Owner::Idle)
                    .expect("an owner to start");
                match self.clients[c].turn {
                    Some(_) => self.clients[c].owners[o] = Owner::Lined,
                    None => self.take_turn(c, o),
                }
            }
            Event::Exec(c) | Event::ExecUnconfirmed(c) => {
                let confirmed = matches!(event, Event::Exec(_));
                if !confirmed {
                    self.unconfirmed -= 1;
                }
                // Run as it arrives; a hold it takes counts from its send.
                let (request, sent_ms) = self.clients[c].requests.pop_front().expect("a request");
                self.replicate();
                if config.client.release_logged_when_sent {
                    self.log_release(c, &request, config);
                }
                // What a renewal finds: it may answer "renewed" only where the owner holds.
                let renewal = match request {
                    Request::Renew { owner } => {
                        let locks = config.takes(c).locks().iter();
                        let held = locks.map(|&l| self.holds(KEYS[usize::from(l)], c, owner));
                        Some((owner, held.collect::<Vec<_>>()))
                    }
                    _ => None,
                };
                let mut reply = self.execute(c, &request, config, scripts);
                // With `replica_acks`, a call whose answer gives a hold waits for the
                // replica: confirmed, its writes are on the replica; else the client takes
                // the call as not done.
                if request.waits_for_replicas(config) && gives_a_hold(&request, &reply) {
                    match confirmed {
                        true => self.replicate(),
                        false => reply = Reply::Status(NOT_REPLICATED.to_owned()),
                    }
                }
                if let (Some((owner, held)), Reply::Array(items)) = (&renewal, &reply)
                    && held
                        .iter()
                        .zip(items)
                        .any(|(held, item)| !held && *item == Reply::Int(1))
                {
                    return Err(format!(
                        "{}'s renewal answered renewed for a hold that was gone",
                        World::field(c, *owner)
                    ));
                }
                self.deliver_published();
                if let (Request::HoldUntil { ms, .. }, Reply::Int(0)) = (&request, &reply) {
                    self.kept_until[usize::from(config.lock(c))] = self.now_ms() + ms;
                }
                self.clients[c].replies.push_back((request, reply, sent_ms));
                self.check_token()?;
                self.check_grant_marks()?;
            }
            Event::Reply(c) => {
                let (request, reply, sent_ms) =
                    self.clients[c].replies.pop_front().expect("a reply");
                self.on_reply(c, request, reply, sent_ms, config)?;
            }
            Event::Message(c) => {
                let message = self.clients[c].messages.pop_front().expect("a message");
                self.on_message(c, &message, config);
            }
            Event::LoseReply(c) => {
                self.lost_replies -= 1;
                let (request, _, _) = self.clients[c].replies.pop_front().expect("a reply");
                // The retry goes on the new connection before anything sent after it; a
                // try of an owner that gave up meanwhile is not sent again (its future,
                // which retries, is gone; its withdraw follows it).
                let retried = match request {
                    Request::Try { owner, .. } => {
                        let trying =
                            matches!(self.clients[c].owners[owner as usize], Owner::Trying { .. });
                        // The lost send may have registered its owner: the retry says so.
                        trying.then_some(Request::Try {
                            owner,
                            registered: true,
                        })
                    }
                    // An abandoned re-entry is not sent again: its undo follows it.
                    Request::Reenter { owner } => (self.clients[c].inner[owner as usize]
                        == Inner::Entering)
                        .then_some(Request::Reenter { owner }),
                    other => Some(other.sent_again()),
                };
                if let Some(retried) = retried {
                    let now = self.now_ms();
                    self.clients[c].requests.push_front((retried, now));
                }
            }
            Event::DelayReply(c) => {
                self.late_replies -= 1;
                self.clients[c].replies_held_until = Some(self.now_ms() + DELAY_MS);
            }
            Event::Stall(c) => {
                self.stalls -= 1;
                self.clients[c].stalled_until = Some(self.now_ms() + STALL_MS);
            }
            Event::DelayRequest(c) => {
                self.late_requests -= 1;
                self.clients[c].requests_held_until = Some(self.now_ms() + DELAY_MS);
            }
            Event::Delay(c) => {
                self.delays -= 1;
                let message = self.clients[c].messages.pop_front().expect("a message");
                let arrives = self.now_ms() + DELAY_MS;
                self.clients[c].held_back.push((message, arrives));
            }
            Event::Tick => {
                let next = self.next_timer(config).expect("a timer");
                self.redis.now_us = (next + self.server_ahead_ms) * 1000;
                self.redis.expire_all_due();
                for client in &mut self.clients {
                    client.replies_held_until = None;
                    client.requests_held_until = None;
                    // A stall lasts its time, whatever timers come before its end.
                    if client.stalled_until.is_some_and(|until| until <= next) {
                        client.stalled_until = None;
                    }
                    let back = std::mem::take(&mut client.held_back);
                    client
                        .messages
                        .extend(back.into_iter().map(|(message, _)| message));
                }
                self.on_timers(config);
            }
            Event::Cancel(c, o) => {
                self.cancels -= 1;
                let lined = self.clients[c].owners[o] == Owner::Lined;
                self.clients[c].owners[o] = Owner::Done;
                if !lined {
                    // The try step's cleanup: the owner's withdraw of each lock; the next
                    // in line goes on at once.
                    for &lock in config.takes(c).locks() {
                        self.send(c, Request::release(o as u32, lock, "withdraw"));
                    }
                    self.pass_turn(c, o);
                }
            }
            Event::Reenter(c, o) => {
                self.clients[c].inner[o] = Inner::Entering;
                self.send(c, Request::Reenter { owner: o as u32 });
            }
            Event::AbandonReentry(c, o) => {
                self.cancels -= 1;
                self.clients[c].inner[o] = Inner::Abandoned;
                if config.client.abandoned_reentry_undone {
                    self.send(c, Request::Undo { owner: o as u32 });
                }
            }
            Event::Crash(c) | Event::Freeze(c) => {
                let crashed = matches!(event, Event::Crash(_));
                match crashed {
                    true => self.crashes -= 1,
                    false => self.freezes -= 1,
                }
                let client = &mut self.clients[c];
                client.dead = true;
                client.requests.clear();
                client.requests_held_until = None;
                client.stalled_until = None;
                client.replies.clear();
                client.messages.clear();
                client.held_back.clear();
                for owner in &mut client.owners {
                    if *owner != Owner::Done {
                        *owner = Owner::Dead;
                    }
                }
                // A frozen process's subscriber stays: the server counts it, and what it
                // is told goes nowhere.
                if crashed {
                    self.unlisten(c);
                }
            }
            Event::Failover => {
                self.failovers -= 1;
                self.move_clock(config.failover_clock_ahead_ms);
                self.fail_over();
            }
            Event::LossyFailover => {
                self.lossy_failovers -= 1;
                self.lose_last_writes(config);
                self.fail_over();
            }
            Event::Reconnect(c) => {
                let client = &mut self.clients[c];
                client.stale = false;
                client.route += 1;
                // The new connection subscribes to what the client listens on or asked
                // for; the waiters' tries below are sent once it is confirmed.
                if client.listening != Listening::No {
                    self.listen(c, config);
                }
                // Messages may have been missed meanwhile: every waiter tries again (one
                // whose try is on its way, once it answers).
                for o in 0..self.clients[c].owners.len() {
                    if let Owner::Trying { woken, .. } = &mut self.clients[c].owners[o] {
                        *woken = Some(woken.map_or(Call::Now, |earlier| earlier.then(Call::Now)));
                    }
                    self.try_again(c, o);
                }
            }
            Event::Subscribe(c) => {
                self.listen(c, config);
                for o in 0..self.clients[c].owners.len() {
                    self.confirmed(c, o);
                }
            }
            Event::Unsubscribe(c) => {
                self.clients[c].listening = Listening::No;
                self.unlisten(c);
            }
            Event::ForceUnlock => {
                self.force_unlocks -= 1;
                // An operator's override: whoever held the lock does so no more, as far as
                // exclusion goes (its guard learns at its next renewal; fencing tokens are
                // what protects the data from it meanwhile), also an owner whose try took
                // the lock and whose answer is still on its way.
                if let Some(Value::Hash(hash)) = self.redis.keys.get(KEYS[0]) {
                    self.forced
                        .extend(hash.keys().filter(|f| !f.starts_with('!')).cloned());
                }
                self.replicate();
                let keys = [KEYS[0], REGISTRIES[0], NAPS[0]].map(str::to_owned);
                let args = vec!["publish".to_owned(), GRANT_MS.to_string()];
                let mut reply = scripts.run(&mut self.redis, "lock_force_unlock", &keys, &args);
                // The operator's client passes the lock on while waiters were left untold
                // (its own `leave`, as one call after another here).
                while untold(&reply) {
                    self.deliver_published();
                    let args = [
                        "operator:0",
                        "leave",
                        "5000",
                        "publish",
                        &GRANT_MS.to_string(),
                        "0",
                    ]
                    .map(str::to_owned);
                    let keys = [
                        KEYS[0],
                        REGISTRIES[0],
                        "dlock:release:{l}:operator",
                        NAPS[0],
                        FENCE,
                    ]
                    .map(str::to_owned);
                    reply = scripts.run(&mut self.redis, "lock_release", &keys, &args);
                }
                if let Reply::Error(e) = reply {
                    return Err(format!("force unlock failed: {e}"));
                }
                self.deliver_published();
            }
        }
        self.check(config)
    }

    /// Client `c` sends `request` now.
    fn send(&mut self, c: usize, request: Request) {
        let now = self.now_ms();
        self.clients[c].requests.push_back((request, now));
    }

    /// Client `c` listens on its wake channels: Redis counts its subscriber there.
    fn listen(&mut self, c: usize, config: &Config) {
        self.clients[c].listening = Listening::Yes;
        for &lock in config.listens(c) {
            self.redis
                .subscribers
                .entry(wake_channel(c, lock.into()))
                .or_default()
                .insert(c as u32);
        }
    }

    /// Redis no longer counts client `c`'s subscriber on its wake channels.
    fn unlisten(&mut self, c: usize) {
        for lock in 0..KEYS.len() {
            if let Some(subscribers) = self.redis.subscribers.get_mut(&wake_channel(c, lock)) {
                subscribers.remove(&(c as u32));
            }
        }
    }

    /// After a release of `lock` by `owner` of client `c` whose hand-off left waiters
    /// untold: the owner's `leave` of that lock, which goes on.
    fn pass_on(&mut self, c: usize, owner: u32, lock: u8, reply: &Reply, config: &Config) {
        if config.client.untold_passed_on && untold(reply) {
            self.send(c, Request::PassOn { owner, lock });
        }
    }

    /// Puts `request`, when it is a release, into client `c`'s release log, while a
    /// failover may still come.
    fn log_release(&mut self, c: usize, request: &Request, config: &Config) {
        if self.failovers + self.lossy_failovers == 0 {
            return;
        }
        let logged = match request {
            Request::Release { mode, .. } => *mode != "withdraw" || config.client.cleanups_logged,
            Request::ReleaseInner { .. } => true,
            Request::Undo { .. } => config.client.cleanups_logged,
            _ => false,
        };
        if logged {
            self.clients[c].released.push(request.clone());
        }
    }

    /// Copies the keys to the replica before a script runs, while a lossy failover may
    /// still come.
    fn replicate(&mut self) {
        self.replica = (self.lossy_failovers > 0).then(|| {
            Box::new(Replica {
                keys: self.redis.keys.clone(),
                expiries: self.redis.expiries.clone(),
            })
        });
    }

    /// The replica becomes the master: the last script run's writes are gone. Every hold
    /// in Redis now is no longer its owner's to keep (see [`Config::lossy_failovers`]),
    /// unless the clients wait for the replica (`replica_acks`): then every hold a guard
    /// counts on was confirmed there. Tokens count on from the replica's, and a minimum
    /// hold the replica does not have is over.
    fn lose_last_writes(&mut self, config: &Config) {
        for key in KEYS {
            if let Some(Value::Hash(hash)) = self.redis.keys.get(key) {
                let holders = hash.keys().filter(|f| !f.starts_with('!'));
                self.failed_over.extend(holders.cloned());
            }
        }
        // With `replica_acks` every hold a guard counts on is on the replica.
        if !config.replica_acks {
            self.forced.extend(self.failed_over.iter().cloned());
        }
        if let Some(replica) = self.replica.take() {
            self.redis.keys = replica.keys;
            self.redis.expiries = replica.expiries;
        }
        self.redis.expire_all_due();
        let counter = match self.redis.keys.get(FENCE) {
            Some(Value::Str(count)) => count.parse().unwrap_or(0),
            _ => 0,
        };
        for (lock, key) in KEYS.into_iter().enumerate() {
            // (A lock nobody took yet has no token to count on from.)
            if self.last_holder[lock].is_none() && !self.redis.keys.contains_key(key) {
                continue;
            }
            let (holder, token) = match self.redis.keys.get(key) {
                Some(Value::Hash(hash)) => hash
                    .iter()
                    .find_map(|(field, token)| Some((field.strip_suffix(":f")?, token)))
                    .map_or((None, None), |(field, token)| {
                        (Some(field.to_owned()), token.parse().ok())
                    }),
                _ => (None, None),
            };
            self.last_token[lock] = token.unwrap_or(counter);
            self.last_holder[lock] = holder;
            let kept = matches!(self.redis.keys.get(key), Some(Value::Hash(hash)) if hash.contains_key("!held"));
            if !kept {
                self.kept_until[lock] = 0;
            }
        }
    }

    /// The new master's clock is `ahead_ms` ahead of the old one's: the holds in Redis
    /// now end that much sooner than their owners count, and so does a minimum hold. The
    /// owners that count already (they hold as far as they know, or an answer that says
    /// so is on its way) are no longer held to exclusion; one that learns of its grant
    /// only now must not count on the old clock.
    fn move_clock(&mut self, ahead_ms: u64) {
        if ahead_ms == 0 {
            return;
        }
        for key in KEYS {
            if let Some(Value::Hash(hash)) = self.redis.keys.get(key) {
                let counting: Vec<String> = hash
                    .keys()
                    .filter(|field| !field.starts_with('!') && self.counts_on_its_hold(field))
                    .cloned()
                    .collect();
                self.failed_over.extend(counting.iter().cloned());
                self.forced.extend(counting);
            }
        }
        self.server_ahead_ms += ahead_ms;
        self.redis.now_us += ahead_ms * 1000;
        self.redis.expire_all_due();
        for kept in &mut self.kept_until {
            *kept = kept.saturating_sub(ahead_ms);
        }
    }

    /// Each live client's commands move to the new master at once, its subscriber stays
    /// on the old one until it connects again, and it sends its releases again there.
    fn fail_over(&mut self) {
        let last = self.failovers + self.lossy_failovers == 0;
        let now = self.now_ms();
        for c in 0..self.clients.len() {
            if self.clients[c].dead {
                continue;
            }
            self.unlisten(c);
            let client = &mut self.clients[c];
            client.route += 1;
            client.stale = true;
            let replays = client
                .released
                .iter()
                .map(|release| (Request::Replay(Box::new(release.clone())), now));
            client.requests.extend(replays);
            if last {
                client.released.clear();
            }
        }
    }

    /// Owner `o` of client `c` has the turn in its line: it tries.
    fn take_turn(&mut self, c: usize, o: usize) {
        let now = self.now_ms();
        let client = &mut self.clients[c];
        client.turn = Some(o as u32);
        client.first_routes[o] = client.route;
        client.owners[o] = Owner::Trying {
            first_sent_ms: now,
            registered: false,
            woken: None,
            unheard: client.listening != Listening::Yes,
        };
        let request = Request::Try {
            owner: o as u32,
            registered: false,
        };
        client.requests.push_back((request, now));
    }

    /// Owner `o` of client `c` gives up the turn, if it has it: the next in line takes it.
    fn pass_turn(&mut self, c: usize, o: usize) {
        if self.clients[c].turn != Some(o as u32) {
            return;
        }
        self.clients[c].turn = None;
        if let Some(next) = self.next_in_line(c) {
            self.take_turn(c, next);
        }
    }

    /// Client `c`'s first owner waiting in its local line.
    fn next_in_line(&self, c: usize) -> Option<usize> {
        self.clients[c]
            .owners
            .iter()
            .position(|o| *o == Owner::Lined)
    }

    fn execute(
        &mut self,
        c: usize,
        request: &Request,
        config: &Config,
        scripts: &Scripts,
    ) -> Reply {
        self.op += 1;
        let op = self.op;
        let s = |v: &str| v.to_owned();
        // The lock of a request for the client's one lock.
        let one = usize::from(config.lock(c));
        let (script, keys, args) = match request {
            Request::Check { owner, lock } => {
                let registry = REGISTRIES[usize::from(*lock)];
                let zscore = [s("ZSCORE"), s(registry), World::field(c, *owner)];
                return self.redis.command(&zscore);
            }
            Request::Try { owner, registered } => {
                // The same arguments for both scripts; the multi-lock's adds how long a
                // lock it passes on is given to the next waiter.
                let mut args = vec![
                    config.lease(c).to_string(),
                    World::field(c, *owner),
                    s("1"),
                    (3 * config.recheck_ms + 1000).to_string(),
                    s(if *registered { "1" } else { "0" }),
                    s("publish"),
                ];
                match config.takes(c) {
                    Takes::Both => {
                        args.push(GRANT_MS.to_string());
                        let keys = [KEYS, [FENCE; 2], REGISTRIES, NAPS].concat();
                        ("multi_acquire", keys.into_iter().map(s).collect(), args)
                    }
                    Takes::Lock(_) => {
                        let keys = [KEYS[one], FENCE, REGISTRIES[one], NAPS[one]];
                        ("lock_acquire", keys.map(s).to_vec(), args)
                    }
                }
            }
            Request::Extend { owner } => (
                "lock_extend",
                vec![s(KEYS[one]), s(REGISTRIES[one]), s(NAPS[one])],
                vec![
                    config.lease(c).to_string(),
                    World::field(c, *owner),
                    s("publish"),
                ],
            ),
            Request::PassOn { owner, lock } => {
                let leave = Request::release(*owner, *lock, "leave");
                return self.execute(c, &leave, config, scripts);
            }
            Request::Renew { owner } => {
                let locks = config.takes(c).locks();
                let keys = locks.iter().map(|&l| s(KEYS[usize::from(l)])).collect();
                let mut args = vec![config.lease(c).to_string()];
                args.extend(locks.iter().map(|_| World::field(c, *owner)));
                ("lock_renew", keys, args)
            }
            // Sent again as a retry, naming no next task.
            Request::Replay(release) => {
                let mut retry = release.sent_again();
                if let Request::Release { next, keep, .. } = &mut retry {
                    (*next, *keep) = (None, false);
                }
                return self.execute(c, &retry, config, scripts);
            }
            Request::Release {
                owner,
                lock,
                mode,
                next,
                keep,
                retried,
            } => {
                let (next, keep, retried) = (*next, *keep, *retried);
                let lock = usize::from(*lock);
                let mut args = vec![
                    World::field(c, *owner),
                    s(mode),
                    s("5000"),
                    s("publish"),
                    GRANT_MS.to_string(),
                    s(if retried { "1" } else { "0" }),
                ];
                if let Some(next) = next {
                    args.extend([
                        World::field(c, next),
                        s(if keep { "1" } else { "0" }),
                        config.lease(c).to_string(),
                        s("1"),
                    ]);
                }
                let keys = vec![
                    s(KEYS[lock]),
                    s(REGISTRIES[lock]),
                    format!("dlock:release:{{l}}:{}:{op}", World::field(c, *owner)),
                    s(NAPS[lock]),
                    s(FENCE),
                ];
                ("lock_release", keys, args)
            }
            Request::Reenter { owner } => {
                let keys = [KEYS[one], FENCE, REGISTRIES[one], NAPS[one]].map(s);
                let mut keys = keys.to_vec();
                keys.push(World::marker(c, *owner));
                // Lease 0: the re-entry lives on its outer hold's explicit lease.
                let args = [
                    "0",
                    &World::field(c, *owner),
                    "1",
                    "0",
                    "0",
                    "publish",
                    "5000",
                ]
                .map(s);
                ("lock_acquire", keys, args.to_vec())
            }
            Request::ReleaseInner { owner, retried } => {
                let memo = format!("dlock:release:{{l}}:{}:1", World::field(c, *owner));
                release_call(one, &World::field(c, *owner), "one", &memo, *retried)
            }
            Request::Undo { owner } => {
                let marker = World::marker(c, *owner);
                release_call(one, &World::field(c, *owner), "undo", &marker, false)
            }
            Request::HoldUntil { owner, ms } => (
                "lock_hold_until",
                vec![s(KEYS[one]), s(REGISTRIES[one]), s(NAPS[one])],
                vec![World::field(c, *owner), ms.to_string(), s("publish")],
            ),
        };
        scripts.run(&mut self.redis, script, &keys, &args)
    }

    /// Moves what the scripts published to the subscribers it reached.
    fn deliver_published(&mut self) {
        for published in std::mem::take(&mut self.redis.outbox) {
            // The counted subscribers, and those on the demoted master, which replicates
            // what the new one publishes without being counted.
            let lock = lock_of_channel(&published.channel);
            let stale = (0..self.clients.len() as u32).filter(|&c| {
                self.clients[c as usize].stale
                    && wake_channel(c as usize, lock.into()) == published.channel
            });
            let to: Vec<u32> = published.to.iter().copied().chain(stale).collect();
            for to in to {
                let client = &mut self.clients[to as usize];
                // A frozen process reads nothing.
                if !client.dead {
                    client.messages.push_back((lock, published.payload.clone()));
                }
            }
        }
    }

    /// Client `c` reads `reply` to `request`, which it sent at `sent_ms` (Redis ran it
    /// then or, a late request, up to [`DELAY_MS`] after): a hold counts from the send,
    /// as dlock's do.
    fn on_reply(
        &mut self,
        c: usize,
        request: Request,
        reply: Reply,
        sent_ms: u64,
        config: &Config,
    ) -> Result<(), String> {
        if let Reply::Error(e) = &reply {
            return Err(format!("client {c}'s {request:?} failed: {e}"));
        }
        let unconfirmed = matches!(&reply, Reply::Status(word) if word == NOT_REPLICATED);
        let now = self.now_ms();
        let sent_ms = match config.client.hold_counted_from_send {
            true => sent_ms,
            false => now,
        };
        match request {
            Request::Try { owner, .. } => {
                let o = owner as usize;
                let Owner::Trying {
                    first_sent_ms,
                    woken,
                    unheard,
                    ..
                } = self.clients[c].owners[o].clone()
                else {
                    // Cancelled meanwhile: its withdraw follows the try.
                    return Ok(());
                };
                // Not confirmed by the replica: not held yet; the client rides it out and
                // tries again, and that try finds the hold its own.
                if unconfirmed {
                    if let Owner::Trying { registered, .. } = &mut self.clients[c].owners[o] {
                        *registered = true;
                    }
                    let again = Request::Try {
                        owner,
                        registered: true,
                    };
                    self.send(c, again);
                    return Ok(());
                }
                match TryAnswer::read(&reply, config.takes(c)) {
                    Some(TryAnswer::Busy { lock, ttl, untold }) => {
                        // A multi-lock whose try passed a lock on and left waiters untold
                        // sends the `leave` of each other lock, which goes on.
                        if untold {
                            for &other in config.takes(c).locks().iter().filter(|&&l| l != lock) {
                                self.send(c, Request::release(owner, other, "leave"));
                            }
                        }
                        // Sent before the client listened, a try may have missed a
                        // release that passed it over, told nothing: once the
                        // subscription is confirmed it asks Redis.
                        let heard = !unheard || !config.client.unheard_try_checked;
                        let recheck = Duration::from_millis(config.recheck_ms);
                        let step = Wait::after_busy(at_ms(now), ttl, recheck, None, heard, woken);
                        let client = &mut self.clients[c];
                        if client.listening == Listening::No {
                            client.listening = Listening::Asked;
                        }
                        // The wait's place, for the step to move on from.
                        client.owners[o] = Owner::Waiting {
                            first_sent_ms,
                            lock,
                            wait: Wait {
                                phase: Phase::Asleep,
                                until: at_ms(now),
                                nap_until: at_ms(now),
                                kept: None,
                            },
                        };
                        self.move_on(c, o, step, config);
                        self.confirmed(c, o);
                    }
                    Some(TryAnswer::Granted { token }) => {
                        self.hold(c, o, sent_ms + config.lease(c), token, config)?;
                    }
                    None => return Err(format!("unexpected try answer {reply:?}")),
                }
            }
            Request::Extend { owner } => {
                let o = owner as usize;
                if let Owner::Holding {
                    deadline_ms,
                    extending,
                    renew_at_ms,
                    ..
                } = &mut self.clients[c].owners[o]
                    && *extending
                {
                    *extending = false;
                    match reply {
                        Reply::Int(1) => {
                            *deadline_ms = (*deadline_ms).max(sent_ms + config.lease(c));
                            if config.watchdog[c % 4] {
                                *renew_at_ms = Some(sent_ms + config.lease(c) / 3);
                            }
                        }
                        // Lost: the guard knows at once, and the owner leaves the
                        // waiters (a busy try after the grant may have registered it).
                        _ => {
                            *deadline_ms = now;
                            if config.client.lost_extension_leaves {
                                let leave = Request::release(owner, config.lock(c), "leave");
                                self.send(c, leave);
                            }
                            self.pass_turn(c, o);
                        }
                    }
                }
            }
            Request::Replay(release) => {
                if let Request::Release { owner, lock, .. } = *release {
                    self.pass_on(c, owner, lock, &reply, config);
                }
            }
            Request::PassOn { owner, lock } => self.pass_on(c, owner, lock, &reply, config),
            Request::Check { owner, .. } => {
                let o = owner as usize;
                let Owner::Waiting { wait, .. } = self.clients[c].owners[o] else {
                    // Cancelled meanwhile: its withdraw follows.
                    return Ok(());
                };
                // Nil: a release passed the owner over. Else nothing was missed: it may
                // sleep out its nap.
                let answer = (reply != Reply::Nil).then_some(wait.nap_until);
                self.move_on(c, o, wait.checked(at_ms(now), answer), config);
            }
            Request::Release {
                owner,
                lock,
                mode,
                next,
                ..
            } => {
                let o = owner as usize;
                // A guard's release gives back the owner's last hold (every inner guard
                // gave its own back first): nothing of the owner's may stay.
                // (Unless a force unlock or a failover took the lock from it, or a failover
                // brought back a hold its undo or inner release had given back, which the
                // replay of that release gives back again: what Redis has of it then is not
                // its guards' to count.)
                let field = World::field(c, owner);
                if let ("one", Reply::Int(left @ 1..)) = (mode, &reply)
                    && !self.forced.contains(&field)
                    && !self.failed_over.contains(&field)
                {
                    return Err(format!(
                        "{field}'s last guard was released with {left} holds left in Redis"
                    ));
                }
                if !config.client.release_logged_when_sent {
                    self.log_release(c, &request, config);
                }
                self.pass_on(c, owner, lock, &reply, config);
                // A multi-lock's guard is given back once its last lock's release is
                // answered.
                if config.takes(c).locks().last() != Some(&lock) {
                    return Ok(());
                }
                if self.clients[c].owners[o] == Owner::Releasing {
                    self.clients[c].owners[o] = Owner::Done;
                }
                if mode == "one" && self.clients[c].turn == Some(owner) {
                    self.released(c, o, next, &reply, sent_ms, config);
                }
            }
            Request::Reenter { owner } => {
                let o = owner as usize;
                if self.clients[c].inner[o] != Inner::Entering {
                    // Abandoned meanwhile: its undo follows the try.
                    return Ok(());
                }
                match reply {
                    // Not confirmed by the replica: the re-entry fails, and undoes itself.
                    _ if unconfirmed => {
                        self.clients[c].inner[o] = Inner::Abandoned;
                        if config.client.abandoned_reentry_undone {
                            self.send(c, Request::Undo { owner });
                        }
                    }
                    // It holds once more; its scope ends and gives the inner hold back.
                    Reply::Nil => {
                        self.clients[c].inner[o] = Inner::Releasing;
                        let release = Request::ReleaseInner {
                            owner,
                            retried: false,
                        };
                        self.send(c, release);
                    }
                    // The outer hold is gone: the guard learns it is lost.
                    Reply::Bulk(word) | Reply::Status(word) if word == "notheld" => {
                        self.clients[c].inner[o] = Inner::Done;
                        if let Owner::Holding { deadline_ms, .. } = &mut self.clients[c].owners[o] {
                            *deadline_ms = (*deadline_ms).min(now);
                        }
                        self.pass_turn(c, o);
                        self.release_if_due(c, o, config);
                    }
                    other => return Err(format!("unexpected re-entry answer {other:?}")),
                }
            }
            Request::Renew { owner } => {
                let o = owner as usize;
                let renewed = matches!(&reply, Reply::Array(items)
                    if items.iter().all(|item| *item == Reply::Int(1)));
                let lease = config.lease(c);
                if let Owner::Holding {
                    deadline_ms,
                    renew_at_ms,
                    ..
                } = &mut self.clients[c].owners[o]
                    && *deadline_ms > now
                {
                    match renewed {
                        // Not confirmed by the replica: the deadline stays; the next
                        // round renews again.
                        _ if unconfirmed => *renew_at_ms = Some(sent_ms + lease / 3),
                        true => {
                            *deadline_ms = (*deadline_ms).max(sent_ms + lease);
                            *renew_at_ms = Some(sent_ms + lease / 3);
                        }
                        // Gone: the guard is told it lost the lock.
                        false => {
                            *deadline_ms = now;
                            self.pass_turn(c, o);
                        }
                    }
                }
            }
            Request::ReleaseInner { owner, .. } => {
                self.clients[c].inner[owner as usize] = Inner::Done;
                self.release_if_due(c, owner as usize, config);
            }
            Request::Undo { .. } => {}
            Request::HoldUntil { owner, .. } => {
                let o = owner as usize;
                if self.clients[c].owners[o] == Owner::Releasing {
                    self.clients[c].owners[o] = Owner::Done;
                }
                self.pass_turn(c, o);
            }
        }
        Ok(())
    }

    /// Owner `o` of client `c` holds the lock until `deadline_ms`, with `token`.
    fn hold(
        &mut self,
        c: usize,
        o: usize,
        deadline_ms: u64,
        token: i64,
        config: &Config,
    ) -> Result<(), String> {
        // The hold counts from `deadline_ms - lease`: the send that took it.
        let lease = config.lease(c);
        self.clients[c].owners[o] = Owner::Holding {
            deadline_ms,
            release_at_ms: self.now_ms() + config.holds_ms[c % 4],
            extending: false,
            token,
            renew_at_ms: config.watchdog[c % 4].then(|| deadline_ms - lease + lease / 3),
        };
        // A hold whose lease ran out before its answer came (its request reached Redis
        // late) is lost from the start: its turn goes on now, as dlock's line does once
        // the holder it watches is lost, not at the next timer.
        if deadline_ms <= self.now_ms() {
            self.pass_turn(c, o);
        }
        Ok(())
    }

    /// A waiting owner moves on as its client's core decided.
    fn move_on(&mut self, c: usize, o: usize, step: Step<Duration>, config: &Config) {
        match step {
            Step::Wait(next) => {
                if let Owner::Waiting { wait, .. } = &mut self.clients[c].owners[o] {
                    *wait = next;
                }
            }
            Step::Try => self.try_again(c, o),
            Step::Granted(grant) => self.take_grant(c, o, grant, config),
            // The simulated owners have no deadline: a cancellation is an event of its own.
            Step::GiveUp => {}
        }
    }

    /// A waiting owner that was subscribing sends its check once its client listens.
    fn confirmed(&mut self, c: usize, o: usize) {
        let client = &mut self.clients[c];
        if client.listening != Listening::Yes {
            return;
        }
        if let Owner::Waiting { wait, lock, .. } = &mut client.owners[o]
            && wait.phase == Phase::Subscribing
        {
            *wait = wait.confirmed();
            let check = Request::Check {
                owner: o as u32,
                lock: *lock,
            };
            self.send(c, check);
        }
    }

    fn try_again(&mut self, c: usize, o: usize) {
        if let Owner::Waiting { first_sent_ms, .. } = self.clients[c].owners[o] {
            self.clients[c].owners[o] = Owner::Trying {
                first_sent_ms,
                registered: true,
                woken: None,
                unheard: self.clients[c].listening != Listening::Yes,
            };
            self.send(
                c,
                Request::Try {
                    owner: o as u32,
                    registered: true,
                },
            );
        }
    }

    /// A grant read now: held as it is, with its extension on its way, or taken with a
    /// try, as the client's core decides ([`protocol::take_up`]).
    fn take_grant(&mut self, c: usize, o: usize, grant: protocol::Grant, config: &Config) {
        let Owner::Waiting { first_sent_ms, .. } = self.clients[c].owners[o] else {
            return;
        };
        // A multi-lock cannot hold one lock as it is given: its try takes the grant with
        // the other locks, or passes it on (`SameSlot` has no `handed_over`).
        if config.takes(c) == Takes::Both {
            self.try_again(c, o);
            return;
        }
        // The mutation that undoes the short-lease rule shows the core a lease it
        // accepts.
        let lease = match config.client.short_lease_grant_is_tried {
            true => config.lease(c),
            false => config.lease(c).max(GRANT_MS),
        };
        let reader = GrantReader {
            first_sent: at_ms(first_sent_ms),
            now: at_ms(self.now_ms()),
            lease: Duration::from_millis(lease),
            replica_acks: config.replica_acks,
            wants_token: false,
            route_moved: config.client.moved_route_grant_is_tried
                && self.clients[c].route != self.clients[c].first_routes[o],
        };
        let TakeUp::Hold { deadline } = protocol::take_up(grant, &reader) else {
            self.try_again(c, o);
            return;
        };
        self.clients[c].owners[o] = Owner::Holding {
            deadline_ms: deadline.as_millis() as u64,
            release_at_ms: self.now_ms() + config.holds_ms[c % 4],
            extending: true,
            token: 0,
            renew_at_ms: None,
        };
        self.send(c, Request::Extend { owner: o as u32 });
    }

    /// The release of owner `o` of client `c`, which had the turn, answered `reply`:
    /// the lock given to `next`, the client's next task (which holds it now, or gives it
    /// back if it stopped waiting meanwhile), or gone elsewhere (the next tries).
    fn released(
        &mut self,
        c: usize,
        o: usize,
        next: Option<u32>,
        reply: &Reply,
        sent_ms: u64,
        config: &Config,
    ) {
        let answer = match reply {
            Reply::Array(items) => match items.get(1) {
                Some(Reply::Bulk(word) | Reply::Status(word)) => word.as_str(),
                _ => "",
            },
            _ => "",
        };
        let given = matches!(answer, "given" | "kept");
        // Not confirmed by the replica: the release may have given the lock to the task it
        // named, which does not count on it (`NextHolder::Unconfirmed`): a task still in
        // line tries itself, one that left gets it given back.
        if matches!(reply, Reply::Status(word) if word == NOT_REPLICATED) {
            if let Some(n) = next.map(|n| n as usize)
                && self.clients[c].owners[n] != Owner::Lined
                && config.client.unconfirmed_local_grant_settled
            {
                let withdraw = Request::release(n as u32, config.lock(c), "withdraw");
                self.send(c, withdraw);
            }
            self.clients[c].run = 0;
            self.pass_turn(c, o);
            return;
        }
        let client = &mut self.clients[c];
        client.run = protocol::run_after(client.run, answer == "kept");
        let Some(n) = next.filter(|_| given).map(|n| n as usize) else {
            self.pass_turn(c, o);
            return;
        };
        if client.owners[n] != Owner::Lined {
            // It stopped waiting before it learnt: the line gives the lock back for it.
            if config.client.unwanted_local_grant_given_back {
                let withdraw = Request::release(n as u32, config.lock(c), "withdraw");
                self.send(c, withdraw);
            }
            self.pass_turn(c, o);
            return;
        }
        let token = match reply {
            Reply::Array(items) => match items.get(2) {
                Some(Reply::Int(token)) => *token,
                _ => 0,
            },
            _ => 0,
        };
        client.turn = Some(n as u32);
        // The task's deadline counts from the release's send.
        let _ = self.hold(c, n, sent_ms + config.lease(c), token, config);
    }

    fn on_message(&mut self, c: usize, (lock, message): &(u8, String), config: &Config) {
        // The client's own reading of the message; `lost:` asks no waiter anything (the
        // local line's business).
        let Some((owner, call)) =
            Message::parse(message).and_then(|message| message.call(at_ms(self.now_ms())))
        else {
            return;
        };
        let o: Option<usize> = owner
            .strip_prefix(&format!("c{c}:"))
            .and_then(|n| n.parse().ok());
        let Some(o) = o else {
            return;
        };
        match self.clients[c].owners[o].clone() {
            Owner::Waiting { wait, .. } => {
                let step = wait.called(at_ms(self.now_ms()), call);
                self.move_on(c, o, step, config);
            }
            Owner::Trying {
                first_sent_ms,
                registered,
                woken,
                unheard,
            } => {
                // Kept for the try's answer, as the client's OwnerWake keeps it.
                self.clients[c].owners[o] = Owner::Trying {
                    first_sent_ms,
                    registered,
                    woken: Some(woken.map_or(call, |earlier| earlier.then(call))),
                    unheard,
                };
            }
            // Not waiting here any more: the lock's leave for it.
            _ => self.send(c, Request::release(o as u32, *lock, "leave")),
        }
    }

    /// The timers due now: naps end (a try), holders release or lose their lock.
    fn on_timers(&mut self, config: &Config) {
        let now = self.now_ms();
        for c in 0..self.clients.len() {
            if self.clients[c].dead {
                continue;
            }
            for o in 0..self.clients[c].owners.len() {
                match self.clients[c].owners[o].clone() {
                    Owner::Waiting { wait, .. } => {
                        self.move_on(c, o, wait.timer(at_ms(now)), config)
                    }
                    Owner::Holding {
                        deadline_ms,
                        release_at_ms,
                        renew_at_ms,
                        ..
                    } if deadline_ms <= now
                        || release_at_ms <= now
                        || renew_at_ms.is_some_and(|at| at <= now) =>
                    {
                        // A hold past its deadline is lost: its turn goes on.
                        if deadline_ms <= now {
                            self.pass_turn(c, o);
                        }
                        if release_at_ms <= now {
                            self.release_hold(c, o, config);
                        } else if renew_at_ms.is_some_and(|at| at <= now) && deadline_ms > now {
                            // The watchdog's renewal; never of a hold past its deadline.
                            if let Owner::Holding { renew_at_ms, .. } =
                                &mut self.clients[c].owners[o]
                            {
                                *renew_at_ms = None;
                            }
                            self.send(c, Request::Renew { owner: o as u32 });
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// Owner `o` of client `c`, whose hold's time is up, releases it: once its inner
    /// guard's scope ended (see [`Config::reentries`]), with `hold until` under a minimum
    /// hold, naming the next in line while its hold has the turn.
    fn release_hold(&mut self, c: usize, o: usize, config: &Config) {
        if !matches!(self.clients[c].owners[o], Owner::Holding { .. })
            || self.clients[c].inner[o].running()
        {
            return;
        }
        self.clients[c].owners[o] = Owner::Releasing;
        let client = &self.clients[c];
        let next = match client.turn == Some(o as u32) {
            true => self.next_in_line(c).map(|n| n as u32),
            false => None,
        };
        let keep = protocol::may_keep(client.run);
        if config.min_holds_ms[c % 4] > 0 {
            let ms = config.min_holds_ms[c % 4];
            let request = Request::HoldUntil {
                owner: o as u32,
                ms,
            };
            self.send(c, request);
            return;
        }
        for &lock in config.takes(c).locks() {
            self.send(
                c,
                Request::Release {
                    owner: o as u32,
                    lock,
                    mode: "one",
                    next,
                    keep,
                    retried: false,
                },
            );
        }
    }

    /// Owner `o` of client `c` releases now if its hold's time is up: it waited for its
    /// inner guard's scope to end.
    fn release_if_due(&mut self, c: usize, o: usize, config: &Config) {
        if let Owner::Holding { release_at_ms, .. } = self.clients[c].owners[o]
            && release_at_ms <= self.now_ms()
        {
            self.release_hold(c, o, config);
        }
    }

    /// Tokens in grant order: each new holder in Redis has a greater token than the last;
    /// and nobody takes the lock inside a minimum hold (unless force-unlocked).
    fn check_token(&mut self) -> Result<(), String> {
        for (lock, key) in KEYS.into_iter().enumerate() {
            let Some(Value::Hash(hash)) = self.redis.keys.get(key) else {
                continue;
            };
            for (field, token) in hash
                .iter()
                .filter_map(|(field, value)| Some((field.strip_suffix(":f")?, value)))
            {
                let token: i64 = token.parse().unwrap_or(0);
                if self.last_holder[lock].as_deref() == Some(field) {
                    continue;
                }
                if token <= self.last_token[lock] {
                    return Err(format!(
                        "{key}: token {token} of {field} after {} of {:?}",
                        self.last_token[lock], self.last_holder[lock]
                    ));
                }
                let kept_until = self.kept_until[lock];
                if self.now_ms() < kept_until && self.forced.is_empty() {
                    return Err(format!(
                        "{field} took {key} {} ms inside the last holder's minimum hold",
                        kept_until - self.now_ms()
                    ));
                }
                self.last_token[lock] = token;
                self.last_holder[lock] = Some(field.to_owned());
            }
        }
        Ok(())
    }

    /// The invariants, after every move.
    fn check(&mut self, config: &Config) -> Result<(), String> {
        let now = self.now_ms();
        // Exclusion: no two owners' guards of a lock consider themselves holding it.
        let mut holding: [Vec<String>; 2] = Default::default();
        for (c, client) in self.clients.iter().enumerate().filter(|(_, c)| !c.dead) {
            for (o, owner) in client.owners.iter().enumerate() {
                let field = World::field(c, o as u32);
                match owner {
                    Owner::Holding { deadline_ms, .. }
                        if *deadline_ms > now && !self.forced.contains(&field) =>
                    {
                        for &lock in config.takes(c).locks() {
                            holding[usize::from(lock)].push(field.clone());
                        }
                    }
                    _ => {}
                }
            }
        }
        for (lock, holders) in holding.iter().enumerate() {
            if holders.len() > 1 {
                return Err(format!(
                    "two holders of {} at once: {holders:?}",
                    KEYS[lock]
                ));
            }
        }
        // Liveness: a lock takeable (free, or given to nobody who takes it) while a live owner waits for it, no longer than a grant's lapse; and both,
        // while a multi-lock's owner waits.
        // (A stalled client's waiters cannot reach Redis: the bound is not theirs.)
        let waits_for = |wanted: Takes| {
            self.clients.iter().enumerate().any(|(c, client)| {
                !client.dead
                    && client.stalled_until.is_none()
                    && config.takes(c) == wanted
                    && client.owners.iter().any(|o| {
                        matches!(
                            o,
                            Owner::Waiting { .. } | Owner::Trying { .. } | Owner::Lined
                        )
                    })
            })
        };
        // A failover's bound is its clients' reconnection, not a grant's lapse: a waiter
        // whose subscriber is on the demoted master is passed over meanwhile.
        let reconnecting = self
            .clients
            .iter()
            .any(|client| client.stale && !client.dead);
        let takeable = |lock: u8| {
            holding[usize::from(lock)].is_empty() && self.lock_takeable(usize::from(lock))
        };
        let conditions = [
            waits_for(Takes::Lock(0)) && takeable(0),
            waits_for(Takes::Lock(1)) && takeable(1),
            waits_for(Takes::Both) && takeable(0) && takeable(1),
        ];
        for (i, condition) in conditions.into_iter().enumerate() {
            match (condition && !reconnecting, self.takeable_since[i]) {
                (true, None) => self.takeable_since[i] = Some(now),
                (true, Some(since)) if now - since > takeable_bound_ms(config) => {
                    let what = ["the lock", "lock {l}b", "both locks"][i];
                    return Err(format!(
                        "{what} sat takeable for {} ms while an owner waited",
                        now - since
                    ));
                }
                (false, _) => self.takeable_since[i] = None,
                _ => {}
            }
        }
        self.check_left_behind()
    }

    /// No stale mark (docs/PROTOCOL.md, "What always holds"): `!next` only beside the
    /// hold of the owner it names, the grant it marks; left beside anything else it would
    /// read as a grant lapsing soon, to a `leave` and to an inspection.
    fn check_grant_marks(&self) -> Result<(), String> {
        for key in KEYS {
            let Some(Value::Hash(hash)) = self.redis.keys.get(key) else {
                continue;
            };
            if let Some(owner) = hash.get("!next")
                && !hash.contains_key(owner)
            {
                return Err(format!(
                    "{key}: `!next` names {owner}, who holds nothing: {hash:?}"
                ));
            }
        }
        Ok(())
    }

    /// No registration or promise of an owner that is done, once its client sent every
    /// request it had (its leave or withdraw among them).
    fn check_left_behind(&self) -> Result<(), String> {
        for key in REGISTRIES.into_iter().chain(NAPS) {
            let Some(Value::ZSet(set)) = self.redis.keys.get(key) else {
                continue;
            };
            for member in set.keys().filter(|m| !self.failed_over.contains(*m)) {
                let done = self
                    .owner_of(member)
                    .is_some_and(|owner| *owner == Owner::Done);
                let settled = self.client_of(member).is_some_and(|client| {
                    !client.dead && client.requests.is_empty() && client.replies.is_empty()
                });
                if done && settled {
                    return Err(format!("{member} is done but still in {key}"));
                }
            }
        }
        Ok(())
    }

    /// Whether the lock is free for nobody that will take it: no key; or no live owner's
    /// hold or grant in it. A hold of a dead process counts as held (its lease is the
    /// bound), a grant to one as takeable (it lapses in 100 ms, and that is what the bound
    /// is about); a minimum hold is busy.
    fn lock_takeable(&self, lock: usize) -> bool {
        let Some(Value::Hash(hash)) = self.redis.keys.get(KEYS[lock]) else {
            return true;
        };
        if hash.contains_key("!held") {
            return false;
        }
        // An owner of a process that died holds what it held until its lease ends: that
        // is what leases are for, and a grant's lapse is no longer.
        let gone = |field: &str, dead_counts: bool| {
            let dead = self.client_of(field).is_some_and(|client| client.dead);
            self.owner_of(field).is_none_or(|owner| match owner {
                _ if dead => dead_counts,
                Owner::Done | Owner::Releasing => true,
                _ => false,
            })
        };
        let granted = hash.contains_key("!next");
        let holds_gone = hash
            .keys()
            .filter(|field| !field.starts_with('!') && !field.ends_with(":f"))
            .all(|field| gone(field, granted));
        holds_gone && hash.get("!next").is_none_or(|next| gone(next, true))
    }

    /// Whether the owner `field` holds as far as it knows, or a reply that will tell it so
    /// (a try's or an extension's) is on its way.
    fn counts_on_its_hold(&self, field: &str) -> bool {
        let Some((c, o)) = field.split_once(':').and_then(|(c, o)| {
            Some((
                c.strip_prefix('c')?.parse::<usize>().ok()?,
                o.parse::<u32>().ok()?,
            ))
        }) else {
            return false;
        };
        let client = &self.clients[c];
        matches!(client.owners[o as usize], Owner::Holding { .. })
            || client.replies.iter().any(|(request, _, _)| {
                matches!(request, Request::Try { owner, .. } | Request::Extend { owner } if *owner == o)
            })
    }

    fn client_of(&self, field: &str) -> Option<&Client> {
        let (client, _) = field.split_once(':')?;
        self.clients
            .get(client.strip_prefix('c')?.parse::<usize>().ok()?)
    }

    fn owner_of(&self, field: &str) -> Option<&Owner> {
        let (client, o) = field.split_once(':')?;
        let c: usize = client.strip_prefix('c')?.parse().ok()?;
        let o: usize = o.parse().ok()?;
        self.clients.get(c)?.owners.get(o)
    }

    /// Whether every live client is done and the network quiet.
    pub fn finished(&self) -> bool {
        self.clients.iter().all(|client| {
            client.dead
                || (client.owners.iter().all(|o| *o == Owner::Done)
                    && client.requests.is_empty()
                    && client.replies.is_empty())
        })
    }

    /// Nothing left behind once every owner is done: no registration or promise of a
    /// finished owner, and the lock free.
    pub fn check_end(&mut self) -> Result<(), String> {
        self.redis.expire_all_due();
        let mut left = Vec::new();
        for key in REGISTRIES.into_iter().chain(NAPS) {
            if let Some(Value::ZSet(set)) = self.redis.keys.get(key) {
                for member in set.keys() {
                    if self
                        .owner_of(member)
                        .is_some_and(|owner| *owner == Owner::Done)
                    {
                        left.push(format!("{key}: {member}"));
                    }
                }
            }
        }
        if !left.is_empty() {
            return Err(format!("left behind: {left:?}"));
        }
        // Nothing can happen any more: every live owner must be done, none stuck (in its
        // local line, say, behind a turn nobody passes on).
        for (c, client) in self.clients.iter().enumerate() {
            if let Some(o) = client
                .owners
                .iter()
                .position(|o| *o != Owner::Done)
                .filter(|_| !client.dead)
            {
                return Err(format!(
                    "{} is stuck: {:?}",
                    World::field(c, o as u32),
                    client.owners[o]
                ));
            }
        }
        Ok(())
    }
}
