//! `subscribe`: how fast one client subscribes many waiters, and unsubscribes them.
//!
//! A rival client holds [`Config::locks`] distinct locks (a fixed lease, no watchdog
//! traffic). One `LockClient` then starts a waiter per lock (`try_lock_for(long)` in its
//! own task). The figure is the time from the last waiter started until the server counts
//! a subscribed channel per lock (`INFO stats`: `pubsub_channels` + `pubsubshard_channels`,
//! polled every [`POLL_EVERY`]); then the waiters are aborted (the futures dropped) and the
//! time until the count is back where it started is the second figure. A waiter that is not
//! subscribed yet would only learn of a release from its fallback timer. Subscribed, a
//! waiter may still send something before it sleeps (a lock's waiter checks that it is
//! still registered): the time until the waiters' commands stop, and the CPU both sides
//! spent until then per waiter, are the whole cost of starting to wait.
//!
//! Asleep, a waiter still tries now and then in case a message was lost (its recheck):
//! the acquire scripts the server runs per second over [`RECHECK_WINDOW`], starting
//! [`RECHECK_AFTER`] after the waiters' first tries (once every waiter's first recheck,
//! which comes after the client's `max_wait_recheck`, is past), are what many sleeping
//! waiters cost the server.
//!
//! The counts are what the server keeps anyway, so a poll costs it nothing and the client
//! little. Listing the channels (`PUBSUB CHANNELS`) instead returned 10,000 names per
//! poll: each poll took 30–40 ms of a machine the waiters share, which both slowed what it
//! measured and made the figure coarse. The listing is still read once at each end, to
//! check that the channels counted are this run's.

use std::time::Duration;

use dlock::LockClient;
use futures_util::stream::{self, StreamExt, TryStreamExt};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::settings::Config;
use crate::stats::{error, process_cpu, resident_bytes, Result};
use crate::target::{self, Target};

/// Poll period of the channel count.
const POLL_EVERY: Duration = Duration::from_millis(5);
/// Give up waiting for the channels after this long (the figure is then this bound).
const GIVE_UP: Duration = Duration::from_secs(30);
/// The rival's lease: outlasts the run, so no lock is freed meanwhile.
const RIVAL_LEASE: Duration = Duration::from_secs(300);
/// The waiters' client's command timeout (see `run`).
const WAITER_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// The waiters' wait: outlasts the run, so none times out meanwhile.
const WAITER_WAIT: Duration = Duration::from_secs(300);

/// Channels the server lists (classic and sharded) for this scenario's locks: dlock's
/// channels of the run's key prefix `prefix` for lock names starting `sub:`. A waiter
/// listens on its client's wake channel of the lock (`dlock:unlock:<scope>#<client>:<name>`).
async fn listed_channels(conn: &mut MultiplexedConnection, prefix: &str) -> Result<usize> {
    let pattern = format!("dlock:unlock:{prefix}*");
    let mut count = 0;
    for kind in ["CHANNELS", "SHARDCHANNELS"] {
        let names: Vec<String> = redis::cmd("PUBSUB")
            .arg(kind)
            .arg(&pattern)
            .query_async(conn)
            .await?;
        count += names.iter().filter(|n| n.contains(":sub:")).count();
    }
    Ok(count)
}

/// Channels subscribed on the whole server, classic and sharded (`INFO stats`).
async fn subscribed_channels(conn: &mut MultiplexedConnection) -> Result<usize> {
    let stats = target::info(conn, "stats").await?;
    let count = |field: &str| {
        stats
            .get(field)
            .and_then(|value| value.parse::<usize>().ok())
            .unwrap_or(0)
    };
    Ok(count("pubsub_channels") + count("pubsubshard_channels"))
}

