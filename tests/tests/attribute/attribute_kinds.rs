//! `#[distributed_lock(kind = ...)]` at run time: each kind takes its own primitive, and
//! nested attribute functions follow that primitive's rules.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dlock::{distributed_lock, LockClient, LockError};
use dlock_tests::RedisServer;

/// Who is inside the bodies of one key: readers may share, a writer (or an exclusive
/// kind) must be alone. Every entry and exit checks; a conflict is counted.
#[derive(Clone, Default)]
struct Occupancy {
    readers: Arc<AtomicUsize>,
    writers: Arc<AtomicUsize>,
    most_readers: Arc<AtomicUsize>,
    conflicts: Arc<AtomicUsize>,
}

impl Occupancy {
    async fn read(&self, hold: Duration) {
        let readers = self.readers.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_readers.fetch_max(readers, Ordering::SeqCst);
        self.check(self.writers.load(Ordering::SeqCst) == 0);
        tokio::time::sleep(hold).await;
        self.check(self.writers.load(Ordering::SeqCst) == 0);
        self.readers.fetch_sub(1, Ordering::SeqCst);
    }

    async fn write(&self, hold: Duration) {
        let writers = self.writers.fetch_add(1, Ordering::SeqCst) + 1;
        self.check(writers == 1 && self.readers.load(Ordering::SeqCst) == 0);
        tokio::time::sleep(hold).await;
        self.check(
            self.writers.load(Ordering::SeqCst) == 1 && self.readers.load(Ordering::SeqCst) == 0,
        );
        self.writers.fetch_sub(1, Ordering::SeqCst);
    }

    fn check(&self, alone: bool) {
        if !alone {
            self.conflicts.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn conflicts(&self) -> usize {
        self.conflicts.load(Ordering::SeqCst)
    }

    fn most_readers(&self) -> usize {
        self.most_readers.load(Ordering::SeqCst)
    }
}

struct Catalog {
    locks: LockClient,
    occupancy: Occupancy,
}

impl Catalog {
    #[distributed_lock(key = "catalog:<shop>", kind = "read", client = self.locks)]
    async fn read(&self, shop: u32) -> Result<(), LockError> {
        self.occupancy.read(Duration::from_millis(150)).await;
        Ok(())
    }

    #[distributed_lock(key = "catalog:<shop>", kind = "write", client = self.locks)]
    async fn write(&self, shop: u32) -> Result<(), LockError> {
        self.occupancy.write(Duration::from_millis(50)).await;
        Ok(())
    }

    #[distributed_lock(key = "catalog:<shop>", kind = "fair", client = self.locks)]
    async fn fair(&self, shop: u32) -> Result<(), LockError> {
        self.occupancy.write(Duration::from_millis(30)).await;
        Ok(())
    }

    #[distributed_lock(key = "catalog:<shop>", kind = "reentrant", client = self.locks)]
    async fn reentrant(&self, shop: u32) -> Result<(), LockError> {
        self.occupancy.write(Duration::from_millis(30)).await;
        Ok(())
    }

    /// A write that reads under itself: a downgrade, allowed.
    #[distributed_lock(key = "catalog:<shop>", kind = "write", client = self.locks)]
    async fn write_then_read(&self, shop: u32) -> Result<(), LockError> {
        self.read(shop).await
    }

    /// A read that asks to write under itself: an upgrade, refused at once.
    #[distributed_lock(key = "catalog:<shop>", kind = "read", client = self.locks)]
    async fn read_then_write(&self, shop: u32) -> Result<(), LockError> {
        self.write(shop).await
    }
}

async fn catalog(server: &RedisServer) -> Arc<Catalog> {
    Arc::new(Catalog {
        locks: LockClient::connect(&server.url()).await.unwrap(),
        occupancy: Occupancy::default(),
    })
}

/// Runs `calls` concurrent calls of `call`, each must succeed.
async fn concurrently<F, Fut>(catalog: &Arc<Catalog>, calls: usize, call: F)
where
    F: Fn(Arc<Catalog>, usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), LockError>> + Send + 'static,
{
    let tasks: Vec<_> = (0..calls)
        .map(|n| tokio::spawn(call(Arc::clone(catalog), n)))
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
}

/// Reads share: several read bodies run at once (which also shows the conflict check of
/// the exclusive kinds below would fire if a kind let bodies overlap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_bodies_run_together() {
    let server = RedisServer::start();
    let catalog = catalog(&server).await;
    concurrently(&catalog, 4, |c, _| async move { c.read(1).await }).await;
    let most = catalog.occupancy.most_readers();
    assert!(
        most > 1,
        "read bodies never overlapped (most at once: {most})"
    );
    assert_eq!(catalog.occupancy.conflicts(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_fair_and_reentrant_bodies_run_alone() {
    let server = RedisServer::start();
    for kind in ["write", "fair", "reentrant"] {
        let catalog = catalog(&server).await;
        concurrently(&catalog, 4, move |c, _| async move {
            match kind {
                "write" => c.write(2).await,
                "fair" => c.fair(2).await,
                _ => c.reentrant(2).await,
            }
        })
        .await;
        assert_eq!(catalog.occupancy.conflicts(), 0, "{kind} bodies overlapped");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_body_never_runs_beside_a_read_body() {
    let server = RedisServer::start();
    let catalog = catalog(&server).await;
    concurrently(&catalog, 9, |c, n| async move {
        if n % 3 == 0 {
            c.write(3).await
        } else {
            c.read(3).await
        }
    })
    .await;
    assert_eq!(
        catalog.occupancy.conflicts(),
        0,
        "a write overlapped a read"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_under_a_write_downgrades_and_a_write_under_a_read_fails_at_once() {
    let server = RedisServer::start();
    let catalog = catalog(&server).await;
    tokio::time::timeout(Duration::from_secs(5), catalog.write_then_read(4))
        .await
        .expect("a read inside a write of the same key waited for itself")
        .unwrap();

    let started = std::time::Instant::now();
    let refused = tokio::time::timeout(Duration::from_secs(5), catalog.read_then_write(4))
        .await
        .expect("a write inside a read of the same key waited for itself");
    assert!(
        matches!(refused, Err(LockError::UpgradeNotSupported { .. })),
        "{refused:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the refusal took {:?}",
        started.elapsed()
    );
    // Nothing is left held: a writer gets in at once.
    tokio::time::timeout(Duration::from_secs(2), catalog.write(4))
        .await
        .expect("the key stayed locked after the refused upgrade")
        .unwrap();
}
