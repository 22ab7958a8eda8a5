//! The `limit` scenario: how fast this Redis server runs dlock's own acquire and release
//! scripts, without dlock's client code in the way.
//!
//! The scripts are the ones dlock-core ships (the same files, compiled in). They are sent
//! as `EVALSHA` through one raw multiplexed connection by as many tasks as S1 uses, each
//! task with its own key, so requests pipeline the same way dlock's do and the server sees
//! the same commands on the same kind of keyspace: every cycle is an acquire of the task's
//! free key (a new owner each time, with a fencing token and the waiter-registry
//! arguments, as dlock's `lock()` sends it) and the guard's release that frees it again
//! (memo lookup, delete, registry check: an owner's last hold writes no memo and, with
//! nobody registered as waiting, publishes nothing). Each task times its acquire and its
//! release calls; with `tasks` calls in flight, `acquire/s = tasks / mean acquire latency`
//! and likewise for release, so `1 / (1/acquire + 1/release)` is the cycle ceiling (it
//! matches the directly counted raw cycles/s, also reported).
//!
//! When `redis-benchmark` is installed its `EVALSHA` figures are measured too, with 64
//! connections (`-c 64`) and with one connection pipelining 64 requests (`-c 1 -P 64`).
//! redis-benchmark can only vary keys at random, so its acquires take fresh keys.

use std::process::Command;

use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::settings::Config;
use crate::stats::{error, machine_busy, micros, process_cpu, Result};
use crate::target::{self, Target};

/// dlock's acquire script, byte for byte.
fn acquire_script() -> &'static str {
    dlock::admin::FunctionLibrary::current()
        .script("lock_acquire")
        .unwrap_or_default()
}

/// dlock's release script, byte for byte.
fn release_script() -> &'static str {
    dlock::admin::FunctionLibrary::current()
        .script("lock_release")
        .unwrap_or_default()
}

/// Lease of the limit's locks: dlock's default watchdog lease, as S1 uses.
const LEASE_MS: u64 = 30_000;
/// Lifetime of release memos, as dlock's default client uses (3 × 3 s + 1 s).
const MEMO_TTL_MS: u64 = 10_000;
/// Lifetime of waiter registries, as dlock's default client uses (3 × 1 s + 1 s).
const REGISTRY_TTL_MS: u64 = 4_000;
/// How long a lock given to a waiting client lasts until that client extends it.
const GRANT_MS: u64 = 100;

/// What every task needs to send the scripts.
#[derive(Clone)]
struct Scripts {
    acquire_sha: String,
    release_sha: String,
    client_id: String,
    prefix: String,
}

/// One task's totals.
#[derive(Default)]
struct Totals {
    cycles: u64,
    acquire_us: u64,
    release_us: u64,
}

