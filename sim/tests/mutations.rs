//! Proof that the explorer finds what matters: each fix of the hand-off, undone one at a
//! time (in the scripts, as text, or in the client's rules), gives a counterexample in a
//! world of `worlds`, which `protocol.rs` explores as built (the control: there every
//! invariant holds). Each test prints the counterexample's length; docs/RELIABILITY.md
//! records them.

use dlock_sim::explore::{exhaustive, Counterexample};
use dlock_sim::lua::Scripts;
use dlock_sim::model::{ClientRules, Config};

mod worlds;

/// Undoes `edits` (script, text, replacement) in dlock's scripts; each must apply.
fn mutated(edits: &'static [(&'static str, &'static str, &'static str)]) -> Scripts {
    Scripts::dlock(move |name, mut code| {
        for (script, from, to) in edits.iter().filter(|(script, _, _)| *script == name) {
            assert!(code.contains(from), "{script} has no {from:?}");
            code = code.replacen(from, to, 1);
        }
        code
    })
}

/// The counterexample the explorer must find for `config` with `scripts`.
fn found(name: &str, config: &Config, scripts: &Scripts) -> Counterexample {
    match exhaustive(config, scripts, 2_000_000) {
        Ok(explored) => panic!("{name}: no counterexample in {explored:?}"),
        Err(found) => {
            eprintln!(
                "{name}: {} after {} events",
                found.problem,
                found.events.len()
            );
            found
        }
    }
}

/// `!next` outlives the grant it marks: beside a minimum hold's mark it names an owner
/// without a hold (once read as a reservation by a late leave, which ended the minimum
/// hold).
#[test]
fn a_next_mark_that_outlives_its_grant() {
    let scripts = mutated(&[
        (
            "lock_hold_until",
            "ARGV[1] .. ':f', '!next')",
            "ARGV[1] .. ':f')",
        ),
        (
            "lock_acquire",
            "    redis.call('hdel', KEYS[1], '!next')\n",
            "",
        ),
    ]);
    found("!next outlives its grant", &worlds::late_leave(), &scripts);
}

/// A granted hold whose extension finds it gone (force-unlocked) stays registered: a busy
/// try after the grant registered it again.
#[test]
fn a_lost_extension_that_does_not_leave() {
    let config = Config {
        client: ClientRules {
            lost_extension_leaves: false,
            ..ClientRules::default()
        },
        ..worlds::lost_reply()
    };
    found(
        "a lost extension's registration",
        &config,
        &Scripts::dlock(|_, code| code),
    );
}

/// A grant's extension to a lease shorter than what waiters were promised tells nobody.
#[test]
fn an_extension_that_tells_nobody() {
    let scripts = mutated(&[(
        "lock_extend",
        "wake_overslept(KEYS[2], KEYS[3], ARGV[3], redis.call('pttl', KEYS[1]))",
        "",
    )]);
    found(
        "an extension that tells nobody",
        &worlds::overslept(),
        &scripts,
    );
}

/// A grantee with a lease shorter than the grant holds it as it is, and its extension
/// shortens the grant under its guard.
#[test]
fn an_extension_that_shortens_the_grant() {
    let scripts = mutated(&[("lock_extend", "ARGV[1], 'GT')", "ARGV[1])")]);
    let config = Config {
        client: ClientRules {
            short_lease_grant_is_tried: false,
            ..ClientRules::default()
        },
        ..worlds::short_lease()
    };
    found("an extension that shortens the grant", &config, &scripts);
}

/// The runner-up of a grant told nothing.
#[test]
fn a_runner_up_nobody_tells() {
    let scripts = mutated(&[(
        "lock_release",
        "if tell(publish, registry, runner_up, message) then",
        "if true then",
    )]);
    found("a runner-up nobody tells", &worlds::frozen(), &scripts);
}

/// A release gives the lock to its client's next task, which stopped waiting before the
/// answer came, and nobody gives it back.
#[test]
fn a_local_grant_nobody_gives_back() {
    let config = Config {
        client: ClientRules {
            unwanted_local_grant_given_back: false,
            ..ClientRules::default()
        },
        ..worlds::lined()
    };
    found(
        "a local grant nobody gives back",
        &config,
        &Scripts::dlock(|_, code| code),
    );
}

