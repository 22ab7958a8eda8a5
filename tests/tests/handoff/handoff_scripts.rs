//! The lock's scripts driven, one call at a time, into the states that races between
//! mechanisms leave behind (a grant's `!next`, a `min_hold`, a registration, a late
//! message's `leave`), and what the next script does with each. Every call is dlock's own
//! script through its function library, so these tests see exactly what a client would
//! leave in Redis, without the timing that makes the races rare.

use dlock_tests::keys::{self, LockKeys};
use dlock_tests::scripts::Scripts;
use dlock_tests::RedisServer;

/// A lock name whose helpers hash by its tag.
const NAME: &str = "{seam}:job";
/// The grantee's client, and its owner field.
const WAITER_CLIENT: &str = "w";
const WAITER: &str = "w:1";
const HOLDER: &str = "h:1";

/// A server with dlock's library, the names of [`NAME`], and a connection.
struct Lock {
    _server: RedisServer,
    conn: redis::Connection,
    scripts: Scripts,
    keys: LockKeys,
}

impl Lock {
    fn new(server: RedisServer) -> Lock {
        let mut conn = server.connection();
        let scripts = Scripts::load(&mut conn);
        Lock {
            _server: server,
            conn,
            scripts,
            keys: LockKeys::new("", NAME),
        }
    }

    /// A fresh owner's try (fencing on, registering for 3 s when busy); `registered`: an
    /// earlier try of its acquisition may have registered it.
    fn try_acquire(&mut self, owner: &str, registered: bool) -> redis::Value {
        let keys = &self.keys;
        self.scripts
            .call(
                &mut self.conn,
                "lock_acquire",
                &[&keys.key, &keys.fence, &keys.registry, &keys.naps],
                &[
                    "30000",
                    owner,
                    "1",
                    "3000",
                    if registered { "1" } else { "0" },
                    "publish",
                ],
            )
            .expect("lock_acquire")
    }

    /// The release script in `mode` for `owner`, passing the token counter (a contended
    /// hold's release, or an owner that stopped waiting).
    fn release(&mut self, owner: &str, mode: &str) -> redis::Value {
        let keys = &self.keys;
        let memo = format!("dlock:release:{{seam}}:{owner}:1");
        self.scripts
            .call(
                &mut self.conn,
                "lock_release",
                &[&keys.key, &keys.registry, &memo, &keys.naps, &keys.fence],
                &[owner, mode, "5000", "publish", "100", "0"],
            )
            .expect("lock_release")
    }

    /// The owner's last hold given back with `min_hold` left for `ms`.
    fn hold_until(&mut self, owner: &str, ms: u64) -> i64 {
        let keys = &self.keys;
        self.scripts
            .call(
                &mut self.conn,
                "lock_hold_until",
                &[&keys.key, &keys.registry, &keys.naps],
                &[owner, &ms.to_string(), "publish"],
            )
            .expect("lock_hold_until")
    }

    fn pttl(&mut self) -> i64 {
        redis::cmd("PTTL")
            .arg(&self.keys.key)
            .query(&mut self.conn)
            .unwrap()
    }
}

/// A subscriber on `channel`, so that the server counts a listener there (`PUBSUB
/// NUMSUB`), as for a client waiting on its wake channel.
fn listen(server_url: &str, channel: &str) -> redis::Connection {
    let mut conn = redis::Client::open(server_url)
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("SUBSCRIBE")
        .arg(channel)
        .exec(&mut conn)
        .expect("SUBSCRIBE");
    conn
}

/// The holder `HOLDER` holds; `WAITER` waits (registered), and its client listens:
/// the holder's release grants the lock to the waiter (its hold and `!next` beside it).
fn granted(lock: &mut Lock, url: &str) -> redis::Connection {
    granted_with_runner_ups(lock, url, &[]).remove(0)
}

