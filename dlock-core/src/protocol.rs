//! The client's decisions in the hand-off protocol (docs/PROTOCOL.md), without I/O: what a
//! message on a wake channel says, what the messages an owner received ask of it, how long
//! a busy owner naps, whether a grant is held as it is or taken with a try, and how
//! long a client keeps a lock others wait for within its local line, and what the first
//! task in that line watches its holder for.
//!
//! Time is whatever the caller counts it in (`tokio::time::Instant` in the client, the
//! simulated clock in dlock's simulator): every decision takes "now" as an argument and
//! reads no clock, sends nothing and sleeps nowhere. The async side (`sync::pubsub`,
//! `sync::wait`, `sync::grant`) feeds these functions what it received and performs what
//! they decide; the simulator (`sim/`) feeds them every order of events against the real
//! Lua scripts, so what it checks is the client's own rule, not a copy of it.
//!
//! Not a stable API: public so that the simulator, a crate of its own, can drive it.

use std::ops::Add;
use std::time::Duration;

/// How long a grant lasts: long enough for the message to arrive and
/// its owner to act (under a millisecond when healthy, tens of milliseconds on a loaded
/// machine); short, because one made for an owner whose process died keeps the lock idle
/// that long.
pub const GRANT: Duration = Duration::from_millis(100);

/// The least a grant must have left for its owner to hold it as it is: with less, the
/// extension's round trip could not be confirmed before the grant's deadline, and the
/// owner's own try, which also takes one round trip, gives it its whole lease at once.
pub const MIN_LEFT: Duration = Duration::from_millis(20);

/// The kinds of the messages that name an owner, as the scripts publish them.
pub const MESSAGE_KINDS: [&str; 5] = ["held", "pass", "next", "wake", "lost"];

/// A moment on some clock that durations can be added to.
pub trait Moment: Copy + Ord + Add<Duration, Output = Self> {}

impl<T: Copy + Ord + Add<Duration, Output = T>> Moment for T {}

/// A message on a lock's channel (docs/PROTOCOL.md, "Messages").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    /// `held:<µs>:<token>:<owner>`: a release wrote `owner`'s hold.
    Held {
        /// The owner the lock was granted to.
        owner: &'a str,
        /// The grant.
        grant: Grant,
    },
    /// `pass:<owner>`: try now: a grant passed `owner` over (its client does not listen on
    /// that server: a replica, after a failover), and the lock may be free.
    Pass {
        /// The owner told.
        owner: &'a str,
    },
    /// `next:<ms>:<owner>`: try when the hand-off to another lapses, in `lapses_in`.
    Next {
        /// The runner-up told.
        owner: &'a str,
        /// How long until the other owner's grant lapses.
        lapses_in: Duration,
    },
    /// `wake:<owner>`: the lock frees earlier than `owner` was promised: try now.
    Wake {
        /// The owner told.
        owner: &'a str,
    },
    /// `lost:<owner>`: a force unlock took `owner`'s hold.
    Lost {
        /// The holder that lost its hold.
        owner: &'a str,
    },
    /// `writers:<ms>` on a read-write lock's shared channel: the lock is free for a
    /// writer; every other waiter tries within `lapses_in`.
    Writers {
        /// How long the writers have the lock to themselves.
        lapses_in: Duration,
    },
}

