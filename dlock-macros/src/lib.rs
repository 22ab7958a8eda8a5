//! The `#[distributed_lock]` attribute of dlock. Use it through `dlock_core`, which
//! re-exports it; the documentation with examples lives there
//! (`dlock_core::distributed_lock`).

mod args;
mod expand;
mod key;

use proc_macro::TokenStream;

/// Runs an async function's body while holding a distributed lock. See
/// `dlock_core::distributed_lock` for the options and examples.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::distributed_lock(args.into(), item.into()).into()
}