/// As [`granted`], with `others` (owners of other clients, each listening) waiting behind
/// the grantee; returns every listener, the grantee's first.
fn granted_with_runner_ups(lock: &mut Lock, url: &str, others: &[&str]) -> Vec<redis::Connection> {
    assert_eq!(
        lock.try_acquire(HOLDER, false),
        redis::Value::Array(vec![redis::Value::Int(1)])
    );
    let mut listeners = vec![listen(url, &lock.keys.wake_channel(WAITER_CLIENT))];
    for owner in std::iter::once(&WAITER).chain(others) {
        assert!(matches!(lock.try_acquire(owner, false), redis::Value::Int(ttl) if ttl > 0));
    }
    for owner in others {
        let client = owner.split(':').next().unwrap();
        listeners.push(listen(url, &lock.keys.wake_channel(client)));
    }
    let passed = lock.release(HOLDER, "one");
    assert_eq!(
        passed,
        redis::Value::Array(vec![
            redis::Value::Int(0),
            redis::Value::BulkString(b"passed".to_vec())
        ])
    );
    let key = lock.keys.key.clone();
    assert_eq!(
        keys::holders(&mut lock.conn, &key)
            .into_iter()
            .collect::<Vec<_>>(),
        [(WAITER.to_owned(), 1)]
    );
    listeners
}

/// A grant names its owner in `!next` beside the hold. The owner's short body ends and
/// `min_hold` keeps the lock (`hold_until`); then the `leave` its client sends for the
/// `held:` message it heard late arrives. The lock must stay taken for the rest of the
/// minimum hold: before the fix, `hold_until` left `!next` beside `!held`, and the leave
/// read it as a reservation for its owner (a state dlock no longer has) and deleted the
/// lock.
#[test]
fn a_late_leave_never_ends_a_minimum_hold() {
    let server = RedisServer::start();
    let url = server.url();
    let mut lock = Lock::new(server);
    let _listener = granted(&mut lock, &url);
    let key = lock.keys.key.clone();

    assert_eq!(lock.hold_until(WAITER, 5_000), 0);
    lock.release(WAITER, "leave");
    assert!(
        keys::exists(&mut lock.conn, &key),
        "the late leave deleted a lock kept by min_hold"
    );
    assert!(lock.pttl() > 4_000, "the minimum hold was shortened");
    assert_eq!(
        keys::marks(&mut lock.conn, &key)
            .into_iter()
            .collect::<Vec<_>>(),
        [("!held".to_owned(), WAITER.to_owned())],
        "what a minimum hold leaves"
    );
}

/// The grantee's extension (the lock's extend script) makes the granted hold a hold like
/// any other: `!next` goes with it. And a waiter that was promised a sleep past the
/// grantee's lease (it tried while the last holder's long lease ran) is told to try again:
/// otherwise, should the grantee never release, it would sleep past the lock's end. (The
/// runner-up, told to try when the grant lapses, needs no word.) Before the fix the
/// extension was the renew script, which told nobody.
#[test]
fn an_extended_grant_is_a_plain_hold_and_tells_the_overslept() {
    let server = RedisServer::start();
    let url = server.url();
    let mut lock = Lock::new(server);
    // A third waiter, of another client, promised the holder's 30 s.
    let _listener = granted_with_runner_ups(&mut lock, &url, &["v:1", "u:1"]);
    let key = lock.keys.key.clone();
    let (registry, naps) = (lock.keys.registry.clone(), lock.keys.naps.clone());
    let extended: i64 = lock
        .scripts
        .call(
            &mut lock.conn,
            "lock_extend",
            &[&key, &registry, &naps],
            &["500", WAITER, "publish"],
        )
        .unwrap();
    assert_eq!(extended, 1);
    assert_eq!(keys::marks(&mut lock.conn, &key), Default::default());
    assert!(lock.pttl() > 400);
    // The runner-up keeps its promise (the grant's lapse); the other was told and lost it.
    assert_eq!(keys::napping(&mut lock.conn, &naps), ["v:1"]);
}