/// A grant made to whoever `PUBLISH` counted: the `held:` message goes out first, and the
/// hold is written only when the server counted a receiver. A client whose subscriber is
/// still on the demoted master hears it through replication, uncounted, and holds a lock
/// nobody holds in Redis (the cluster-failover grant, V26).
#[test]
fn a_grant_to_whoever_publish_counted() {
    let scripts = mutated(&[(
        "lock_release",
        "if listens_here(publish, registry, owner) then",
        "if tell(publish, registry, owner, 'held:' .. string.format('%d', math.max(0, expires_ms * 1000 - tonumber(oldest[2]))) .. ':0') then",
    )]);
    found(
        "a grant to whoever PUBLISH counted",
        &worlds::failover(),
        &scripts,
    );
}

/// A release put into the client's release log only once Redis answered it: a release
/// the old master applied and the promoted replica never got, whose reply the client
/// reads after it moved to the new master, is never replayed, and the lock sits there
/// until its lease runs out while a waiter is passed over.
#[test]
fn a_release_logged_once_answered() {
    let config = Config {
        client: ClientRules {
            release_logged_when_sent: false,
            ..ClientRules::default()
        },
        ..worlds::lossy_failover()
    };
    found(
        "a release logged once answered",
        &config,
        &Scripts::dlock(|_, code| code),
    );
}

/// An owner whose busy try was sent before its client listened waits once it listens,
/// without asking whether a release passed it over meanwhile: it sleeps through the
/// release it was not told of.
#[test]
fn an_unheard_try_nobody_checks() {
    let config = Config {
        client: ClientRules {
            unheard_try_checked: false,
            ..ClientRules::default()
        },
        ..worlds::cold()
    };
    found(
        "an unheard try nobody checks",
        &config,
        &Scripts::dlock(|_, code| code),
    );
}

/// A release whose hand-off left waiters untold is not followed by a `leave`: the live
/// waiter behind a gone one sleeps on.
#[test]
fn an_untold_waiter_nobody_passes_to() {
    let config = Config {
        client: ClientRules {
            untold_passed_on: false,
            ..ClientRules::default()
        },
        ..worlds::untold()
    };
    found(
        "an untold waiter nobody passes to",
        &config,
        &worlds::scripts_with_a_bound_of_one(),
    );
}

/// A grant read after the client's route moved is held as it is: its length, from a
/// registration on the old master to a grant on the new one, is read off two clocks
/// (V29, the grant timed by two clocks).
#[test]
fn a_grant_timed_by_two_clocks() {
    let config = Config {
        client: ClientRules {
            moved_route_grant_is_tried: false,
            ..ClientRules::default()
        },
        ..worlds::clock_failover()
    };
    found(
        "a grant timed by two clocks",
        &config,
        &Scripts::dlock(|_, code| code),
    );
}

/// A hold counted from the answer of the call that took it, not from its send: a late
/// answer makes the guard outlive the hold's expiry in Redis.
#[test]
fn a_hold_counted_from_its_answer() {
    let config = Config {
        client: ClientRules {
            hold_counted_from_send: false,
            ..ClientRules::default()
        },
        ..worlds::late_replies()
    };
    found(
        "a hold counted from its answer",
        &config,
        &Scripts::dlock(|_, code| code),
    );
}

/// A same-slot multi-lock's try that takes a lock a release gave it leaves the `!next`
/// mark beside its hold: the hash reads as a grant that lapses in 100 ms, not a hold of
/// the whole lease (found by the simulator, this round).
#[test]
fn a_grant_mark_left_by_the_multi_lock() {
    let scripts = mutated(&[(
        "multi_acquire",
        "    if given[i] then\n      -- A lock given",
        "    if false then\n      -- A lock given",
    )]);
    found(
        "a grant mark left by the multi-lock",
        &worlds::multi_crash(),
        &scripts,
    );
}

/// A multi-lock's client that listens on the first lock's wake channel alone: a try
/// blocked by the second registers its owner there, and that lock's release, counting no
/// receiver, passes it over (the integration test `multi_waits` found this on a real
/// Redis, with another task of the client keeping that channel subscribed).
#[test]
fn a_multi_lock_deaf_to_its_second_lock() {
    let config = Config {
        client: ClientRules {
            multi_listens_on_every_lock: false,
            ..ClientRules::default()
        },
        ..worlds::multi()
    };
    found(
        "a multi-lock deaf to its second lock",
        &config,
        &Scripts::dlock(|_, code| code),
    );
}