/// Polls the server's channel count until `done(count)`; returns the elapsed time since
/// `from` and the last count.
async fn until(
    conn: &mut MultiplexedConnection,
    from: Instant,
    done: impl Fn(usize) -> bool,
) -> Result<(Duration, usize, bool)> {
    loop {
        let count = subscribed_channels(conn).await?;
        if done(count) {
            return Ok((from.elapsed(), count, true));
        }
        if from.elapsed() >= GIVE_UP {
            return Ok((from.elapsed(), count, false));
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// How long after the waiters' first tries the count of their rechecks starts: past the
/// first recheck of each (the default `max_wait_recheck`, 1 s, and some slack).
const RECHECK_AFTER: Duration = Duration::from_millis(2_500);
/// How long the rechecks of sleeping waiters are counted.
const RECHECK_WINDOW: Duration = Duration::from_secs(3);

/// How long the waiters' commands must have stopped for them to count as asleep.
const SETTLE_QUIET: Duration = Duration::from_millis(25);

/// The waiters' commands the server ran so far: acquire scripts, registration checks
/// and subscriptions (the admin connection's `INFO` and `PUBSUB` are not counted).
async fn waiter_calls(conn: &mut MultiplexedConnection) -> Result<(u64, u64, u64)> {
    let calls = target::command_calls(conn).await?;
    let count = |names: &[&str]| -> u64 {
        names
            .iter()
            .map(|name| calls.get(*name).copied().unwrap_or(0))
            .sum()
    };
    Ok((
        count(&["evalsha", "eval"]),
        count(&["zscore"]),
        count(&["subscribe", "ssubscribe"]),
    ))
}

/// Polls until the waiters' commands stop for [`SETTLE_QUIET`]; returns the time of their
/// last one since `from`, and the counts then.
async fn until_settled(
    conn: &mut MultiplexedConnection,
    from: Instant,
) -> Result<(Duration, (u64, u64, u64))> {
    let mut last = waiter_calls(conn).await?;
    let mut last_change = from.elapsed();
    loop {
        tokio::time::sleep(POLL_EVERY).await;
        let now = waiter_calls(conn).await?;
        if now != last {
            last = now;
            last_change = from.elapsed();
        } else if from.elapsed() >= last_change + SETTLE_QUIET || from.elapsed() >= GIVE_UP {
            return Ok((last_change, last));
        }
    }
}

/// Runs the subscribe scenario once.
pub async fn run(target: &Target, cfg: &Config) -> Result<Metrics> {
    let n = cfg.locks;
    let names: Vec<String> = (0..n).map(|i| format!("sub:{i}")).collect();
    let rival = target.lock_client(None).await?;
    let rival_started = Instant::now();
    let guards: Vec<dlock::LockGuard> = stream::iter(names.iter())
        .map(|name| {
            let lock = rival.lock(name);
            async move { lock.lock_with_lease(RIVAL_LEASE).await }
        })
        .buffer_unordered(256)
        .try_collect()
        .await?;

    // Every waiter's first try is sent at once: with 100,000 of them the last are
    // answered seconds later, past the default command timeout (3 s), which is not what
    // this scenario measures.
    let waiters = LockClient::builder()
        .key_prefix(target.prefix().to_owned())
        .command_timeout(WAITER_COMMAND_TIMEOUT)
        .connect(target.url())
        .await?;
    let mut admin = target.connection().await?;
    let stem = target.prefix().to_owned();
    // Channels of others on a shared server (none on the scenario's own server).
    let before = subscribed_channels(&mut admin).await?;
    target::reset_stats(&mut admin).await?;
    let resident_before = resident_bytes();
    let (client_cpu_before, server_cpu_before) =
        (process_cpu(), target::server_cpu(&mut admin).await?);
    let tasks: Vec<_> = names
        .iter()
        .map(|name| {
            let lock = waiters.lock(name);
            tokio::spawn(async move { lock.try_lock_for(WAITER_WAIT).await })
        })
        .collect();
    let last_started = Instant::now();
    // The waiters' first tries (one acquire script each, answered busy) are the server's
    // work before any waiter can subscribe; how long they take says how much of the
    // figure is subscribing.
    let first_tries = loop {
        let calls = target::command_calls(&mut admin).await?;
        let scripts = calls.get("evalsha").copied().unwrap_or(0);
        if scripts >= n as u64 || last_started.elapsed() >= GIVE_UP {
            break last_started.elapsed();
        }
        tokio::time::sleep(POLL_EVERY).await;
    };
    // What the first tries cost each side: the phase is bound by CPU, not by waiting.
    let client_cpu = process_cpu().saturating_sub(client_cpu_before);
    let server_cpu = target::server_cpu(&mut admin).await? - server_cpu_before;
    let (subscribed, reached, all_in) =
        until(&mut admin, last_started, |c| c >= before + n).await?;
    let reached = reached.saturating_sub(before);
    // The count is the server's: the channels must be this run's.
    if all_in && listed_channels(&mut admin, &stem).await? != n {
        return Err(error(
            "the server counts a channel per waiter, but not all of them are the waiters'",
        ));
    }
    // Subscribed, a waiter may still send something before it sleeps (a lock's waiter
    // checks its registration): the whole cost of starting to wait is counted until the
    // waiters' commands stop.
    let (settled, (scripts, checks, _)) = until_settled(&mut admin, last_started).await?;
    let settle_client_cpu = process_cpu().saturating_sub(client_cpu_before);
    let settle_server_cpu = target::server_cpu(&mut admin).await? - server_cpu_before;
    // Every waiter is now waiting in Redis: its task, its acquisition and its share of
    // the subscriptions are what the process grew by.
    let per_waiter = resident_bytes()
        .zip(resident_before)
        .map_or(f64::NAN, |(after, before)| {
            after.saturating_sub(before) as f64 / n as f64
        });
    // Asleep, the waiters only recheck.
    tokio::time::sleep_until((last_started + first_tries + RECHECK_AFTER).max(Instant::now()))
        .await;
    let (rechecks_before, ..) = waiter_calls(&mut admin).await?;
    let asleep_server_cpu_before = target::server_cpu(&mut admin).await?;
    let window = Instant::now();
    tokio::time::sleep(RECHECK_WINDOW).await;
    let (rechecks_after, ..) = waiter_calls(&mut admin).await?;
    let asleep_server_cpu = target::server_cpu(&mut admin).await? - asleep_server_cpu_before;
    let window = window.elapsed().as_secs_f64();
    let rechecks_per_s = rechecks_after.saturating_sub(rechecks_before) as f64 / window;

    for task in &tasks {
        task.abort();
    }
    let aborted = Instant::now();
    for task in tasks {
        match task.await {
            Err(e) if e.is_cancelled() => {}
            Err(e) => return Err(error(format!("waiter task: {e}"))),
            Ok(Ok(_)) if rival_started.elapsed() >= RIVAL_LEASE => {
                return Err(error(format!(
                    "the run outlasted the rival's {} lease, and a waiter took its lock",
                    humantime::format_duration(RIVAL_LEASE)
                )))
            }
            Ok(Ok(_)) => return Err(error("a waiter acquired a lock the rival holds")),
            Ok(Err(e)) => return Err(error(format!("a waiter failed: {e}"))),
        }
    }
    let (unsubscribed, left, all_out) = until(&mut admin, aborted, |c| c <= before).await?;
    let left = left.saturating_sub(before);
    if all_out && listed_channels(&mut admin, &stem).await? != 0 {
        return Err(error(
            "the server counts no waiter's channel, but lists some of them",
        ));
    }
    for guard in guards {
        guard.unlock().await?;
    }

    let mut m = Metrics::default();
    m.add(
        "subscribed_ms",
        "last waiter started → all channels subscribed (ms)",
        subscribed.as_secs_f64() * 1e3,
        1,
    );
    m.add(
        "client_bytes_per_waiter",
        "client memory per waiting task (resident growth / waiters, bytes)",
        per_waiter,
        0,
    );
    m.add(
        "first_tries_ms",
        "last waiter started → the server ran one acquire script per waiter (ms)",
        first_tries.as_secs_f64() * 1e3,
        1,
    );
    m.add(
        "first_try_client_us",
        "client CPU per waiter until the first tries ran (µs)",
        client_cpu.as_secs_f64() * 1e6 / n as f64,
        1,
    );
    m.add(
        "first_try_server_us",
        "server CPU per waiter until the first tries ran (µs)",
        server_cpu * 1e6 / n as f64,
        1,
    );
    m.add(
        "subscribed_after_tries_ms",
        "… → all channels subscribed, after those first tries (ms)",
        subscribed.saturating_sub(first_tries).as_secs_f64() * 1e3,
        1,
    );
    m.add(
        "settled_ms",
        "… → the waiters' last command before they all sleep (ms)",
        settled.as_secs_f64() * 1e3,
        1,
    );
    m.add(
        "settle_client_us",
        "client CPU per waiter until they all sleep (µs)",
        settle_client_cpu.as_secs_f64() * 1e6 / n as f64,
        1,
    );
    m.add(
        "settle_server_us",
        "server CPU per waiter until they all sleep (µs)",
        settle_server_cpu * 1e6 / n as f64,
        1,
    );
    m.add(
        "scripts_per_waiter",
        "acquire scripts per waiter until they all sleep",
        scripts as f64 / n as f64,
        2,
    );
    m.add(
        "checks_per_waiter",
        "registration checks (ZSCORE) per waiter until they all sleep",
        checks as f64 / n as f64,
        2,
    );
    m.add(
        "first_rechecks_per_waiter",
        "acquire scripts per waiter once they all sleep, until the rechecks are counted \
         (the first wait's rechecks, 2.5 s)",
        rechecks_before.saturating_sub(scripts) as f64 / n as f64,
        2,
    );
    m.add(
        "rechecks_per_s",
        "acquire scripts per second while the waiters sleep (their rechecks)",
        rechecks_per_s,
        0,
    );
    m.add(
        "asleep_server_busy_pct",
        "the server's CPU while the waiters sleep (% of one core)",
        asleep_server_cpu / window * 100.0,
        0,
    );
    m.add(
        "unsubscribed_ms",
        "waiters aborted → no channel left (ms)",
        unsubscribed.as_secs_f64() * 1e3,
        1,
    );
    m.add("waiters", "waiters (distinct locks)", n as f64, 0);
    m.add_min(
        "subscribed_count",
        "channels subscribed at the end of the wait (worst run)",
        reached as f64,
    );
    m.add_max(
        "left_count",
        "channels left at the end of the wait (worst run)",
        left as f64,
    );
    if !all_in || !all_out {
        m.note(format!(
            "subscribe: gave up after {} ({reached} of {n} channels subscribed, {left} left \
             after the abort); the times shown are that bound",
            humantime::format_duration(GIVE_UP)
        ));
    }
    m.note(format!(
        "subscribe: a rival client holds {n} locks; one LockClient starts a try_lock_for waiter \
         on each; channels counted with INFO stats (pubsub_channels + pubsubshard_channels) every {} ms",
        POLL_EVERY.as_millis()
    ));
    Ok(m)
}
