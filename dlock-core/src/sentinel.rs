//! Finding the current master through Redis Sentinel.
//!
//! Every reachable sentinel is asked at once, and the newest answer wins. Picking the first
//! answer, or the majority, can name the old master: during the last part of a failover the
//! leading sentinel already reports the promoted replica (`GET-MASTER-ADDR-BY-NAME`) while
//! its `SENTINEL MASTERS` entry and the other sentinels still name the old master, which
//! keeps accepting writes for seconds. A lock written there is thrown away when the old
//! master is demoted, so it must not be chosen.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::future::join_all;
use redis::{RedisError, RedisResult};

use crate::backend::CallError;

/// One sentinel's view of the master.
#[derive(Debug, Clone, PartialEq, Eq)]
struct View {
    host: String,
    port: u16,
    /// The sentinel reports a promoted replica that its configuration does not name yet:
    /// a failover it leads is reconfiguring the replicas. Newer than any configuration.
    promoting: bool,
    /// The configuration epoch: higher is newer.
    epoch: u64,
}

/// Asks every sentinel (each within `timeout`) for the master named `master_name`; returns
/// the newest answer's `(host, port)`.
pub(crate) async fn current_master(
    sentinels: &[redis::Client],
    master_name: &str,
    timeout: Duration,
) -> Result<(String, u16), CallError> {
    let asks = sentinels.iter().map(|sentinel| async move {
        match tokio::time::timeout(timeout, ask(sentinel, master_name)).await {
            Ok(answer) => answer.map_err(CallError::Redis),
            Err(_) => Err(CallError::Timeout(timeout)),
        }
    });
    let mut last_error = None;
    let mut views = Vec::new();
    for answer in join_all(asks).await {
        match answer {
            Ok(view) => views.push(view),
            Err(error) => last_error = Some(error),
        }
    }
    match newest(views) {
        Some(view) => Ok((view.host, view.port)),
        None => Err(last_error.unwrap_or_else(|| {
            CallError::Redis(RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "no sentinel configured",
            )))
        })),
    }
}

/// One sentinel's answer: the master address it reports and its configuration.
async fn ask(sentinel: &redis::Client, master_name: &str) -> RedisResult<View> {
    let mut conn = sentinel.get_multiplexed_async_connection().await?;
    let (address, master): ((String, u16), HashMap<String, String>) = redis::pipe()
        .cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(master_name)
        .cmd("SENTINEL")
        .arg("MASTER")
        .arg(master_name)
        .query_async(&mut conn)
        .await?;
    Ok(view(address, &master))
}

fn view((host, port): (String, u16), master: &HashMap<String, String>) -> View {
    let configured = master.get("ip").map(String::as_str) == Some(host.as_str())
        && master.get("port").and_then(|p| p.parse().ok()) == Some(port);
    View {
        promoting: !configured,
        epoch: master
            .get("config-epoch")
            .and_then(|e| e.parse().ok())
            .unwrap_or(0),
        host,
        port,
    }
}

/// The newest view: a failover in progress first, then the highest configuration epoch.
fn newest(views: Vec<View>) -> Option<View> {
    views
        .into_iter()
        .max_by_key(|view| (view.promoting, view.epoch))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn master(ip: &str, port: u16, epoch: u64) -> HashMap<String, String> {
        HashMap::from([
            ("ip".to_owned(), ip.to_owned()),
            ("port".to_owned(), port.to_string()),
            ("config-epoch".to_owned(), epoch.to_string()),
        ])
    }

    #[test]
    fn a_leader_reporting_the_promoted_replica_beats_the_majority() {
        let old = ("127.0.0.1".to_owned(), 7000);
        let new = ("127.0.0.1".to_owned(), 7001);
        let views = vec![
            view(old.clone(), &master("127.0.0.1", 7000, 3)),
            view(new.clone(), &master("127.0.0.1", 7000, 3)),
            view(old, &master("127.0.0.1", 7000, 3)),
        ];
        let chosen = newest(views).unwrap();
        assert_eq!((chosen.host, chosen.port), new);
    }

    #[test]
    fn the_highest_configuration_epoch_wins_otherwise() {
        let views = vec![
            view(
                ("127.0.0.1".to_owned(), 7000),
                &master("127.0.0.1", 7000, 3),
            ),
            view(
                ("127.0.0.1".to_owned(), 7002),
                &master("127.0.0.1", 7002, 4),
            ),
        ];
        assert_eq!(newest(views).unwrap().port, 7002);
        assert_eq!(newest(Vec::new()), None);
    }
}
