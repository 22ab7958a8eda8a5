//! What every primitive shares: holds and their loss, the local line, call-chain
//! ownership, unlock notifications, the wait between tries, renewal, release, retries,
//! statistics, spans and exported metrics. Each primitive (the reentrant lock in `lock/`)
//! builds on these and plugs its own scripts in: a release is a `release::ReleaseOp`, a
//! hold names its renew script, a try step hands its outcome to `wait::Waiter`, its
//! acquisition runs in `observe::acquisition`.

pub(crate) mod attempt;
pub(crate) mod held;
pub(crate) mod local;
pub(crate) mod metrics;
pub(crate) mod observe;
pub(crate) mod owner;
pub(crate) mod pubsub;
pub(crate) mod release;
pub(crate) mod retry;
pub(crate) mod wait;
pub(crate) mod watchdog;
