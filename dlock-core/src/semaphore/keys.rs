//! The semaphore's Redis names.

use crate::lock::keys::LockKeys;
use crate::names::glob_escape;

/// The semaphore's names (`Semaphore`), each in a namespace of its own so that a lock and
/// a semaphore of the same name never share a key, and all in the slot of key prefix +
/// name (the slot a lock of that name would have).
#[derive(Debug, Clone)]
pub(crate) struct SemKeys {
    /// Hash of the live grants: `<grant>` → permits, `<grant>:t` → server-time deadline.
    /// Also the name of the channel releases and reclaims publish on (channels and keys
    /// are separate namespaces in Redis).
    pub(crate) grants: String,
    /// String: the capacity, the one semaphore key without a TTL.
    pub(crate) capacity: String,
    /// The lock-style names; only the release memos (`memo`) are used.
    pub(crate) lock: LockKeys,
}

impl SemKeys {
    pub(crate) fn new(prefix: &str, name: &str) -> SemKeys {
        let lock = LockKeys::new(prefix, name);
        SemKeys {
            grants: lock.helper("sem"),
            capacity: lock.helper("semcap"),
            lock,
        }
    }
}

impl SemKeys {
    /// The `SCAN MATCH` pattern of the capacity keys of every semaphore under `prefix`
    /// whose name starts with `name_prefix` (the capacity is the one semaphore key that
    /// stays while nobody holds a permit). The tag sits between the prefix and the name,
    /// so the pattern matches any tag; [`SemKeys::name_of_capacity`] checks each key found.
    pub(crate) fn capacity_pattern(prefix: &str, name_prefix: &str) -> String {
        format!(
            "dlock:semcap:{}{{*}}:{}*",
            glob_escape(prefix),
            glob_escape(name_prefix)
        )
    }

    /// The semaphore name whose capacity key is `key`, when `key` is exactly the capacity
    /// key dlock would name for it under `prefix` (not some other key the pattern matched).
    pub(crate) fn name_of_capacity(prefix: &str, key: &str) -> Option<String> {
        let rest = key.strip_prefix("dlock:semcap:")?.strip_prefix(prefix)?;
        // The tag holds no `}` (a hash tag ends at its first one; an anchor is base 36).
        let (_, name) = rest.strip_prefix('{')?.split_once("}:")?;
        (SemKeys::new(prefix, name).capacity == key).then(|| name.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_semaphore_shares_no_key_with_a_lock_of_the_same_name() {
        for name in ["jobs", "{jobs}", "a{b}}c"] {
            let lock = LockKeys::new("app:", name);
            let sem = SemKeys::new("app:", name);
            let lock_names = [
                lock.key.clone(),
                lock.channel.clone(),
                lock.waiting_writers(),
            ];
            for sem_name in [&sem.grants, &sem.capacity] {
                assert!(!lock_names.contains(sem_name), "{name}: {sem_name}");
            }
            assert_ne!(sem.grants, sem.capacity);
        }
    }

    #[test]
    fn a_semaphore_name_is_found_from_its_capacity_key() {
        for name in ["jobs", "{jobs}", "a{b}}c", "}{", "x}:y", ""] {
            for prefix in ["", "shop:", "sh}op:"] {
                let capacity = SemKeys::new(prefix, name).capacity;
                assert_eq!(
                    SemKeys::name_of_capacity(prefix, &capacity).as_deref(),
                    Some(name),
                    "{prefix:?} {name:?}"
                );
            }
        }
        let other = SemKeys::new("other:", "jobs").capacity;
        assert_eq!(SemKeys::name_of_capacity("shop:", &other), None);
        assert_eq!(
            SemKeys::name_of_capacity("shop:", "dlock:semcap:shop:{x}:jobs"),
            None
        );
        assert_eq!(
            SemKeys::capacity_pattern("a*", "b?"),
            "dlock:semcap:a\\*{*}:b\\?*"
        );
    }
}
