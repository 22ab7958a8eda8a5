//! The version of the Redis layout: how dlock names its keys and what it keeps in them.
//! Recorded under each key prefix by the first client that connects with it; every later
//! client of that prefix checks that it lays out locks the same way, and refuses to
//! start if not (fail closed), so that two versions never lock the same names and miss
//! each other's holds during a rolling deploy.

use crate::error::{LockError, Result};
use crate::redis::Backend;
use crate::scripts::catalog::client::client_scripts;

/// The layout this code reads and writes. Bump it with every change to a key's name, a
/// field or a value format, a channel or a message (`docs/LAYOUT.md` describes version 1).
pub(crate) const LAYOUT_VERSION: u32 = 1;

/// Records `version` for `key_prefix` if no version is recorded yet, else checks that the
/// recorded one is `version`. A recorded version is read with `GET` first, so that a
/// read-only user (an operator with read-only key rights, which a script call is refused)
/// connects to a prefix whose applications have recorded theirs; the script records one
/// atomically when none is.
pub(crate) async fn check(backend: &Backend, key_prefix: &str, version: u32) -> Result<()> {
    let key = layout_key(key_prefix);
    let read: Option<String> = backend
        .query(redis::cmd("GET").arg(&key))
        .await
        .map_err(|e| e.into_lock_error(&key, "read the layout version kept in"))?;
    let recorded = match read {
        Some(recorded) => recorded,
        None => {
            let mut call = client_scripts().layout.prepare_invoke();
            call.key(&key).arg(version);
            backend
                .invoke(&call)
                .await
                .map_err(|e| e.into_lock_error(&key, "record the layout version in"))?
        }
    };
    if recorded == version.to_string() {
        return Ok(());
    }
    Err(LockError::LayoutMismatch {
        address: backend.shown().to_owned(),
        key_prefix: key_prefix.to_owned(),
        key,
        ours: version,
        recorded,
    })
}

/// Where the layout version of the clients of `prefix` is recorded
/// (`client::layout`): `dlock:layout:<key prefix>`, nothing after it, so that the ACL
/// pattern for it can be the exact name.
pub(crate) fn layout_key(prefix: &str) -> String {
    format!("dlock:layout:{prefix}")
}
