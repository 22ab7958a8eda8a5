//! The reentrant lock's Redis names, which the primitives built on the lock's hash (fair,
//! read-write, multi-lock, RedLock, and the semaphore's release memos) share. See
//! `names` for the convention and docs/LAYOUT.md for every name.

use std::sync::Arc;

use crate::names::helper_scope;

/// The names dlock uses in Redis for one lock.
#[derive(Debug, Clone)]
pub(crate) struct LockKeys {
    /// The lock hash: key prefix + lock name.
    pub(crate) key: String,
    /// Where the lock name starts in `key` (the key prefix's length).
    name_at: usize,
    /// `<key prefix>{<tag>}`: what every helper name of this lock starts with after
    /// `dlock:<kind>:`.
    scope: String,
    /// The lock's unlock channel, in the key's slot: the read-write lock's releases
    /// publish on it, and its name is also the key of the lock's waiter registry (see
    /// `lock/scripts/handoff.lua`); the lock's own messages go to each client's
    /// [`wake_channel`](LockKeys::wake_channel).
    pub(crate) channel: String,
    /// Start of the release memo keys (`<memo_prefix><owner>:<op>`) and re-entry markers
    /// (`<memo_prefix><owner>:acq:<op>`), in the key's slot:
    /// `dlock:release:<key prefix>{tag}:`.
    pub(crate) memo_prefix: String,
    /// What the lock's waiters were told they may sleep until (a sorted set, see
    /// `scripts/naps.lua`): `dlock:unlock:<key prefix>{tag}!<name>`, in the key's slot;
    /// the `!` after the tag keeps it apart from every registry (`:` there).
    pub(crate) naps: String,
    /// The fencing-token counter (`dlock:fence:<key prefix>{anchor}`): one per slot
    /// anchor and key prefix, shared by every lock whose key has that anchor, so the number
    /// of counters is bounded (at most 16,384 for untagged names, plus one per hash tag in
    /// use) however many lock names come and go. It only ever grows, so the tokens of each
    /// lock still strictly increase (not consecutively). It never expires.
    pub(crate) fence: Arc<str>,
}

impl LockKeys {
    pub(crate) fn new(prefix: &str, name: &str) -> LockKeys {
        let key = format!("{prefix}{name}");
        let scope = helper_scope(prefix, &key);
        LockKeys {
            channel: format!("dlock:unlock:{scope}:{name}"),
            naps: format!("dlock:unlock:{scope}!{name}"),
            memo_prefix: format!("dlock:release:{scope}:"),
            fence: format!("dlock:fence:{scope}").into(),
            name_at: prefix.len(),
            scope,
            key,
        }
    }

    /// The lock name (the key without its prefix).
    fn name(&self) -> &str {
        &self.key[self.name_at..]
    }

    /// `dlock:<kind>:<key prefix>{tag}:<name>`: a helper of `kind` for this lock.
    pub(crate) fn helper(&self, kind: &str) -> String {
        format!("dlock:{kind}:{}:{}", self.scope, self.name())
    }
}

impl LockKeys {
    /// The memo that makes release operation `op` of `field` count once across retries.
    pub(crate) fn memo(&self, field: &str, op: u64) -> String {
        format!("{}{field}:{op}", self.memo_prefix)
    }

    /// The marker a re-entry (acquisition `op` of `field`) leaves, so that a retry of it
    /// adds no second hold and an abandoned one can be undone exactly once.
    pub(crate) fn marker(&self, field: &str, op: u64) -> String {
        format!("{}{field}:acq:{op}", self.memo_prefix)
    }

    /// The channel on which the lock's messages for the waiters of the client `client_id`
    /// arrive: `dlock:unlock:<key prefix>{tag}#<client id>:<name>`, the registry's name
    /// with `#<client id>` after the tag (the scripts derive it so; see
    /// `lock/scripts/handoff.lua`). The tag holds no `}` and the prefix no `{`, so the
    /// character after the tag tells it from every lock's unlock channel (`:` there), and
    /// it stays in the lock's slot.
    pub(crate) fn wake_channel(&self, client_id: &str) -> String {
        format!("dlock:unlock:{}#{client_id}:{}", self.scope, self.name())
    }

    /// How many tasks of the client `client_id` wait in its local line for the lock,
    /// behind a task of their own client that holds it or waits in Redis, where the
    /// registry does not see them: `dlock:unlock:<key prefix>{tag}~<client id>:<name>`, a
    /// string, in the key's slot, for `inspect` (see `sync::line`).
    pub(crate) fn line_report(&self, client_id: &str) -> String {
        format!("dlock:unlock:{}~{client_id}:{}", self.scope, self.name())
    }

    /// The read-write lock's set of waiting writers (a sorted set: writer owner → server
    /// deadline of its entry), in the key's slot.
    pub(crate) fn waiting_writers(&self) -> String {
        self.helper("rwwait")
    }
}
