//! The README's axum handler, compiled from the README's own text (`build.rs` copies the
//! block) and served through a `Router` with the global client: a buy with the lock free
//! sells, one while another client holds the lock is a 409 after the handler's 2 s wait,
//! one while Redis does not answer a 503, and any other failure a 500, as the README's
//! comment promises.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use axum::routing::post;
use axum::Router;
use dlock::LockClient;
use dlock_tests::RedisServer;
use tower::ServiceExt;

include!(concat!(env!("OUT_DIR"), "/readme_axum.rs"));

/// The shop the README's handler takes as its state.
#[derive(Clone)]
struct Shop {
    stock: Arc<AtomicU32>,
}

impl Shop {
    async fn sell_one(&self, _id: u64) -> (StatusCode, &'static str) {
        let sold = self
            .stock
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        match sold {
            Ok(_) => (StatusCode::OK, "sold"),
            Err(_) => (StatusCode::GONE, "sold out"),
        }
    }
}

/// `POST /buy/7` on `app`: the status, the body and how long it took.
async fn buy_seven(app: Router) -> (StatusCode, String, Duration) {
    let started = Instant::now();
    let request = Request::post("/buy/7").body(Body::empty()).unwrap();
    let response = app.oneshot(request).await.unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1024)
        .await
        .unwrap();
    (
        status,
        String::from_utf8(body.to_vec()).unwrap(),
        started.elapsed(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_handler_sells_when_free_and_answers_409_when_busy_503_when_redis_is_down() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .command_timeout(Duration::from_millis(500))
        .connect(&server.url())
        .await
        .unwrap();
    assert!(
        dlock::set_global(client).is_ok(),
        "the only global client of this test binary"
    );
    let shop = Shop {
        stock: Arc::new(AtomicU32::new(5)),
    };
    let app = Router::new()
        .route("/buy/{id}", post(buy))
        .with_state(shop.clone());

    let (status, body, _) = buy_seven(app.clone()).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "sold"));
    assert_eq!(shop.stock.load(Ordering::SeqCst), 4);

    let other = LockClient::connect(&server.url()).await.unwrap();
    let held = other.lock("goods:7").lock().await.unwrap();
    let (status, body, took) = buy_seven(app.clone()).await;
    held.unlock().await.unwrap();
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.contains("goods:7"), "the 409 names the lock: {body}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(5),
        "the busy lock was waited for 2 s, as `wait` says: {took:?}"
    );
    assert_eq!(
        shop.stock.load(Ordering::SeqCst),
        4,
        "nothing sold while busy"
    );

    server.pause();
    let (status, body, took) = buy_seven(app).await;
    server.resume();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        took < Duration::from_secs(5),
        "Redis down answered within the wait and a command timeout: {took:?}"
    );
    assert_eq!(shop.stock.load(Ordering::SeqCst), 4, "nothing sold");
}

#[test]
fn the_readme_handler_answers_500_for_other_failures() {
    let response = lock_failed(LockError::NotHeld {
        name: "goods:7".to_owned(),
    });
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
}
