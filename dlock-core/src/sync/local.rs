//! In-process queueing: tasks of one client that want the same lock line up locally
//! (first come, first served) and only the head of the line talks to Redis.
//!
//! Without it every local contender polls Redis on each release and the releasing task,
//! which needs no wake-up, usually wins again; with it a release hands the lock to the
//! next local task without a pub/sub round trip, and local tasks are served in order.
//! Contenders in other processes still wait through pub/sub.
//!
//! Across clients the line is one cohort: while other clients wait (the lock's release
//! script knows them from its waiter registry), the lock stays in this client for at most
//! [`LOCAL_RUN_BOUND`] hand-offs in a row, then goes to the longest-waiting other client
//! and this client's next task waits for its own wake-up behind the others. Without the
//! bound, the local hand-off, which needs no pub/sub hop, would keep a hot lock in one
//! process while the others wait seconds.
//!
//! A release that keeps the lock for the line's next task reserves it for the client's
//! tasks without telling the other clients' waiters. If no task of the line tries for it
//! after all (the next task was cancelled), the line passes the lock on (its [`PassOn`]
//! release), so that it does not sit reserved, then free, while they sleep.
//!
//! The line only orders this client's tasks; Redis decides who holds the lock. So the turn
//! belongs to a hold, not to a guard object: a hold that is released, lost or expired gives
//! it up, and the first waiter in line watches the holder so that it learns of an expired
//! lease or a force unlock as soon as a waiter in another process would. The line is
//! generic over that holder (`H`, a primitive's hold state), which it only hands to the
//! first waiter.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

use crate::sync::release::{BackgroundReleases, HandOff, NextHolder, ReleaseJob};

/// How many times in a row a lock may go from one task of a client to the next while
/// other clients wait for it. Small enough that no client waits long behind another
/// (a few critical sections per client in turn); large enough that most hand-offs stay
/// local, which costs no pub/sub round trip.
pub(crate) const LOCAL_RUN_BOUND: u32 = 8;

/// How a line passes its lock on when a release kept the lock for it and none of its
/// tasks tried for it: the lock's release of an abandoned owner, for no owner (it hands a
/// free lock to the next waiter).
pub(crate) type PassOn = Arc<dyn Fn() -> ReleaseJob + Send + Sync>;

/// The client's local lines, one per lock key while anyone is in it.
pub(crate) struct LocalQueues<H> {
    lines: Mutex<HashMap<Arc<str>, Line<H>>>,
    next_ticket: AtomicU64,
    /// The client's background releases, for a line's [`PassOn`].
    releases: BackgroundReleases,
}

impl<H> LocalQueues<H> {
    /// Lines whose [`PassOn`] releases go to `releases`.
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
    /// The tickets waiting for the turn, in arrival order, each with its wake-up.
    waiting: VecDeque<(u64, Arc<Notify>)>,
    /// Consecutive releases that kept the lock in this client while others waited.
    run: u32,
    /// The last release kept the lock for this line (reserved it for the client's tasks
    /// without telling the other clients' waiters), and no task of the line has tried for
    /// it since.
    owed: bool,
    pass_on: PassOn,
}

impl<H> Line<H> {
    fn new(pass_on: &PassOn) -> Self {
        Line {
            turn: None,
            holder: None,
            waiting: VecDeque::new(),
            run: 0,
            owed: false,
            pass_on: Arc::clone(pass_on),
        }
    }
}

