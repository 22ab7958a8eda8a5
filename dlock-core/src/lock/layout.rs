//! The lock hash's layout, parsed from `HGETALL` for inspection (`inspect`): holds,
//! fencing tokens, a grant's mark, `min_hold` and the fair lock's marker (the fair lock
//! keeps the lock's layout). A field the layout has not makes the parse fail: never a
//! guess. docs/LAYOUT.md describes every field.

use std::collections::HashMap;

use crate::names::is_owner;

/// The lock hash's fields, sorted into their meanings.
#[derive(Default)]
pub(crate) struct Fields {
    pub(crate) holds: Vec<(String, u64)>,
    pub(crate) fences: HashMap<String, u64>,
    pub(crate) min_hold: Option<String>,
    /// The fair lock's marker is there: the name is held as a fair lock.
    pub(crate) fair: bool,
}

/// The hash field beside a hold that names the owner a release gave the lock to, until
/// the owner extends or re-takes it: the hold says all an inspection needs.
const GRANT_MARK: &str = "!next";
/// The hash field that marks a fair lock's hash.
const FAIR: &str = "!fair";
/// The hash field naming the finished holder whose `min_hold` keeps the lock taken.
const MIN_HOLD: &str = "!held";

impl Fields {
    /// Sorts `hash` (from `HGETALL`) into holds, fences and marks; `None` when a field
    /// fits none of them (not a lock of this layout).
    pub(crate) fn parse(hash: HashMap<String, String>) -> Option<Fields> {
        let mut fields = Fields::default();
        for (field, value) in hash {
            if field == GRANT_MARK {
                // Beside the hold it marks: the hold says all an inspection needs.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_fields_are_sorted_into_holds_fences_and_marks() {
        let hash = HashMap::from([
            ("c1:1".to_owned(), "2".to_owned()),
            ("c1:1:f".to_owned(), "17".to_owned()),
            ("!next".to_owned(), "c1:1".to_owned()),
        ]);
        let fields = Fields::parse(hash).unwrap();
        let held = HashMap::from([("!held".to_owned(), "c3:4".to_owned())]);
        assert_eq!(
            Fields::parse(held).unwrap().min_hold.as_deref(),
            Some("c3:4")
        );
        assert_eq!(fields.holds, [("c1:1".to_owned(), 2)]);
        assert_eq!(fields.fences.get("c1:1"), Some(&17));
        // A grant's mark beside the hold it marks: the hold is what counts.
        let granted = HashMap::from([
            ("c2:5".to_owned(), "1".to_owned()),
            ("!next".to_owned(), "c2:5".to_owned()),
        ]);
        let granted = Fields::parse(granted).unwrap();
        assert_eq!(granted.holds, [("c2:5".to_owned(), 1)]);
        let kept = HashMap::from([("!held".to_owned(), "c2:5".to_owned())]);
        assert_eq!(
            Fields::parse(kept).unwrap().min_hold.as_deref(),
            Some("c2:5")
        );
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
}
