//! Names: what a lock name may be, and the Redis key names for a lock (the hash itself,
//! its unlock channel and its release memos).
//!
//! In Redis Cluster a script may only touch keys of one slot, and a sharded unlock message
//! must be published in the slot of the lock. So every helper name embeds a hash tag that
//! lands in the lock key's slot: the key's own tag when it has a valid one (cluster spec:
//! the first `{`, then the first `}` after it, with something in between), otherwise a
//! short string chosen to hash to the same slot. Naively wrapping the name in `{...}` would
//! be wrong for names such as `{}` or `a{b}}`, whose slot is that of the whole name.
//!
//! Every helper name is `dlock:<kind>:<key prefix>{<tag>}:<rest>`: the key prefix comes
//! right after the fixed kind, before anything a lock name can influence, so an ACL
//! pattern `dlock:<kind>:<prefix>*` matches one application's names and no other's,
//! whatever characters the other application's lock names hold (a pattern with a `*`
//! before the prefix would let a name containing `}:<prefix>` match it). That is why a key
//! prefix may not contain `{` ([`check_prefix`]): the helper's own tag must be the first.

use std::sync::OnceLock;

use crate::error::{LockError, Result};

/// The longest lock name (and the longest key prefix) accepted, in bytes: 4096.
///
/// The name is repeated in the lock's unlock channel and release memo keys, in every
/// unlock message and in every log line about the lock, so a runaway name (say, a request
/// body used as a key by mistake) multiplies. Longer names are reported as
/// [`LockError::InvalidName`] by every operation; nothing is sent to Redis.
pub const MAX_NAME_LEN: usize = 4096;

/// Checks a lock name or key prefix (`what`) for what every name must satisfy: at most
/// [`MAX_NAME_LEN`] bytes and no ASCII control characters. Control characters (NUL, line
/// breaks, escape...) are never meant in a key, and would corrupt log lines that show it.
pub(crate) fn check_text(what: &'static str, text: &str) -> Result<()> {
    if text.len() > MAX_NAME_LEN {
        return Err(LockError::invalid_name(
            what,
            text,
            format!("a {what} is at most {MAX_NAME_LEN} bytes"),
        ));
    }
    if let Some((at, control)) = text.char_indices().find(|(_, c)| c.is_ascii_control()) {
        return Err(LockError::invalid_name(
            what,
            text,
            format!(
                "a {what} must not contain ASCII control characters; found U+{:04X} at byte {at}",
                u32::from(control)
            ),
        ));
    }
    Ok(())
}

/// Checks a key prefix: a lock name's rules ([`check_text`]), and no `{`, which would
/// take the place of the hash tag dlock writes after the prefix in its helper names and
/// move them to another cluster slot than the lock's (see the module documentation).
pub(crate) fn check_prefix(prefix: &str) -> Result<()> {
    check_text("key prefix", prefix)?;
    if let Some(at) = prefix.find('{') {
        return Err(LockError::invalid_name(
            "key prefix",
            prefix,
            format!(
                "a key prefix must not contain `{{` (found at byte {at}): dlock writes the prefix before the cluster hash tag of its own keys; put hash tags in lock names instead"
            ),
        ));
    }
    Ok(())
}

const SLOTS: usize = 16_384;

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
    pub(crate) fence: String,
}