/// Runs the scenario once.
pub async fn run(target: &Target, cfg: &Config) -> Result<Metrics> {
    let mut conn = target.connection().await?;
    let acquire_sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(acquire_script())
        .query_async(&mut conn)
        .await?;
    let release_sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(release_script())
        .query_async(&mut conn)
        .await?;
    let scripts = Scripts {
        acquire_sha,
        release_sha,
        client_id: uuid::Uuid::new_v4().to_string(),
        prefix: target.prefix().to_owned(),
    };
    let tasks = cfg.s1_tasks;

    let started = Instant::now();
    let measure_from = started + cfg.warmup;
    let until = measure_from + cfg.duration;
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let conn = conn.clone();
            let s = scripts.clone();
            tokio::spawn(cycles(conn, s, task, measure_from, until))
        })
        .collect();
    tokio::time::sleep_until(measure_from).await;
    let server_before = target::server_cpu(&mut conn).await?;
    let cpu_before = process_cpu();
    let machine_before = machine_busy();
    let mut totals = Totals::default();
    for handle in handles {
        let t = handle.await??;
        totals.cycles += t.cycles;
        totals.acquire_us += t.acquire_us;
        totals.release_us += t.release_us;
    }
    let elapsed = measure_from.elapsed().as_secs_f64();
    let client_cpu = process_cpu().saturating_sub(cpu_before).as_secs_f64();
    let server_cpu = target::server_cpu(&mut conn).await? - server_before;
    let machine = machine_busy()
        .zip(machine_before)
        .map(|(after, before)| after - before);

    let n = totals.cycles as f64;
    // `tasks` calls in flight: rate = tasks / mean latency.
    let a = tasks as f64 / (totals.acquire_us as f64 / n / 1e6);
    let r = tasks as f64 / (totals.release_us as f64 / n / 1e6);
    let mut m = Metrics::default();
    m.add(
        "cycle_ceiling_per_s",
        "cycle ceiling 1/(1/acquire+1/release) (cycles/s)",
        1.0 / (1.0 / a + 1.0 / r),
        0,
    );
    m.add(
        "raw_cycles_per_s",
        "raw acquire + release cycles counted (cycles/s)",
        n / elapsed,
        0,
    );
    m.add("acquire_per_s", "acquire script (calls/s)", a, 0);
    m.add("release_per_s", "release script (calls/s)", r, 0);
    m.add(
        "acquire_mean_ms",
        "acquire latency, mean (ms)",
        totals.acquire_us as f64 / n / 1e3,
        3,
    );
    m.add(
        "release_mean_ms",
        "release latency, mean (ms)",
        totals.release_us as f64 / n / 1e3,
        3,
    );
    m.add("cycles", "cycles measured", n, 0);
    m.add(
        "server_cpu_us_per_cycle",
        "server CPU per cycle (µs)",
        server_cpu * 1e6 / n,
        2,
    );
    m.add(
        "client_cpu_us_per_cycle",
        "client CPU per cycle (µs)",
        client_cpu * 1e6 / n,
        2,
    );
    m.add(
        "server_cpu_pct",
        "server CPU (% of one core)",
        server_cpu / elapsed * 100.0,
        0,
    );
    m.add(
        "client_cpu_pct",
        "client CPU (% of one core)",
        client_cpu / elapsed * 100.0,
        0,
    );
    m.add(
        "other_cpu_pct",
        "CPU used by other processes (% of one core)",
        machine.map_or(f64::NAN, |busy| {
            (busy - client_cpu - server_cpu).max(0.0) / elapsed * 100.0
        }),
        0,
    );

    redis_benchmark(target, cfg, &scripts, a, &mut m).await;
    Ok(m)
}

/// One task: acquire its key, release it, again, until `until`; times the calls made
/// after `measure_from`.
async fn cycles(
    mut conn: MultiplexedConnection,
    s: Scripts,
    task: usize,
    measure_from: Instant,
    until: Instant,
) -> Result<Totals> {
    let key = format!("{}lim:{task}", s.prefix);
    // dlock's names (`dlock:<kind>:<prefix>{tag}:...`), all with one tag: the server is
    // not a cluster.
    let channel = format!("dlock:unlock:{}{{x}}:lim:{task}", s.prefix);
    let naps = format!("dlock:unlock:{}{{x}}!lim:{task}", s.prefix);
    let fence = format!("dlock:fence:{}{{x}}", s.prefix);
    let mut totals = Totals::default();
    for owner in 0u64.. {
        let began = Instant::now();
        if began >= until {
            break;
        }
        // A new owner per acquisition and a unique memo per release, as dlock does.
        let field = format!("{}:{task}:{owner}", s.client_id);
        let token: Vec<i64> = redis::cmd("EVALSHA")
            .arg(&s.acquire_sha)
            .arg(4)
            .arg(&key)
            .arg(&fence)
            .arg(&channel)
            .arg(&naps)
            .arg(LEASE_MS)
            .arg(&field)
            .arg("1")
            .arg(REGISTRY_TTL_MS)
            .arg("0")
            .arg("publish")
            .query_async(&mut conn)
            .await?;
        if token.len() != 1 {
            return Err(error(format!("limit: {key} was locked by someone else")));
        }
        let acquired = Instant::now();
        let memo = format!("dlock:release:{}{{x}}:{field}:{owner}", s.prefix);
        let remaining: i64 = redis::cmd("EVALSHA")
            .arg(&s.release_sha)
            .arg(4)
            .arg(&key)
            .arg(&channel)
            .arg(&memo)
            .arg(&naps)
            .arg(&field)
            .arg("one")
            .arg(MEMO_TTL_MS)
            .arg("publish")
            .arg(GRANT_MS)
            // A first send, as dlock's unlock sends it; no task of this client waits
            // next, so nothing for one follows.
            .arg("0")
            .query_async(&mut conn)
            .await?;
        if remaining != 0 {
            return Err(error(format!(
                "limit: release of {key} returned {remaining}"
            )));
        }
        if began >= measure_from {
            totals.cycles += 1;
            totals.acquire_us += micros(acquired - began);
            totals.release_us += micros(acquired.elapsed());
        }
    }
    Ok(totals)
}

