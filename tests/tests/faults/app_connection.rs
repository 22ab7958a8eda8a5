//! The README's advice for the application's own Redis connection: opened as a
//! `redis::aio::ConnectionManager`, it answers again once a restarted Redis is back,
//! where a plain multiplexed connection stays broken (the control, what a newcomer's
//! service met); dlock's own client needs nothing of the kind.

use std::time::{Duration, Instant};

use dlock::LockClient;
use dlock_tests::RedisServer;
use redis::AsyncCommands;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_applications_connection_manager_survives_a_redis_restart() {
    let mut server = RedisServer::start();
    let redis_client = redis::Client::open(server.url()).unwrap();
    let mut manager = redis::aio::ConnectionManager::new(redis_client.clone())
        .await
        .unwrap();
    let mut plain = redis_client
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let locks = LockClient::connect(&server.url()).await.unwrap();
    let () = manager.set("stock:1", 10).await.unwrap();
    let () = plain.set("stock:2", 10).await.unwrap();

    server.restart();

    // The manager reconnects: a call may fail while it does, then they answer.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let set: redis::RedisResult<()> = manager.set("stock:1", 9).await;
        if set.is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the manager never answered: {set:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // dlock's client reconnects by itself.
    locks
        .lock("goods:1")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    // The control: the plain connection stays broken, however often it is asked.
    for _ in 0..5 {
        let set: redis::RedisResult<()> = plain.set("stock:2", 9).await;
        assert!(
            set.is_err(),
            "the plain connection answered after the restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
