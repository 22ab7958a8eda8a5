//! The worlds the mutation tests break, shared by `protocol.rs`, which explores each as
//! built (where every invariant must hold), and `mutations.rs`, which explores each with
//! one fix undone (where the explorer must find a counterexample).

use dlock_sim::lua::Scripts;
use dlock_sim::model::{Config, Takes};

/// A grantee's own try races its grant and wins (its nap ends as its holder releases),
/// its `held:` message comes late, after its short body ended under `min_hold`.
pub fn late_leave() -> Config {
    Config {
        clients: 3,
        holds_ms: [300, 5, 300, 300],
        min_holds_ms: [0, 150, 0, 0],
        delays: 3,
        ..Config::default()
    }
}

/// Two clients taking the lock twice each; a reply lost with its connection (the request
/// sent again) and a force unlock.
pub fn lost_reply() -> Config {
    Config {
        clients: 2,
        acquisitions: 2,
        lost_replies: 1,
        force_unlocks: 1,
        ..Config::default()
    }
}

/// Four clients with leases of 500 and 150 ms held past their end, one of which dies:
/// waiters promised the long lease while a short one holds.
pub fn overslept() -> Config {
    Config {
        clients: 4,
        leases_ms: [500, 150, 150, 150],
        holds_ms: [200; 4],
        crashes: 1,
        ..Config::default()
    }
}

/// Three clients, one with a 60 ms lease (under a grant's 100 ms), held past its end.
pub fn short_lease() -> Config {
    Config {
        clients: 3,
        leases_ms: [300, 60, 300, 300],
        holds_ms: [200; 4],
        ..Config::default()
    }
}

/// A process that freezes with its connections open: the release grants it the lock (its
/// subscriber still counts), and only the runner-up's `next:` gets the lock going again
/// when the grant lapses.
pub fn frozen() -> Config {
    Config {
        clients: 3,
        freezes: 1,
        ..Config::default()
    }
}

/// Two owners of one client in its local line beside another client, one of which may
/// give up.
pub fn lined() -> Config {
    Config {
        clients: 2,
        acquisitions: 2,
        lined: true,
        cancels: 1,
        ..Config::default()
    }
}

/// Two clients taking the lock twice each through a failover that keeps every write.
pub fn failover() -> Config {
    Config {
        clients: 2,
        acquisitions: 2,
        failovers: 1,
        ..Config::default()
    }
}

/// Two clients taking the lock once each through a failover to a replica that missed the
/// last script run's writes: a release, a registration, a grant, its extension or a
/// withdraw lost. The releases come back with the clients' replays, the waiters try again
/// once their route moved; the holds lost are their owners' loss. (Twice each, 464,000
/// states, with `DLOCK_SIM_FULL=1`: see `protocol.rs`.)
pub fn lossy_failover() -> Config {
    Config {
        clients: 2,
        acquisitions: 1,
        lossy_failovers: 1,
        ..Config::default()
    }
}

/// Two clients taking the lock twice each, which listen only once an owner waits.
pub fn cold() -> Config {
    Config {
        clients: 2,
        acquisitions: 2,
        cold: true,
        ..Config::default()
    }
}

/// Three clients, one of which may die while its owner waits: with
/// [`scripts_with_a_bound_of_one`], a release whose first registered waiter is gone stops
/// at its bound and leaves the next untold.
pub fn untold() -> Config {
    Config {
        clients: 3,
        crashes: 1,
        ..Config::default()
    }
}

/// dlock's scripts with a hand-off that looks at one registry entry per call (64 in
/// dlock), so that one gone waiter ahead of a live one is enough to meet the bound.
pub fn scripts_with_a_bound_of_one() -> Scripts {
    Scripts::dlock(|_, code| {
        if !code.contains("MAX_PASSED_OVER") {
            return code;
        }
        let bound = "local MAX_PASSED_OVER = 64";
        assert!(
            code.contains(bound),
            "the hand-off's bound is not {bound:?}"
        );
        code.replacen(bound, "local MAX_PASSED_OVER = 1", 1)
    })
}

