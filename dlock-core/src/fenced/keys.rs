//! The fenced writes' Redis names for one application key.

use crate::names::helper_scope;

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
        let scope = helper_scope(prefix, key);
        FencedKeys {
            fence: format!("dlock:fenced:{scope}:{key}"),
            op_prefix: format!("dlock:fencedop:{scope}:"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::slot_of;

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
}
