//! The `scripts` scenario: what each common-path script costs Redis per call, read from
//! `INFO commandstats` around phases that run one script only.
//!
//! dlock's lock is driven through its client, with fencing tokens on (the default): a
//! phase of fresh acquisitions of free locks, a phase in which the watchdog renews them
//! once, and a phase of last releases with nobody waiting. The lean floor's pair and the
//! design floor's (see `floor`) run on as many keys from a bare connection. A script's `usec` in commandstats
//! includes the commands it runs; those commands are also counted on their own lines,
//! which gives the commands per call.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use dlock::{LockClient, LockGuard};
use redis::aio::MultiplexedConnection;
use tokio::sync::Mutex;

use crate::floor::{Floor, FloorScripts};
use crate::metrics::Metrics;
use crate::settings::Config;
use crate::stats::{error, Result};
use crate::target::{self, CommandStat, Target};

/// The watchdog timeout of the renewal phase's client: a round every 500 ms.
const RENEWAL_WATCHDOG: Duration = Duration::from_millis(1_500);
/// Holds per renewal call of dlock's watchdog.
const RENEW_BATCH: usize = 512;
/// How long the renewal phase is measured: a few rounds.
const RENEWAL_WINDOW: Duration = Duration::from_millis(1_600);

/// Commands that are not run by a script: the scripts themselves, and what the client and
/// the benchmark send besides.
const NOT_INNER: &[&str] = &[
    "evalsha",
    "eval",
    "evalsha_ro",
    "eval_ro",
    "fcall",
    "fcall_ro",
    "info",
    "ping",
    "hello",
    "select",
    "subscribe",
    "unsubscribe",
    "ssubscribe",
    "sunsubscribe",
    "psubscribe",
    "punsubscribe",
];

/// What one phase cost: script calls, server time per call, commands run per call.
struct Phase {
    calls: f64,
    us_per_call: f64,
    inner_per_call: f64,
}

/// Runs `work` and reads what the scripts it sent cost.
async fn phase<T>(
    admin: &mut MultiplexedConnection,
    work: impl Future<Output = Result<T>>,
) -> Result<(T, Phase)> {
    let before = target::command_stats(admin).await?;
    let out = work.await?;
    let after = target::command_stats(admin).await?;
    let delta = |command: &str| -> CommandStat {
        let a = after.get(command).copied().unwrap_or_default();
        let b = before.get(command).copied().unwrap_or_default();
        CommandStat {
            calls: a.calls - b.calls,
            usec: a.usec - b.usec,
        }
    };
    let scripts = ["evalsha", "eval", "fcall"].map(delta);
    let calls: u64 = scripts.iter().map(|s| s.calls).sum();
    let usec: u64 = scripts.iter().map(|s| s.usec).sum();
    if calls == 0 {
        return Err(error("scripts: a phase ran no script"));
    }
    let inner: u64 = after
        .keys()
        .filter(|command| !NOT_INNER.contains(&command.as_str()))
        .filter(|command| {
            !command.starts_with("client|")
                && !command.starts_with("config|")
                && !command.starts_with("script|")
                && !command.starts_with("function|")
        })
        .map(|command| delta(command).calls)
        .sum();
    let calls = calls as f64;
    Ok((
        out,
        Phase {
            calls,
            us_per_call: usec as f64 / calls,
            inner_per_call: inner as f64 / calls,
        },
    ))
}

