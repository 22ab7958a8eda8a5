//! The rest of the lock family: the fair lock, the read-write lock, the semaphore, the
//! multi-lock and RedLock, each on one server, across processes and in a cluster.
//!
//! Each module is one subject; run one with `cargo test -p dlock-tests --test family <module>::`.

mod fair_cancel;
mod fair_cluster;
mod fair_dead_waiter;
mod fair_fifo;
mod fair_script;
mod fair_waiting;
mod multi_cluster;
mod multi_processes;
mod multi_semantics;
mod redlock_overlap;
mod redlock_quorum;
mod redlock_startup;
mod rw_cluster;
mod rw_processes;
mod rw_semantics;
mod rw_waiting;
mod semaphore_cancel;
mod semaphore_cluster;
mod semaphore_processes;
mod semaphore_semantics;
