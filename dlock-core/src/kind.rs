//! The kinds of lock a name can be held as, and how a name is shared between them.

/// Which primitive a lock name's keys belong to: in [`LockInfo::kind`] and in
/// [`LockError::KindMismatch`].
///
/// Locks (and the [`MultiLock`](crate::MultiLock)s made of them), fair locks and
/// read-write locks share one namespace: a name is held as one of them at a time, in one
/// Redis hash (the key prefix + the name), and an acquisition of another kind finds it
/// held and is refused with [`LockError::KindMismatch`] instead of waiting for a release
/// it would never hear of, or taking the hash over. A [`Semaphore`](crate::Semaphore) has
/// a namespace of its own: `semaphore("z")` and `lock("z")` are two independent things.
///
/// [`LockInfo::kind`]: crate::inspect::LockInfo::kind
/// [`LockError::KindMismatch`]: crate::LockError::KindMismatch
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// A reentrant [`Lock`](crate::Lock), or a [`MultiLock`](crate::MultiLock)'s lock (also
    /// a free name: nothing in Redis says more).
    Lock,
    /// A [`FairLock`](crate::FairLock): held, or with tasks in its queue.
    Fair,
    /// A [`ReadWriteLock`](crate::ReadWriteLock) held by readers or a writer.
    ReadWrite,
    /// A [`Semaphore`](crate::Semaphore): its capacity is stored (it stays while nobody
    /// holds a permit), and no lock hash of the same name exists.
    Semaphore,
}

impl LockKind {
    /// `lock`, `fair`, `read_write` or `semaphore`: the name tools print.
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Lock => "lock",
            LockKind::Fair => "fair",
            LockKind::ReadWrite => "read_write",
            LockKind::Semaphore => "semaphore",
        }
    }

    /// The kind a script names (`lock`, `fair`, `read_write`), as in its `kind:<kind>`
    /// answer.
    pub(crate) fn from_script(name: &str) -> Option<LockKind> {
        match name {
            "lock" => Some(LockKind::Lock),
            "fair" => Some(LockKind::Fair),
            "read_write" => Some(LockKind::ReadWrite),
            _ => None,
        }
    }
}

impl std::fmt::Display for LockKind {
    /// `lock`, `fair lock`, `read-write lock` or `semaphore`: the name messages use.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LockKind::Lock => "lock",
            LockKind::Fair => "fair lock",
            LockKind::ReadWrite => "read-write lock",
            LockKind::Semaphore => "semaphore",
        })
    }
}
