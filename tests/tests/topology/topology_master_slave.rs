//! Every lock operation through a client built from `examples/config/master_slave.toml`;
//! the locks live on the master and reach the replicas by replication.

use dlock_tests::topology as common;

use dlock_tests::RedisReplicaSet;
use redis::Commands;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_slave_mode_from_its_sample_file() {
    let set = RedisReplicaSet::start(2);
    let ports = [
        (6379, set.master.port()),
        (6380, set.replicas[0].port()),
        (6381, set.replicas[1].port()),
    ];
    let config = common::sample("master_slave", &ports, "30s");
    let fast = common::sample("master_slave", &ports, "1s");
    let counter = set
        .master
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    common::lock_suite(&config, &fast, counter, "suite:value").await;

    // Writes went to the master: a held lock shows up there and, replicated, on replicas.
    let client = config.build().await.unwrap();
    let guard = client.lock("replicated").lock().await.unwrap();
    set.wait_replicated();
    for server in std::iter::once(&set.master).chain(&set.replicas) {
        let exists: bool = server.connection().exists("shop:replicated").unwrap();
        assert!(exists, "lock missing on port {}", server.port());
    }
    guard.unlock().await.unwrap();
}
