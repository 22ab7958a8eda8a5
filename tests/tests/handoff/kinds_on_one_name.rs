//! Every pair of lock kinds on one name excludes as the table says, and a read-write lock
//! never takes a name held as a plain lock.

use std::time::Duration;

use dlock::{LockClient, LockGuard, MultiGuard, MultiLock};
use dlock_tests::RedisServer;

/// Client A holds `lock("x")`; client B's read lock and write lock of `x` (200 ms waits)
/// must not succeed while A holds it, and A's `unlock` must still succeed. Fails when the
/// read-write lock's script takes a hash in the plain lock's layout for a free
/// read-write lock (the read succeeds, and A's release then finds its hold gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_lock_does_not_take_a_name_held_as_a_plain_lock() {
    let server = RedisServer::start();
    let url = server.url();
    let (a, b) = (
        LockClient::connect(&url).await.unwrap(),
        LockClient::connect(&url).await.unwrap(),
    );
    let held = a.lock("x").lock().await.unwrap();
    let short = Duration::from_millis(200);
    let read = b.rw_lock("x").read().try_lock_for(short).await;
    let write = b.rw_lock("x").write().try_lock_for(short).await;
    let describe = |outcome: &dlock::Result<LockGuard>| match outcome {
        Ok(_) => "acquired".to_owned(),
        Err(e) => format!("refused: {e}"),
    };
    let (read_text, write_text) = (describe(&read), describe(&write));
    let unlocked = held.unlock().await;
    eprintln!(
        "item 10: while A holds lock(\"x\"): B's read {read_text}; B's write {write_text}; A's unlock {unlocked:?}"
    );
    assert!(read.is_err(), "B's read lock succeeded while A holds x");
    assert!(write.is_err(), "B's write lock succeeded while A holds x");
    unlocked.expect("A's unlock of x");
}

/// The kinds of lock that can be taken on one name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Lock,
    Fair,
    Read,
    Write,
    /// `semaphore(name, 1)`, one permit.
    Semaphore,
    /// A same-slot multi-lock over the name and another name of its slot.
    Multi,
}

const KINDS: [Kind; 6] = [
    Kind::Lock,
    Kind::Fair,
    Kind::Read,
    Kind::Write,
    Kind::Semaphore,
    Kind::Multi,
];

/// Whether the second kind (column) may be taken on a name while the first kind (row)
/// holds it, by another client; in the order of [`KINDS`]. Everything on one name
/// excludes everything else, except: a semaphore has its own namespace (its keys are not
/// the lock's), so it neither excludes nor is excluded by a lock of the same name (but
/// a second permit of a one-permit semaphore is refused); readers share; a lock and a
/// multi-lock over its name are the same kind of hold and exclude each other.
const MAY_SHARE: [[bool; 6]; 6] = [
    //             lock   fair   read   write  sem    multi
    /* lock  */
    [false, false, false, false, true, false],
    /* fair  */ [false, false, false, false, true, false],
    /* read  */ [false, false, true, false, true, false],
    /* write */ [false, false, false, false, true, false],
    /* sem   */ [true, true, true, true, false, true],
    /* multi */ [false, false, false, false, true, false],
];

/// A hold of one of the [`Kind`]s.
enum Holding {
    One(LockGuard),
    Permit(dlock::SemaphorePermit),
    Set(MultiGuard),
}

impl Holding {
    async fn unlock(self) -> dlock::Result<()> {
        match self {
            Holding::One(guard) => guard.unlock().await,
            Holding::Permit(permit) => permit.unlock().await,
            Holding::Set(guard) => guard.unlock().await,
        }
    }
}

/// Takes `name` as `kind` on `client`, waiting up to `wait`; a multi-lock takes `other`
/// (same slot) too.
async fn take(
    kind: Kind,
    client: &LockClient,
    name: &str,
    other: &str,
    wait: Duration,
) -> dlock::Result<Holding> {
    Ok(match kind {
        Kind::Lock => Holding::One(client.lock(name).try_lock_for(wait).await?),
        Kind::Fair => Holding::One(client.fair_lock(name).try_lock_for(wait).await?),
        Kind::Read => Holding::One(client.rw_lock(name).read().try_lock_for(wait).await?),
        Kind::Write => Holding::One(client.rw_lock(name).write().try_lock_for(wait).await?),
        Kind::Semaphore => {
            Holding::Permit(client.semaphore(name, 1).try_acquire_for(1, wait).await?)
        }
        Kind::Multi => Holding::Set(
            MultiLock::same_slot(client, [name, other])?
                .try_lock_for(wait)
                .await?,
        ),
    })
}

/// What happened to one ordered pair of kinds.
struct PairOutcome {
    first: Kind,
    second: Kind,
    /// The second kind's attempt while the first held the name.
    second_took: Result<(), String>,
    /// The first holder's unlock.
    first_unlock: Result<(), String>,
    /// The second holder's unlock, when it took the name.
    second_unlock: Option<Result<(), String>>,
}

