//! What every primitive shares: holds and their loss, the local line, call-chain
//! ownership, unlock notifications, renewal, release, background tasks, retries and
//! statistics. Nothing here knows a particular primitive; each primitive (the reentrant
//! lock in `lock/`) builds on these.

pub(crate) mod background;
pub(crate) mod held;
pub(crate) mod local;
pub(crate) mod metrics;
pub(crate) mod owner;
pub(crate) mod pubsub;
pub(crate) mod release;
pub(crate) mod retry;
pub(crate) mod watchdog;
