//! dlock's functions take no command name from their caller: the publish command an
//! `FCALL` passes is one of `publish` / `spublish` or it is ignored, so a caller with
//! `+fcall` cannot make dlock's function run `SET` (or anything else) for it. Each case
//! calls a function the way an attacker would, with `set` as the publish command, and
//! checks that no key was written by it (before the fix each one wrote a string key).

use dlock_tests::scripts::Scripts;
use dlock_tests::RedisServer;

fn load_library(conn: &mut redis::Connection) -> &'static str {
    Scripts::load(conn).library()
}

fn string_keys(conn: &mut redis::Connection) -> Vec<String> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(conn).unwrap();
    keys.into_iter()
        .filter(|key| {
            redis::cmd("TYPE")
                .arg(key)
                .query::<String>(conn)
                .is_ok_and(|found| found == "string")
        })
        .collect()
}

#[test]
fn a_caller_cannot_name_the_command_a_function_runs() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let library = load_library(&mut conn);

    // The lock's force unlock tells each holder's client: with `set` as the publish
    // command, that message would become a key.
    redis::cmd("HSET")
        .arg("shop:goods:1")
        .arg("c:1")
        .arg(1)
        .query::<()>(&mut conn)
        .unwrap();
    // Whether the call then fails does not matter (a write inside a script is not rolled
    // back); what it wrote does.
    let _ = redis::cmd("FCALL")
        .arg(format!("{library}_lock_force_unlock"))
        .arg(3)
        .arg("shop:goods:1")
        .arg("dlock:unlock:shop:{x}:goods:1")
        .arg("dlock:unlock:shop:{x}!goods:1")
        .arg("set")
        .arg(100)
        .query::<redis::Value>(&mut conn);
    assert_eq!(string_keys(&mut conn), Vec::<String>::new(), "force unlock");

    // The semaphore's capacity change publishes the permits free on the grants hash's
    // name: with `set`, the grants hash would become a string.
    for (function, args) in [
        ("sem_set_permits", vec!["5", "set"]),
        ("sem_available", vec!["set"]),
    ] {
        let mut call = redis::cmd("FCALL");
        call.arg(format!("{library}_{function}"))
            .arg(2)
            .arg("dlock:sem:shop:{x}:pool")
            .arg("dlock:semcap:shop:{x}:pool");
        for arg in args {
            call.arg(arg);
        }
        let _ = call.query::<redis::Value>(&mut conn);
        let written: Vec<String> = string_keys(&mut conn)
            .into_iter()
            .filter(|key| key != "dlock:semcap:shop:{x}:pool")
            .collect();
        assert_eq!(written, Vec::<String>::new(), "{function}");
    }
}

/// A force unlock deletes only a hash in the lock's layout: an application's hash at the
/// lock's name (no owner fields, or other fields beside them) is refused as `WrongType`
/// and left as it was (before, it was deleted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_leaves_application_hashes_alone() {
    let server = RedisServer::start();
    let client = dlock::LockClient::builder()
        .key_prefix("shop:")
        .connect(&server.url())
        .await
        .unwrap();
    let mut conn = server.connection();
    let holder = format!("{}:1", client.id());
    for (name, fields) in [
        ("profile:1", vec![("name", "alice"), ("plan", "gold")]),
        ("profile:2", vec![(holder.as_str(), "1"), ("name", "bob")]),
    ] {
        let key = format!("shop:{name}");
        let mut hset = redis::cmd("HSET");
        hset.arg(&key);
        for (field, value) in &fields {
            hset.arg(*field).arg(*value);
        }
        hset.query::<()>(&mut conn).unwrap();
        match client.lock(name).force_unlock().await {
            Err(dlock::LockError::WrongType { found, .. }) => assert_eq!(found, "hash"),
            other => panic!("{name}: an application hash was force-unlocked: {other:?}"),
        }
        let left: usize = redis::cmd("HLEN").arg(&key).query(&mut conn).unwrap();
        assert_eq!(left, fields.len(), "{name} was changed");
    }
    // A lock in the lock's layout is still force-unlocked.
    let guard = client.lock("goods:1").lock().await.unwrap();
    assert!(client.lock("goods:1").force_unlock().await.unwrap());
    assert!(guard.unlock().await.is_err());
    client.shutdown().await.unwrap();
}

