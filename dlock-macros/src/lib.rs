//! The `#[distributed_lock]` attribute of dlock: an implementation crate. Use it through
//! the [`dlock`](https://docs.rs/dlock) crate, which re-exports it
//! (`dlock::distributed_lock`) and documents its options with examples; the code it
//! generates calls `::dlock`.

#![warn(missing_debug_implementations, unreachable_pub)]
mod args;
mod expand;
mod key;

use proc_macro::TokenStream;

/// Runs an async function's body while holding a distributed lock. See
/// `dlock::distributed_lock` for the options and examples.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::distributed_lock(args.into(), item.into()).into()
}
