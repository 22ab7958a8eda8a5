//! What every primitive shares: holds and their loss, the local line, call-chain
//! ownership, unlock notifications, renewal, release, retries and statistics. Each
//! primitive (the reentrant lock in `lock/`) builds on these. Renewal and release still
//! run the reentrant lock's scripts and key layout (`names::LockKeys`).

pub(crate) mod held;
pub(crate) mod local;
pub(crate) mod metrics;
pub(crate) mod owner;
pub(crate) mod pubsub;
pub(crate) mod release;
pub(crate) mod retry;
pub(crate) mod watchdog;