impl<'a> Message<'a> {
    /// The message `payload` says, or `None` for one of no kind known here.
    pub fn parse(payload: &'a str) -> Option<Message<'a>> {
        let (kind, rest) = payload.split_once(':')?;
        let message = match kind {
            "held" => {
                let mut parts = rest.splitn(3, ':');
                let lasts_us: u64 = parts.next()?.parse().ok()?;
                let token: u64 = parts.next()?.parse().ok()?;
                let owner = parts.next()?;
                Message::Held {
                    owner,
                    grant: Grant {
                        lasts: Duration::from_micros(lasts_us),
                        token: (token > 0).then_some(token),
                    },
                }
            }
            "pass" => Message::Pass { owner: rest },
            "next" => {
                let (ms, owner) = rest.split_once(':')?;
                Message::Next {
                    owner,
                    lapses_in: Duration::from_millis(ms.parse().ok()?),
                }
            }
            "wake" => Message::Wake { owner: rest },
            "lost" => Message::Lost { owner: rest },
            "writers" => Message::Writers {
                lapses_in: Duration::from_millis(rest.parse().ok()?),
            },
            _ => return None,
        };
        Some(message)
    }

    /// The owner the message names and what it asks of it if it waits, read at `now`;
    /// `None` for a message that asks no waiting owner anything (`lost:`, which only the
    /// holder's watchers care about, and `writers:`).
    ///
    /// A message naming an owner that no longer waits in the client that received it is
    /// answered with the lock's `leave` (the owner leaves the waiters and keeps its holds:
    /// its own try may have taken the lock before the message came).
    pub fn call<T: Moment>(&self, now: T) -> Option<(&'a str, Call<T>)> {
        match *self {
            Message::Held { owner, grant } => Some((owner, Call::Granted(grant))),
            Message::Pass { owner } | Message::Wake { owner } => Some((owner, Call::Now)),
            Message::Next { owner, lapses_in } => Some((owner, Call::At(now + lapses_in))),
            Message::Lost { .. } | Message::Writers { .. } => None,
        }
    }
}

/// A `held:` message's grant: the owner holds the lock from the message on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Grant {
    /// How long the grant lasts past the server time of the owner's registration.
    pub lasts: Duration,
    /// The fencing token minted for the owner's hold, if the lock has a token counter.
    pub token: Option<u64>,
}

/// What the messages naming a waiting owner since its last try ask of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Call<T> {
    /// Try now: a grant passed the owner over, the lock's expiry moved closer than the
    /// owner was promised, or messages may have been lost.
    Now,
    /// Try at this moment: the lock is granted to another owner until
    /// then.
    At(T),
    /// A release gave the owner the lock (see [`take_up`]).
    Granted(Grant),
}

impl<T: Moment> Call<T> {
    /// What is asked once `newer` came after `self`: a grant outweighs everything (the
    /// owner holds the lock), trying now outweighs trying later, and the lapse of a
    /// later grant to another replaces an earlier one (the lock stayed handed off).
    pub fn then(self, newer: Call<T>) -> Call<T> {
        match (self, newer) {
            (_, Call::Granted(grant)) | (Call::Granted(grant), _) => Call::Granted(grant),
            (Call::Now, _) | (_, Call::Now) => Call::Now,
            (Call::At(_), Call::At(at)) => Call::At(at),
        }
    }

    /// Until when an owner asked this at `now` may sleep before it tries, no later than
    /// `nap_until`: only a grant to another lets it sleep on.
    pub fn sleep_until(self, now: T, nap_until: T) -> Option<T> {
        match self {
            Call::At(at) if at > now => Some(at.min(nap_until)),
            _ => None,
        }
    }
}

/// The shortest nap: a busy answer's TTL of 0 says the lock ends within the millisecond,
/// which Redis still counts as held, so a try sent at once would find it busy again.
pub const SHORTEST_NAP: Duration = Duration::from_millis(1);

/// A waiting owner between a busy try and its next (docs/PROTOCOL.md, "Waiting"): which
/// phase of its wait it is in, and until when.
///
/// The async side performs what a phase asks (it sleeps, awaits its subscriptions'
/// confirmation, sends its check) and tells the wait what happened; every step answers
/// what the owner does next ([`Step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Wait<T> {
    /// What the owner waits for.
    pub phase: Phase,
    /// When it tries unless something comes first.
    pub until: T,
    /// The end of the busy answer's nap, which no message moves a try past.
    pub nap_until: T,
    /// What messages asked while it could not act on them yet (subscribing or checking).
    pub kept: Option<Call<T>>,
}

