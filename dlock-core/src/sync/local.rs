//! In-process queueing: tasks of one client that want the same lock line up locally
//! (first come, first served) and only the head of the line talks to Redis.
//!
//! Without it every local contender polls Redis on each release and the releasing task,
//! which needs no wake-up, usually wins again; with it a release hands the lock to the
//! next local task without a pub/sub round trip, and local tasks are served in order.
//! Contenders in other processes still wait through pub/sub.
//!
//! A release that finds a task of the line waiting next gives the lock to that task in
//! its own script (the task's hold, lease and fencing token), so the task holds it without
//! a try of its own: one round trip per local hand-off instead of two. The task's
//! deadline counts from the release's send. If the task stopped waiting meanwhile, the
//! line gives the lock back for it (its [`OwnerRelease`] release); if the release's outcome is
//! unknown (the unlock failed or was cancelled), the task tries as usual, and its try finds
//! the hold the release may have given it.
//!
//! Across clients the line is one cohort: while other clients wait (the lock's release
//! script knows them from its waiter registry), the lock stays in this client for at most
//! [`LOCAL_RUN_BOUND`](protocol::LOCAL_RUN_BOUND) hand-offs in a row (the client's core decides: `protocol::may_keep`), then goes to the longest-waiting other client
//! and this client's next task waits for its own wake-up behind the others. Without the
//! bound, the local hand-off, which needs no pub/sub hop, would keep a hot lock in one
//! process while the others wait seconds.
//!
//! The line only orders this client's tasks; Redis decides who holds the lock. So the turn
//! belongs to a hold, not to a guard object: a hold that is released, lost or expired gives
//! it up, and the first waiter in line watches the holder so that it learns of an expired
//! lease or a force unlock as soon as a waiter in another process would. The line is
//! generic over that holder (`H`, a primitive's hold state), which it only hands to the
//! first waiter.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::fence::Fence;
use crate::protocol;
use crate::sync::release::{BackgroundReleases, NextHolder, NextInLine, NextTask, OwnerRelease};

/// The client's local lines, one per lock key while anyone is in it.
pub(crate) struct LocalQueues<H> {
    lines: Mutex<HashMap<Arc<str>, Line<H>>>,
    next_ticket: AtomicU64,
    /// The client's background releases, for a line's [`OwnerRelease`].
    releases: BackgroundReleases,
}

impl<H> LocalQueues<H> {
    /// Lines whose [`OwnerRelease`] releases go to `releases`.
    pub(crate) fn new(releases: BackgroundReleases) -> Self {
        LocalQueues {
            lines: Mutex::default(),
            next_ticket: AtomicU64::default(),
            releases,
        }
    }
}

struct Line<H> {
    /// The ticket that has the turn.
    turn: Option<u64>,
    /// The hold of the turn's owner, once it acquired the lock in Redis.
    holder: Option<Weak<H>>,
    /// The tickets waiting for the turn, in arrival order.
    waiting: VecDeque<Waiting>,
    /// Consecutive releases that kept the lock in this client while others waited.
    run: u32,
    /// The waiting task that the release of the turn's hold names (see
    /// [`Turn::next_in_line`]), until that release's outcome is known ([`Turn::released`]) or
    /// the turn ends without it.
    named: Option<Arc<Offer>>,
    withdraw: OwnerRelease,
    /// Whether the line's length was reported to Redis for `inspect` since it was last
    /// taken back (see `sync::line`).
    reported: bool,
}

/// A ticket waiting for the turn.
struct Waiting {
    id: u64,
    wake: Arc<Notify>,
    offer: Arc<Offer>,
}

impl<H> Line<H> {
    fn new(withdraw: &OwnerRelease) -> Self {
        Line {
            turn: None,
            holder: None,
            waiting: VecDeque::new(),
            run: 0,
            named: None,
            withdraw: Arc::clone(withdraw),
            reported: false,
        }
    }

    /// Wakes the first waiter: it has the turn now, or it is first and must watch.
    fn wake_first(&self) {
        if let Some(first) = self.waiting.front() {
            first.wake.notify_one();
        }
    }

    /// Settles the task the release of the turn's hold named, if any, with `outcome`.
    fn settle_named(&mut self, outcome: Outcome, releases: &BackgroundReleases) {
        if let Some(offer) = self.named.take() {
            offer.settle(outcome, &self.withdraw, releases);
        }
    }
}

