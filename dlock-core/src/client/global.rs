//! The process-wide client used by `#[distributed_lock]` functions without `client = ...`.

use std::sync::OnceLock;

use crate::client::LockClient;
use crate::error::{LockError, Result};

static GLOBAL: OnceLock<LockClient> = OnceLock::new();

/// Registers `client` as the process-wide client of `#[distributed_lock]` functions that
/// do not name one with `client = ...`. Call it once at start-up.
///
/// # Errors
///
/// Gives `client` back when a client was registered before; the first one stays.
pub fn set_global(client: LockClient) -> std::result::Result<(), LockClient> {
    GLOBAL.set(client)
}

/// The client registered with [`set_global`].
///
/// # Errors
///
/// [`LockError::NoClient`] when none was registered.
pub fn global_client() -> Result<LockClient> {
    GLOBAL.get().cloned().ok_or(LockError::NoClient)
}
