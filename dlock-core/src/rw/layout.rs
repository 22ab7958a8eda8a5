//! The read-write lock hash's layout (written by `rw/scripts/common.lua`), parsed from
//! `HGETALL` for inspection (`inspect`), and its mode.

use std::collections::HashMap;

use crate::names::is_owner;

/// The mode of a read-write lock, in [`ReadWriteInfo::mode`](crate::inspect::ReadWriteInfo::mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReadWriteMode {
    /// Held by readers (a writer may be among them after a downgrade, as a reader).
    Read,
    /// Held by one writer.
    Write,
}

impl ReadWriteMode {
    /// `read` or `write`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadWriteMode::Read => "read",
            ReadWriteMode::Write => "write",
        }
    }
}

/// The read-write lock's mode field.
pub(crate) const RW_MODE: &str = "mode";

/// A read-write lock hash's fields (layout in `rw/scripts/common.lua`).
pub(crate) struct RwFields {
    pub(crate) mode: ReadWriteMode,
    /// Owner → (read holds, write holds, deadline in server ms, fence).
    pub(crate) owners: HashMap<String, RwOwner>,
}

#[derive(Default)]
pub(crate) struct RwOwner {
    pub(crate) reads: u64,
    pub(crate) writes: u64,
    pub(crate) deadline: Option<u64>,
    pub(crate) fence: Option<u64>,
}

impl RwFields {
    /// `None` when a field fits none of the read-write layout's, a number does not parse,
    /// or an owner holds nothing or has no deadline.
    pub(crate) fn parse(hash: HashMap<String, String>) -> Option<RwFields> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_fields_are_sorted_into_owners() {
        let hash = HashMap::from([
            ("mode".to_owned(), "write".to_owned()),
            ("c1:1".to_owned(), "1".to_owned()),
            ("c1:1:w".to_owned(), "2".to_owned()),
            ("c1:1:t".to_owned(), "1000".to_owned()),
            ("c1:1:f".to_owned(), "9".to_owned()),
        ]);
        let Some(rw) = RwFields::parse(hash) else {
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
            assert!(RwFields::parse(hash).is_none(), "{foreign:?}");
        }
    }
}