/// What a release that named a waiting task did, as far as its client knows.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    /// It gave the task the lock.
    Given(Given),
    /// It did not (the lock went elsewhere, or was not freed).
    NotGiven,
    /// Unknown: the turn ended without an answer (the unlock failed or was cancelled),
    /// or the answer gave the lock but the replicas did not confirm it (`replica_acks`).
    Unknown,
}

/// A waiting task as a release may give it the lock, and what came of it.
pub(crate) struct Offer {
    task: NextTask,
    state: Mutex<OfferState>,
}

/// Where an [`Offer`] stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OfferState {
    /// No release names the task.
    Waiting,
    /// The release in flight names it.
    Named,
    /// A release gave it the lock, and it has not taken the hold yet.
    Given(Given),
    /// It stopped waiting while a release named it: the lock is given back for it if
    /// that release gave it (or may have given it) the lock.
    Left,
}

/// A lock a release gave to a waiting task: held by the task's owner from that release
/// on, as if its own try had taken it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Given {
    /// When the release was first sent: the hold's lease counts from then at the
    /// earliest.
    pub(crate) sent_at: Instant,
    /// The hold's fencing token, with fencing on.
    pub(crate) fence: Option<Fence>,
}

impl Offer {
    fn new(task: NextTask) -> Offer {
        Offer {
            task,
            state: Mutex::new(OfferState::Waiting),
        }
    }

    fn lock_state(&self) -> MutexGuard<'_, OfferState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The release that named the task ended with `outcome`. A task still waiting holds a
    /// lock it was given, and otherwise tries as usual (its try finds a hold an unknown
    /// outcome may have given it); one that left gets a lock that was, or may have been,
    /// given to it given back.
    fn settle(&self, outcome: Outcome, withdraw: &OwnerRelease, releases: &BackgroundReleases) {
        let mut state = self.lock_state();
        let left = match *state {
            OfferState::Named => false,
            OfferState::Left => true,
            // Not named (any more): nothing of this release's is owed.
            OfferState::Waiting | OfferState::Given(_) => return,
        };
        *state = match outcome {
            Outcome::Given(given) if !left => OfferState::Given(given),
            Outcome::Given(_) | Outcome::Unknown if left => {
                releases.send(withdraw(&self.task.field));
                OfferState::Waiting
            }
            _ => OfferState::Waiting,
        };
    }

    /// The task stops waiting: a lock a release gave it goes back now; one a release in
    /// flight may give it goes back once that release's outcome is known.
    fn leave(&self, withdraw: &OwnerRelease, releases: &BackgroundReleases) {
        let mut state = self.lock_state();
        match *state {
            OfferState::Named => *state = OfferState::Left,
            OfferState::Given(_) => {
                *state = OfferState::Waiting;
                releases.send(withdraw(&self.task.field));
            }
            OfferState::Waiting | OfferState::Left => {}
        }
    }
}

/// Where a ticket stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// It has the turn: go to Redis.
    Turn,
    /// First in line: the next turn is its own.
    First,
    /// Behind other waiters.
    Behind,
}

/// A place in a line, from arrival until the turn (then a [`Turn`]) or cancellation.
/// Dropping it at any point leaves the line as if it never came.
pub(crate) struct Ticket<H> {
    /// The membership; as a waiter's, dropping it leaves the line just the same.
    member: Turn<H>,
    wake: Arc<Notify>,
}

/// Membership of a local line; once [`Ticket::into_turn`] made it one, the head of the
/// line, held until the hold ends. Dropping it leaves the line (passing the turn on).
pub(crate) struct Turn<H> {
    queues: Arc<LocalQueues<H>>,
    key: Arc<str>,
    id: u64,
    /// What a release may give this member the lock as, if it waited in line.
    offer: Option<Arc<Offer>>,
}

