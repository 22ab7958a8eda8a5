//! The naming convention, checked over every primitive's names at once: each helper
//! name starts with its kind and the key prefix, then its own hash tag, and lands in the
//! slot of the key it serves (see `names` and docs/LAYOUT.md).

use crate::client::registration::client_key;
use crate::fair::keys::FairKeys;
use crate::fenced::keys::FencedKeys;
use crate::lock::keys::LockKeys;
use crate::names::slot_of;
use crate::semaphore::keys::SemKeys;

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
                keys.line_report("client"),
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
                ("fence", keys.fence.to_string()),
                ("rwwait", keys.waiting_writers()),
                ("unlock", keys.line_report("c")),
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