fn memory_field(conn: &mut redis::Connection, field: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("memory").query(conn).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in INFO memory"))
}

/// What the server's keys take (`MEMORY USAGE` of each, every element counted): what a
/// script's writes add. (Not the dataset of `INFO memory`: the server's buffers for a
/// connection that sent a 4 MiB call leave it slowly, more slowly beside a busy loop,
/// and the flake hunt saw 200 KB of them after two seconds.)
fn keys_memory(conn: &mut redis::Connection) -> u64 {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(conn).unwrap();
    keys.iter()
        .map(|key| {
            redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(key)
                .arg("SAMPLES")
                .arg(0)
                .query::<Option<u64>>(conn)
                .unwrap()
                .unwrap_or(0)
        })
        .sum()
}

/// On a full server (`maxmemory` reached, `noeviction`), the release functions, which must
/// run there (`allow-oom`), create no key beyond a release memo of bounded name and
/// lifetime, and only for a hold that existed: callers passing 4 MiB memo names and
/// three-year lifetimes (before: 20 MiB and more beyond maxmemory) get an error and the
/// dataset stays as it was.
#[test]
fn release_functions_do_not_grow_a_full_server() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let mut conn = server.connection();
    let library = load_library(&mut conn);
    // A hold re-entered many times, taken before the server filled up.
    redis::cmd("HSET")
        .arg("shop:goods:1")
        .arg("c:1")
        .arg(1000)
        .query::<()>(&mut conn)
        .unwrap();
    // And a semaphore grant, far from its deadline.
    redis::cmd("HSET")
        .arg("dlock:sem:shop:{x}:pool")
        .arg(&["c:9", "1", "c:9:t", "99999999999999"][..])
        .query::<()>(&mut conn)
        .unwrap();
    redis::cmd("SET")
        .arg("dlock:semcap:shop:{x}:pool")
        .arg(2)
        .query::<()>(&mut conn)
        .unwrap();
    let used = memory_field(&mut conn, "used_memory");
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(used + 256 * 1024)
        .query::<()>(&mut conn)
        .unwrap();
    let refused = redis::cmd("SET")
        .arg("filler")
        .arg(vec![b'x'; 1 << 20])
        .query::<()>(&mut conn)
        .unwrap_err();
    assert_eq!(refused.code(), Some("OOM"), "{refused}");

    let before = keys_memory(&mut conn);
    let huge = format!("dlock:release:shop:{{x}}:{}", "x".repeat(4 << 20));
    let three_years = "100000000000";
    let mut big = server.connection();
    for _ in 0..5 {
        let sem = redis::cmd("FCALL")
            .arg(format!("{library}_sem_release"))
            .arg(3)
            .arg("dlock:sem:shop:{x}:pool")
            .arg("dlock:semcap:shop:{x}:pool")
            .arg(&huge)
            .arg("c:9")
            .arg(three_years)
            .arg("publish")
            .query::<redis::Value>(&mut big);
        assert!(sem.is_err(), "a 4 MiB memo name was taken: {sem:?}");
        let lock = redis::cmd("FCALL")
            .arg(format!("{library}_lock_release"))
            .arg(4)
            .arg("shop:goods:1")
            .arg("dlock:unlock:shop:{x}:goods:1")
            .arg(&huge)
            .arg("dlock:unlock:shop:{x}!goods:1")
            .arg(&["c:1", "one", three_years, "publish", "100", "1"][..])
            .query::<redis::Value>(&mut big);
        assert!(lock.is_err(), "a 4 MiB memo name was taken: {lock:?}");
    }
    // A memo of a release's own shape is written, its lifetime capped at 181 s.
    let memo = "dlock:release:shop:{x}:c:1:7";
    let released: i64 = redis::cmd("FCALL")
        .arg(format!("{library}_lock_release"))
        .arg(4)
        .arg("shop:goods:1")
        .arg("dlock:unlock:shop:{x}:goods:1")
        .arg(memo)
        .arg("dlock:unlock:shop:{x}!goods:1")
        .arg(&["c:1", "one", three_years, "publish", "100", "1"][..])
        .query(&mut conn)
        .unwrap();
    assert_eq!(released, 999);
    let ttl: i64 = redis::cmd("PTTL").arg(memo).query(&mut conn).unwrap();
    assert!(ttl > 0 && ttl <= 181_000, "memo lives {ttl} ms");
    let after = keys_memory(&mut conn);
    assert!(
        after < before + 64 * 1024,
        "the keys grew by {} bytes on a full server",
        after.saturating_sub(before)
    );
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("dlock:release:*")
        .query(&mut conn)
        .unwrap();
    assert_eq!(keys, [memo]);
}

