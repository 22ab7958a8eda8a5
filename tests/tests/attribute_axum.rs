//! An axum handler carrying the attribute, called through a real `Router`.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use dlock_core::{distributed_lock, LockClient, LockError};
use dlock_tests::RedisServer;
use redis::AsyncCommands;
use tower::ServiceExt;

#[derive(Clone)]
struct AppState {
    locks: LockClient,
    redis: redis::aio::MultiplexedConnection,
}

struct Busy(LockError);

impl IntoResponse for Busy {
    fn into_response(self) -> Response {
        (StatusCode::CONFLICT, self.0.to_string()).into_response()
    }
}

impl From<LockError> for Busy {
    fn from(error: LockError) -> Self {
        Busy(error)
    }
}

/// Buys one item: a read-modify-write of the stock that only the lock protects.
/// `<id>` names the binding inside the `Path(id)` pattern.
#[distributed_lock(key = "goods:<id>", wait = "2s", client = state.locks)]
async fn buy(State(state): State<AppState>, Path(id): Path<u64>) -> Result<String, Busy> {
    let mut redis = state.redis.clone();
    let stock: i64 = redis.get(format!("stock:{id}")).await.unwrap_or(0);
    if stock <= 0 {
        return Ok("sold out".into());
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    let () = redis.set(format!("stock:{id}"), stock - 1).await.unwrap();
    Ok("sold".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotated_handler_serves_through_a_router_without_overselling() {
    let server = RedisServer::start();
    let state = AppState {
        locks: LockClient::connect(&server.url()).await.unwrap(),
        redis: server
            .client()
            .get_multiplexed_async_connection()
            .await
            .unwrap(),
    };
    let mut redis = state.redis.clone();
    let () = redis.set("stock:42", 5).await.unwrap();
    let app = Router::new()
        .route("/goods/{id}/buy", post(buy))
        .with_state(state);

    let mut calls = Vec::new();
    for _ in 0..12 {
        let app = app.clone();
        calls.push(tokio::spawn(async move {
            let request = Request::post("/goods/42/buy").body(Body::empty()).unwrap();
            let response = app.oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            let body = axum::body::to_bytes(response.into_body(), 1024)
                .await
                .unwrap();
            String::from_utf8(body.to_vec()).unwrap()
        }));
    }
    let mut sold = 0;
    for call in calls {
        if call.await.unwrap() == "sold" {
            sold += 1;
        }
    }
    let stock: i64 = redis.get("stock:42").await.unwrap();
    assert_eq!(
        (sold, stock),
        (5, 0),
        "exactly the stock was sold, never more"
    );
}