/// Two clients taking the lock twice each through a failover to a master whose clock is
/// 150 ms ahead (more than a grant lasts): a grant the old master wrote is gone on the new
/// one before its owner reads it.
pub fn clock_failover() -> Config {
    Config {
        clients: 2,
        acquisitions: 2,
        failovers: 1,
        failover_clock_ahead_ms: 150,
        ..Config::default()
    }
}

/// Three clients with leases of 500, 150 and 60 ms held past their end, whose replies may
/// come late (twice).
pub fn late_replies() -> Config {
    Config {
        clients: 3,
        leases_ms: [500, 150, 60, 60],
        holds_ms: [200; 4],
        late_replies: 2,
        ..Config::default()
    }
}

/// A same-slot multi-lock's client (both locks at once) beside a client of each lock.
pub fn multi() -> Config {
    Config {
        clients: 3,
        takes: [Takes::Both, Takes::Lock(0), Takes::Lock(1), Takes::Lock(0)],
        ..Config::default()
    }
}

/// [`multi`] with a second client of the first lock, and a process that dies: a release
/// gives the multi-lock's owner a lock it then takes with the other, and dies holding
/// both (its lease, not a grant's lapse, is the bound).
pub fn multi_crash() -> Config {
    Config {
        clients: 4,
        crashes: 1,
        ..multi()
    }
}

/// Two clients whose holders re-enter the lock once each (an inner guard given back
/// before the outer), a reply lost with its connection (the request sent again) and a
/// re-entry abandoned while its try is on its way.
pub fn reentry() -> Config {
    Config {
        clients: 2,
        reentries: true,
        lost_replies: 1,
        cancels: 1,
        ..Config::default()
    }
}

/// Two clients whose holders re-enter the lock once each, a re-entry abandoned while its
/// try is on its way, and a failover to a replica that missed the last script run's
/// writes: the abandoned re-entry's `undo` among them.
pub fn lost_cleanup() -> Config {
    Config {
        clients: 2,
        reentries: true,
        cancels: 1,
        lossy_failovers: 1,
        ..Config::default()
    }
}

/// [`multi`]'s multi-lock beside a client of its first lock, every holder re-entering
/// that lock once (the multi-lock a hold the same-slot script wrote), a lost reply and
/// a re-entry abandoned.
pub fn multi_reentry() -> Config {
    Config {
        clients: 2,
        reentries: true,
        lost_replies: 1,
        cancels: 1,
        ..multi()
    }
}

/// Two clients whose holds the watchdog renews (a 150 ms timeout, held 400 ms: three
/// renewals each), and a force unlock: the holder's next renewal finds its hold gone.
pub fn watchdog_forced() -> Config {
    Config {
        clients: 2,
        watchdog: [true; 4],
        leases_ms: [150; 4],
        holds_ms: [400; 4],
        force_unlocks: 1,
        ..Config::default()
    }
}

/// Two clients with `replica_acks`, a confirmation that does not come in time, and a
/// failover to a replica that missed the last script run's writes: no guard loses its
/// lock to the failover.
pub fn replica_acks() -> Config {
    Config {
        clients: 2,
        replica_acks: true,
        unconfirmed: 1,
        lossy_failovers: 1,
        ..Config::default()
    }
}

/// Two clients with `replica_acks` whose holds the watchdog renews, a failover to a
/// replica that missed the last script run's writes (a renewal among them), and a
/// client's commands stalled (its renewals held back past the lease).
pub fn replica_acks_watchdog() -> Config {
    Config {
        clients: 2,
        replica_acks: true,
        watchdog: [true; 4],
        leases_ms: [150; 4],
        holds_ms: [200; 4],
        lossy_failovers: 1,
        stalls: 1,
        ..Config::default()
    }
}

/// A client with `replica_acks` whose two owners wait in its local line, beside another
/// client; a confirmation that does not come in time and an owner that gives up: a
/// release's local grant, unconfirmed, to a task that left.
pub fn replica_acks_lined() -> Config {
    Config {
        clients: 2,
        acquisitions: 2,
        lined: true,
        replica_acks: true,
        unconfirmed: 1,
        cancels: 1,
        ..Config::default()
    }
}
