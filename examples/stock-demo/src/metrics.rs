//! `GET /metrics`: dlock's metrics (the `metrics` feature of dlock-core) in the Prometheus
//! text format, for a scraper or `curl`. Each service process serves its own.
//!
//! The histograms (`dlock_wait_seconds`, `dlock_hold_seconds`) get the buckets of
//! [`BUCKETS`]; without them the exporter would render summaries, which cannot be summed
//! across processes.

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Bucket bounds in seconds: from a lock taken at once to a long hold.
pub const BUCKETS: [f64; 9] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0];

/// Installs the process's Prometheus recorder, which everything the `metrics` facade
/// records from now on goes to.
pub fn install() -> Result<PrometheusHandle, String> {
    PrometheusBuilder::new()
        .set_buckets(&BUCKETS)
        .and_then(PrometheusBuilder::install_recorder)
        .map_err(|e| format!("cannot install the Prometheus recorder: {e}"))
}

/// The `/metrics` route.
pub fn route(handle: PrometheusHandle) -> Router {
    Router::new()
        .route("/metrics", get(render))
        .with_state(handle)
}

async fn render(State(handle): State<PrometheusHandle>) -> String {
    // Without the exporter's own listener, upkeep is the scrape's job.
    handle.run_upkeep();
    handle.render()
}