/// A `leave` for an owner with a `!next` naming it beside a hold that is not its own (a
/// state no script writes, but a lock of an older layout or a hand-edited one may have)
/// leaves the lock alone: no script deletes a lock for its `!next`.
#[test]
fn a_next_mark_beside_another_s_hold_is_left_alone_by_a_leave() {
    let server = RedisServer::start();
    let mut lock = Lock::new(server);
    let key = lock.keys.key.clone();
    redis::cmd("HSET")
        .arg(&key)
        .arg(HOLDER)
        .arg(1)
        .arg("!next")
        .arg(WAITER)
        .exec(&mut lock.conn)
        .unwrap();
    redis::cmd("PEXPIRE")
        .arg(&key)
        .arg(30_000)
        .exec(&mut lock.conn)
        .unwrap();
    lock.release(WAITER, "leave");
    assert_eq!(
        keys::holders(&mut lock.conn, &key)
            .into_iter()
            .collect::<Vec<_>>(),
        [(HOLDER.to_owned(), 1)]
    );
}

/// A try that finds its own hold (a release gave it the lock, or an earlier send of this
/// acquisition took it with its reply lost) takes the owner out of the waiters: a later
/// release must never grant the lock again to an owner that holds it, maybe done with it
/// by then (the lock would idle for the grant's 100 ms). Before the fix the owner stayed
/// registered and promised a nap.
#[test]
fn a_try_that_finds_its_own_hold_leaves_the_waiters() {
    let server = RedisServer::start();
    let mut lock = Lock::new(server);
    let key = lock.keys.key.clone();
    // The owner waited (registered, promised a nap)...
    assert_eq!(
        lock.try_acquire(HOLDER, false),
        redis::Value::Array(vec![redis::Value::Int(1)])
    );
    assert!(matches!(
        lock.try_acquire(WAITER, false),
        redis::Value::Int(_)
    ));
    // ...and holds now while still registered: what a send whose reply was lost leaves
    // when its retry (which did not say the owner may be registered) takes the free lock.
    redis::cmd("DEL").arg(&key).exec(&mut lock.conn).unwrap();
    redis::cmd("HSET")
        .arg(&key)
        .arg(WAITER)
        .arg(1)
        .exec(&mut lock.conn)
        .unwrap();
    redis::cmd("PEXPIRE")
        .arg(&key)
        .arg(30_000)
        .exec(&mut lock.conn)
        .unwrap();
    let registry = lock.keys.registry.clone();
    let naps = lock.keys.naps.clone();
    assert_eq!(keys::registered(&mut lock.conn, &registry), [WAITER]);

    let reply = lock.try_acquire(WAITER, true);
    assert!(matches!(reply, redis::Value::Array(_)), "{reply:?}");
    assert_eq!(
        keys::registered(&mut lock.conn, &registry),
        Vec::<String>::new()
    );
    assert_eq!(keys::napping(&mut lock.conn, &naps), Vec::<String>::new());
}

/// A grantee that takes its grant with a try (with `replica_acks`, for a token, or too
/// late to hold it as it is) and a lease shorter than the grant's 100 ms ends the lock
/// before the runner-up was told to try (at the grant's lapse): the runner-up is told to
/// try again, so that it does not sleep past the lock's end should the grantee never
/// release. Before the fix the try that found its own hold told nobody.
#[test]
fn a_try_that_takes_a_grant_with_a_short_lease_tells_the_runner_up() {
    let server = RedisServer::start();
    let url = server.url();
    let mut lock = Lock::new(server);
    let _listeners = granted_with_runner_ups(&mut lock, &url, &["v:1"]);
    let naps = lock.keys.naps.clone();
    assert_eq!(
        keys::napping(&mut lock.conn, &naps),
        ["v:1"],
        "the runner-up's promise"
    );
    let keys = &lock.keys;
    let reply: redis::Value = lock
        .scripts
        .call(
            &mut lock.conn,
            "lock_acquire",
            &[&keys.key, &keys.fence, &keys.registry, &keys.naps],
            &["20", WAITER, "1", "3000", "1", "publish"],
        )
        .unwrap();
    assert!(matches!(reply, redis::Value::Array(_)), "{reply:?}");
    assert!(lock.pttl() <= 20);
    assert_eq!(keys::napping(&mut lock.conn, &naps), Vec::<String>::new());
}
