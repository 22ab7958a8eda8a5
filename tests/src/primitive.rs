//! Every dlock primitive behind one interface, for the fault matrix and the soak: take a
//! hold of a given kind on a name, watch it for loss, give it back, and free it behind
//! dlock's back (the control that shows a wake-up oracle can fire).
//!
//! A primitive's *rival* is what it excludes: another hold of the same kind, except for
//! a read hold, which only a write hold excludes. Every kind is exclusive against its
//! rival here: the semaphore has one permit.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::time::{Duration, Instant};

use dlock::{LockClient, LockError, LockGuard, MultiGuard, MultiLock, SemaphorePermit};

/// The five verbs come down to two here: waiting up to `wait`, with or without a lease.
macro_rules! with_lease {
    ($handle:expr, $wait:expr, $lease:expr) => {{
        let handle = $handle;
        match $lease {
            Some(lease) => handle.try_lock_with_lease($wait, lease).await,
            None => handle.try_lock_for($wait).await,
        }
    }};
}

/// A lock primitive of dlock, as the fault matrix names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Primitive {
    /// `client.lock(name)`.
    Lock,
    /// `client.fair_lock(name)`.
    Fair,
    /// `client.rw_lock(name).read()`; its rival is the write side.
    Read,
    /// `client.rw_lock(name).write()`.
    Write,
    /// `client.semaphore(name, 1)`: one permit, so a second grant waits.
    Semaphore,
    /// `MultiLock::same_slot` over two names sharing a hash tag: one script.
    MultiSameSlot,
    /// `MultiLock::sequential` over two names: one lock after the other.
    MultiSequential,
}

impl Primitive {
    /// Every primitive, in the order the fault matrix lists them.
    pub const ALL: [Primitive; 7] = [
        Primitive::Lock,
        Primitive::Fair,
        Primitive::Read,
        Primitive::Write,
        Primitive::Semaphore,
        Primitive::MultiSameSlot,
        Primitive::MultiSequential,
    ];