impl LockKeys {
    pub(crate) fn new(prefix: &str, name: &str) -> LockKeys {
        let key = format!("{prefix}{name}");
        let scope = format!("{prefix}{{{}}}", slot_anchor(key.as_bytes()));
        LockKeys {
            channel: format!("dlock:unlock:{scope}:{name}"),
            naps: format!("dlock:unlock:{scope}!{name}"),
            memo_prefix: format!("dlock:release:{scope}:"),
            fence: format!("dlock:fence:{scope}"),
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
    fn helper(&self, kind: &str) -> String {
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

    /// The read-write lock's set of waiting writers (a sorted set: writer owner → server
    /// deadline of its entry), in the key's slot.
    pub(crate) fn waiting_writers(&self) -> String {
        self.helper("rwwait")
    }
}

/// The fair lock's extra names (`FairLock`), in the lock key's slot: its queue of waiters,
/// their entries' deadlines, and the start of each waiter's wake-up channel.
#[derive(Debug, Clone)]
pub(crate) struct FairKeys {
    /// Sorted set: waiter → place in the queue.
    pub(crate) queue: String,
    /// Sorted set: waiter → server time (ms) at which its entry dies.
    pub(crate) deadlines: String,
    /// A waiter's channel is this + the waiter (its owner field).
    pub(crate) wake_prefix: String,
}

impl FairKeys {
    pub(crate) fn new(prefix: &str, name: &str) -> FairKeys {
        let base = LockKeys::new(prefix, name).helper("fair");
        FairKeys {
            queue: format!("{base}:queue"),
            deadlines: format!("{base}:deadlines"),
            wake_prefix: format!("{base}:wake:"),
        }
    }
}

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

/// `text` with the glob characters of `SCAN MATCH` escaped, so that it matches itself.
pub(crate) fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The fenced writes' names for one application key (`FencedWrites`), in that key's slot.
/// The application key itself is used as given (no key prefix): it is the application's.
#[derive(Debug, Clone)]
pub(crate) struct FencedKeys {
    /// Hash, field `fence`: the highest token that has written the key.
    pub(crate) fence: String,
    /// Start of the memos of `incr_by` calls (`<op_prefix><client-id>:<op>`).
    pub(crate) op_prefix: String,
}

impl FencedKeys {
    pub(crate) fn new(prefix: &str, key: &str) -> FencedKeys {
        let scope = format!("{prefix}{{{}}}", slot_anchor(key.as_bytes()));
        FencedKeys {
            fence: format!("dlock:fenced:{scope}:{key}"),
            op_prefix: format!("dlock:fencedop:{scope}:"),
        }
    }
}

/// The key under which client `client_id` describes itself (see
/// `client::registration`): `dlock:client:<key prefix>{<anchor>}:<client id>`, the anchor
/// being the client id's, so that the clients of one deployment spread over the slots and
/// anyone who knows an owner field (`<client id>:<n>`) can find its client.
pub(crate) fn client_key(prefix: &str, client_id: &str) -> String {
    format!(
        "dlock:client:{prefix}{{{}}}:{client_id}",
        slot_anchor(client_id.as_bytes())
    )
}

/// Where the layout version of the clients of `prefix` is recorded
/// (`client::layout`): `dlock:layout:<key prefix>`, nothing after it, so that the ACL
/// pattern for it can be the exact name.
pub(crate) fn layout_key(prefix: &str) -> String {
    format!("dlock:layout:{prefix}")
}

/// A hash tag body that hashes to the same cluster slot as `key`.
fn slot_anchor(key: &[u8]) -> String {
    // A tag ends at the first `}` after its `{`, so `{tag}` re-parses as the same tag.
    match hash_tag(key).and_then(|tag| std::str::from_utf8(tag).ok()) {
        Some(tag) => tag.to_owned(),
        None => anchor_table()[slot_of(key)].clone(),
    }
}

/// The effective hash tag of `key` by the cluster spec's rule, if it has one.
pub(crate) fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// The cluster slot of `key`.
pub(crate) fn slot_of(key: &[u8]) -> usize {
    usize::from(crc16(hash_tag(key).unwrap_or(key))) % SLOTS
}

/// CRC-16/XMODEM, the checksum Redis Cluster uses for key slots.
fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &byte| {
        (0..8).fold(crc ^ (u16::from(byte) << 8), |crc, _| {
            if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            }
        })
    })
}