/// A retried re-entry that adds a second hold: its marker unread, the owner's last guard
/// leaves a hold behind.
#[test]
fn a_retried_reentry_that_counts_twice() {
    let scripts = mutated(&[(
        "lock_acquire",
        "if redis.call('exists', KEYS[5]) == 0 then",
        "if true then",
    )]);
    found("a retried re-entry", &worlds::reentry(), &scripts);
}

/// A retried release of a re-entered hold that gives back a second hold: its memo unread,
/// the lock is freed under its outer guard.
#[test]
fn a_retried_inner_release_that_counts_twice() {
    let scripts = mutated(&[(
        "lock_release",
        "elseif mode == 'one' and ARGV[6] ~= '0' then",
        "elseif false then",
    )]);
    found("a retried inner release", &worlds::reentry(), &scripts);
    found(
        "a retried inner release of a multi-lock's hold",
        &worlds::multi_reentry(),
        &scripts,
    );
}

/// A retried undo that gives back a second hold: its marker's deletion unread, the lock is
/// freed under its outer guard.
#[test]
fn a_retried_undo_that_counts_twice() {
    let scripts = mutated(&[(
        "lock_release",
        "if redis.call('del', KEYS[3]) == 0 then",
        "if redis.call('del', KEYS[3]) < 0 then",
    )]);
    found("a retried undo", &worlds::reentry(), &scripts);
}

/// A re-entry abandoned while its try was on its way, never undone: the owner's last
/// guard leaves the hold the try added.
#[test]
fn an_abandoned_reentry_that_is_not_undone() {
    let config = Config {
        client: ClientRules {
            abandoned_reentry_undone: false,
            ..ClientRules::default()
        },
        ..worlds::reentry()
    };
    found(
        "an abandoned re-entry",
        &config,
        &Scripts::dlock(|_, code| code),
    );
}

/// A cleanup sent by an acquisition that gave up, not put into the release log: a
/// failover that loses it leaves what it gave back (a re-entry's hold) to its lease.
#[test]
fn a_cleanup_left_out_of_the_release_log() {
    let config = Config {
        client: ClientRules {
            cleanups_logged: false,
            ..ClientRules::default()
        },
        ..worlds::lost_cleanup()
    };
    found(
        "a cleanup left out of the release log",
        &config,
        &Scripts::dlock(|_, code| code),
    );
}

/// A renewal that answers "renewed" whatever the key holds: a force-unlocked holder's
/// guard never learns it lost the lock.
#[test]
fn a_renewal_of_a_hold_that_is_gone() {
    let scripts = mutated(&[("lock_renew", "elseif held == 1 then", "elseif true then")]);
    found(
        "a renewal of a hold that is gone",
        &worlds::watchdog_forced(),
        &scripts,
    );
}

/// With `replica_acks`, a try whose grant counts without the replica's confirmation: a
/// failover that loses its writes takes the lock from its guard.
#[test]
fn a_try_that_does_not_wait_for_the_replica() {
    let config = Config {
        client: ClientRules {
            tries_wait_for_replicas: false,
            ..ClientRules::default()
        },
        ..worlds::replica_acks()
    };
    found(
        "a try without the replica",
        &config,
        &Scripts::dlock(|_, code| code),
    );
}

/// With `replica_acks`, a renewal that moves its guard's deadline without the replica's
/// confirmation (`sync::watchdog`): a failover that loses it leaves the guard counting
/// on an expiry the new master lacks.
#[test]
fn a_renewal_that_does_not_wait_for_the_replica() {
    let config = Config {
        client: ClientRules {
            renewals_wait_for_replicas: false,
            ..ClientRules::default()
        },
        ..worlds::replica_acks_watchdog()
    };
    found(
        "a renewal without the replica",
        &config,
        &Scripts::dlock(|_, code| code),
    );
}

/// With `replica_acks`, a release whose local grant the replica did not confirm read as
/// giving the named task nothing: a task that left meanwhile keeps the hold for its lease
/// (found by the simulator's random walks with `replica_acks`).
#[test]
fn an_unconfirmed_local_grant_read_as_not_given() {
    let config = Config {
        client: ClientRules {
            unconfirmed_local_grant_settled: false,
            ..ClientRules::default()
        },
        ..worlds::replica_acks_lined()
    };
    found(
        "an unconfirmed local grant",
        &config,
        &Scripts::dlock(|_, code| code),
    );
}