    /// The name the matrix, the worker's command line and the reports use.
    pub fn label(self) -> &'static str {
        match self {
            Primitive::Lock => "lock",
            Primitive::Fair => "fair",
            Primitive::Read => "read",
            Primitive::Write => "write",
            Primitive::Semaphore => "semaphore",
            Primitive::MultiSameSlot => "multi-same-slot",
            Primitive::MultiSequential => "multi-sequential",
        }
    }

    /// What a hold of this kind excludes (see the module's notes).
    pub fn rival(self) -> Primitive {
        match self {
            Primitive::Read => Primitive::Write,
            other => other,
        }
    }

    /// Whether an acquisition of this kind mints a fencing token.
    pub fn is_fenced(self) -> bool {
        !matches!(self, Primitive::Read | Primitive::Semaphore)
    }

    /// The two lock names a multi-lock over `name` takes, in one slot: `name`'s own hash
    /// tag when it has one, else `name` as the tag.
    fn multi_names(name: &str) -> [String; 2] {
        if name.contains('{') {
            [format!("{name}:a"), format!("{name}:b")]
        } else {
            [format!("{{{name}}}:a"), format!("{{{name}}}:b")]
        }
    }

    /// Takes a hold of this kind on `name`, waiting up to `wait`, with an explicit `lease`
    /// or (when `None`) the watchdog.
    ///
    /// # Errors
    ///
    /// What the primitive's acquisition returns (`Timeout` when `wait` passed first).
    pub async fn acquire(
        self,
        client: &LockClient,
        name: &str,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Held, LockError> {
        let guard = |guard: LockGuard| Held::Guard(Box::new(guard));
        match self {
            Primitive::Lock => with_lease!(client.lock(name), wait, lease).map(guard),
            Primitive::Fair => with_lease!(client.fair_lock(name), wait, lease).map(guard),
            Primitive::Read => with_lease!(client.rw_lock(name).read(), wait, lease).map(guard),
            Primitive::Write => with_lease!(client.rw_lock(name).write(), wait, lease).map(guard),
            Primitive::Semaphore => {
                let semaphore = client.semaphore(name, 1);
                match lease {
                    Some(lease) => semaphore.try_acquire_with_lease(1, wait, lease).await,
                    None => semaphore.try_acquire_for(1, wait).await,
                }
                .map(|permit| Held::Permit(Box::new(permit)))
            }
            Primitive::MultiSameSlot => {
                let multi = MultiLock::same_slot(client, Self::multi_names(name))?;
                with_lease!(multi, wait, lease).map(|guard| Held::Multi(Box::new(guard)))
            }
            Primitive::MultiSequential => {
                let locks = Self::multi_names(name).map(|name| client.lock(&name));
                let multi = MultiLock::sequential(locks)?;
                with_lease!(multi, wait, lease).map(|guard| Held::Multi(Box::new(guard)))
            }
        }
    }

    /// The Redis keys that hold this kind's state for `name`: deleting them frees it
    /// without the release's message (so only a recheck could wake a waiter).
    pub fn keys(self, client: &LockClient, name: &str) -> Vec<String> {
        match self {
            Primitive::Lock => vec![client.lock(name).key().to_owned()],
            Primitive::Fair => vec![client.fair_lock(name).key().to_owned()],
            Primitive::Read | Primitive::Write => vec![client.rw_lock(name).key().to_owned()],
            Primitive::Semaphore => vec![client.semaphore(name, 1).key().to_owned()],
            Primitive::MultiSameSlot | Primitive::MultiSequential => Self::multi_names(name)
                .iter()
                .map(|name| client.lock(name).key().to_owned())
                .collect(),
        }
    }
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

impl FromStr for Primitive {
    type Err = String;

    fn from_str(label: &str) -> Result<Primitive, String> {
        Primitive::ALL
            .into_iter()
            .find(|primitive| primitive.label() == label)
            .ok_or_else(|| {
                let labels: Vec<&str> = Primitive::ALL.iter().map(|p| p.label()).collect();
                format!("unknown primitive {label:?} (one of {})", labels.join(", "))
            })
    }
}

/// A hold of any primitive.
pub enum Held {
    /// Lock, fair lock, read or write hold.
    Guard(Box<LockGuard>),
    /// Either multi-lock mode.
    Multi(Box<MultiGuard>),
    /// A semaphore grant.
    Permit(Box<SemaphorePermit>),
}

impl Held {
    /// Completes with the loss when the hold is lost while held.
    pub fn lost(&self) -> Pin<Box<dyn Future<Output = LockError> + Send + 'static>> {
        match self {
            Held::Guard(guard) => Box::pin(guard.lost()),
            Held::Multi(guard) => Box::pin(guard.lost()),
            Held::Permit(permit) => Box::pin(permit.lost()),
        }
    }

    /// Whether the hold knows it is lost now (a passed deadline counts).
    pub fn is_lost(&self) -> bool {
        match self {
            Held::Guard(guard) => guard.is_lost(),
            Held::Multi(guard) => guard.is_lost(),
            Held::Permit(permit) => permit.is_lost(),
        }
    }

    /// When the hold's lease ends as far as the holder knows.
    pub fn deadline(&self) -> Instant {
        match self {
            Held::Guard(guard) => guard.deadline(),
            Held::Multi(guard) => guard.deadline(),
            Held::Permit(permit) => permit.deadline(),
        }
    }

    /// The fencing token of the hold (the first lock's for a multi-lock).
    pub fn fencing_token(&self) -> Option<u64> {
        match self {
            Held::Guard(guard) => guard.fencing_token().map(|fence| fence.get()),
            Held::Multi(guard) => guard.fencing_tokens().first().map(|(_, fence)| fence.get()),
            Held::Permit(_) => None,
        }
    }

    /// Gives the hold back.
    ///
    /// # Errors
    ///
    /// What the primitive's release returns.
    pub async fn unlock(self) -> Result<(), LockError> {
        match self {
            Held::Guard(guard) => guard.unlock().await,
            Held::Multi(guard) => guard.unlock().await,
            Held::Permit(permit) => permit.unlock().await,
        }
    }
}