/// For every slot, the shortest base-36 string that hashes to it; built once, on first use.
fn anchor_table() -> &'static [String] {
    static TABLE: OnceLock<Vec<String>> = OnceLock::new();
    TABLE.get_or_init(|| {
        const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
        let mut table = vec![String::new(); SLOTS];
        let mut missing = SLOTS;
        let mut n: u64 = 0;
        while missing > 0 {
            let mut digits = Vec::new();
            let mut rest = n;
            loop {
                digits.push(DIGITS[(rest % 36) as usize]);
                rest /= 36;
                if rest == 0 {
                    break;
                }
            }
            let slot = usize::from(crc16(&digits)) % SLOTS;
            if table[slot].is_empty() {
                // Digits are ASCII, so this is valid UTF-8.
                table[slot] = String::from_utf8(digits).unwrap_or_default();
                missing -= 1;
            }
            n += 1;
        }
        table
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_cluster_spec_reference() {
        // The cluster specification's test vector.
        assert_eq!(crc16(b"123456789"), 0x31C3);
    }

    #[test]
    fn hash_tag_follows_the_first_brace_rule() {
        assert_eq!(hash_tag(b"goods:{42}"), Some(&b"42"[..]));
        assert_eq!(hash_tag(b"{a}{b}"), Some(&b"a"[..]));
        assert_eq!(hash_tag(b"{}"), None);
        assert_eq!(hash_tag(b"a{"), None);
        assert_eq!(
            hash_tag(b"{}{x}"),
            None,
            "first `{{` then empty tag: no tag"
        );
        assert_eq!(hash_tag(b"a{b}}c"), Some(&b"b"[..]));
        assert_eq!(hash_tag(b"plain"), None);
    }

    #[test]
    fn slots_match_values_measured_on_redis() {
        // From REDIS-NOTES.md: CLUSTER KEYSLOT '{}' and 'pre:{}'.
        assert_eq!(slot_of(b"{}"), 15257);
        assert_eq!(slot_of(b"pre:{}"), 243);
    }

    #[test]
    fn helper_names_share_the_lock_key_slot() {
        for name in [
            "goods:42",
            "goods:{42}",
            "{}",
            "a{",
            "{}{x}",
            "a{b}}c",
            "}{",
            "",
            "ключ",
        ] {
            for prefix in ["", "shop:", "sh}op:"] {
                let keys = LockKeys::new(prefix, name);
                let slot = slot_of(keys.key.as_bytes());
                assert_eq!(slot_of(keys.channel.as_bytes()), slot, "{prefix}{name}");
                let fair = FairKeys::new(prefix, name);
                let sem = SemKeys::new(prefix, name);
                for helper in [
                    keys.memo("client:1", 7),
                    keys.marker("client:1", 7),
                    keys.waiting_writers(),
                    fair.queue,
                    fair.deadlines,
                    format!("{}client:1", fair.wake_prefix),
                    sem.grants,
                    sem.capacity,
                    sem.lock.memo("client:1", 7),
                ] {
                    assert_eq!(slot_of(helper.as_bytes()), slot, "{prefix}{name}");
                }
            }
        }
    }

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

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }

    #[test]
    fn fenced_names_share_the_application_key_slot() {
        for key in ["stock:42", "stock:{42}", "{}", "a{b}}c", "}{", "ключ"] {
            for prefix in ["", "shop:", "sh}op:"] {
                let names = FencedKeys::new(prefix, key);
                let slot = slot_of(key.as_bytes());
                let memo = format!("{}client:1:7", names.op_prefix);
                for name in [&names.fence, &memo] {
                    assert_eq!(slot_of(name.as_bytes()), slot, "{prefix} {key}: {name}");
                }
            }
        }
    }

    #[test]
    fn helper_names_start_with_their_kind_and_the_prefix_then_their_own_tag() {
        let hostile = ["x}:b:y", "{b}:x", "b:*", "?}{", "}", "{", "a:{x}:b:", "*"];
        for prefix in ["a:", "b:", "", "sh}op:"] {
            for name in hostile {
                let keys = LockKeys::new(prefix, name);
                let fair = FairKeys::new(prefix, name);
                let sem = SemKeys::new(prefix, name);
                let fenced = FencedKeys::new(prefix, name);
                let helpers = [
                    ("unlock", keys.channel.clone()),
                    ("release", keys.memo("c:1", 7)),
                    ("release", keys.marker("c:1", 7)),
                    ("fence", keys.fence.clone()),
                    ("rwwait", keys.waiting_writers()),
                    ("fair", fair.queue),
                    ("fair", format!("{}c:1", fair.wake_prefix)),
                    ("sem", sem.grants),
                    ("semcap", sem.capacity),
                    ("fenced", fenced.fence),
                    ("fencedop", format!("{}c:1:7", fenced.op_prefix)),
                    ("client", client_key(prefix, name)),
                ];
                for (kind, helper) in helpers {
                    let start = format!("dlock:{kind}:{prefix}{{");
                    assert!(
                        helper.starts_with(&start),
                        "{helper} for {prefix:?} {name:?}"
                    );
                    assert_eq!(helper.find('{'), Some(start.len() - 1), "{helper}");
                }
            }
        }
    }

    #[test]
    fn a_prefix_with_an_opening_brace_is_refused() {
        for prefix in ["{shop}:", "a{", "{}"] {
            let error = check_prefix(prefix).unwrap_err().to_string();
            assert!(error.contains("must not contain `{`"), "{error}");
        }
        for prefix in ["", "shop:", "sh}op:", "ключ:"] {
            check_prefix(prefix).unwrap();
        }
    }

    #[test]
    fn every_slot_has_an_anchor() {
        let table = anchor_table();
        for (slot, anchor) in table.iter().enumerate() {
            assert_eq!(slot_of(anchor.as_bytes()), slot);
        }
    }
}
