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
/// Annotated functions look the client up when they are called, so a service that forgot
/// [`set_global`] would learn it from its first request. Calling this once at start-up,
/// after registering, turns that into a boot failure:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> dlock::Result<()> {
/// # let server = dlock_tests::RedisServer::start();
/// # let redis_url = server.url();
/// use dlock::LockClient;
///
/// dlock::set_global(LockClient::connect(&redis_url).await?).ok();
/// // Start-up check: fails here, not at the first request, when nothing was registered.
/// dlock::global_client()?;
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// [`LockError::NoClient`] when none was registered.
pub fn global_client() -> Result<LockClient> {
    GLOBAL
        .get()
        .cloned()
        .ok_or(LockError::NoClient { function: None })
}

/// [`global_client`] for the annotated function `function` (`module::name`), which the
/// error then names.
pub fn global_client_for(function: &'static str) -> Result<LockClient> {
    GLOBAL.get().cloned().ok_or(LockError::NoClient {
        function: Some(function),
    })
}
