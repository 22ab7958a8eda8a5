//! The fair lock's acquire script driven directly with synthetic waiters (Redisson's
//! `_Descrete` style): entry deadlines are the server's TIME + the entry timeout (the
//! script takes no clock from the client), every dead entry is purged and no live one's
//! deadline is touched, and a non-head is never told to wait 0 ms.

use std::time::Duration;

use dlock_tests::RedisServer;
use redis::{Commands, Connection, Value};

const ENTRY_MS: i64 = 300;

fn acquire_script() -> redis::Script {
    redis::Script::new(
        dlock::admin::FunctionLibrary::current()
            .script("fair_acquire")
            .expect("dlock has the fair lock's acquire script"),
    )
}

/// One call of the acquire script for `waiter` ('wait' mode): `None` when granted, else
/// the nap in ms.
fn call(conn: &mut Connection, waiter: &str) -> Option<i64> {
    let reply: Value = acquire_script()
        .key("lock")
        .key("queue")
        .key("deadlines")
        .key("fence")
        .key("naps")
        .arg(30_000)
        .arg(waiter)
        .arg("wait")
        .arg(ENTRY_MS)
        .arg("wake:")
        .arg("publish")
        .invoke(conn)
        .unwrap();
    match reply {
        Value::Nil => None,
        Value::Int(nap) => Some(nap),
        other => panic!("unexpected reply {other:?}"),
    }
}

fn server_ms(conn: &mut Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(conn).unwrap();
    secs * 1000 + micros / 1000
}

fn queue(conn: &mut Connection) -> Vec<String> {
    conn.zrange("queue", 0, -1).unwrap()
}

fn deadline(conn: &mut Connection, waiter: &str) -> i64 {
    let score: f64 = conn.zscore("deadlines", waiter).unwrap();
    score as i64
}

#[test]
fn entries_expire_by_server_time_and_every_dead_one_is_purged() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    // Held by a fair lock's owner: its hash carries the fair lock's marker.
    let () = conn
        .hset_multiple("lock", &[("!fair", 1), ("holder", 1)])
        .unwrap();
    let _: bool = conn.pexpire("lock", 30_000).unwrap();

    // The head naps until the lock's TTL; the others until the head's entry would die.
    let head_nap = call(&mut conn, "w1").expect("busy");
    assert!((29_000..=30_000).contains(&head_nap), "head nap {head_nap}");
    for waiter in ["w2", "w3"] {
        let nap = call(&mut conn, waiter).expect("busy");
        assert!((1..=ENTRY_MS).contains(&nap), "{waiter} nap {nap}");
    }
    assert_eq!(queue(&mut conn), ["w1", "w2", "w3"]);
    // Deadlines are the server's clock + the entry timeout.
    let now = server_ms(&mut conn);
    for waiter in ["w1", "w2", "w3"] {
        let left = deadline(&mut conn, waiter) - now;
        assert!(
            (ENTRY_MS - 50..=ENTRY_MS).contains(&left),
            "{waiter}: {left} ms left"
        );
    }

    // w2 and w3 keep their entries alive; w1 does not and dies with its deadline.
    std::thread::sleep(Duration::from_millis(150));
    call(&mut conn, "w2");
    call(&mut conn, "w3");
    let w2_deadline = deadline(&mut conn, "w2");
    std::thread::sleep(Duration::from_millis(200));
    assert!(server_ms(&mut conn) > deadline(&mut conn, "w1"));
    call(&mut conn, "w3");
    assert_eq!(
        queue(&mut conn),
        ["w2", "w3"],
        "the dead head is purged, order kept"
    );
    assert_eq!(
        deadline(&mut conn, "w2"),
        w2_deadline,
        "another waiter's deadline is never rebased"
    );

    // Now dead waiters behind a live head: w3 and w4 stop, w2 keeps going, w5 arrives.
    call(&mut conn, "w4");
    std::thread::sleep(Duration::from_millis(200));
    call(&mut conn, "w2");
    std::thread::sleep(Duration::from_millis(150));
    assert!(server_ms(&mut conn) > deadline(&mut conn, "w4"));
    let nap = call(&mut conn, "w5").expect("busy");
    assert_eq!(
        queue(&mut conn),
        ["w2", "w5"],
        "every dead entry is purged, not only the head"
    );
    assert!(nap >= 1, "a non-head is never told to wait {nap} ms");

    // Free: only the head is granted, and it leaves the queue.
    let _: i64 = conn.del("lock").unwrap();
    assert!(call(&mut conn, "w5").is_some(), "w5 is not the head");
    assert_eq!(call(&mut conn, "w2"), None, "the head is granted");
    assert_eq!(queue(&mut conn), ["w5"]);
    let count: i64 = conn.hget("lock", "w2").unwrap();
    assert_eq!(count, 1);
    // A retried grant (lost reply) is granted again without a second hold.
    assert_eq!(call(&mut conn, "w2"), None);
    let count: i64 = conn.hget("lock", "w2").unwrap();
    assert_eq!(count, 1);
}