impl<H> LocalQueues<H> {
    /// Gets in line for `key`, whose lock is given back for a task that stopped waiting
    /// with `withdraw`; the ticket has the turn at once when nobody is there. A ticket
    /// that waits can be given the lock by the release before its turn, as `task` (made
    /// only then).
    pub(crate) fn join(
        self: &Arc<Self>,
        key: &Arc<str>,
        withdraw: &OwnerRelease,
        task: impl FnOnce() -> NextTask,
    ) -> Ticket<H> {
        let id = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let wake = Arc::new(Notify::new());
        let mut lines = self.lock_lines();
        let line = lines
            .entry(Arc::clone(key))
            .or_insert_with(|| Line::new(withdraw));
        let offer = if line.turn.is_none() && line.waiting.is_empty() {
            line.turn = Some(id);
            None
        } else {
            let offer = Arc::new(Offer::new(task()));
            line.waiting.push_back(Waiting {
                id,
                wake: Arc::clone(&wake),
                offer: Arc::clone(&offer),
            });
            Some(offer)
        };
        Ticket {
            member: Turn {
                queues: Arc::clone(self),
                key: Arc::clone(key),
                id,
                offer,
            },
            wake,
        }
    }

    fn lock_lines(&self) -> MutexGuard<'_, HashMap<Arc<str>, Line<H>>> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes member `id` (with its `offer`, if it waited) out of the line for `key`:
    /// passes the turn on if it had it, gives back a lock a release gave it, forgets the
    /// line when nobody is left.
    fn leave(&self, key: &Arc<str>, id: u64, offer: Option<&Arc<Offer>>) {
        let mut lines = self.lock_lines();
        let Some(line) = lines.get_mut(key) else {
            return;
        };
        if let Some(offer) = offer {
            offer.leave(&line.withdraw, &self.releases);
        }
        if line.turn == Some(id) {
            line.settle_named(Outcome::Unknown, &self.releases);
            line.holder = None;
            // Only the task taking the turn is woken: the one behind it, first now, has
            // no holder to watch until that task holds the lock, and `hold` wakes it then.
            line.turn = line.waiting.pop_front().map(|next| {
                next.wake.notify_one();
                next.id
            });
        } else if let Some(at) = line.waiting.iter().position(|waiting| waiting.id == id) {
            line.waiting.remove(at);
            if at == 0 {
                line.wake_first();
            }
        }
        if line.turn.is_none() && line.waiting.is_empty() {
            lines.remove(key);
        }
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.lock_lines().is_empty()
    }
}

impl<H> Ticket<H> {
    /// Where this ticket stands now.
    pub(crate) fn place(&self) -> Place {
        let Turn {
            queues, key, id, ..
        } = &self.member;
        let lines = queues.lock_lines();
        let Some(line) = lines.get(key) else {
            return Place::Behind;
        };
        if line.turn == Some(*id) {
            Place::Turn
        } else if line.waiting.front().is_some_and(|first| first.id == *id) {
            Place::First
        } else {
            Place::Behind
        }
    }

    /// How many tasks wait in this ticket's line (this one included, until it has the
    /// turn).
    pub(crate) fn in_line(&self) -> usize {
        let lines = self.member.queues.lock_lines();
        lines
            .get(&self.member.key)
            .map_or(0, |line| line.waiting.len())
    }

    /// Records that the line's length was reported to Redis.
    pub(crate) fn mark_reported(&self) {
        let mut lines = self.member.queues.lock_lines();
        if let Some(line) = lines.get_mut(&self.member.key) {
            line.reported = true;
        }
    }

    /// Whether the line is reported to Redis and nobody but this ticket waits in it: then
    /// this ticket, whose wait ends (it has the turn, or it leaves), takes the report back
    /// (and the line counts it so).
    pub(crate) fn take_report_if_alone(&self) -> bool {
        let id = self.member.id;
        let mut lines = self.member.queues.lock_lines();
        match lines.get_mut(&self.member.key) {
            Some(line) if line.waiting.iter().all(|waiting| waiting.id == id) => {
                std::mem::take(&mut line.reported)
            }
            _ => false,
        }
    }

    /// The hold that has the turn, once its owner acquired the lock in Redis.
    pub(crate) fn holder(&self) -> Option<Arc<H>> {
        let lines = self.member.queues.lock_lines();
        lines.get(&self.member.key)?.holder.as_ref()?.upgrade()
    }

    /// Completes when this ticket's place may have changed (it got the turn, became first,
    /// or the holder acquired); spurious completions are possible, so re-check the place.
    pub(crate) async fn moved(&self) {
        self.wake.notified().await;
    }