/// Adds `redis-benchmark`'s figures when the tool is installed and the server is a plain
/// TCP address; otherwise adds a note saying why not. Never fails the scenario.
async fn redis_benchmark(
    target: &Target,
    cfg: &Config,
    scripts: &Scripts,
    acquire_rate: f64,
    m: &mut Metrics,
) {
    let Some((host, port)) = target.plain_tcp_address() else {
        m.note("redis-benchmark skipped: the server URL has credentials, a database or TLS");
        return;
    };
    let version = Command::new("redis-benchmark").arg("--version").output();
    if !version.is_ok_and(|out| out.status.success()) {
        m.note("redis-benchmark not installed: its EVALSHA figures are missing");
        return;
    }
    match run_redis_benchmark(target, cfg, scripts, acquire_rate, &host, port).await {
        Ok(figures) => {
            for (key, label, value) in figures {
                m.add(key, label, value, 0);
            }
            m.note(
                "redis-benchmark release: the keys are drawn at random from pre-acquired locks, \
                 so a few calls find their lock already released or their memo already written \
                 (the cheaper paths); `rb_release_full_path_pct` is the share that ran the full \
                 release (counted with INFO commandstats)",
            );
        }
        Err(e) => m.note(format!("redis-benchmark failed: {e}")),
    }
}

