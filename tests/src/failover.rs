//! Load kept up through a failover (used by the Sentinel and Cluster tests).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::LockClient;

/// Tasks that take and release locks in a loop, recording when each cycle succeeded: the
/// load kept up through a failover.
pub struct CycleLoad {
    stop: Arc<AtomicBool>,
    successes: Arc<std::sync::Mutex<Vec<Instant>>>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl CycleLoad {
    /// One looping task per name.
    pub fn start(client: &LockClient, names: &[String]) -> CycleLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let successes: Arc<std::sync::Mutex<Vec<Instant>>> = Arc::default();
        let workers = names
            .iter()
            .map(|name| {
                let lock = client.lock(name);
                let (stop, successes) = (stop.clone(), successes.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        let cycle = async {
                            lock.try_lock_for(Duration::from_millis(500))
                                .await?
                                .unlock()
                                .await
                        };
                        match tokio::time::timeout(Duration::from_secs(2), cycle).await {
                            Ok(Ok(())) => successes.lock().unwrap().push(Instant::now()),
                            _ => tokio::time::sleep(Duration::from_millis(20)).await,
                        }
                    }
                })
            })
            .collect();
        CycleLoad {
            stop,
            successes,
            workers,
        }
    }

    /// Waits (at most 15 s) until a cycle succeeds after `since`.
    pub async fn wait_for_success_after(&self, since: Instant) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !self.successes.lock().unwrap().iter().any(|t| *t > since) {
            assert!(
                Instant::now() < deadline,
                "no lock cycle succeeded within 15 s after the failover"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the tasks; returns the number of successful cycles and the longest interval
    /// without one among those ending after `from`.
    pub async fn stop(self, from: Instant) -> (usize, Duration) {
        self.stop.store(true, Ordering::SeqCst);
        for worker in self.workers {
            worker.await.unwrap();
        }
        let mut times = self.successes.lock().unwrap().clone();
        times.sort();
        let gap = times
            .windows(2)
            .filter(|pair| pair[1] >= from)
            .map(|pair| pair[1] - pair[0])
            .max()
            .unwrap_or_default();
        (times.len(), gap)
    }
}