    /// The turn, once [`place`](Ticket::place) said [`Place::Turn`].
    pub(crate) fn into_turn(self) -> Turn<H> {
        self.member
    }
}

impl<H> Turn<H> {
    /// Records `held` as the holder of the turn and tells the first waiter, which watches
    /// the holder from now on.
    pub(crate) fn hold(&self, held: &Arc<H>) {
        let mut lines = self.queues.lock_lines();
        if let Some(line) = lines.get_mut(&self.key)
            && line.turn == Some(self.id)
        {
            line.holder = Some(Arc::downgrade(held));
            line.wake_first();
        }
    }

    /// The lock, if the release before this turn gave it to this member: it holds it
    /// already, and must not try. Taken once.
    pub(crate) fn take_given(&self) -> Option<Given> {
        let mut state = self.offer.as_ref()?.lock_state();
        let OfferState::Given(given) = *state else {
            return None;
        };
        *state = OfferState::Waiting;
        Some(given)
    }

    /// What the release of the turn's hold tells Redis about this line: the task waiting
    /// next, which the release may give the lock to (it is named until the release's
    /// outcome is known).
    pub(crate) fn next_in_line(&self) -> NextInLine {
        self.with_line(|line| {
            let Some(first) = line.waiting.front() else {
                return NextInLine::NONE;
            };
            *first.offer.lock_state() = OfferState::Named;
            line.named = Some(Arc::clone(&first.offer));
            NextInLine {
                next: Some(first.offer.task.clone()),
                keep: protocol::may_keep(line.run),
                contended: true,
            }
        })
        .unwrap_or(NextInLine::NONE)
    }

    /// Records where the release of the turn's hold, sent at `sent_at`, put the lock,
    /// before the turn passes on: given to the task it named (which holds it now, or
    /// gets it given back if it left), maybe given to it (unconfirmed by the replicas:
    /// as an unknown outcome), or gone to anyone or to another client.
    pub(crate) fn released(&self, next: NextHolder, sent_at: Instant) {
        let releases = &self.queues.releases;
        self.with_line(|line| {
            let kept = matches!(
                next,
                NextHolder::ThisClient {
                    others_wait: true,
                    ..
                }
            );
            line.run = protocol::run_after(line.run, kept);
            let outcome = match next {
                NextHolder::ThisClient { fence, .. } => Outcome::Given(Given { sent_at, fence }),
                NextHolder::Unconfirmed => Outcome::Unknown,
                NextHolder::Anyone | NextHolder::Another => Outcome::NotGiven,
            };
            line.settle_named(outcome, releases);
        });
    }

    /// Runs `f` on the line while this ticket has its turn.
    fn with_line<T>(&self, f: impl FnOnce(&mut Line<H>) -> T) -> Option<T> {
        let mut lines = self.queues.lock_lines();
        let line = lines.get_mut(&self.key)?;
        (line.turn == Some(self.id)).then(|| f(line))
    }
}

