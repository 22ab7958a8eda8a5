//! The load driver and its report.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// What to send.
pub struct Plan {
    /// Base URLs of the service processes.
    pub services: Vec<String>,
    /// Items and their initial stock.
    pub items: Vec<(u64, i64)>,
    /// Total requests (an upper bound when `duration` is set).
    pub requests: usize,
    /// Send no new request after this long (requests in flight still finish and count).
    pub duration: Option<Duration>,
    /// The time a sale spends inside the critical section (`--hold`), for the throughput
    /// figure: one lock serialises the sales of an item, so `1 / hold` is its ceiling.
    pub hold: Duration,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// `buy`, `buy-manual` or `buy-try`.
    pub route: String,
    /// Show a progress bar.
    pub progress: bool,
    /// Set while the first service is paused (`--pause-holder`): it gets no new requests
    /// then, as a load balancer would route around a process that stopped answering.
    pub first_paused: Arc<AtomicBool>,
}

/// The outcome of a run.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Requests sent.
    pub requests: usize,
    /// Answered "sold".
    pub sold: usize,
    /// Answered "sold out".
    pub sold_out: usize,
    /// Answered "busy" (lock wait ran out).
    pub busy: usize,
    /// Failed otherwise.
    pub errors: usize,
    /// Sales whose stock write the store refused because a newer lock holder had written
    /// (answered 412). Each is a sale that did not happen, and the buyer was told so.
    pub stale_refused: usize,
    /// Per item: id, initial stock, final stock, sold.
    pub items: Vec<ItemReport>,
    /// "sold" answers per service process, in start order. Each request worker sends to
    /// one process only (as a sticky load balancer would), so a process whose buys lose
    /// the lock more often sells less: this is the lock's fairness across processes.
    pub sold_per_process: Vec<usize>,
    /// Whether every process sold within ±30 % of the mean per process.
    pub per_process_within_30pct: bool,
    /// Smallest / mean of `sold_per_process` (1 = perfectly even).
    #[serde(serialize_with = "rounded")]
    pub per_process_min_over_mean: f64,
    /// Sales per second over the whole run.
    #[serde(serialize_with = "rounded")]
    pub sold_per_s: f64,
    /// `sold_per_s` × hold: the share of the one-lock ceiling (1 / critical section)
    /// reached; `None` without a hold.
    #[serde(serialize_with = "rounded_option")]
    pub sold_per_s_vs_hold: Option<f64>,
    /// Sales the stock does not account for: sold − (initial − final), summed. Must be 0.
    pub oversold: i64,
    /// Requests per second over the whole run.
    #[serde(serialize_with = "rounded")]
    pub throughput: f64,
    /// Latency percentiles in milliseconds.
    pub latency_ms: Percentiles,
    /// Wall time of the load phase in seconds.
    #[serde(serialize_with = "rounded")]
    pub seconds: f64,
    /// The `--pause-holder` fault, when it ran.
    pub pause: Option<Pause>,
}

/// What the `--pause-holder` fault did.
#[derive(Debug, Default, Serialize)]
pub struct Pause {
    /// The item whose critical section was paused; `None`: no sale reached the pause point.
    pub item: Option<u64>,
    /// The stock the paused holder had read (and later wrote back, minus one).
    pub stock_read: i64,
    /// How long the holder was stopped.
    pub paused_ms: u128,
    /// The lock's lease, shorter than the pause.
    pub lease_ms: u128,
}

/// One item's numbers.
#[derive(Debug, Serialize)]
pub struct ItemReport {
    /// Item id.
    pub id: u64,
    /// Stock before the run.
    pub initial: i64,
    /// Stock after the run.
    pub r#final: i64,
    /// "sold" answers for this item.
    pub sold: usize,
}

/// Latency percentiles.
#[derive(Debug, Serialize)]
pub struct Percentiles {
    /// Median.
    #[serde(serialize_with = "rounded")]
    pub p50: f64,
    /// 95th percentile.
    #[serde(serialize_with = "rounded")]
    pub p95: f64,
    /// 99th percentile.
    #[serde(serialize_with = "rounded")]
    pub p99: f64,
}

/// A measured figure in the JSON report, to 3 decimals: more digits are noise, and
/// `0.30000000000000004` is hard to read.
fn rounded<S: serde::Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64((value * 1000.0).round() / 1000.0)
}

/// [`rounded`] for an optional figure.
fn rounded_option<S: serde::Serializer>(
    value: &Option<f64>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => rounded(value, serializer),
        None => serializer.serialize_none(),
    }
}