/// What a waiting owner waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// A message naming it, or [`Wait::until`].
    Asleep,
    /// Its try was sent before its subscriptions were confirmed, so a release published
    /// in between was not heard: their confirmation, then the check ([`Phase::Checking`]);
    /// at [`Wait::until`] it tries.
    Subscribing,
    /// The answer to its check whether a release passed it over while it did not listen
    /// (cheaper than a try); only the answer moves it on.
    Checking,
}

/// What a waiting owner does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step<T> {
    /// Waits on.
    Wait(Wait<T>),
    /// Tries again.
    Try,
    /// Takes up the grant a release made it ([`take_up`]).
    Granted(Grant),
    /// Gives up: its deadline passed while the lock was busy.
    GiveUp,
}

impl<T: Moment> Wait<T> {
    /// The wait after a try answered busy at `now` (`busy_ttl_ms`: the lock's expiry or
    /// the nap the owner was promised, negative when it has none): it never sleeps past
    /// that, its `recheck` interval or `give_up_at`, and never less than
    /// [`SHORTEST_NAP`] unless `give_up_at` comes first. `heard`: its subscriptions were
    /// confirmed before the try was sent; `asked`: what messages asked meanwhile.
    pub fn after_busy(
        now: T,
        busy_ttl_ms: i64,
        recheck: Duration,
        give_up_at: Option<T>,
        heard: bool,
        asked: Option<Call<T>>,
    ) -> Step<T> {
        if give_up_at.is_some_and(|at| at <= now) {
            return Step::GiveUp;
        }
        let nap = u64::try_from(busy_ttl_ms)
            .map_or(recheck, Duration::from_millis)
            .clamp(SHORTEST_NAP, recheck.max(SHORTEST_NAP));
        let nap_until = give_up_at.map_or(now + nap, |at| at.min(now + nap));
        let wait = Wait {
            phase: if heard {
                Phase::Asleep
            } else {
                Phase::Subscribing
            },
            until: nap_until,
            nap_until,
            kept: None,
        };
        match asked {
            Some(call) => wait.called(now, call),
            None => Step::Wait(wait),
        }
    }

    /// A message asked `call` at `now`: an owner asleep acts on it, one subscribing or
    /// checking keeps it for when it can.
    pub fn called(self, now: T, call: Call<T>) -> Step<T> {
        match self.phase {
            Phase::Asleep => match call {
                Call::Granted(grant) => Step::Granted(grant),
                call => match call.sleep_until(now, self.nap_until) {
                    Some(until) => Step::Wait(Wait { until, ..self }),
                    None => Step::Try,
                },
            },
            Phase::Subscribing | Phase::Checking => Step::Wait(Wait {
                kept: Some(self.kept.map_or(call, |earlier| earlier.then(call))),
                ..self
            }),
        }
    }

    /// Its subscriptions were confirmed: one subscribing sends its check.
    pub fn confirmed(self) -> Wait<T> {
        match self.phase {
            Phase::Subscribing => Wait {
                phase: Phase::Checking,
                ..self
            },
            _ => self,
        }
    }

    /// Its check was answered at `now`: `None`, a release passed it over (or may have),
    /// or until when it may sleep on. A grant a message brought meanwhile is taken up
    /// whatever the check says (the grant took the owner out of the registry); other
    /// asks apply to the rest of the nap, and a nap that ended while the check was on its
    /// way ends in a try.
    pub fn checked(self, now: T, sleep_until: Option<T>) -> Step<T> {
        if self.phase != Phase::Checking {
            return Step::Wait(self);
        }
        if let Some(Call::Granted(grant)) = self.kept {
            return Step::Granted(grant);
        }
        let Some(until) = sleep_until.map(|until| until.min(self.nap_until)) else {
            return Step::Try;
        };
        if until <= now {
            return Step::Try;
        }
        // The check's answer bounds the rest of the wait as a busy answer's nap does.
        let asleep = Wait {
            phase: Phase::Asleep,
            until,
            nap_until: until,
            kept: None,
        };
        match self.kept {
            Some(call) => asleep.called(now, call),
            None => Step::Wait(asleep),
        }
    }

