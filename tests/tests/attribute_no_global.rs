//! Without `client = ...` and with no client registered, an annotated call fails with a
//! clear error instead of panicking, and its body does not run.

use std::sync::atomic::{AtomicBool, Ordering};

use dlock::{distributed_lock, LockError};

static RAN: AtomicBool = AtomicBool::new(false);

#[distributed_lock(key = "orphan:<id>")]
async fn orphan(id: u64) -> Result<(), LockError> {
    RAN.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn a_missing_global_client_is_an_error_not_a_panic() {
    let err = orphan(1).await.unwrap_err();
    assert!(
        matches!(
            err,
            LockError::NoClient {
                function: Some("attribute_no_global::orphan")
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("dlock::set_global"), "{err}");
    assert!(
        err.to_string()
            .contains("(needed by `attribute_no_global::orphan`)"),
        "the error names the function that needed the client: {err}"
    );
    assert!(
        !RAN.load(Ordering::SeqCst),
        "the body must not run without the lock"
    );
}

/// The start-up check the docs recommend: `global_client()` at boot fails when nothing was
/// registered, before any annotated function is called (`attribute_global.rs` shows it
/// passing after `set_global`).
#[test]
fn the_start_up_check_finds_the_missing_client() {
    let err = dlock::global_client().unwrap_err();
    assert!(
        matches!(err, LockError::NoClient { function: None }),
        "{err:?}"
    );
    assert!(err.to_string().contains("dlock::set_global"), "{err}");
}
