//! The lock on every topology a configuration file can choose (single, master-slave,
//! Sentinel, cluster), through the sample files in `examples/config/`, and its routing.
//!
//! Each module is one subject; run one with `cargo test -p dlock-tests --test topology <module>::`.

mod cluster_moved_slot_push;
mod master_slave_routing;
mod topology_cluster;
mod topology_master_slave;
mod topology_sentinel;
mod topology_single;
