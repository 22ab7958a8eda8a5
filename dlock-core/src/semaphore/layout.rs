//! The semaphore grants hash's layout (written by `semaphore/scripts/common.lua`), parsed
//! from `HGETALL` for inspection (`inspect`).

use std::collections::HashMap;

use crate::names::is_owner;

/// A semaphore's grants hash (layout in `semaphore/scripts/common.lua`): grant → (permits,
/// deadline in server ms); `None` when a field fits neither or a grant lacks one of them.
pub(crate) fn parse_grants(hash: HashMap<String, String>) -> Option<Vec<(String, u64, u64)>> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