/// The lease goes to `PEXPIRE` as the caller wrote it, so the scripts refuse a lease
/// `PEXPIRE` would not read (exponent, sign, leading zero, fraction, spaces) before they
/// write anything: otherwise the hold would be written and its expiry refused, leaving a
/// lock that never expires. The acquire and renew scripts check their lease, and a
/// release the lease of the next task it gives the lock to.
#[test]
fn a_lease_pexpire_cannot_read_is_refused_before_anything_is_written() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let library = load_library(&mut conn);
    for lease in ["1e3", "030000", "+5", " 5", "5 ", "5.5", "-1", "", "0x10"] {
        let acquired = redis::cmd("FCALL")
            .arg(format!("{library}_lock_acquire"))
            .arg(4)
            .arg(&["shop:goods:1", "dlock:fence:shop:{x}"][..])
            .arg(
                &[
                    "dlock:unlock:shop:{x}:goods:1",
                    "dlock:unlock:shop:{x}!goods:1",
                ][..],
            )
            .arg(&[lease, "c:1", "1", "4000", "0", "publish"][..])
            .query::<redis::Value>(&mut conn);
        assert!(acquired.is_err(), "lease {lease:?} was taken: {acquired:?}");
        let exists: bool = redis::cmd("EXISTS")
            .arg("shop:goods:1")
            .query(&mut conn)
            .unwrap();
        assert!(!exists, "lease {lease:?} left a lock behind");
    }

    // A renewal refuses such a lease too, and leaves the expiry alone.
    redis::cmd("HSET")
        .arg("shop:goods:2")
        .arg("c:2")
        .arg(1)
        .query::<()>(&mut conn)
        .unwrap();
    redis::cmd("PEXPIRE")
        .arg("shop:goods:2")
        .arg(60_000)
        .query::<()>(&mut conn)
        .unwrap();
    for lease in ["1e3", "030000", "+5"] {
        let renewed = redis::cmd("FCALL")
            .arg(format!("{library}_lock_renew"))
            .arg(1)
            .arg("shop:goods:2")
            .arg(&[lease, "c:2"][..])
            .query::<redis::Value>(&mut conn);
        assert!(renewed.is_err(), "lease {lease:?} renewed: {renewed:?}");
    }
    let ttl: i64 = redis::cmd("PTTL")
        .arg("shop:goods:2")
        .query(&mut conn)
        .unwrap();
    assert!(ttl > 50_000, "the expiry moved: {ttl} ms");

    // A release refuses such a lease for the next task it would give the lock to, before
    // it gives back its own hold: the releasing owner still holds the lock, with its
    // expiry, and the next task holds nothing.
    for lease in ["1e3", "030000", "+5", "0", ""] {
        let released = redis::cmd("FCALL")
            .arg(format!("{library}_lock_release"))
            .arg(5)
            .arg(
                &[
                    "shop:goods:2",
                    "dlock:unlock:shop:{x}:goods:2",
                    "shop:goods:2",
                ][..],
            )
            .arg(&["dlock:unlock:shop:{x}!goods:2", "dlock:fence:shop:{x}"][..])
            .arg(
                &[
                    "c:2", "one", "10000", "publish", "100", "0", "c:3", "1", lease, "1",
                ][..],
            )
            .query::<redis::Value>(&mut conn);
        assert!(
            released.is_err(),
            "next lease {lease:?} taken: {released:?}"
        );
        let owners: Vec<String> = redis::cmd("HKEYS")
            .arg("shop:goods:2")
            .query(&mut conn)
            .unwrap();
        assert_eq!(owners, ["c:2"], "next lease {lease:?} touched the lock");
    }
    let ttl: i64 = redis::cmd("PTTL")
        .arg("shop:goods:2")
        .query(&mut conn)
        .unwrap();
    assert!(ttl > 50_000, "the expiry moved: {ttl} ms");
}
