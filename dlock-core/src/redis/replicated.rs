//! Acquisitions and renewals that count only once replicas confirmed them
//! (`replica_acks`): the script and `WAIT` in one pipeline, shared by every primitive
//! that honours it and by the watchdog.

use std::time::Duration;

use redis::FromRedisValue;

use super::{Backend, CallError};
use crate::scripts::ScriptCall;

impl Backend {
    /// Runs `call` (an acquire or renew script) followed by `WAIT replicas within` in one
    /// pipeline, so both run on the same connection and `WAIT` covers the script's writes
    /// (the hold, its fencing token, its new expiry). The connection is one of its own:
    /// `WAIT` blocks it, and must not delay the client's other commands.
    ///
    /// A reply that `granted` something, confirmed by fewer than `replicas` replicas, is
    /// [`CallError::NotReplicated`]: what the script wrote stays, so the caller's retry
    /// finds it (acquire scripts are idempotent) or its give-up path releases it.
    pub(crate) async fn invoke_replicated<T: FromRedisValue>(
        &self,
        name: &str,
        call: &ScriptCall,
        (replicas, within): (u32, Duration),
        granted: impl FnOnce(&T) -> bool,
    ) -> Result<T, CallError> {
        let wait_ms = u64::try_from(within.as_millis()).unwrap_or(u64::MAX);
        let mut pipeline = redis::pipe();
        pipeline
            .add_command(self.script_cmd(call))
            .cmd("WAIT")
            .arg(replicas)
            .arg(wait_ms);
        let (reply, acked): (T, u64) = self.query_blocking(&pipeline).await?;
        if granted(&reply) && acked < u64::from(replicas) {
            tracing::warn!(lock = %name, acked, wanted = replicas, "dlock: not confirmed by enough replicas");
            return Err(CallError::NotReplicated {
                acked,
                wanted: replicas,
                within,
            });
        }
        Ok(reply)
    }
}