impl<H> Drop for Turn<H> {
    fn drop(&mut self) {
        self.queues.leave(&self.key, self.id, self.offer.as_ref());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use futures_util::FutureExt;

    use crate::scripts::catalog::lock::scripts;
    use crate::sync::release::{ReleaseJob, ReleaseOp, ReleaseQueue};

    /// Lines whose withdraws (a local grant given back) land in the returned queue.
    fn queues() -> (Arc<LocalQueues<()>>, ReleaseQueue) {
        let (releases, queue) = BackgroundReleases::new();
        (Arc::new(LocalQueues::new(releases)), queue)
    }

    /// A withdraw named after the owner it gives the hold back for.
    fn withdraw() -> OwnerRelease {
        Arc::new(|field: &str| ReleaseJob {
            name: field.into(),
            op: ReleaseOp::new(&scripts().release, &[], &[], true),
            label: None,
            counted: false,
        })
    }

    /// Joins the line for `key` as the owner `field`.
    fn join(queues: &Arc<LocalQueues<()>>, key: &str, field: &str) -> Ticket<()> {
        let task = || NextTask {
            field: field.into(),
            lease_ms: 1_000,
            fence: true,
        };
        queues.join(&key.into(), &withdraw(), task)
    }

    /// Waits until `ticket` has the turn.
    async fn turn(ticket: Ticket<()>) -> Turn<()> {
        while ticket.place() != Place::Turn {
            ticket.moved().await;
        }
        ticket.into_turn()
    }

    /// The owners given back for so far.
    fn given_back(queue: &ReleaseQueue) -> Vec<String> {
        std::iter::from_fn(|| queue.try_next())
            .map(|job| job.name.to_string())
            .collect()
    }

    fn given_to_this_client(fence: u64) -> NextHolder {
        NextHolder::ThisClient {
            others_wait: false,
            fence: Some(Fence::new(fence)),
        }
    }

    #[tokio::test]
    async fn turns_are_exclusive_first_come_first_served_and_tidied_up() {
        let (queues, _) = queues();
        let first = turn(join(&queues, "k", "a")).await;
        let second = join(&queues, "k", "b");
        assert_eq!(second.place(), Place::First, "the line is taken");
        let other = join(&queues, "other", "c");
        assert_eq!(other.place(), Place::Turn, "other keys have their own line");
        drop(other);
        drop(second);

        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..3 {
            let ticket = join(&queues, "k", &format!("w{i}"));
            let order = Arc::clone(&order);
            waiters.push(tokio::spawn(async move {
                let _turn = turn(ticket).await;
                order.lock().unwrap().push(i);
            }));
        }
        drop(first);
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
        assert!(queues.is_empty(), "idle lines are removed");
    }

    /// A hand-off wakes the task taking the turn and nobody else: the waiter behind it,
    /// first now, has no holder to watch until that task holds the lock, and is woken
    /// then. (Each needless wake-up cost a busy line a task switch per hand-off, often on
    /// the other worker thread.)
    #[tokio::test]
    async fn a_hand_off_wakes_the_next_task_and_its_hold_wakes_the_first_waiter() {
        let (queues, _) = queues();
        let holder = turn(join(&queues, "k", "h")).await;
        let next = join(&queues, "k", "n");
        let first = join(&queues, "k", "f");
        let behind = join(&queues, "k", "b");
        for ticket in [&next, &first, &behind] {
            // Whatever joining may have signalled.
            let _ = ticket.moved().now_or_never();
        }

        drop(holder);
        assert!(
            next.moved().now_or_never().is_some(),
            "the next task is woken"
        );
        assert_eq!(next.place(), Place::Turn);
        assert_eq!(first.place(), Place::First);
        assert!(
            first.moved().now_or_never().is_none(),
            "the new first waiter is not woken before there is a holder to watch"
        );

        let turn = next.into_turn();
        turn.hold(&Arc::new(()));
        assert!(
            first.moved().now_or_never().is_some(),
            "the hold wakes the first waiter, which watches it"
        );
        assert!(behind.moved().now_or_never().is_none(), "nobody else");
    }

    /// Cancelled before, while and after the turn was handed over: nothing stays behind,
    /// and the turn goes to the next waiter each time.
    #[tokio::test]
    async fn cancellation_at_any_point_leaves_no_entry_and_passes_the_turn_on() {
        let (queues, _) = queues();
        let holder = turn(join(&queues, "k", "h")).await;

        // Cancelled while waiting behind others.
        let first = join(&queues, "k", "f");
        let behind = join(&queues, "k", "b");
        let last = join(&queues, "k", "l");
        drop(behind);
        assert_eq!(last.place(), Place::Behind);

        // The holder hands over to `first`, which is cancelled before it noticed.
        drop(holder);
        assert_eq!(first.place(), Place::Turn);
        drop(first);
        assert_eq!(last.place(), Place::Turn, "the turn passed on");

        // A waiter cancelled mid-await.
        let waiting = join(&queues, "k", "w");
        let cancelled = tokio::time::timeout(Duration::from_millis(20), turn(waiting)).await;
        assert!(cancelled.is_err());
        drop(last);
        assert!(
            queues.is_empty(),
            "no entry leaked: {:?}",
            queues.lines.lock().unwrap().keys().collect::<Vec<_>>()
        );
    }

    /// The release names the first waiter; given the lock, that waiter finds it in its
    /// turn, once, with the release's send time and token, and nothing is given back.
    #[tokio::test]
    async fn a_lock_given_to_the_next_task_reaches_it_once() {
        let (queues, back) = queues();
        let holder = turn(join(&queues, "k", "h")).await;
        let next = join(&queues, "k", "n");
        let _behind = join(&queues, "k", "b");
        let next_in_line = holder.next_in_line();
        assert_eq!(
            next_in_line.next.as_ref().map(|task| &*task.field),
            Some("n")
        );
        assert!(next_in_line.keep);
        let sent_at = Instant::now();
        holder.released(given_to_this_client(7), sent_at);
        drop(holder);
        let next = turn(next).await;
        let given = next.take_given().expect("given");
        assert_eq!(given.sent_at, sent_at);
        assert_eq!(given.fence, Some(Fence::new(7)));
        assert_eq!(next.take_given(), None, "taken once");
        drop(next);
        assert!(given_back(&back).is_empty());
    }

    /// Whenever the named task stops waiting, a lock a release gave it (or may have
    /// given it: outcome unknown) goes back once, and only then.
    #[tokio::test]
    async fn a_lock_given_to_a_task_that_left_is_given_back_once() {
        let (queues, back) = queues();

        // Left while the release was in flight; the release gave it the lock.
        let holder = turn(join(&queues, "k", "h")).await;
        let next = join(&queues, "k", "left-early");
        holder.next_in_line();
        drop(next);
        assert!(given_back(&back).is_empty(), "not known to be given yet");
        holder.released(given_to_this_client(1), Instant::now());
        assert_eq!(given_back(&back), ["left-early"]);
        drop(holder);

        // Given the lock, then cancelled before its turn came.
        let holder = turn(join(&queues, "k", "h")).await;
        let next = join(&queues, "k", "left-late");
        holder.next_in_line();
        holder.released(given_to_this_client(2), Instant::now());
        drop(next);
        assert_eq!(given_back(&back), ["left-late"]);
        drop(holder);

        // Given the lock, and the turn came, but it gave up before taking the hold.
        let holder = turn(join(&queues, "k", "h")).await;
        let next = join(&queues, "k", "turn-untaken");
        holder.next_in_line();
        holder.released(given_to_this_client(3), Instant::now());
        drop(holder);
        assert_eq!(next.place(), Place::Turn);
        drop(next);
        assert_eq!(given_back(&back), ["turn-untaken"]);

        // The release gave the lock to someone else: nothing to give back.
        let holder = turn(join(&queues, "k", "h")).await;
        let next = join(&queues, "k", "passed-over");
        holder.next_in_line();
        drop(next);
        holder.released(NextHolder::Another, Instant::now());
        drop(holder);
        assert!(given_back(&back).is_empty());

        // The release's outcome is unknown (the turn ends without it): a task that left
        // gets it given back; one still waiting tries, and nothing is given back for it.
        let holder = turn(join(&queues, "k", "h")).await;
        let next = join(&queues, "k", "unknown-left");
        holder.next_in_line();
        drop(next);
        drop(holder);
        assert_eq!(given_back(&back), ["unknown-left"]);
        let holder = turn(join(&queues, "k", "h")).await;
        let next = join(&queues, "k", "unknown-waiting");
        holder.next_in_line();
        drop(holder);
        let next = turn(next).await;
        assert_eq!(next.take_given(), None, "it must try");
        drop(next);
        assert!(given_back(&back).is_empty());
        assert!(queues.is_empty());
    }

    /// Consecutive local hand-offs while others wait are counted, and the count ends
    /// when the lock leaves the client or nobody else waits.
    #[tokio::test]
    async fn the_local_run_counts_hand_offs_while_others_wait() {
        let (queues, _) = queues();
        let mut holder = turn(join(&queues, "k", "h0")).await;
        for i in 1..=protocol::LOCAL_RUN_BOUND {
            let next = join(&queues, "k", &format!("h{i}"));
            assert!(holder.next_in_line().keep, "hand-off {i} may stay");
            let kept = NextHolder::ThisClient {
                others_wait: true,
                fence: None,
            };
            holder.released(kept, Instant::now());
            drop(holder);
            holder = turn(next).await;
        }
        let next = join(&queues, "k", "last");
        assert!(!holder.next_in_line().keep, "the bound is reached");
        holder.released(NextHolder::Another, Instant::now());
        drop(holder);
        let holder = turn(next).await;
        let _behind = join(&queues, "k", "after");
        assert!(holder.next_in_line().keep, "the count starts again");
    }
}
