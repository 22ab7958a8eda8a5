//! The fault matrix: every primitive under every fault of docs/RELIABILITY.md that
//! applies to it, each cell asserting what the primitive promises under that fault, with
//! a control that shows the oracle can fire. `CELLS` lists every cell and the test that
//! fills it (or why none applies); `the_reliability_table_lists_every_cell` keeps the
//! table in docs/RELIABILITY.md in step with it.

mod replicated;
mod single;
mod support;

use std::time::Duration;

use dlock_tests::primitive::Primitive;
use dlock_tests::RedisServer;

use support::{builder, connect, hold, name, Rival};

/// The control of every wake-up oracle: a lock freed behind dlock's back (its keys
/// deleted, no release message) wakes no rival within a second — so a rival woken within
/// `WAKE_LIMIT` in a cell was woken by the release, not by luck or a timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_a_release_without_its_message_wakes_nobody() {
    let server = RedisServer::start();
    let holders = connect(builder(), &server.url()).await;
    let rivals = connect(builder(), &server.url()).await;
    let mut admin = server.connection();
    let mut cells = Vec::new();
    for primitive in Primitive::ALL {
        let name = name("control", primitive);
        let held = hold(&holders, primitive, &name, None).await;
        let rival = Rival::spawn(&rivals, primitive, &name, Duration::from_secs(20));
        cells.push((primitive, name, held, rival));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (primitive, name, _, _) in &cells {
        let _: u64 = redis::cmd("DEL")
            .arg(primitive.keys(&holders, name))
            .query(&mut admin)
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (primitive, _, held, rival) in cells {
        assert!(
            !rival.is_finished(),
            "{primitive}: a rival was woken without a release message"
        );
        drop(rival);
        drop(held);
    }
}