    /// Its timer fired at `now`: a wait past its `until` tries, but for a check's, which
    /// its answer ends.
    pub fn timer(self, now: T) -> Step<T> {
        match self.phase {
            Phase::Asleep | Phase::Subscribing if self.until <= now => Step::Try,
            _ => Step::Wait(self),
        }
    }

    /// When its timer fires, if it has one.
    pub fn timer_at(&self) -> Option<T> {
        (self.phase != Phase::Checking).then_some(self.until)
    }
}

/// The longest pause between tries while Redis does not answer: short, so that an owner
/// is back soon after a failover.
pub const OUTAGE_PAUSE: Duration = Duration::from_millis(200);

/// When an owner whose try found Redis unavailable at `now` (since `since`, the first
/// failure of this outage) tries again: after its `recheck` interval or
/// [`OUTAGE_PAUSE`], whichever is shorter; `None` gives up, when that would be past
/// `failover_wait` into the outage or past `give_up_at`.
pub fn ride_out<T: Moment>(
    now: T,
    since: T,
    recheck: Duration,
    failover_wait: Duration,
    give_up_at: Option<T>,
) -> Option<T> {
    let back = now + recheck.min(OUTAGE_PAUSE);
    (back < since + failover_wait && give_up_at.is_none_or(|at| back < at)).then_some(back)
}

/// What an owner knows when it reads a grant (see [`take_up`]).
#[derive(Debug, Clone, Copy)]
pub struct GrantReader<T> {
    /// When its acquisition sent its first try: a grant's length counts from there.
    pub first_sent: T,
    /// When it reads the grant.
    pub now: T,
    /// The lease its hold is to have.
    pub lease: Duration,
    /// Its client waits for replicas to confirm writes (`replica_acks`).
    pub replica_acks: bool,
    /// Its holds carry fencing tokens.
    pub wants_token: bool,
    /// Its client's route to Redis moved since `first_sent` (a failover, a reconnection,
    /// a moved slot): the grant's length may be read off another server's clock.
    pub route_moved: bool,
}

/// How an owner takes up a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakeUp<T> {
    /// It holds the lock until `deadline`, and extends the hold to its lease at once.
    Hold {
        /// When its hold ends unless the extension confirms more.
        deadline: T,
    },
    /// It tries: its try finds the hold its own and gives it its whole lease.
    Try,
}

/// Whether `reader` holds `grant` as it is or takes it with a try.
///
/// The deadline counts from the acquisition's first send: the release says how long the
/// grant lasts past the server time of the registration, which a try sent after the first
/// made, so the first send plus that is never later than the grant's expiry in Redis,
/// provided one server's clock wrote both (hence a try when the route moved). It is never
/// later than a grant's length from now either, which keeps an overstated length from
/// counting for more than the message's delay.
///
/// A try instead with `replica_acks` (the grant counts once the replicas confirm it,
/// which a try's `WAIT` does), without the token the owner wants, with a lease shorter
/// than a grant (held as it is, the hold would outlive the lease: an extension never
/// shortens it), or with less than [`MIN_LEFT`] left.
pub fn take_up<T: Moment>(grant: Grant, reader: &GrantReader<T>) -> TakeUp<T> {
    if reader.replica_acks
        || reader.wants_token && grant.token.is_none()
        || reader.lease < GRANT
        || reader.route_moved
    {
        return TakeUp::Try;
    }
    let deadline = (reader.first_sent + grant.lasts).min(reader.now + GRANT);
    if deadline >= reader.now + MIN_LEFT {
        TakeUp::Hold { deadline }
    } else {
        TakeUp::Try
    }
}

/// How many times in a row a lock may go from one task of a client to the next (a local
/// grant) while other clients wait for it. Small enough that no client waits long behind
/// another (a few critical sections per client in turn); large enough that most hand-offs
/// stay local, which costs no pub/sub round trip.
pub const LOCAL_RUN_BOUND: u32 = 8;

