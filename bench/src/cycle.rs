//! What S1's loop runs: one lock + unlock of some implementation.

use std::future::Future;

use crate::stats::Result;

/// One lock + unlock of some implementation.
pub trait Cycle: Send + 'static {
    /// Takes and releases the task's lock once.
    fn cycle(&mut self) -> impl Future<Output = Result<()>> + Send;
}