/// Every ordered pair of kinds on one name: the first (client A) holds it, the second
/// (client B) tries for 200 ms. The second must succeed exactly where [`MAY_SHARE`] says
/// so, and the first holder's unlock must succeed in every pair. Fails where one kind's
/// script takes a hash of another kind's layout for its own (a read-write lock over a
/// plain lock, say).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pair_of_kinds_on_one_name_excludes_as_the_table_says() {
    let server = RedisServer::start();
    let url = server.url();
    let (a, b) = (
        LockClient::connect(&url).await.unwrap(),
        LockClient::connect(&url).await.unwrap(),
    );
    let text =
        |outcome: &dlock::Result<()>| outcome.as_ref().map(|_| ()).map_err(ToString::to_string);
    // The pairs run concurrently, each on names of its own.
    let mut pairs = Vec::new();
    for (i, &first) in KINDS.iter().enumerate() {
        for (j, &second) in KINDS.iter().enumerate() {
            let (a, b) = (a.clone(), b.clone());
            pairs.push(tokio::spawn(async move {
                let name = format!("{{pair-{i}-{j}}}n");
                let other = format!("{{pair-{i}-{j}}}o");
                let held = take(first, &a, &name, &other, Duration::from_secs(1))
                    .await
                    .unwrap_or_else(|e| panic!("{first:?} on a free name: {e}"));
                let second_hold = take(second, &b, &name, &other, Duration::from_millis(200)).await;
                let second_took = second_hold
                    .as_ref()
                    .map(|_| ())
                    .map_err(ToString::to_string);
                let first_unlock = text(&held.unlock().await);
                let second_unlock = match second_hold {
                    Ok(hold) => Some(text(&hold.unlock().await)),
                    Err(_) => None,
                };
                PairOutcome {
                    first,
                    second,
                    second_took,
                    first_unlock,
                    second_unlock,
                }
            }));
        }
    }
    let mut wrong = Vec::new();
    for (index, pair) in pairs.into_iter().enumerate() {
        let outcome = tokio::time::timeout(Duration::from_secs(10), pair)
            .await
            .expect("a pair finished")
            .unwrap();
        let (i, j) = (index / KINDS.len(), index % KINDS.len());
        let expected = MAY_SHARE[i][j];
        let took = outcome.second_took.is_ok();
        let verdict = if took == expected && outcome.first_unlock.is_ok() {
            "ok"
        } else {
            "WRONG"
        };
        eprintln!(
            "item 10: {verdict:5} {:?} then {:?}: second {} (expected {}); first unlock {:?}; second unlock {:?}",
            outcome.first,
            outcome.second,
            match &outcome.second_took {
                Ok(()) => "took it".to_owned(),
                Err(e) => format!("refused ({e})"),
            },
            if expected { "to take it" } else { "a refusal" },
            outcome.first_unlock,
            outcome.second_unlock,
        );
        if verdict != "ok" {
            wrong.push(format!("{:?} then {:?}", outcome.first, outcome.second));
        }
    }
    assert!(wrong.is_empty(), "pairs not as the table says: {wrong:?}");
}

// ---------------------------------------------------------------------------------------
// 11. `wait` bounds every primitive while Redis is down.
// ---------------------------------------------------------------------------------------

/// Which family a kind's holds belong to: a name held by one family is refused to another
/// with [`LockError::KindMismatch`](dlock::LockError::KindMismatch); within a family
/// (a lock and a multi-lock over its name, a read and a write lock) a call waits.
fn family(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Lock | Kind::Multi => Some("lock"),
        Kind::Fair => Some("fair"),
        Kind::Read | Kind::Write => Some("rw"),
        Kind::Semaphore => None,
    }
}

/// A name held as one kind fails an acquisition of another family at once with
/// `LockError::KindMismatch` naming both kinds, as the README promises, rather than
/// waiting out its 10 s for a release it would never hear of.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_kind_on_a_held_name_is_refused_at_once_with_kind_mismatch() {
    let server = RedisServer::start();
    let url = server.url();
    let (a, b) = (
        LockClient::connect(&url).await.unwrap(),
        LockClient::connect(&url).await.unwrap(),
    );
    let mut checked = 0;
    for (i, &first) in KINDS.iter().enumerate() {
        for (j, &second) in KINDS.iter().enumerate() {
            let (Some(held_as), Some(asked_as)) = (family(first), family(second)) else {
                continue;
            };
            if held_as == asked_as {
                continue;
            }
            let name = format!("{{mismatch-{i}-{j}}}n");
            let other = format!("{{mismatch-{i}-{j}}}o");
            let held = take(first, &a, &name, &other, Duration::from_secs(1))
                .await
                .unwrap_or_else(|e| panic!("{first:?} on a free name: {e}"));
            let started = std::time::Instant::now();
            let refused = take(second, &b, &name, &other, Duration::from_secs(10)).await;
            let took = started.elapsed();
            match refused {
                Err(dlock::LockError::KindMismatch {
                    requested, found, ..
                }) => {
                    assert_ne!(requested, found, "{first:?} then {second:?}");
                }
                Err(other) => {
                    panic!("{first:?} then {second:?}: refused with {other}, not KindMismatch")
                }
                Ok(_) => panic!("{first:?} then {second:?}: the second kind took a held name"),
            }
            assert!(
                took < Duration::from_secs(2),
                "{first:?} then {second:?}: refused after {took:?}, not at once"
            );
            held.unlock().await.unwrap();
            checked += 1;
        }
    }
    // lock, multi, fair, read, write: 5 × 5 pairs less the 9 within a family.
    assert_eq!(checked, 16);
}