/// Whether a release may give the lock to its client's next task while other clients
/// wait, after `run` local grants in a row while they did.
pub fn may_keep(run: u32) -> bool {
    run < LOCAL_RUN_BOUND
}

/// The run of local grants after a release that gave the lock to its client's next task
/// while others waited (`kept`), or did anything else (which ends the run).
pub fn run_after(run: u32, kept: bool) -> u32 {
    match kept {
        true => run.saturating_add(1),
        false => 0,
    }
}

/// How long the first task in a client's local line lets a new holder of its own process
/// hold before watching it: far below the promised bounds for noticing an expired lease
/// (50 ms) or a force unlock (100 ms), far above a busy line's hand-off interval.
pub const WATCH_GRACE: Duration = Duration::from_millis(20);

/// What a task in its client's local line waits for next (see [`LineWatch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch<T> {
    /// Not first in line: the line to move.
    Behind,
    /// The line to move, or `T`, when the holder has held for [`WATCH_GRACE`].
    Until(T),
    /// Ask Redis whether the holder still holds, then decide again.
    Check,
    /// The line to move, the holder lost, or the subscription to the lock's channel
    /// confirmed; ask Redis at each recheck.
    Confirming,
    /// The line to move, the holder lost; ask Redis after each message on the lock's
    /// channel and at each recheck.
    Watching,
}

/// The first task's watch of the holder ahead of it in its client's local line: it learns
/// of an expired lease or a force unlock as soon as a waiter in another process would.
///
/// A holder is asked about in Redis once it has held for [`WATCH_GRACE`] (it may have been
/// force-unlocked or have expired before this task came), again once the subscription to
/// the lock's channel is confirmed (a force unlock before that was not heard), then after
/// every message on the channel (a force unlock tells the holder's client) and every
/// recheck. `H` tells holders apart.
#[derive(Debug, Default)]
pub struct LineWatch<H> {
    /// The holder watched, and whether Redis was asked about it since it was first seen.
    watched: Option<(H, bool)>,
    confirmation_seen: bool,
}

