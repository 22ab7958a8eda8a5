//! In-process queueing: tasks of one client that want the same lock line up locally
//! (first come, first served) and only the head of the line talks to Redis.
//!
//! Without it every local contender polls Redis on each release and the releasing task,
//! which needs no wake-up, usually wins again; with it a release hands the lock to the
//! next local task without a pub/sub round trip, and local tasks are served in order.
//! Contenders in other processes still wait through pub/sub.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Mutex as TurnLock, OwnedMutexGuard};
use tokio::time::Instant;

/// The client's local lines, one per lock key while anyone is in it.
#[derive(Default)]
pub(crate) struct LocalQueues {
    lines: Mutex<HashMap<String, Arc<TurnLock<()>>>>,
}

/// The head of a local line: held from acquisition until the lock is released.
pub(crate) struct Turn {
    queues: Arc<LocalQueues>,
    key: String,
    line: Arc<TurnLock<()>>,
    held: Option<OwnedMutexGuard<()>>,
}

impl LocalQueues {
    fn line(&self, key: &str) -> Arc<TurnLock<()>> {
        let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(lines.entry(key.to_owned()).or_default())
    }

    /// Waits for this task's turn on `key` until `deadline` (`None`: no limit); `None` if
    /// the deadline passed first.
    pub(crate) async fn wait_turn(
        self: &Arc<Self>,
        key: &str,
        deadline: Option<Instant>,
    ) -> Option<Turn> {
        let line = self.line(key);
        let waiting = Arc::clone(&line).lock_owned();
        let held = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, waiting).await.ok(),
            None => Some(waiting.await),
        };
        let turn = Turn {
            queues: Arc::clone(self),
            key: key.to_owned(),
            line,
            held,
        };
        // Dropping a turn without `held` still tidies the line up.
        turn.held.is_some().then_some(turn)
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        drop(self.held.take());
        let mut lines = self.queues.lines.lock().unwrap_or_else(|p| p.into_inner());
        // Only the map and this turn know the line: nobody waits, forget it.
        if Arc::strong_count(&self.line) == 2 {
            lines.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn turns_are_exclusive_first_come_first_served_and_tidied_up() {
        let queues = Arc::new(LocalQueues::default());
        let first = queues.wait_turn("k", None).await.unwrap();
        let soon = Instant::now() + Duration::from_millis(20);
        assert!(
            queues.wait_turn("k", Some(soon)).await.is_none(),
            "the line is taken"
        );
        let other = queues.wait_turn("other", Some(soon)).await;
        assert!(other.is_some(), "other keys have their own line");
        drop(other);

        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..3 {
            let (queues, order) = (Arc::clone(&queues), Arc::clone(&order));
            waiters.push(tokio::spawn(async move {
                let _turn = queues.wait_turn("k", None).await.unwrap();
                order.lock().unwrap().push(i);
            }));
            tokio::task::yield_now().await;
        }
        drop(first);
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
        assert!(
            queues.lines.lock().unwrap().is_empty(),
            "idle lines are removed"
        );
    }
}
