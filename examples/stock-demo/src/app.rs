//! The HTTP service: the seed's three ways to lock a stock decrement, side by side.
//!
//! | route | locking |
//! |---|---|
//! | `POST /goods/{id}/buy` | `#[distributed_lock(key = "goods:<id>", lease = "5s")]` on the handler |
//! | `POST /goods/{id}/buy-manual` | `lock_with_lease(5s)` … `unlock()` by hand |
//! | `POST /goods/{id}/buy-try` | `try_lock_with_lease(wait 3s, lease 5s)`; busy → 503 |
//! | `GET /goods/{id}` | reads the stock |
//! | `POST /goods/{id}/stock` | sets the stock (body: a number) |
//! | `GET /metrics` | dlock's metrics, Prometheus text (added by `serve`, see `metrics.rs`) |
//!
//! With `--fenced` the stock is written with `client.fenced().set`, presenting the hold's
//! fencing token: a write from a holder whose lock has since been taken by another is
//! refused (`StaleToken`), and the buy answers 412 without selling.
//!
//! With `--no-lock` every buy route runs the same decrement without any lock: the control
//! that shows what the lock prevents.
//!
//! The process started with `--pause-point` stops at most one buy inside its critical
//! section, after reading the stock: it prints `inside <id> <stock>` on stdout and writes
//! nothing until it reads `go` on stdin. The demo's `--pause-holder` fault mode SIGSTOPs
//! the process there, past the lock's lease, so that another process sells meanwhile.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use dlock::{
    distributed_lock,
    fencing::{current_fence, Fence},
    LockClient, LockError, LockGuard,
};

use crate::store::{self, StockStore};

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState {
    /// The lock client.
    pub locks: LockClient,
    /// The stock keys.
    pub stock: StockStore,
    /// Time spent inside the critical section between reading and writing the stock.
    pub hold: Duration,
    /// Write the stock through the fenced helper with the hold's token.
    pub fenced: bool,
    /// Armed in the process chosen to be paused: the first buy that finds stock stops
    /// there (see the module docs). Disarmed once used.
    pub pause_point: Arc<AtomicBool>,
}

/// Lease of the buy locks, as in the seed's `@DistributedLock(value="goods", leaseTime=5)`.
/// The `--pause-holder` fault mode must outlast it.
pub const LEASE: Duration = Duration::from_secs(5);
/// How long `buy-try` waits for the lock.
const TRY_WAIT: Duration = Duration::from_secs(3);

/// Why a request failed.
#[derive(Debug)]
pub enum AppError {
    /// The lock could not be taken.
    Lock(LockError),
    /// Redis failed on the stock keys.
    Redis(redis::RedisError),
    /// The pause point's stdin/stdout conversation with the demo failed.
    PausePoint(std::io::Error),
    /// `--fenced`, but the hold has no fencing token (the client turned tokens off).
    Unfenced,
}

impl From<LockError> for AppError {
    fn from(error: LockError) -> Self {
        AppError::Lock(error)
    }
}

impl From<redis::RedisError> for AppError {
    fn from(error: redis::RedisError) -> Self {
        AppError::Redis(error)
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        match self {
            AppError::Lock(e) if e.is_timeout() => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
            AppError::Lock(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            AppError::Redis(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            AppError::Unfenced => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "--fenced needs fencing tokens, and this hold has none".to_owned(),
            ),
            AppError::PausePoint(e) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("pause point: {e}"),
            ),
        }
        .into_response()
    }
}

/// The outcome of one buy.
pub enum Sale {
    /// One item sold; the stock left.
    Sold(i64),
    /// Nothing left.
    SoldOut,
    /// The stock write was refused as stale: another holder has written since this one
    /// took the lock, so this one's lock was lost and nothing was sold.
    Stale(LockError),
}

impl IntoResponse for Sale {
    fn into_response(self) -> Response {
        match self {
            Sale::Sold(left) => (StatusCode::OK, format!("sold, {left} left")).into_response(),
            Sale::SoldOut => (StatusCode::CONFLICT, "sold out").into_response(),
            Sale::Stale(e) => (StatusCode::PRECONDITION_FAILED, e.to_string()).into_response(),
        }
    }
}