impl<H: PartialEq> LineWatch<H> {
    /// What to wait for at `now`: `holder` is the hold ahead of this task with the time it
    /// was acquired, or `None` when the task is not first in line; `confirmed` whether
    /// Redis confirmed the subscription to the lock's channel.
    pub fn next<T: Moment>(&mut self, holder: Option<(H, T)>, now: T, confirmed: bool) -> Watch<T> {
        let Some((holder, acquired_at)) = holder else {
            return Watch::Behind;
        };
        if self
            .watched
            .as_ref()
            .is_none_or(|(seen, _)| *seen != holder)
        {
            self.watched = Some((holder, false));
        }
        // A busy line hands over faster than the grace: only a holder that keeps the lock
        // longer is worth watching (and asking about in Redis).
        let watch_from = acquired_at + WATCH_GRACE;
        if now < watch_from {
            return Watch::Until(watch_from);
        }
        if let Some((_, asked @ false)) = &mut self.watched {
            *asked = true;
            return Watch::Check;
        }
        match (self.confirmation_seen, confirmed) {
            (true, _) => Watch::Watching,
            (false, true) => {
                self.confirmation_seen = true;
                Watch::Check
            }
            (false, false) => Watch::Confirming,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Milliseconds on a test clock.
    type Ms = Duration;

    fn ms(n: u64) -> Ms {
        Duration::from_millis(n)
    }

    #[test]
    fn a_client_keeps_a_lock_others_wait_for_a_bounded_number_of_times() {
        let mut run = 0;
        for _ in 0..LOCAL_RUN_BOUND {
            assert!(may_keep(run));
            run = run_after(run, true);
        }
        assert!(!may_keep(run));
        assert_eq!(run_after(run, false), 0);
    }

    #[test]
    fn the_first_in_line_asks_about_a_holder_after_its_grace_and_once_it_listens() {
        let mut watch = LineWatch::default();
        let acquired = ms(1000);
        assert_eq!(watch.next::<Ms>(None, ms(1000), false), Watch::Behind);
        assert_eq!(
            watch.next(Some((1, acquired)), ms(1005), false),
            Watch::Until(ms(1020))
        );
        assert_eq!(
            watch.next(Some((1, acquired)), ms(1020), false),
            Watch::Check
        );
        assert_eq!(
            watch.next(Some((1, acquired)), ms(1030), false),
            Watch::Confirming
        );
        assert_eq!(
            watch.next(Some((1, acquired)), ms(1040), true),
            Watch::Check
        );
        assert_eq!(
            watch.next(Some((1, acquired)), ms(1050), true),
            Watch::Watching
        );
        // A new holder is asked about once more; the confirmation stays seen.
        assert_eq!(watch.next(Some((2, ms(900))), ms(1060), true), Watch::Check);
        assert_eq!(
            watch.next(Some((2, ms(900))), ms(1070), true),
            Watch::Watching
        );
    }

    #[test]
    fn every_message_kind_parses() {
        assert_eq!(
            Message::parse("held:1500:7:abc:12"),
            Some(Message::Held {
                owner: "abc:12",
                grant: Grant {
                    lasts: Duration::from_micros(1500),
                    token: Some(7),
                },
            })
        );
        assert_eq!(
            Message::parse("held:1500:0:o"),
            Some(Message::Held {
                owner: "o",
                grant: Grant {
                    lasts: Duration::from_micros(1500),
                    token: None,
                },
            })
        );
        assert_eq!(
            Message::parse("next:40:c:3"),
            Some(Message::Next {
                owner: "c:3",
                lapses_in: ms(40),
            })
        );
        assert_eq!(
            Message::parse("pass:c:3"),
            Some(Message::Pass { owner: "c:3" })
        );
        assert_eq!(
            Message::parse("wake:c:3"),
            Some(Message::Wake { owner: "c:3" })
        );
        assert_eq!(
            Message::parse("lost:c:3"),
            Some(Message::Lost { owner: "c:3" })
        );
        assert_eq!(
            Message::parse("writers:25"),
            Some(Message::Writers { lapses_in: ms(25) })
        );
        for kind in MESSAGE_KINDS {
            assert!(Message::parse(&format!("{kind}:1:1:o")).is_some(), "{kind}");
        }
    }

    #[test]
    fn a_malformed_message_is_none() {
        for payload in [
            "",
            "held",
            "held:x:1:o",
            "held:1:x:o",
            "held:1:2",
            "held:-5:1:o",
            "next:o",
            "next:x:o",
            "writers:x",
            "other:o",
            "1",
        ] {
            assert_eq!(Message::parse(payload), None, "{payload}");
        }
    }

    #[test]
    fn a_message_asks_the_owner_it_names() {
        let now = ms(1000);
        let ask = |payload| Message::parse(payload).unwrap().call(now);
        assert_eq!(ask("pass:c:1"), Some(("c:1", Call::Now)));
        assert_eq!(ask("wake:c:1"), Some(("c:1", Call::Now)));
        assert_eq!(ask("next:40:c:1"), Some(("c:1", Call::At(ms(1040)))));
        assert!(matches!(
            ask("held:1:0:c:1"),
            Some(("c:1", Call::Granted(_)))
        ));
        assert_eq!(ask("lost:c:1"), None);
        assert_eq!(ask("writers:5"), None);
    }

    #[test]
    fn a_grant_outweighs_a_try_now_which_outweighs_a_later_one() {
        let grant = Grant {
            lasts: ms(100),
            token: None,
        };
        let calls = [Call::Now, Call::At(ms(5)), Call::Granted(grant)];
        for earlier in calls {
            assert_eq!(earlier.then(Call::Granted(grant)), Call::Granted(grant));
            assert_eq!(Call::Granted(grant).then(earlier), Call::Granted(grant));
        }
        assert_eq!(Call::Now.then(Call::At(ms(5))), Call::Now);
        assert_eq!(Call::At(ms(5)).then(Call::Now), Call::Now);
        assert_eq!(Call::At(ms(5)).then(Call::At(ms(9))), Call::At(ms(9)));
        assert_eq!(Call::At(ms(9)).then(Call::At(ms(5))), Call::At(ms(5)));
    }

    #[test]
    fn only_a_grant_to_another_lets_an_owner_sleep_on() {
        let now = ms(100);
        assert_eq!(Call::At(ms(150)).sleep_until(now, ms(200)), Some(ms(150)));
        assert_eq!(Call::At(ms(250)).sleep_until(now, ms(200)), Some(ms(200)));
        assert_eq!(Call::At(ms(100)).sleep_until(now, ms(200)), None);
        assert_eq!(Call::<Ms>::Now.sleep_until(now, ms(200)), None);
    }

    /// The wait a busy answer at `now` starts, asleep or subscribing.
    fn waiting(step: Step<Ms>) -> Wait<Ms> {
        match step {
            Step::Wait(wait) => wait,
            other => panic!("expected a wait, got {other:?}"),
        }
    }

    #[test]
    fn a_nap_ends_at_the_busy_answer_the_recheck_or_the_deadline() {
        let nap_end = |ttl, give_up_at| {
            waiting(Wait::after_busy(
                ms(100),
                ttl,
                ms(1000),
                give_up_at,
                true,
                None,
            ))
            .until
        };
        assert_eq!(nap_end(30, None), ms(130));
        assert_eq!(nap_end(5000, None), ms(1100));
        assert_eq!(nap_end(-1, None), ms(1100));
        assert_eq!(nap_end(-2, Some(ms(110))), ms(110));
        assert_eq!(nap_end(30, Some(ms(110))), ms(110));
        // The lock ends within the millisecond: a try at once would find it held.
        assert_eq!(nap_end(0, None), ms(101));
        assert_eq!(
            Wait::after_busy(ms(100), 30, ms(1000), Some(ms(100)), true, None),
            Step::GiveUp
        );
    }

    #[test]
    fn an_owner_asleep_acts_on_a_message_at_once() {
        let asleep = waiting(Wait::after_busy(ms(100), 500, ms(1000), None, true, None));
        assert_eq!(asleep.phase, Phase::Asleep);
        assert_eq!(asleep.called(ms(120), Call::Now), Step::Try);
        let grant = Grant {
            lasts: ms(100),
            token: None,
        };
        assert_eq!(
            asleep.called(ms(120), Call::Granted(grant)),
            Step::Granted(grant)
        );
        // A later hand-off to another replaces an earlier one, within the nap.
        let first = waiting(asleep.called(ms(120), Call::At(ms(200))));
        assert_eq!(first.until, ms(200));
        assert_eq!(
            waiting(first.called(ms(150), Call::At(ms(300)))).until,
            ms(300)
        );
        assert_eq!(
            waiting(first.called(ms(150), Call::At(ms(900)))).until,
            ms(600)
        );
        assert_eq!(first.timer(ms(199)), Step::Wait(first));
        assert_eq!(first.timer(ms(200)), Step::Try);
        // What a message asked during the try applies as the wait starts.
        assert_eq!(
            Wait::after_busy(ms(100), 500, ms(1000), None, true, Some(Call::Now)),
            Step::Try
        );
    }

    #[test]
    fn an_owner_that_was_not_listening_checks_once_it_listens_and_acts_on_messages_after() {
        let subscribing = waiting(Wait::after_busy(ms(100), 500, ms(1000), None, false, None));
        assert_eq!(subscribing.phase, Phase::Subscribing);
        // Never confirmed: it tries at the nap's end.
        assert_eq!(subscribing.timer(ms(600)), Step::Try);
        // A message is kept until the check answers.
        let kept = waiting(subscribing.called(ms(110), Call::At(ms(300))));
        assert_eq!(kept.kept, Some(Call::At(ms(300))));
        let checking = kept.confirmed();
        assert_eq!(checking.phase, Phase::Checking);
        assert_eq!(checking.timer_at(), None);
        assert_eq!(checking.timer(ms(900)), Step::Wait(checking));
        // Missed a release: it tries.
        assert_eq!(checking.checked(ms(120), None), Step::Try);
        // Nothing missed: it sleeps on, as the kept message says.
        let asleep = waiting(checking.checked(ms(120), Some(ms(600))));
        assert_eq!(
            (asleep.phase, asleep.until, asleep.kept),
            (Phase::Asleep, ms(300), None)
        );
        // Its nap ended while the check was on its way: it tries.
        assert_eq!(checking.checked(ms(600), Some(ms(600))), Step::Try);
        // A grant that came meanwhile is taken up whatever the check says.
        let grant = Grant {
            lasts: ms(100),
            token: Some(3),
        };
        let granted = waiting(checking.called(ms(130), Call::Granted(grant)));
        assert_eq!(
            granted.checked(ms(140), Some(ms(600))),
            Step::Granted(grant)
        );
    }

    #[test]
    fn an_outage_is_ridden_out_until_failover_wait_or_the_deadline() {
        let wait = ms(1000);
        assert_eq!(
            ride_out(ms(100), ms(100), ms(50), wait, None),
            Some(ms(150))
        );
        assert_eq!(
            ride_out(ms(100), ms(100), ms(5000), wait, None),
            Some(ms(300))
        );
        // The pause would end past failover_wait into the outage, or at the deadline.
        assert_eq!(ride_out(ms(900), ms(100), ms(5000), wait, None), None);
        assert_eq!(
            ride_out(ms(100), ms(100), ms(50), wait, Some(ms(150))),
            None
        );
        assert_eq!(
            ride_out(ms(100), ms(100), ms(50), wait, Some(ms(151))),
            Some(ms(150))
        );
    }

    fn reader(first_sent: u64, now: u64) -> GrantReader<Ms> {
        GrantReader {
            first_sent: ms(first_sent),
            now: ms(now),
            lease: ms(30_000),
            replica_acks: false,
            wants_token: false,
            route_moved: false,
        }
    }

    #[test]
    fn a_grant_is_held_from_the_first_send_no_longer_than_a_grant_from_now() {
        let grant = Grant {
            lasts: ms(90),
            token: None,
        };
        assert_eq!(
            take_up(grant, &reader(1000, 1000)),
            TakeUp::Hold { deadline: ms(1090) }
        );
        // Read late: too little left.
        assert_eq!(take_up(grant, &reader(1000, 1071)), TakeUp::Try);
        // An overstated length counts for a grant from now at most.
        let overstated = Grant {
            lasts: ms(5000),
            token: None,
        };
        assert_eq!(
            take_up(overstated, &reader(1000, 1000)),
            TakeUp::Hold { deadline: ms(1100) }
        );
    }

    #[test]
    fn a_grant_the_owner_cannot_hold_as_it_is_is_taken_with_a_try() {
        let grant = Grant {
            lasts: ms(90),
            token: None,
        };
        let base = reader(1000, 1000);
        for changed in [
            GrantReader {
                replica_acks: true,
                ..base
            },
            GrantReader {
                wants_token: true,
                ..base
            },
            GrantReader {
                lease: ms(99),
                ..base
            },
            GrantReader {
                route_moved: true,
                ..base
            },
        ] {
            assert_eq!(take_up(grant, &changed), TakeUp::Try, "{changed:?}");
        }
        let with_token = Grant {
            token: Some(3),
            ..grant
        };
        assert!(matches!(
            take_up(
                with_token,
                &GrantReader {
                    wants_token: true,
                    ..base
                }
            ),
            TakeUp::Hold { .. }
        ));
    }
}
