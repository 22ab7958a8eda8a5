//! The client's background tasks (watchdog, subscriber, background releases, release
//! replay, Sentinel watchers), kept running on whatever runtime uses the client.
//!
//! A task runs on the runtime it was spawned on, and dies with it. A client often outlives
//! that runtime: `set_global` in one `#[tokio::test]`, used by the next; a client built
//! in a short-lived runtime at start-up. Its locks would then still be taken, but nothing
//! would renew them, wake waiters or release dropped guards. So each task is started by
//! a factory that rebuilds it from shared state, knows when its future was dropped, and
//! is started again on the caller's runtime by the next operation that finds it dead.
//!
//! Tasks whose work ends with the client (renewals, Sentinel watchers) are started with
//! [`Background::start_until_dropped`]: they stop as soon as the `Background` is dropped
//! (with the client, or with a connect that was cancelled), not at their next wake-up,
//! and close their connections with them.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

type TaskFuture = Pin<Box<dyn Future<Output = ()> + Send>>;
type Factory = Box<dyn Fn() -> TaskFuture + Send + Sync>;

/// The client's restartable tasks.
pub(crate) struct Background {
    tasks: Mutex<Vec<Task>>,
    /// Never sent on: its receivers learn that the `Background` is gone when it drops.
    alive: watch::Sender<()>,
}

impl Default for Background {
    fn default() -> Background {
        Background {
            tasks: Mutex::default(),
            alive: watch::channel(()).0,
        }
    }
}

struct Task {
    name: &'static str,
    start: Factory,
    /// `true` while a future of this task exists on some runtime.
    running: Arc<AtomicBool>,
    /// Set when the task ended by itself (its work is over): never restarted.
    finished: Arc<AtomicBool>,
}

/// Marks a task as not running when its future is dropped, finished or not.
struct Running {
    running: Arc<AtomicBool>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.running.store(false, Ordering::Release);
    }
}

impl Task {
    fn spawn(&self) {
        let running = Arc::clone(&self.running);
        let finished = Arc::clone(&self.finished);
        running.store(true, Ordering::Release);
        let future = (self.start)();
        tokio::spawn(async move {
            let _running = Running { running };
            future.await;
            finished.store(true, Ordering::Release);
        });
    }
}

impl Background {
    /// Starts `start()` now (on the current runtime) and again whenever its future was
    /// dropped unfinished and [`keep_running`](Background::keep_running) is called.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub(crate) fn start<F, Fut>(&self, name: &'static str, start: F)
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let task = Task {
            name,
            start: Box::new(move || Box::pin(start())),
            running: Arc::default(),
            finished: Arc::default(),
        };
        task.spawn();
        self.lock_tasks().push(task);
    }

    /// Like [`start`](Background::start), for a task that has no work left once the
    /// `Background` is dropped: it is stopped then, wherever it is waiting.
    pub(crate) fn start_until_dropped<F, Fut>(&self, name: &'static str, start: F)
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let alive = self.alive.subscribe();
        self.start(name, move || {
            let task = start();
            let mut alive = alive.clone();
            async move {
                tokio::select! {
                    () = task => {}
                    // Nothing is ever sent: this ends when the sender is dropped.
                    _ = alive.changed() => {}
                }
            }
        });
    }

    /// Restarts, on the current runtime, every task whose runtime is gone. Cheap when all
    /// run (one atomic load per task); does nothing outside a runtime.
    pub(crate) fn keep_running(&self) {
        let tasks = self.lock_tasks();
        let dead = |task: &&Task| {
            !task.running.load(Ordering::Acquire) && !task.finished.load(Ordering::Acquire)
        };
        if !tasks.iter().any(|task| dead(&task)) || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        for task in tasks.iter().filter(dead) {
            tracing::info!(
                task = task.name,
                "dlock: restarting a background task whose runtime shut down"
            );
            task.spawn();
        }
    }

    fn lock_tasks(&self) -> std::sync::MutexGuard<'_, Vec<Task>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }
}