/// Runs `per_key` for keys `0..keys`, from `tasks` tasks at once.
async fn spread<F, Fut, T>(keys: usize, tasks: usize, per_key: F) -> Result<Vec<T>>
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<T>> + Send,
    T: Send + 'static,
{
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let per_key = per_key.clone();
            tokio::spawn(async move {
                let mut out = Vec::new();
                for key in (task..keys).step_by(tasks) {
                    out.push(per_key(key).await?);
                }
                Ok::<_, crate::stats::Error>(out)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(keys);
    for handle in handles {
        all.extend(handle.await??);
    }
    Ok(all)
}

/// `lock()` of `keys` locks named `<name>:<i>` from `tasks` tasks; their guards.
async fn acquire_all(
    client: &LockClient,
    name: &str,
    keys: usize,
    tasks: usize,
) -> Result<Vec<LockGuard>> {
    let (client, name) = (client.clone(), name.to_owned());
    spread(keys, tasks, move |key| {
        let lock = client.lock(&format!("{name}:{key}"));
        async move { Ok::<LockGuard, crate::stats::Error>(lock.lock().await?) }
    })
    .await
}

/// `unlock()` of every guard, from `tasks` tasks.
async fn release_all(guards: Vec<LockGuard>, tasks: usize) -> Result<()> {
    let count = guards.len();
    let guards: HashMap<usize, LockGuard> = guards.into_iter().enumerate().collect();
    let guards = Arc::new(Mutex::new(guards));
    spread(count, tasks, move |key| {
        let guards = Arc::clone(&guards);
        async move {
            let guard = guards.lock().await.remove(&key);
            match guard {
                Some(guard) => Ok(guard.unlock().await?),
                None => Err(error("scripts: a guard went missing")),
            }
        }
    })
    .await
    .map(drop)
}

/// Alternating rounds of dlock's pair and the floor's: their medians are compared, so a
/// burst of load on this shared machine does not land on one side only.
const ROUNDS: usize = 5;

/// A floor's pair over `keys` keys from `tasks` tasks: its acquire phase and its
/// release phase.
async fn floor_round(
    admin: &mut MultiplexedConnection,
    conn: &MultiplexedConnection,
    floor: &FloorScripts,
    prefix: &str,
    keys: usize,
    tasks: usize,
) -> Result<(Phase, Phase)> {
    let owner = uuid::Uuid::new_v4().to_string();
    let prefix = prefix.to_owned();
    let each = |release: bool| {
        let (conn, floor, owner, prefix) =
            (conn.clone(), floor.clone(), owner.clone(), prefix.clone());
        async move {
            spread(keys, tasks, move |key| {
                let (mut conn, floor, owner) = (conn.clone(), floor.clone(), owner.clone());
                let key = floor.key(&prefix, key);
                async move {
                    match release {
                        false => floor.acquire(&mut conn, &key, &owner).await,
                        true => floor.release(&mut conn, &key, &owner).await,
                    }
                }
            })
            .await
            .map(drop)
        }
    };
    let ((), acquire) = phase(admin, each(false)).await?;
    let ((), release) = phase(admin, each(true)).await?;
    Ok((acquire, release))
}

/// The median of `phases`' `what`.
fn median_of(phases: &[Phase], what: impl Fn(&Phase) -> f64) -> f64 {
    crate::stats::median(&phases.iter().map(what).collect::<Vec<_>>())
}

/// Runs the scenario once.
pub async fn run(target: &Target, cfg: &Config) -> Result<Metrics> {
    let keys = if cfg.quick { 1_000 } else { 4_000 };
    let rounds = if cfg.quick { 2 } else { ROUNDS };
    let tasks = cfg.s1_tasks;
    let mut admin = target.connection().await?;
    let mut m = Metrics::default();

    // dlock's lock from a client with the default watchdog (its first renewal round is
    // 10 s away), and the floor's pair, round after round.
    let client = target.lock_client(None).await?;
    // A round first, unmeasured, as S1's steady state has it: the names' keys (the
    // fencing counters of their slots) exist.
    release_all(acquire_all(&client, "scripts", keys, tasks).await?, tasks).await?;
    let conn = target.connection().await?;
    let (floor, design, at_args, bare) = (
        FloorScripts::new(Floor::Lean),
        FloorScripts::new(Floor::Design),
        FloorScripts::new(Floor::DesignAtDlockArguments),
        FloorScripts::new(Floor::DlockScripts),
    );
    floor.load(&mut admin).await?;
    design.load(&mut admin).await?;
    at_args.load(&mut admin).await?;
    bare.load(&mut admin).await?;
    // The counters exist before the measured rounds, as dlock's do.
    for scripts in [&design, &at_args, &bare] {
        floor_round(&mut admin, &conn, scripts, target.prefix(), keys, tasks).await?;
    }
    let (mut acquires, mut releases, mut floor_acquires, mut floor_releases) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut design_acquires, mut design_releases) = (Vec::new(), Vec::new());
    let (mut args_acquires, mut args_releases) = (Vec::new(), Vec::new());
    let (mut bare_acquires, mut bare_releases) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (guards, acquire) =
            phase(&mut admin, acquire_all(&client, "scripts", keys, tasks)).await?;
        let ((), release) = phase(&mut admin, release_all(guards, tasks)).await?;
        let (floor_acquire, floor_release) =
            floor_round(&mut admin, &conn, &floor, target.prefix(), keys, tasks).await?;
        let (design_acquire, design_release) =
            floor_round(&mut admin, &conn, &design, target.prefix(), keys, tasks).await?;
        let (args_acquire, args_release) =
            floor_round(&mut admin, &conn, &at_args, target.prefix(), keys, tasks).await?;
        let (bare_acquire, bare_release) =
            floor_round(&mut admin, &conn, &bare, target.prefix(), keys, tasks).await?;
        acquires.push(acquire);
        releases.push(release);
        floor_acquires.push(floor_acquire);
        floor_releases.push(floor_release);
        design_acquires.push(design_acquire);
        design_releases.push(design_release);
        args_acquires.push(args_acquire);
        args_releases.push(args_release);
        bare_acquires.push(bare_acquire);
        bare_releases.push(bare_release);
    }
    let median = |phases: &[Phase]| Phase {
        calls: median_of(phases, |p| p.calls),
        us_per_call: median_of(phases, |p| p.us_per_call),
        inner_per_call: median_of(phases, |p| p.inner_per_call),
    };
    let (acquire, release) = (median(&acquires), median(&releases));
    let (floor_acquire, floor_release) = (median(&floor_acquires), median(&floor_releases));
    let (design_acquire, design_release) = (median(&design_acquires), median(&design_releases));
    let (args_acquire, args_release) = (median(&args_acquires), median(&args_releases));
    let (bare_acquire, bare_release) = (median(&bare_acquires), median(&bare_releases));

    // Renewals: a client renewing every half second, measured over rounds in which it
    // sends nothing else.
    let renewing = LockClient::builder()
        .key_prefix(target.prefix().to_owned())
        .watchdog_timeout(RENEWAL_WATCHDOG)
        .connect(target.url())
        .await?;
    let guards = acquire_all(&renewing, "renewed", keys, tasks).await?;
    let ((), renew) = phase(&mut admin, async {
        tokio::time::sleep(RENEWAL_WINDOW).await;
        Ok(())
    })
    .await?;
    release_all(guards, tasks).await?;
    let batches = keys.div_ceil(RENEW_BATCH) as f64;
    let renewed = (renew.calls / batches).round() * keys as f64;
    if renewed == 0.0 {
        return Err(error("scripts: no renewal round in the window"));
    }

    let locks = keys as f64;
    m.add("keys", "locks per phase", locks, 0);
    m.add("rounds", "alternating rounds (medians)", rounds as f64, 0);
    m.add(
        "acquire_us",
        "dlock acquire, fresh (µs per call)",
        acquire.us_per_call,
        2,
    );
    m.add(
        "acquire_commands",
        "dlock acquire, fresh (commands per call)",
        acquire.inner_per_call,
        2,
    );
    m.add(
        "release_us",
        "dlock release, last hold (µs per call)",
        release.us_per_call,
        2,
    );
    m.add(
        "release_commands",
        "dlock release, last hold (commands per call)",
        release.inner_per_call,
        2,
    );
    m.add(
        "renew_calls",
        "dlock renewal calls per round",
        renew.calls / (renewed / locks),
        1,
    );
    m.add(
        "renew_us_per_lock",
        "dlock renewal (µs per lock renewed)",
        renew.us_per_call * renew.calls / renewed,
        2,
    );
    m.add(
        "renew_commands_per_lock",
        "dlock renewal (commands per lock renewed)",
        renew.inner_per_call * renew.calls / renewed,
        2,
    );
    m.add(
        "floor_acquire_us",
        "floor acquire (µs per call)",
        floor_acquire.us_per_call,
        2,
    );
    m.add(
        "floor_acquire_commands",
        "floor acquire (commands per call)",
        floor_acquire.inner_per_call,
        2,
    );
    m.add(
        "floor_release_us",
        "floor release (µs per call)",
        floor_release.us_per_call,
        2,
    );
    m.add(
        "floor_release_commands",
        "floor release (commands per call)",
        floor_release.inner_per_call,
        2,
    );
    m.add(
        "design_acquire_us",
        "design floor acquire (µs per call)",
        design_acquire.us_per_call,
        2,
    );
    m.add(
        "design_acquire_commands",
        "design floor acquire (commands per call)",
        design_acquire.inner_per_call,
        2,
    );
    m.add(
        "design_release_us",
        "design floor release (µs per call)",
        design_release.us_per_call,
        2,
    );
    m.add(
        "design_release_commands",
        "design floor release (commands per call)",
        design_release.inner_per_call,
        2,
    );
    m.add(
        "args_acquire_us",
        "design floor acquire at dlock's arguments (µs per call)",
        args_acquire.us_per_call,
        2,
    );
    m.add(
        "args_release_us",
        "design floor release at dlock's arguments (µs per call)",
        args_release.us_per_call,
        2,
    );
    m.add(
        "bare_acquire_us",
        "dlock acquire from a bare connection (µs per call)",
        bare_acquire.us_per_call,
        2,
    );
    m.add(
        "bare_release_us",
        "dlock release from a bare connection (µs per call)",
        bare_release.us_per_call,
        2,
    );
    let pair = |acquire: &Phase, release: &Phase| acquire.us_per_call + release.us_per_call;
    m.add(
        "bare_vs_design",
        "dlock's pair from a bare connection over the design floor's (execution)",
        pair(&bare_acquire, &bare_release) / pair(&design_acquire, &design_release),
        2,
    );
    m.add(
        "args_vs_design",
        "the design floor's pair at dlock's arguments over the design floor's (execution)",
        pair(&args_acquire, &args_release) / pair(&design_acquire, &design_release),
        2,
    );
    m.add(
        "cycle_vs_floor",
        "dlock acquire + release over the floor's pair (execution)",
        pair(&acquire, &release) / pair(&floor_acquire, &floor_release),
        2,
    );
    m.add(
        "cycle_vs_design",
        "dlock acquire + release over the design floor's pair (execution)",
        pair(&acquire, &release) / pair(&design_acquire, &design_release),
        2,
    );
    m.add(
        "design_vs_floor",
        "the design floor's pair over the lean floor's (execution)",
        pair(&design_acquire, &design_release) / pair(&floor_acquire, &floor_release),
        2,
    );
    for (name, p) in [
        ("acquire", &acquire),
        ("release", &release),
        ("floor acquire", &floor_acquire),
        ("floor release", &floor_release),
        ("design floor acquire", &design_acquire),
        ("design floor release", &design_release),
        ("design floor acquire at dlock's arguments", &args_acquire),
        ("design floor release at dlock's arguments", &args_release),
        ("dlock acquire from a bare connection", &bare_acquire),
        ("dlock release from a bare connection", &bare_release),
    ] {
        if (p.calls - locks).abs() > locks * 0.01 {
            m.note(format!(
                "{name}: {} script calls for {keys} locks (retries?)",
                p.calls
            ));
        }
    }
    Ok(m)
}
