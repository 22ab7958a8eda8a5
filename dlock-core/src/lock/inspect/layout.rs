//! The layouts a lock name's hash can have, parsed from `HGETALL` into their meanings:
//! the lock's (holds, fences, reservation, `min_hold`), the read-write lock's and the
//! semaphore's grants. A field no layout has makes the parse fail: never a guess.

use std::collections::HashMap;
use std::time::Duration;

use super::ReadWriteMode;

/// The lock hash's fields, sorted into their meanings.
#[derive(Default)]
pub(crate) struct Fields {
    pub(super) holds: Vec<(String, u64)>,
    pub(super) fences: HashMap<String, u64>,
    pub(super) reserved_for: Option<String>,
    pub(super) min_hold: Option<String>,
    /// The fair lock's marker is there: the name is held as a fair lock.
    pub(super) fair: bool,
}

/// The hash field that reserves a free lock for one waiting owner.
const RESERVATION: &str = "!next";
/// The hash field that marks a fair lock's hash.
const FAIR: &str = "!fair";
/// The hash field naming the finished holder whose `min_hold` keeps the lock taken.
const MIN_HOLD: &str = "!held";
/// The read-write lock's mode field.
const RW_MODE: &str = "mode";

impl Fields {
    /// Sorts `hash` (from `HGETALL`) into holds, fences and the reservation; `None` when
    /// a field fits none of them (not a lock of this layout).
    pub(super) fn parse(hash: HashMap<String, String>) -> Option<Fields> {
        let mut fields = Fields::default();
        for (field, value) in hash {
            if field == RESERVATION {
                fields.reserved_for = Some(value);
            } else if field == MIN_HOLD {
                fields.min_hold = Some(value);
            } else if field == FAIR {
                fields.fair = true;
            } else if let Some(owner) = field.strip_suffix(":f").filter(|o| is_owner(o)) {
                fields.fences.insert(owner.to_owned(), value.parse().ok()?);
            } else if is_owner(&field) {
                fields.holds.push((field, value.parse().ok()?));
            } else {
                return None;
            }
        }
        fields.holds.sort();
        Some(fields)
    }
}

/// A read-write lock hash's fields (layout in `rw/scripts/common.lua`).
pub(crate) struct RwFields {
    pub(super) mode: ReadWriteMode,
    /// Owner → (read holds, write holds, deadline in server ms, fence).
    pub(super) owners: HashMap<String, RwOwner>,
}

#[derive(Default)]
pub(super) struct RwOwner {
    pub(super) reads: u64,
    pub(super) writes: u64,
    pub(super) deadline: Option<u64>,
    pub(super) fence: Option<u64>,
}

impl RwFields {
    /// `None` when a field fits none of the read-write layout's, a number does not parse,
    /// or an owner holds nothing or has no deadline.
    pub(super) fn parse(hash: HashMap<String, String>) -> Option<RwFields> {
        let mode = match hash.get(RW_MODE)?.as_str() {
            "read" => ReadWriteMode::Read,
            "write" => ReadWriteMode::Write,
            _ => return None,
        };
        let mut owners: HashMap<String, RwOwner> = HashMap::new();
        for (field, value) in hash {
            if field == RW_MODE {
                continue;
            }
            let number: u64 = value.parse().ok()?;
            let (owner, slot): (&str, fn(&mut RwOwner, u64)) = if is_owner(&field) {
                (&field, |o, n| o.reads = n)
            } else if let Some(owner) = field.strip_suffix(":w").filter(|o| is_owner(o)) {
                (owner, |o, n| o.writes = n)
            } else if let Some(owner) = field.strip_suffix(":t").filter(|o| is_owner(o)) {
                (owner, |o, n| o.deadline = Some(n))
            } else if let Some(owner) = field.strip_suffix(":f").filter(|o| is_owner(o)) {
                (owner, |o, n| o.fence = Some(n))
            } else {
                return None;
            };
            slot(owners.entry(owner.to_owned()).or_default(), number);
        }
        if owners.values().any(|o| o.deadline.is_none()) {
            return None;
        }
        Some(RwFields { mode, owners })
    }
}

/// A semaphore's grants hash (layout in `semaphore/scripts/common.lua`): grant → (permits,
/// deadline in server ms); `None` when a field fits neither or a grant lacks one of them.
pub(super) fn parse_grants(hash: HashMap<String, String>) -> Option<Vec<(String, u64, u64)>> {
    let mut permits: HashMap<String, u64> = HashMap::new();
    let mut deadlines: HashMap<String, u64> = HashMap::new();
    for (field, value) in hash {
        let number: u64 = value.parse().ok()?;
        if let Some(grant) = field.strip_suffix(":t").filter(|g| is_owner(g)) {
            deadlines.insert(grant.to_owned(), number);
        } else if is_owner(&field) {
            permits.insert(field, number);
        } else {
            return None;
        }
    }
    if permits.len() != deadlines.len() {
        return None;
    }
    let mut grants = permits
        .into_iter()
        .map(|(grant, n)| Some((deadlines.remove(&grant)?, grant, n)))
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .map(|(deadline, grant, n)| (grant, n, deadline))
        .collect::<Vec<_>>();
    grants.sort();
    Some(grants)
}