impl<H> Line<H> {
    /// Wakes the first waiter: it has the turn now, or it is first and must watch.
    fn wake_first(&self) {
        if let Some((_, wake)) = self.waiting.front() {
            wake.notify_one();
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
}

impl<H> LocalQueues<H> {
    /// Gets in line for `key`, which passes its lock on with `pass_on` (see [`PassOn`]);
    /// the ticket has the turn at once when nobody is there.
    pub(crate) fn join(self: &Arc<Self>, key: &Arc<str>, pass_on: &PassOn) -> Ticket<H> {
        let id = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let wake = Arc::new(Notify::new());
        let mut lines = self.lock_lines();
        let line = lines
            .entry(Arc::clone(key))
            .or_insert_with(|| Line::new(pass_on));
        if line.turn.is_none() && line.waiting.is_empty() {
            line.turn = Some(id);
        } else {
            line.waiting.push_back((id, Arc::clone(&wake)));
        }
        Ticket {
            member: Turn {
                queues: Arc::clone(self),
                key: Arc::clone(key),
                id,
            },
            wake,
        }
    }

    fn lock_lines(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Line<H>>> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes ticket `id` out of the line for `key`: passes the turn on if it had it,
    /// forgets the line when nobody is left.
    fn leave(&self, key: &Arc<str>, id: u64) {
        let mut lines = self.lock_lines();
        let Some(line) = lines.get_mut(key) else {
            return;
        };
        if line.turn == Some(id) {
            line.holder = None;
            line.turn = line.waiting.pop_front().map(|(next, wake)| {
                wake.notify_one();
                next
            });
            line.wake_first();
        } else if let Some(at) = line.waiting.iter().position(|(waiting, _)| *waiting == id) {
            line.waiting.remove(at);
            if at == 0 {
                line.wake_first();
            }
        }
        if line.turn.is_none() && line.waiting.is_empty() {
            if let Some(line) = lines.remove(key) {
                if line.owed {
                    self.releases.send((line.pass_on)());
                }
            }
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
        let Turn { queues, key, id } = &self.member;
        let lines = queues.lock_lines();
        let Some(line) = lines.get(key) else {
            return Place::Behind;
        };
        if line.turn == Some(*id) {
            Place::Turn
        } else if line.waiting.front().is_some_and(|(first, _)| first == id) {
            Place::First
        } else {
            Place::Behind
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
        if let Some(line) = lines.get_mut(&self.key) {
            if line.turn == Some(self.id) {
                line.holder = Some(Arc::downgrade(held));
                line.wake_first();
            }
        }
    }
}

impl<H> Turn<H> {
    /// What the release of the turn's hold tells Redis about this line.
    pub(crate) fn hand_off(&self) -> HandOff {
        self.with_line(|line| HandOff {
            local_next: !line.waiting.is_empty(),
            keep: line.run < LOCAL_RUN_BOUND,
        })
        .unwrap_or(HandOff::NONE)
    }

    /// Records where the release of the turn's hold put the lock, before the turn passes
    /// on: kept for this line (the next task must try, or the line passes it on), or gone
    /// to anyone or to another client.
    pub(crate) fn released(&self, next: NextHolder) {
        self.with_line(|line| {
            line.run = match next {
                NextHolder::ThisClient => line.run.saturating_add(1),
                NextHolder::Anyone | NextHolder::Another => 0,
            };
            line.owed = next == NextHolder::ThisClient;
        });
    }

    /// The turn's first try is being sent: whatever the lock's state, this task now asks
    /// for it (and cleans up after itself if it gives up), so the line owes nothing.
    pub(crate) fn trying(&self) {
        self.with_line(|line| line.owed = false);
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
        self.queues.leave(&self.key, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::lock::scripts::scripts;
    use crate::sync::release::{ReleaseOp, ReleaseQueue};

    /// Lines whose pass-on releases land in the returned queue.
    fn queues() -> (Arc<LocalQueues<()>>, ReleaseQueue) {
        let (releases, queue) = BackgroundReleases::new();
        (Arc::new(LocalQueues::new(releases)), queue)
    }

    /// A pass-on release that says which line it came from.
    fn pass_on(key: &str) -> PassOn {
        let key = key.to_owned();
        Arc::new(move || ReleaseJob {
            name: key.as_str().into(),
            op: ReleaseOp {
                script: &scripts().release,
                keys: Vec::new(),
                args: Vec::new(),
                finds_nothing_once_done: true,
            },
            label: None,
            counted: true,
        })
    }

    /// Waits until `ticket` has the turn.
    async fn turn(ticket: Ticket<()>) -> Turn<()> {
        while ticket.place() != Place::Turn {
            ticket.moved().await;
        }
        ticket.into_turn()
    }

    #[tokio::test]
    async fn turns_are_exclusive_first_come_first_served_and_tidied_up() {
        let (queues, _) = queues();
        let key: Arc<str> = "k".into();
        let k = pass_on("k");
        let first = turn(queues.join(&key, &k)).await;
        let second = queues.join(&key, &k);
        assert_eq!(second.place(), Place::First, "the line is taken");
        let other = queues.join(&"other".into(), &pass_on("other"));
        assert_eq!(other.place(), Place::Turn, "other keys have their own line");
        drop(other);
        drop(second);

        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..3 {
            let ticket = queues.join(&key, &k);
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

    /// Cancelled before, while and after the turn was handed over: nothing stays behind,
    /// and the turn goes to the next waiter each time.
    #[tokio::test]
    async fn cancellation_at_any_point_leaves_no_entry_and_passes_the_turn_on() {
        let (queues, _) = queues();
        let key: Arc<str> = "k".into();
        let k = pass_on("k");
        let holder = turn(queues.join(&key, &k)).await;

        // Cancelled while waiting behind others.
        let first = queues.join(&key, &k);
        let behind = queues.join(&key, &k);
        let last = queues.join(&key, &k);
        drop(behind);
        assert_eq!(last.place(), Place::Behind);

        // The holder hands over to `first`, which is cancelled before it noticed.
        drop(holder);
        assert_eq!(first.place(), Place::Turn);
        drop(first);
        assert_eq!(last.place(), Place::Turn, "the turn passed on");

        // A waiter cancelled mid-await.
        let waiting = queues.join(&key, &k);
        let cancelled = tokio::time::timeout(Duration::from_millis(20), turn(waiting)).await;
        assert!(cancelled.is_err());
        drop(last);
        assert!(
            queues.is_empty(),
            "no entry leaked: {:?}",
            queues.lines.lock().unwrap().keys().collect::<Vec<_>>()
        );
    }

    /// A release kept the lock for the line, and its next task gave up before trying: the
    /// line passes the lock on, once, when its last member leaves; a task that tried
    /// (and so cleans up after itself) settles the debt.
    #[tokio::test]
    async fn a_kept_lock_nobody_tries_for_is_passed_on() {
        let (queues, passed) = queues();
        let key: Arc<str> = "k".into();
        let k = pass_on("k");

        let holder = turn(queues.join(&key, &k)).await;
        let next = queues.join(&key, &k);
        holder.released(NextHolder::ThisClient);
        drop(holder);
        assert_eq!(next.place(), Place::Turn);
        assert!(passed.try_next().is_none(), "the next task may still try");
        drop(next);
        assert_eq!(&*passed.try_next().expect("passed on").name, "k");
        assert!(passed.try_next().is_none(), "passed on once");

        let holder = turn(queues.join(&key, &k)).await;
        let next = queues.join(&key, &k);
        holder.released(NextHolder::ThisClient);
        drop(holder);
        let next = turn(next).await;
        next.trying();
        drop(next);
        assert!(
            passed.try_next().is_none(),
            "the task that tried settled it"
        );

        let holder = turn(queues.join(&key, &k)).await;
        holder.released(NextHolder::Another);
        drop(holder);
        assert!(
            passed.try_next().is_none(),
            "a lock that went elsewhere is not owed"
        );
        assert!(queues.is_empty());
    }
}
