//! An axum handler carrying the attribute, called through a real `Router`.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use dlock::{distributed_lock, LockClient, LockError};
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

/// Sells one item: a read-modify-write of the stock that only a lock can protect.
async fn sell_one(state: &AppState, id: u64) -> Result<String, Busy> {
    let mut redis = state.redis.clone();
    let stock: i64 = redis.get(format!("stock:{id}")).await.unwrap_or(0);
    if stock <= 0 {
        return Ok("sold out".into());
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    let () = redis.set(format!("stock:{id}"), stock - 1).await.unwrap();
    Ok("sold".into())
}

/// Buys one item under the lock. `<id>` names the binding inside the `Path(id)` pattern.
#[distributed_lock(key = "goods:<id>", wait = "2s", client = state.locks)]
async fn buy(State(state): State<AppState>, Path(id): Path<u64>) -> Result<String, Busy> {
    sell_one(&state, id).await
}

/// The control: the same handler without the attribute.
async fn buy_unlocked(State(state): State<AppState>, Path(id): Path<u64>) -> Result<String, Busy> {
    sell_one(&state, id).await
}

/// Sets the stock of item 42 to 5, sends 12 concurrent buys through a `Router` serving
/// `handler`; returns the "sold" answers and the stock left.
async fn sell_concurrently<H, T>(handler: H) -> (i64, i64)
where
    H: axum::handler::Handler<T, AppState>,
    T: 'static,
{
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
        .route("/goods/{id}/buy", post(handler))
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
    (sold, stock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotated_handler_serves_through_a_router_without_overselling() {
    let (sold, stock) = sell_concurrently(buy).await;
    assert_eq!(
        (sold, stock),
        (5, 0),
        "exactly the stock was sold, never more"
    );
}

/// The oracle above can fire: without the lock the same load sells more than the stock
/// (every "sold" beyond 5 - stock left is an item sold twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_the_same_handler_without_the_lock_oversells() {
    let (sold, stock) = sell_concurrently(buy_unlocked).await;
    assert!(
        sold > 5 - stock,
        "without the lock {sold} sold and {stock} left of 5: no oversell, so the locked test proves nothing"
    );
    eprintln!("control: {sold} sold, {stock} left of 5");
}

/// Recipe 1 for handlers returning `impl IntoResponse`: wrap it in a `Result` whose error
/// is an application type with `From<LockError>` and `IntoResponse` (`Busy` above).
#[distributed_lock(key = "report:<id>", on_busy = "fail", client = state.locks)]
async fn report_result(
    State(state): State<AppState>,
    Path(id): Path<u64>,
) -> Result<impl IntoResponse, Busy> {
    Ok((StatusCode::OK, format!("report {id}")))
}

/// Recipe 2: a handler returning `impl IntoResponse` (or `Response`) with `on_fail`
/// turning the `LockError` into a `Response`; the body returns a `Response` too, since an
/// `impl Trait` return is one concrete type. This is also the way for a foreign error
/// type such as `StatusCode`, which cannot get `From<LockError>`.
fn locked_out(error: LockError) -> Response {
    let status = if error.is_timeout() {
        StatusCode::CONFLICT
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, error.to_string()).into_response()
}

#[distributed_lock(key = "report:<id>", on_busy = "fail", client = state.locks, on_fail = locked_out)]
async fn report_on_fail(State(state): State<AppState>, Path(id): Path<u64>) -> impl IntoResponse {
    (StatusCode::OK, format!("report {id}")).into_response()
}

/// Calls `GET /report/7` on a router serving `handler`, once with the lock free and once
/// while another client holds it; returns both statuses and bodies.
async fn report_free_then_busy<H, T>(handler: H) -> [(StatusCode, String); 2]
where
    H: axum::handler::Handler<T, AppState>,
    T: 'static,
{
    let server = RedisServer::start();
    let state = AppState {
        locks: LockClient::connect(&server.url()).await.unwrap(),
        redis: server
            .client()
            .get_multiplexed_async_connection()
            .await
            .unwrap(),
    };
    let app = Router::new()
        .route("/report/{id}", axum::routing::get(handler))
        .with_state(state);
    let call = |app: Router| async move {
        let request = Request::get("/report/7").body(Body::empty()).unwrap();
        let response = app.oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    };
    let free = call(app.clone()).await;
    let other = LockClient::connect(&server.url()).await.unwrap();
    let held = other.lock("report:7").lock().await.unwrap();
    let busy = call(app).await;
    held.unlock().await.unwrap();
    [free, busy]
}

#[tokio::test]
async fn impl_into_response_in_a_result_with_an_app_error() {
    let [free, busy] = report_free_then_busy(report_result).await;
    assert_eq!(free, (StatusCode::OK, "report 7".to_owned()));
    assert_eq!(busy.0, StatusCode::CONFLICT, "{busy:?}");
    assert!(busy.1.contains("report:7"), "{busy:?}");
}

#[tokio::test]
async fn impl_into_response_with_on_fail_returning_a_response() {
    let [free, busy] = report_free_then_busy(report_on_fail).await;
    assert_eq!(free, (StatusCode::OK, "report 7".to_owned()));
    assert_eq!(busy.0, StatusCode::CONFLICT, "{busy:?}");
    assert!(busy.1.contains("report:7"), "{busy:?}");
}
