//! One RedLock server: its client once connected. A RedLock is for a minority of servers
//! being down, start-up included: a server that does not answer when the RedLock is
//! created is connected in the background, retried with back-off, and counted in rounds
//! from the moment it answers. Until then every round counts it as failed.

use std::sync::{OnceLock, Weak};
use std::time::Duration;

use crate::client::{LockClient, LockClientBuilder};
use crate::redact::redact;

/// The first and the longest pause between two connection attempts to a server that was
/// down when the RedLock was created.
const RECONNECT_BACK_OFF: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(5));

pub(super) struct Server {
    /// `host:port`, for errors and `Debug`.
    address: String,
    /// The key prefix of the server's client (known before it connects).
    key_prefix: String,
    client: OnceLock<LockClient>,
}

impl Server {
    /// A server whose client is connected.
    pub(super) fn connected(client: LockClient, address: String) -> Server {
        let server = Server {
            address,
            key_prefix: client.key_prefix().to_owned(),
            client: OnceLock::new(),
        };
        let _ = server.client.set(client);
        server
    }

    /// A server not connected yet: [`connect_in_background`] connects it.
    pub(super) fn pending(address: String, key_prefix: String) -> Server {
        Server {
            address,
            key_prefix,
            client: OnceLock::new(),
        }
    }

    /// Its client, once connected.
    pub(super) fn client(&self) -> Option<&LockClient> {
        self.client.get()
    }

    pub(super) fn address(&self) -> &str {
        &self.address
    }

    pub(super) fn key_prefix(&self) -> &str {
        &self.key_prefix
    }
}

/// Connects the server `index` of the RedLock `owner` with `builder` to `url`, retrying
/// with back-off until it answers or the RedLock is dropped.
pub(super) fn connect_in_background(
    owner: Weak<super::Shared>,
    index: usize,
    builder: LockClientBuilder,
    url: String,
) {
    tokio::spawn(async move {
        let (first, longest) = RECONNECT_BACK_OFF;
        let mut pause = first;
        let mut attempt: u32 = 1;
        loop {
            tokio::time::sleep(pause).await;
            if owner.strong_count() == 0 {
                return;
            }
            let outcome = builder.clone().connect(&url).await;
            let Some(owner) = owner.upgrade() else {
                return;
            };
            let server = &owner.servers[index];
            match outcome {
                Ok(client) => {
                    tracing::info!(server = %redact(server.address()), attempt, "dlock: RedLock server connected; it counts from the next round");
                    let _ = server.client.set(client);
                    return;
                }
                // Unreachable still: expected while it is down.
                Err(error @ crate::error::LockError::Connect { .. }) => {
                    tracing::debug!(server = %redact(server.address()), attempt, %error, "dlock: RedLock server still unreachable; retrying");
                }
                // It answers but refuses this client (credentials, library, layout): an
                // operator must act; it keeps being retried.
                Err(error) => {
                    tracing::warn!(server = %redact(server.address()), attempt, %error, "dlock: RedLock server answers but refuses the connection; retrying");
                }
            }
            drop(owner);
            attempt = attempt.saturating_add(1);
            pause = (pause * 2).min(longest);
        }
    });
}
