//! Names: what a lock name and a key prefix may be, cluster slot maths, and the
//! convention every primitive's Redis names follow (each primitive names its own keys in
//! its folder: `lock/keys.rs`, `fair/keys.rs`, `semaphore/keys.rs`, `fenced/keys.rs`,
//! `client/`; docs/LAYOUT.md lists them all).
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
    // The least-privilege rule gives an application `~<prefix>*`: from a prefix that starts
    // like dlock's own names (`d`, `dlock`, `dlock:`...) or inside them (`dlock:unlock:`),
    // that pattern would reach every application's waiter registries, fencing counters,
    // memos and descriptions.
    if !prefix.is_empty()
        && (DLOCK_NAMESPACE.starts_with(prefix) || prefix.starts_with(DLOCK_NAMESPACE))
    {
        return Err(LockError::invalid_name(
            "key prefix",
            prefix,
            format!(
                "a key prefix must not start like dlock's own names (`{DLOCK_NAMESPACE}...`), nor be a start of them: an ACL pattern `{prefix}*` would match every application's dlock names; choose a prefix of the application's own, e.g. `shop:`"
            ),
        ));
    }
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

/// What every name dlock adds starts with.
const DLOCK_NAMESPACE: &str = "dlock:";

/// `<key prefix>{<tag>}`: what every helper name of the key `key` (prefix included)
/// starts with after `dlock:<kind>:`, the tag putting it in `key`'s cluster slot.
pub(crate) fn helper_scope(prefix: &str, key: &str) -> String {
    format!("{prefix}{{{}}}", slot_anchor(key.as_bytes()))
}

/// Whether `field` is an owner field: `<client id>:<number>`.
pub(crate) fn is_owner(field: &str) -> bool {
    field.split_once(':').is_some_and(|(client, n)| {
        !client.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    })
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

/// A hash tag body that hashes to the same cluster slot as `key`.
pub(crate) fn slot_anchor(key: &[u8]) -> String {
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
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }

    #[test]
    fn a_prefix_that_reaches_dlocks_own_names_is_refused() {
        for prefix in [
            "d",
            "dl",
            "dlock",
            "dlock:",
            "dlock:unlock:",
            "dlock:fence:app:",
        ] {
            let error = check_prefix(prefix).unwrap_err().to_string();
            assert!(
                error.contains("must not start like dlock's own names"),
                "{error}"
            );
        }
        for prefix in ["", "shop:", "do", "dlocks:", "app:dlock:", "Dlock:"] {
            check_prefix(prefix).unwrap();
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