/// What the lock key's hash holds.
pub(crate) enum Layout {
    Lock(Fields),
    ReadWrite(RwFields),
}

impl Layout {
    /// The layout `hash` has; `None` when it fits neither (an empty hash is a free lock).
    pub(super) fn parse(hash: HashMap<String, String>) -> Option<Layout> {
        if hash.contains_key(RW_MODE) {
            RwFields::parse(hash).map(Layout::ReadWrite)
        } else {
            Fields::parse(hash).map(Layout::Lock)
        }
    }
}

/// Whether `field` is an owner field: `<client id>:<number>`.
pub(super) fn is_owner(field: &str) -> bool {
    field.split_once(':').is_some_and(|(client, n)| {
        !client.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    })
}

/// Time from server time `now` (ms) to `deadline` (ms), none when passed.
pub(super) fn until(deadline: u64, now: u64) -> Option<Duration> {
    deadline
        .checked_sub(now)
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_fields_are_sorted_into_holds_fences_and_the_reservation() {
        let hash = HashMap::from([
            ("c1:1".to_owned(), "2".to_owned()),
            ("c1:1:f".to_owned(), "17".to_owned()),
            ("!next".to_owned(), "c2".to_owned()),
        ]);
        let fields = Fields::parse(hash).unwrap();
        let held = HashMap::from([("!held".to_owned(), "c3:4".to_owned())]);
        assert_eq!(
            Fields::parse(held).unwrap().min_hold.as_deref(),
            Some("c3:4")
        );
        assert_eq!(fields.holds, [("c1:1".to_owned(), 2)]);
        assert_eq!(fields.fences.get("c1:1"), Some(&17));
        assert_eq!(fields.reserved_for.as_deref(), Some("c2"));
        for foreign in [
            ("mode", "read"),
            ("c1:1:w", "1"),
            ("c1:x", "1"),
            ("c1:1", "x"),
        ] {
            let hash = HashMap::from([(foreign.0.to_owned(), foreign.1.to_owned())]);
            assert!(Fields::parse(hash).is_none(), "{foreign:?}");
        }
    }

    #[test]
    fn read_write_fields_are_sorted_into_owners() {
        let hash = HashMap::from([
            ("mode".to_owned(), "write".to_owned()),
            ("c1:1".to_owned(), "1".to_owned()),
            ("c1:1:w".to_owned(), "2".to_owned()),
            ("c1:1:t".to_owned(), "1000".to_owned()),
            ("c1:1:f".to_owned(), "9".to_owned()),
        ]);
        let Some(Layout::ReadWrite(rw)) = Layout::parse(hash) else {
            panic!("not read as a read-write lock");
        };
        assert_eq!(rw.mode, ReadWriteMode::Write);
        let owner = &rw.owners["c1:1"];
        assert_eq!(
            (owner.reads, owner.writes, owner.deadline, owner.fence),
            (1, 2, Some(1000), Some(9))
        );
        for foreign in [
            vec![("mode", "read"), ("c1:1", "1")],
            vec![("mode", "both"), ("c1:1", "1"), ("c1:1:t", "5")],
            vec![("mode", "read"), ("c1:1", "1"), ("c1:1:t", "5"), ("x", "1")],
            vec![("mode", "read"), ("c1:1:t", "x")],
            vec![("mode", "read"), ("!next", "c2")],
        ] {
            let hash: HashMap<String, String> = foreign
                .iter()
                .map(|(f, v)| ((*f).to_owned(), (*v).to_owned()))
                .collect();
            assert!(Layout::parse(hash).is_none(), "{foreign:?}");
        }
    }

    #[test]
    fn semaphore_grants_pair_permits_with_deadlines() {
        let hash = HashMap::from([
            ("c1:2".to_owned(), "2".to_owned()),
            ("c1:2:t".to_owned(), "500".to_owned()),
            ("c2:1".to_owned(), "1".to_owned()),
            ("c2:1:t".to_owned(), "700".to_owned()),
        ]);
        assert_eq!(
            parse_grants(hash).unwrap(),
            [("c1:2".to_owned(), 2, 500), ("c2:1".to_owned(), 1, 700)]
        );
        for foreign in [
            vec![("c1:2", "2")],
            vec![("c1:2:t", "2")],
            vec![("c1:2", "2"), ("c1:3:t", "2")],
            vec![("c1:2", "x"), ("c1:2:t", "2")],
            vec![("mode", "read")],
        ] {
            let hash: HashMap<String, String> = foreign
                .iter()
                .map(|(f, v)| ((*f).to_owned(), (*v).to_owned()))
                .collect();
            assert!(parse_grants(hash).is_none(), "{foreign:?}");
        }
    }
}
