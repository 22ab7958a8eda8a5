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

use crate::sync::release::{HandOff, NextHolder};

/// How many times in a row a lock may go from one task of a client to the next while
/// other clients wait for it. Small enough that no client waits long behind another
/// (a few critical sections per client in turn); large enough that most hand-offs stay
/// local, which costs no pub/sub round trip.
pub(crate) const LOCAL_RUN_BOUND: u32 = 8;

/// The client's local lines, one per lock key while anyone is in it.
pub(crate) struct LocalQueues<H> {
    lines: Mutex<HashMap<Arc<str>, Line<H>>>,
    next_ticket: AtomicU64,
}

impl<H> Default for LocalQueues<H> {
    fn default() -> Self {
        LocalQueues {
            lines: Mutex::default(),
            next_ticket: AtomicU64::default(),
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
    /// The last release passed the lock to another client and registered this one behind
    /// the waiting clients: the next turn waits for its wake-up instead of trying at once.
    wait_for_wake: bool,
}

impl<H> Default for Line<H> {
    fn default() -> Self {
        Line {
            turn: None,
            holder: None,
            waiting: VecDeque::new(),
            run: 0,
            wait_for_wake: false,
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
    /// Gets in line for `key`; the ticket has the turn at once when nobody is there.
    pub(crate) fn join(self: &Arc<Self>, key: &Arc<str>) -> Ticket<H> {
        let id = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let wake = Arc::new(Notify::new());
        let mut lines = self.lock_lines();
        let line = lines.entry(Arc::clone(key)).or_default();
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

    /// Records where the release of the turn's hold (sent with `hand_off`) put the lock,
    /// before the turn passes on.
    pub(crate) fn released(&self, hand_off: HandOff, next: NextHolder) {
        self.with_line(|line| {
            line.run = match next {
                NextHolder::ThisClient => line.run.saturating_add(1),
                NextHolder::Anyone | NextHolder::Another => 0,
            };
            line.wait_for_wake = next == NextHolder::Another && hand_off.local_next;
        });
    }

    /// Whether this turn must wait for a wake-up before trying (see
    /// [`released`](Turn::released)); asked once, when the turn begins.
    pub(crate) fn take_wait_for_wake(&self) -> bool {
        self.with_line(|line| std::mem::take(&mut line.wait_for_wake))
            .unwrap_or(false)
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

    /// Waits until `ticket` has the turn.
    async fn turn(ticket: Ticket<()>) -> Turn<()> {
        while ticket.place() != Place::Turn {
            ticket.moved().await;
        }
        ticket.into_turn()
    }

    #[tokio::test]
    async fn turns_are_exclusive_first_come_first_served_and_tidied_up() {
        let queues = Arc::new(LocalQueues::<()>::default());
        let key: Arc<str> = "k".into();
        let first = turn(queues.join(&key)).await;
        let second = queues.join(&key);
        assert_eq!(second.place(), Place::First, "the line is taken");
        let other = queues.join(&"other".into());
        assert_eq!(other.place(), Place::Turn, "other keys have their own line");
        drop(other);
        drop(second);

        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..3 {
            let ticket = queues.join(&key);
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
        let queues = Arc::new(LocalQueues::<()>::default());
        let key: Arc<str> = "k".into();
        let holder = turn(queues.join(&key)).await;

        // Cancelled while waiting behind others.
        let first = queues.join(&key);
        let behind = queues.join(&key);
        let last = queues.join(&key);
        drop(behind);
        assert_eq!(last.place(), Place::Behind);

        // The holder hands over to `first`, which is cancelled before it noticed.
        drop(holder);
        assert_eq!(first.place(), Place::Turn);
        drop(first);
        assert_eq!(last.place(), Place::Turn, "the turn passed on");

        // A waiter cancelled mid-await.
        let waiting = queues.join(&key);
        let cancelled = tokio::time::timeout(Duration::from_millis(20), turn(waiting)).await;
        assert!(cancelled.is_err());
        drop(last);
        assert!(
            queues.is_empty(),
            "no entry leaked: {:?}",
            queues.lines.lock().unwrap().keys().collect::<Vec<_>>()
        );
    }
}