/// The critical section: read, work, write back. Unsafe without a lock by design; with
/// `--fenced` the write presents `fence`, the hold's token.
async fn decrement(state: &AppState, id: u64, fence: Option<Fence>) -> Result<Sale, AppError> {
    let stock = state.stock.read(id).await?;
    if stock <= 0 {
        return Ok(Sale::SoldOut);
    }
    if !state.hold.is_zero() {
        tokio::time::sleep(state.hold).await;
    }
    if state.pause_point.swap(false, Ordering::SeqCst) {
        wait_at_pause_point(id, stock).await?;
    }
    if state.fenced {
        let fence = fence.ok_or(AppError::Unfenced)?;
        let written = state
            .locks
            .fenced()
            .set(&store::key(id), (stock - 1).to_string(), fence)
            .await;
        match written {
            Ok(()) => {}
            Err(e @ LockError::StaleToken { .. }) => return Ok(Sale::Stale(e)),
            Err(e) => return Err(e.into()),
        }
    } else {
        state.stock.write(id, stock - 1).await?;
    }
    Ok(Sale::Sold(stock - 1))
}

/// Tells the demo this process is inside a critical section, then waits for its `go`.
async fn wait_at_pause_point(id: u64, stock: i64) -> Result<(), AppError> {
    let mut stdout = std::io::stdout();
    writeln!(stdout, "inside {id} {stock}")
        .and_then(|()| stdout.flush())
        .map_err(AppError::PausePoint)?;
    // Blocking stdin on its own thread, so that the other requests keep being served.
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).map(|_| line)
    })
    .await
    .map_err(std::io::Error::other)
    .and_then(|read| read)
    .map_err(AppError::PausePoint)?;
    if line.trim() == "go" {
        Ok(())
    } else {
        Err(AppError::PausePoint(std::io::Error::other(format!(
            "expected `go` at the pause point, got {line:?}"
        ))))
    }
}

/// `POST /goods/{id}/buy`: the attribute style.
#[distributed_lock(key = "goods:<id>", lease = "5s", client = state.locks)]
async fn buy(State(state): State<AppState>, Path(id): Path<u64>) -> Result<Sale, AppError> {
    decrement(&state, id, current_fence()).await
}

/// Unlocks after the critical section. A failure (the lock was lost meanwhile, e.g. its
/// holder paused past the lease) is logged, not answered: the stock write is done or
/// refused by then, and the buyer must hear which.
async fn release(guard: LockGuard) {
    if let Err(e) = guard.unlock().await {
        eprintln!("stock-demo: unlock after the sale: {e}");
    }
}

/// `POST /goods/{id}/buy-manual`: lock and unlock by hand.
async fn buy_manual(State(state): State<AppState>, Path(id): Path<u64>) -> Result<Sale, AppError> {
    let guard = state
        .locks
        .lock(&format!("goods:{id}"))
        .lock_with_lease(LEASE)
        .await?;
    let sale = decrement(&state, id, guard.fencing_token()).await;
    release(guard).await;
    sale
}

/// `POST /goods/{id}/buy-try`: bounded wait; busy answers 503.
async fn buy_try(State(state): State<AppState>, Path(id): Path<u64>) -> Result<Sale, AppError> {
    let guard = state
        .locks
        .lock(&format!("goods:{id}"))
        .try_lock_with_lease(TRY_WAIT, LEASE)
        .await?;
    let sale = decrement(&state, id, guard.fencing_token()).await;
    release(guard).await;
    sale
}

/// Any buy route with `--no-lock`.
async fn buy_unlocked(
    State(state): State<AppState>,
    Path(id): Path<u64>,
) -> Result<Sale, AppError> {
    decrement(&state, id, None).await
}

async fn stock(State(state): State<AppState>, Path(id): Path<u64>) -> Result<String, AppError> {
    Ok(state.stock.read(id).await?.to_string())
}

async fn set_stock(
    State(state): State<AppState>,
    Path(id): Path<u64>,
    body: String,
) -> Result<StatusCode, Response> {
    let value: i64 = body.trim().parse().map_err(|_| {
        (
            StatusCode::BAD_REQUEST,
            format!("stock must be an integer, got {body:?}"),
        )
            .into_response()
    })?;
    state
        .stock
        .write(id, value)
        .await
        .map_err(|e| AppError::from(e).into_response())?;
    Ok(StatusCode::NO_CONTENT)
}

/// The service; `locking: false` is the control without locks.
pub fn app(state: AppState, locking: bool) -> Router {
    let router = Router::new()
        // The process id: the demo checks that the service it started answers on the
        // port, not another process that took the port first.
        .route("/health", get(|| async { std::process::id().to_string() }))
        .route("/goods/{id}", get(stock))
        .route("/goods/{id}/stock", post(set_stock));
    let router = if locking {
        router
            .route("/goods/{id}/buy", post(buy))
            .route("/goods/{id}/buy-manual", post(buy_manual))
            .route("/goods/{id}/buy-try", post(buy_try))
    } else {
        router
            .route("/goods/{id}/buy", post(buy_unlocked))
            .route("/goods/{id}/buy-manual", post(buy_unlocked))
            .route("/goods/{id}/buy-try", post(buy_unlocked))
    };
    router.with_state(state)
}
