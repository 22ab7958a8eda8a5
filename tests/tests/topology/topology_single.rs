//! Every lock operation through a client built from `examples/config/single.toml`.

use dlock_tests::topology as common;

use dlock_tests::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_mode_from_its_sample_file() {
    let server = RedisServer::start();
    let ports = [(6379, server.port())];
    let config = common::sample("single", &ports, "30s");
    let fast = common::sample("single", &ports, "1s");
    let counter = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    common::lock_suite(&config, &fast, counter, "suite:value").await;
}
