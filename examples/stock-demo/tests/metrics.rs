//! `GET /metrics` of a service process counts what its load did: every buy that took the
//! lock is one acquisition and one hold (sold or sold out), under the attribute's key
//! template `goods:<id>` or, for the hand-written route, `*`; never under a stock key.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::{Child, Command};
use std::time::Duration;

use dlock_tests::RedisServer;

/// A `stock-demo serve` process, killed when dropped.
struct Service {
    child: Child,
    base: String,
}

impl Service {
    fn start(redis_url: &str) -> Service {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_stock-demo"))
            .args([
                "serve",
                "--port",
                &port.to_string(),
                "--redis-url",
                redis_url,
            ])
            .args(["--hold", "2ms"])
            .spawn()
            .expect("start stock-demo serve");
        Service {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The scraped series: `name{labels}` → value.
fn parse(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| {
            let (series, number) = line.rsplit_once(' ')?;
            Some((series.to_owned(), number.parse().ok()?))
        })
        .collect()
}

fn series(name: &str, template: &str) -> String {
    format!("{name}{{kind=\"lock\",key_template=\"{template}\"}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scraped_metrics_match_the_load() {
    let redis = RedisServer::start();
    let service = Service::start(&redis.url());
    let http = reqwest::Client::new();
    let base = &service.base;
    let mut up = false;
    for _ in 0..100 {
        if http.get(format!("{base}/health")).send().await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "stock-demo serve did not start");
    for (id, stock) in [(1, 15), (2, 10), (3, 5)] {
        let set = http
            .post(format!("{base}/goods/{id}/stock"))
            .body(stock.to_string())
            .send()
            .await
            .unwrap();
        assert!(set.status().is_success(), "{set:?}");
    }

    // 40 attribute buys over items 1 and 2 (15 + 10 in stock), 12 hand-written ones of
    // item 3 (5 in stock), all at once.
    let buys = (0..40)
        .map(|n| format!("{base}/goods/{}/buy", 1 + n % 2))
        .chain((0..12).map(|_| format!("{base}/goods/3/buy-manual")));
    let answers = futures_util::future::join_all(buys.map(|url| {
        let http = http.clone();
        async move { http.post(url).send().await.unwrap().status().as_u16() }
    }))
    .await;
    let sold = answers.iter().filter(|&&status| status == 200).count();
    let sold_out = answers.iter().filter(|&&status| status == 409).count();
    assert_eq!((sold, sold_out), (30, 22), "answers: {answers:?}");

    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let metrics = parse(&text);
    let get = |name: &str, template: &str| {
        metrics
            .get(&series(name, template))
            .copied()
            .unwrap_or_else(|| panic!("{name} for {template} missing:\n{text}"))
    };
    // Every buy took the lock, sold or sold out: acquisitions = sales + sold-out answers.
    assert_eq!(
        get("dlock_acquisitions_total", "goods:<id>"),
        40.0,
        "{text}"
    );
    assert_eq!(
        get("dlock_hold_seconds_count", "goods:<id>"),
        40.0,
        "{text}"
    );
    assert_eq!(
        get("dlock_wait_seconds_count", "goods:<id>"),
        40.0,
        "{text}"
    );
    assert_eq!(get("dlock_acquisitions_total", "*"), 12.0, "{text}");
    assert_eq!(get("dlock_hold_seconds_count", "*"), 12.0, "{text}");
    // Each hold lasted at least the 2 ms critical section.
    let held = get("dlock_hold_seconds_sum", "goods:<id>");
    assert!(
        held >= 40.0 * 0.002,
        "40 holds of ≥ 2 ms summed to {held} s"
    );
    // The histograms have buckets, and all 40 holds fit under the largest bound.
    assert_eq!(
        metrics
            .get(r#"dlock_hold_seconds_bucket{kind="lock",key_template="goods:<id>",le="+Inf"}"#),
        Some(&40.0),
        "{text}"
    );
    // Nothing is held or waiting once the load is answered, and nothing timed out.
    assert_eq!(get("dlock_locks_held", "goods:<id>"), 0.0, "{text}");
    assert_eq!(get("dlock_waiters", "goods:<id>"), 0.0, "{text}");
    assert!(!text.contains("dlock_timeouts_total"), "{text}");
    // Labels are templates: no stock key appears.
    assert!(!text.contains("goods:1"), "a full key as a label:\n{text}");
}
