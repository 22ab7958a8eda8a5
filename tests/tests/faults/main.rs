//! Faults: connections killed, a holder killed, Redis paused or restarted, failovers that
//! lose writes, replica acknowledgements, and the soak (long variants opt-in by variable).
//!
//! Each module is one subject; run one with `cargo test -p dlock-tests --test faults <module>::`.

mod app_connection;
mod failover_lost_updates;
mod failover_release_replay;
mod fault_connections_killed;
mod fault_failover_lock_loss;
mod fault_holder_killed;
mod fault_long_hold_under_load;
mod fault_redis_paused;
mod fault_redis_restarted;
mod redis_down;
mod replica_acks;
mod soak;