/// Runs `redis-benchmark` for both scripts in two shapes; returns `(key, label, value)`.
async fn run_redis_benchmark(
    target: &Target,
    cfg: &Config,
    scripts: &Scripts,
    acquire_rate: f64,
    host: &str,
    port: u16,
) -> Result<Vec<(&'static str, &'static str, f64)>> {
    let mut conn = target.connection().await?;
    let requests = ((acquire_rate * cfg.redis_benchmark_seconds) as u64).clamp(5_000, 1_000_000);
    let prefix = target.prefix();
    let field = &format!("{}:1", scripts.client_id);
    let shapes: [(&str, &[&str]); 2] = [("c64", &["-c", "64"]), ("p64", &["-c", "1", "-P", "64"])];
    let mut out = Vec::new();

    for (shape, flags) in shapes {
        let key = format!("{prefix}rb:acq:{shape}:__rand_int__");
        let fence = format!("dlock:fence:{prefix}{{x}}");
        let channel = format!("dlock:unlock:{prefix}{{x}}:rb:acq:{shape}:__rand_int__");
        let naps = format!("dlock:unlock:{prefix}{{x}}!rb:acq:{shape}:__rand_int__");
        let lease = LEASE_MS.to_string();
        let registry = REGISTRY_TTL_MS.to_string();
        let args = [
            "EVALSHA",
            &scripts.acquire_sha,
            "4",
            &key,
            &fence,
            &channel,
            &naps,
            &lease,
            field,
            "1",
            &registry,
            "0",
            "publish",
        ];
        let rps = benchmark_rps(host, port, flags, requests, 2_000_000_000, &args).await?;
        out.push((
            if shape == "c64" {
                "rb_acquire_c64_per_s"
            } else {
                "rb_acquire_p64_per_s"
            },
            if shape == "c64" {
                "redis-benchmark acquire -c 64 (calls/s)"
            } else {
                "redis-benchmark acquire -c 1 -P 64 (calls/s)"
            },
            rps,
        ));
    }

    // Releases: pre-acquire `pool` locks, release `pool / 10` of them at random.
    let release_requests = (requests / 4).max(5_000);
    let pool = release_requests * 10;
    for (shape, flags) in shapes {
        let key_base = format!("{prefix}rb:rel:{shape}:");
        prepopulate(&mut conn, &key_base, field, pool).await?;
        target::reset_stats(&mut conn).await?;
        let key = format!("{key_base}__rand_int__");
        let channel = format!("dlock:unlock:{prefix}{{x}}:rb");
        let naps = format!("dlock:unlock:{prefix}{{x}}!rb");
        let memo = format!("{prefix}rb:memo:{shape}:__rand_int__");
        let memo_ttl = MEMO_TTL_MS.to_string();
        let grant = GRANT_MS.to_string();
        let args = [
            "EVALSHA",
            &scripts.release_sha,
            "4",
            &key,
            &channel,
            &memo,
            &naps,
            field,
            "one",
            &memo_ttl,
            "publish",
            &grant,
            // A first send; no task of this client waits next.
            "0",
        ];
        let rps = benchmark_rps(host, port, flags, release_requests, pool, &args).await?;
        let calls = target::command_calls(&mut conn).await?;
        let full = calls.get("del").copied().unwrap_or(0) as f64 / release_requests as f64 * 100.0;
        if shape == "c64" {
            out.push((
                "rb_release_c64_per_s",
                "redis-benchmark release -c 64 (calls/s)",
                rps,
            ));
            out.push((
                "rb_release_full_path_pct",
                "redis-benchmark release: full-path share (%)",
                full,
            ));
        } else {
            out.push((
                "rb_release_p64_per_s",
                "redis-benchmark release -c 1 -P 64 (calls/s)",
                rps,
            ));
        }
    }
    let get = |key: &str| {
        out.iter()
            .find(|(k, _, _)| *k == key)
            .map_or(f64::NAN, |(_, _, v)| *v)
    };
    let ceiling = |a: f64, r: f64| 1.0 / (1.0 / a + 1.0 / r);
    let c64 = ceiling(get("rb_acquire_c64_per_s"), get("rb_release_c64_per_s"));
    let p64 = ceiling(get("rb_acquire_p64_per_s"), get("rb_release_p64_per_s"));
    out.insert(
        0,
        (
            "rb_cycle_p64_per_s",
            "redis-benchmark cycle ceiling -c 1 -P 64 (cycles/s)",
            p64,
        ),
    );
    out.insert(
        0,
        (
            "rb_cycle_c64_per_s",
            "redis-benchmark cycle ceiling -c 64 (cycles/s)",
            c64,
        ),
    );
    Ok(out)
}

/// Creates `count` held locks `<key_base><12-digit n>` (redis-benchmark's `__rand_int__`
/// format) owned by `field`.
async fn prepopulate(
    conn: &mut MultiplexedConnection,
    key_base: &str,
    field: &str,
    count: u64,
) -> Result<()> {
    const CHUNK: u64 = 5_000;
    let mut next = 0;
    while next < count {
        let mut pipe = redis::pipe();
        for n in next..(next + CHUNK).min(count) {
            let key = format!("{key_base}{n:012}");
            pipe.hset(&key, field, 1).ignore();
            pipe.pexpire(&key, LEASE_MS as i64).ignore();
        }
        let () = pipe.query_async(conn).await?;
        next += CHUNK;
    }
    Ok(())
}

/// Runs `redis-benchmark` once and returns its requests per second.
async fn benchmark_rps(
    host: &str,
    port: u16,
    flags: &[&str],
    requests: u64,
    keyspace: u64,
    command: &[&str],
) -> Result<f64> {
    let mut cmd = Command::new("redis-benchmark");
    cmd.args(["-h", host, "-p", &port.to_string()])
        .args(flags)
        .args([
            "-n",
            &requests.to_string(),
            "-r",
            &keyspace.to_string(),
            "--csv",
        ])
        .args(command);
    let output = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .map_err(|e| error(format!("redis-benchmark task: {e}")))??;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(error(format!(
            "redis-benchmark exited with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    // Last line: "<command>","<rps>","<avg ms>",...
    let line = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    line.split("\",\"")
        .nth(1)
        .and_then(|rps| rps.trim_matches('"').parse::<f64>().ok())
        .filter(|rps| *rps > 0.0)
        .ok_or_else(|| {
            error(format!(
                "cannot read redis-benchmark's output: {}",
                stdout.trim()
            ))
        })
}
