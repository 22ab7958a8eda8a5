//! The SQL recipe of `docs/FENCING.md`, run against a real embedded database (SQLite,
//! bundled) with real Redis locks: a stale token changes no row, a holder that paused past
//! its lease cannot overwrite the later holder's write, and the same run without the fence
//! condition (the control) does corrupt the row. Also the multi-row variant: a
//! `fence_tokens` row checked and moved in the same transaction as the rows it guards.
//!
//! The statements are written out here exactly as the documentation shows them.

use std::time::Duration;

use dlock::LockClient;
use dlock_tests::RedisServer;
use rusqlite::{params, Connection};

const CREATE: &str =
    "CREATE TABLE stock(id INTEGER PRIMARY KEY, qty INTEGER, fence INTEGER NOT NULL DEFAULT 0)";
/// The recipe: write only when no higher token has written the row; zero rows = stale.
/// `<=` (not `<`): a holder may write the row several times in one section with its one
/// token, as with the Redis helper.
const FENCED_UPDATE: &str = "UPDATE stock SET qty = ?1, fence = ?2 WHERE id = ?3 AND fence <= ?2";
/// The control: the same write without the fence condition.
const PLAIN_UPDATE: &str = "UPDATE stock SET qty = ?1 WHERE id = ?2";

fn database(dir: &tempfile::TempDir) -> (Connection, Connection) {
    let path = dir.path().join("shop.db");
    let first = Connection::open(&path).unwrap();
    first.execute(CREATE, []).unwrap();
    first
        .execute("INSERT INTO stock(id, qty) VALUES (1, 10)", [])
        .unwrap();
    (first, Connection::open(&path).unwrap())
}

fn row(db: &Connection) -> (i64, i64) {
    db.query_row("SELECT qty, fence FROM stock WHERE id = 1", [], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .unwrap()
}

#[test]
fn a_stale_token_changes_no_row_and_a_holder_may_write_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = database(&dir);
    assert_eq!(db.execute(FENCED_UPDATE, params![9, 5i64, 1]).unwrap(), 1);
    assert_eq!(
        db.execute(FENCED_UPDATE, params![8, 5i64, 1]).unwrap(),
        1,
        "same token again"
    );
    assert_eq!(db.execute(FENCED_UPDATE, params![7, 6i64, 1]).unwrap(), 1);
    assert_eq!(
        db.execute(FENCED_UPDATE, params![1, 5i64, 1]).unwrap(),
        0,
        "stale"
    );
    assert_eq!(row(&db), (7, 6));
}

/// The guard's fencing token as the database stores it.
fn token(guard: &dlock::LockGuard) -> i64 {
    let fence = guard
        .fencing_token()
        .expect("a lock hands out a fencing token");
    i64::try_from(fence.get()).expect("tokens stay below 2^53")
}

/// Holder A takes the lock with a 300 ms lease, reads the stock and "pauses" (sleeps) past
/// its lease; holder B (another client) takes the lock once the lease ran out, sells 3 and
/// writes; A wakes up and writes its sale of 1, computed from what it read before the
/// pause. Returns the row and the rows A's late write changed.
async fn paused_holder(fenced: bool) -> ((i64, i64), usize) {
    let server = RedisServer::start();
    let (a, b) = (
        LockClient::connect(&server.url()).await.unwrap(),
        LockClient::connect(&server.url()).await.unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let (db_a, db_b) = database(&dir);
    let lease = Duration::from_millis(300);
    let (acquired_tx, acquired) = tokio::sync::oneshot::channel();
    let (written_tx, written) = tokio::sync::oneshot::channel::<()>();

    let holder_a = tokio::spawn(async move {
        let guard = a.lock("stock:1").lock_with_lease(lease).await.unwrap();
        let token_a = token(&guard);
        let (qty, _) = row(&db_a);
        acquired_tx.send(token_a).unwrap();
        // The pause: well past the lease, and until B has written.
        tokio::time::sleep(lease * 2).await;
        written.await.unwrap();
        let late = if fenced {
            db_a.execute(FENCED_UPDATE, params![qty - 1, token_a, 1])
        } else {
            db_a.execute(PLAIN_UPDATE, params![qty - 1, 1])
        }
        .unwrap();
        drop(guard);
        (row(&db_a), late)
    });

    let token_a = acquired.await.unwrap();
    let guard_b = tokio::time::timeout(
        Duration::from_secs(5),
        b.lock("stock:1").lock_with_lease(lease),
    )
    .await
    .expect("B gets the lock once A's lease runs out")
    .unwrap();
    let token_b = token(&guard_b);
    assert!(token_b > token_a);
    let (qty, _) = row(&db_b);
    assert_eq!(
        db_b.execute(FENCED_UPDATE, params![qty - 3, token_b, 1])
            .unwrap(),
        1
    );
    guard_b.unlock().await.unwrap();
    written_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), holder_a)
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_cannot_overwrite_the_next_holders_write() {
    let (row, late) = paused_holder(true).await;
    assert_eq!(late, 0, "the late write is refused (zero rows: stale)");
    assert_eq!(row.0, 7, "B's sale of 3 stands: {row:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_without_the_fence_the_late_write_corrupts_the_row() {
    let (row, late) = paused_holder(false).await;
    assert_eq!(late, 1);
    assert_eq!(row.0, 9, "A's stale write erased B's sale of 3: {row:?}");
}

/// Multi-row work: the token is checked and moved on a `fence_tokens` row in the same
/// transaction as the rows it guards; a stale token rolls the whole transaction back.
fn transfer(db: &mut Connection, token: i64, from: i64, to: i64, qty: i64) -> bool {
    let tx = db.transaction().unwrap();
    tx.execute(
        "INSERT INTO fence_tokens(resource, token) VALUES ('stock', 0) ON CONFLICT DO NOTHING",
        [],
    )
    .unwrap();
    let fresh = tx
        .execute(
            "UPDATE fence_tokens SET token = ?1 WHERE resource = 'stock' AND token <= ?1",
            params![token],
        )
        .unwrap();
    if fresh == 0 {
        return false; // dropped: rolled back
    }
    tx.execute(
        "UPDATE stock SET qty = qty - ?1 WHERE id = ?2",
        params![qty, from],
    )
    .unwrap();
    tx.execute(
        "UPDATE stock SET qty = qty + ?1 WHERE id = ?2",
        params![qty, to],
    )
    .unwrap();
    tx.commit().unwrap();
    true
}

#[test]
fn several_rows_are_guarded_by_one_fence_tokens_row_in_the_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let (mut db, _) = database(&dir);
    db.execute(
        "CREATE TABLE fence_tokens(resource TEXT PRIMARY KEY, token INTEGER NOT NULL)",
        [],
    )
    .unwrap();
    db.execute("INSERT INTO stock(id, qty) VALUES (2, 0)", [])
        .unwrap();
    let qty = |db: &Connection, id: i64| -> i64 {
        db.query_row("SELECT qty FROM stock WHERE id = ?1", [id], |r| r.get(0))
            .unwrap()
    };
    assert!(transfer(&mut db, 4, 1, 2, 3));
    assert!(!transfer(&mut db, 3, 1, 2, 5), "stale token");
    assert_eq!(
        (qty(&db, 1), qty(&db, 2)),
        (7, 3),
        "nothing of the stale transfer stays"
    );
    assert!(transfer(&mut db, 4, 2, 1, 1), "the same holder again");
    assert_eq!((qty(&db, 1), qty(&db, 2)), (8, 2));
}
