//! The reentrant lock's contract on one server: exclusion, reentrancy, leases and the
//! watchdog, release, fencing tokens, bad input, the scripts' bounds and inputs, the API's
//! promises, statistics, TLS and shutdown.
//!
//! Each module is one subject; run one with `cargo test -p dlock-tests --test core <module>::`.

mod api_contracts;
mod architecture;
mod bad_input;
mod client_drop;
mod client_name;
mod command_budget;
mod default_wait;
mod exclusion;
mod fence_pause;
mod fence_sql;
mod fence_tokens;
mod fenced;
mod holds;
mod layout_version;
mod lease;
mod lost_after_release;
mod overlap;
mod prefix_isolation;
mod proptest_holds;
mod proptest_inspect;
mod reentrancy;
mod release;
mod script_bounds;
mod script_inputs;
mod shutdown;
mod stats;
mod tls;
mod unlock_contract;
mod watchdog;
mod wrong_type;