/// How long the run has left: the time to the `--duration` bound, or to the last request
/// at the average rate so far, whichever comes first. `None` (shown as `…`) until the rate
/// means something: at least 1 % of the requests done and 100 ms elapsed. (indicatif's own
/// estimate starts from its first few samples and showed hours for a one-second run.)
fn time_left(
    done: u64,
    total: Option<u64>,
    elapsed: Duration,
    duration: Option<Duration>,
) -> Option<Duration> {
    let by_duration = duration.map(|d| d.saturating_sub(elapsed));
    let total = total.unwrap_or(0);
    let by_rate = (done > 0 && done * 100 >= total && elapsed >= Duration::from_millis(100))
        .then(|| elapsed.mul_f64(total.saturating_sub(done) as f64 / done as f64));
    match (by_duration, by_rate) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (Some(a), None) => Some(a),
        (None, rate) => rate,
    }
}

#[derive(Default)]
struct Tally {
    sold: Vec<usize>,
    sold_by: Vec<usize>,
    sold_out: usize,
    busy: usize,
    stale_refused: usize,
    errors: usize,
    latencies: Vec<Duration>,
    first_error: Option<String>,
}

/// Sends the planned requests and reads the final stock.
pub async fn run(plan: Plan) -> Result<Report, String> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(plan.concurrency)
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    let tally = Arc::new(Mutex::new(Tally {
        sold: vec![0; plan.items.len()],
        sold_by: vec![0; plan.services.len()],
        ..Tally::default()
    }));
    let next = Arc::new(AtomicUsize::new(0));
    let bar = if plan.progress {
        let bar = ProgressBar::new(plan.requests as u64);
        let duration = plan.duration;
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} requests {per_sec} eta {left}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .with_key(
                    "left",
                    move |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let left = time_left(state.pos(), state.len(), state.elapsed(), duration);
                        let _ = match left {
                            Some(left) => write!(w, "{:.1}s", left.as_secs_f64()),
                            None => write!(w, "…"),
                        };
                    },
                ),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let plan = Arc::new(plan);
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..plan.concurrency.max(1) {
        let (http, tally, next, plan, bar) = (
            http.clone(),
            tally.clone(),
            next.clone(),
            plan.clone(),
            bar.clone(),
        );
        workers.push(tokio::spawn(async move {
            loop {
                if plan.duration.is_some_and(|d| started.elapsed() >= d) {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= plan.requests {
                    break;
                }
                let item = i % plan.items.len();
                let (id, _) = plan.items[item];
                let mut service = worker % plan.services.len();
                if service == 0
                    && plan.services.len() > 1
                    && plan.first_paused.load(Ordering::SeqCst)
                {
                    service = 1 + worker % (plan.services.len() - 1);
                }
                let index = service;
                let service = &plan.services[service];
                let url = format!("{service}/goods/{id}/{}", plan.route);
                let sent = Instant::now();
                let outcome = http.post(&url).send().await;
                let latency = sent.elapsed();
                let mut tally = tally.lock().unwrap_or_else(|p| p.into_inner());
                tally.latencies.push(latency);
                match outcome.map(|r| r.status().as_u16()) {
                    Ok(200) => {
                        tally.sold[item] += 1;
                        tally.sold_by[index] += 1;
                    }
                    Ok(409) => tally.sold_out += 1,
                    Ok(503) => tally.busy += 1,
                    Ok(412) => tally.stale_refused += 1,
                    Ok(status) => {
                        tally.errors += 1;
                        tally
                            .first_error
                            .get_or_insert(format!("HTTP {status} from {url}"));
                    }
                    Err(e) => {
                        tally.errors += 1;
                        tally.first_error.get_or_insert(format!("{url}: {e}"));
                    }
                }
                drop(tally);
                bar.inc(1);
            }
        }));
    }
    for worker in workers {
        worker
            .await
            .map_err(|e| format!("load worker failed: {e}"))?;
    }
    let elapsed = started.elapsed();
    bar.finish_and_clear();

    let mut items = Vec::new();
    let tally = std::mem::take(&mut *tally.lock().unwrap_or_else(|p| p.into_inner()));
    if let Some(error) = &tally.first_error {
        eprintln!("first error: {error}");
    }
    for (index, (id, initial)) in plan.items.iter().enumerate() {
        let url = format!("{}/goods/{id}", plan.services[0]);
        let text = http
            .get(&url)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| format!("reading the final stock of item {id}: {e}"))?
            .text()
            .await
            .map_err(|e| format!("reading the final stock of item {id}: {e}"))?;
        let r#final = text
            .trim()
            .parse()
            .map_err(|_| format!("item {id}: stock {text:?} is not a number"))?;
        items.push(ItemReport {
            id: *id,
            initial: *initial,
            r#final,
            sold: tally.sold[index],
        });
    }
    let oversold = items
        .iter()
        .map(|item| (item.sold as i64 - (item.initial - item.r#final)).max(0))
        .sum();
    let sent = tally.latencies.len();
    let sold: usize = tally.sold.iter().sum();
    let mean = sold as f64 / plan.services.len().max(1) as f64;
    let min = tally.sold_by.iter().copied().min().unwrap_or(0) as f64;
    let within = tally
        .sold_by
        .iter()
        .all(|&n| (n as f64 - mean).abs() <= 0.3 * mean);
    let sold_per_s = sold as f64 / elapsed.as_secs_f64();
    let mut latencies = tally.latencies.clone();
    latencies.sort();
    let percentile = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    Ok(Report {
        requests: sent,
        sold,
        sold_out: tally.sold_out,
        busy: tally.busy,
        errors: tally.errors,
        stale_refused: tally.stale_refused,
        items,
        sold_per_process: tally.sold_by,
        per_process_within_30pct: within,
        per_process_min_over_mean: if mean > 0.0 { min / mean } else { f64::NAN },
        sold_per_s,
        sold_per_s_vs_hold: (!plan.hold.is_zero()).then(|| sold_per_s * plan.hold.as_secs_f64()),
        oversold,
        throughput: sent as f64 / elapsed.as_secs_f64(),
        latency_ms: Percentiles {
            p50: percentile(0.50),
            p95: percentile(0.95),
            p99: percentile(0.99),
        },
        seconds: elapsed.as_secs_f64(),
        pause: None,
    })
}

impl Report {
    /// The report as a table for people.
    pub fn table(&self, title: &str) -> String {
        let mut out = format!("{title}\n");
        let row = |out: &mut String, name: &str, value: String| {
            out.push_str(&format!("  {name:<22} {value}\n"));
        };
        row(&mut out, "requests", self.requests.to_string());
        row(&mut out, "sold", self.sold.to_string());
        row(&mut out, "sold-out rejections", self.sold_out.to_string());
        row(&mut out, "busy (wait ran out)", self.busy.to_string());
        row(&mut out, "errors", self.errors.to_string());
        if let Some(pause) = &self.pause {
            let what = match pause.item {
                Some(item) => format!(
                    "item {item} at stock {}, stopped {} ms (lease {} ms)",
                    pause.stock_read, pause.paused_ms, pause.lease_ms
                ),
                None => "never (no sale reached the pause point)".to_owned(),
            };
            row(&mut out, "holder paused", what);
        }
        row(
            &mut out,
            "stale writes refused",
            self.stale_refused.to_string(),
        );
        row(
            &mut out,
            "oversold",
            format!(
                "{}{}",
                self.oversold,
                if self.oversold == 0 {
                    "  (none)"
                } else {
                    "  <-- OVERSOLD"
                }
            ),
        );
        row(
            &mut out,
            "throughput",
            format!("{:.0} req/s over {:.2}s", self.throughput, self.seconds),
        );
        row(
            &mut out,
            "sold per process",
            format!(
                "{:?}  (min {:.2} × mean; {})",
                self.sold_per_process,
                self.per_process_min_over_mean,
                if self.per_process_within_30pct {
                    "each within ±30 % of the mean"
                } else {
                    "NOT all within ±30 % of the mean"
                }
            ),
        );
        row(
            &mut out,
            "sales/s",
            match self.sold_per_s_vs_hold {
                Some(share) => format!(
                    "{:.1}  ({share:.2} × the one-lock ceiling, 1 / hold)",
                    self.sold_per_s
                ),
                None => format!("{:.1}", self.sold_per_s),
            },
        );
        row(
            &mut out,
            "latency p50/p95/p99",
            format!(
                "{:.1} / {:.1} / {:.1} ms",
                self.latency_ms.p50, self.latency_ms.p95, self.latency_ms.p99
            ),
        );
        out.push_str("  item   initial   final   sold\n");
        for item in &self.items {
            out.push_str(&format!(
                "  {:<6} {:>7} {:>7} {:>6}\n",
                item.id, item.initial, item.r#final, item.sold
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::time_left;
    use std::time::Duration;

    #[test]
    fn time_left_waits_for_a_meaningful_rate_then_uses_the_average() {
        let ms = Duration::from_millis;
        // Nothing measured yet: no estimate (indicatif showed hours here).
        assert_eq!(time_left(0, Some(5_000), ms(5), None), None);
        assert_eq!(time_left(10, Some(5_000), ms(20), None), None);
        // 1,000 of 5,000 in 200 ms: 800 ms left at the average rate.
        assert_eq!(time_left(1_000, Some(5_000), ms(200), None), Some(ms(800)));
        // A one-second run: never more than the time to its bound.
        assert_eq!(
            time_left(0, Some(5_000), ms(5), Some(ms(1_000))),
            Some(ms(995))
        );
        assert_eq!(
            time_left(1_000, Some(1_000_000), ms(200), Some(ms(1_000))),
            Some(ms(800))
        );
    }
}
