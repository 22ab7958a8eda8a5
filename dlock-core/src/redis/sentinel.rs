//! Everything Sentinel: finding the current master, following it when it moves, and
//! watching the sentinels' failover announcements.
//!
//! Every reachable sentinel is asked at once, and the newest answer wins. Picking the first
//! answer, or the majority, can name the old master: during the last part of a failover the
//! leading sentinel already reports the promoted replica (`GET-MASTER-ADDR-BY-NAME`) while
//! its `SENTINEL MASTERS` entry and the other sentinels still name the old master, which
//! keeps accepting writes for seconds. A lock written there is thrown away when the old
//! master is demoted, so it must not be chosen.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use futures_util::StreamExt;
use redis::{RedisError, RedisResult};
use tokio::sync::mpsc;

use super::connect::{master_client, Transport};
use super::managed::ManagedConnection;
use super::topology::Auth;
use super::{Backend, CallError, ConnectOptions, Node, Route, Shared};
use crate::background::Background;

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
            Ok(answer) => answer.map_err(CallError::from),
            Err(_) => Err(CallError::timeout(timeout)),
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
            CallError::from(RedisError::from((
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

pub(super) struct SentinelRoute {
    /// One client per configured sentinel.
    pub(super) sentinels: Vec<redis::Client>,
    /// Held while asking the sentinels, so that concurrent failures resolve once.
    resolving: tokio::sync::Mutex<()>,
    master_name: String,
    /// Credentials and database for the master, whichever server it is.
    settings: redis::RedisConnectionInfo,
    /// Plain or TLS, as the sentinels are.
    transport: Transport,
    current: RwLock<Node>,
}

impl SentinelRoute {
    pub(super) async fn connect(
        master_name: &str,
        sentinels: Vec<redis::Client>,
        transport: Transport,
        auth: &Auth,
        options: ConnectOptions,
    ) -> Result<SentinelRoute, CallError> {
        let mut settings = redis::RedisConnectionInfo::default().set_db(auth.database.unwrap_or(0));
        if let Some(username) = &auth.username {
            settings = settings.set_username(username);
        }
        if let Some(password) = &auth.password {
            settings = settings.set_password(password);
        }
        let (host, port) = current_master(&sentinels, master_name, options.connect_timeout).await?;
        let client = master_client(&host, port, &settings, &transport)?;
        let node = tokio::time::timeout(options.connect_timeout, Node::connect(client, options))
            .await
            .map_err(|_| CallError::timeout(options.connect_timeout))?
            .map_err(CallError::from)?;
        tracing::info!(master = %master_name, address = %node.address(), "dlock: sentinel master resolved");
        Ok(SentinelRoute {
            sentinels,
            resolving: tokio::sync::Mutex::new(()),
            master_name: master_name.to_owned(),
            settings,
            transport,
            current: RwLock::new(node),
        })
    }

    /// Replaces the connection to the master (same server) with `node`.
    pub(super) fn replace_node(&self, node: Node) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = node;
    }

    /// The connection to the current master, and its serial.
    pub(super) fn connection(&self) -> (ManagedConnection, u64) {
        let node = self.current.read().unwrap_or_else(|p| p.into_inner());
        (node.conn.clone(), node.serial)
    }

    /// Puts `fresh` in place of the connection `serial` and returns that one, unless it
    /// was replaced meanwhile (by a failover, say).
    pub(super) fn replace_node_if(&self, serial: u64, fresh: Node) -> Option<Node> {
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        (current.serial == serial).then(|| std::mem::replace(&mut *current, fresh))
    }

    pub(super) fn node(&self) -> Node {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Asks the sentinels for the master; switches the connection when it moved.
    pub(super) async fn resolve(&self, shared: &Shared) -> Result<(), CallError> {
        let before = *shared.generation.borrow();
        let resolving = self.resolving.lock().await;
        if *shared.generation.borrow() != before {
            return Ok(()); // another caller switched while we waited
        }
        let (host, port) = current_master(
            &self.sentinels,
            &self.master_name,
            shared.options.command_timeout,
        )
        .await?;
        drop(resolving);
        self.follow(shared, &host, port).await
    }

    /// Switches to the master a sentinel announced with `+switch-master`. The announcement
    /// is authoritative; asking the sentinels again could reach one that has not switched
    /// yet and still names the old master, which keeps accepting writes for a while.
    async fn follow(&self, shared: &Shared, host: &str, port: u16) -> Result<(), CallError> {
        self.switch(
            shared,
            master_client(host, port, &self.settings, &self.transport)?,
        )
        .await
    }

    async fn switch(&self, shared: &Shared, client: redis::Client) -> Result<(), CallError> {
        let address = client.get_connection_info().addr().to_string();
        if address == self.node().address() {
            return Ok(());
        }
        let node = Node::connect(client, shared.options)
            .await
            .map_err(CallError::from)?;
        tracing::warn!(master = %self.master_name, %address, "dlock: sentinel failover: following the new master");
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = node;
        shared.generation.send_modify(|generation| *generation += 1);
        Ok(())
    }
}

impl Backend {
    /// Starts one failover watcher per sentinel and waits (at most the connect timeout)
    /// until each has tried to subscribe: a failover in the first moments of the client's
    /// life would otherwise go unnoticed, and the client would keep writing to the old
    /// master, which stays writable for seconds.
    pub(super) async fn watch_sentinels(
        &self,
        sentinels: &[redis::Client],
        shown: &str,
        background: &Background,
    ) {
        let (attempted, mut attempts) = mpsc::channel(sentinels.len().max(1));
        for sentinel in sentinels {
            let shared = Arc::downgrade(&self.shared);
            let sentinel = sentinel.clone();
            // Only the first start reports its first attempt.
            let first_attempt = Mutex::new(Some(attempted.clone()));
            background.start_until_dropped("sentinel watcher", move || {
                let attempted = first_attempt
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                watch_switch_master(shared.clone(), sentinel.clone(), attempted)
            });
        }
        drop(attempted);
        let all_tried = async { while attempts.recv().await.is_some() {} };
        if tokio::time::timeout(self.shared.options.connect_timeout, all_tried)
            .await
            .is_err()
        {
            tracing::warn!(master = %shown, "dlock: some sentinels did not answer the failover subscription yet; relying on the others and on errors to notice a failover");
        }
    }
}

/// The master a sentinel event announces: `(master name, host, port)`.
///
/// - `+promoted-slave`: `slave <ip>:<port> <ip> <port> @ <master-name> <old-ip> <old-port>`,
///   sent as soon as the replica is promoted;
/// - `+switch-master`: `<master-name> <old-ip> <old-port> <new-ip> <new-port>`, sent when
///   the failover is complete (about a second later).
fn announced_master<'a>(channel: &str, payload: &'a str) -> Option<(&'a str, &'a str, u16)> {
    let fields: Vec<&str> = payload.split(' ').collect();
    let (name, host, port) = match (channel, &fields[..]) {
        ("+switch-master", [name, _, _, host, port]) => (*name, *host, *port),
        ("+promoted-slave", ["slave", _, host, port, "@", name, ..]) => (*name, *host, *port),
        _ => return None,
    };
    Some((name, host, port.parse().ok()?))
}

/// Listens for `+promoted-slave` / `+switch-master` on one sentinel and moves to the new
/// master at once, so the client stops writing to a demoted master (which can stay
/// writable for seconds after a manual failover) without waiting for an error.
///
/// One runs per sentinel: only the sentinel leading a failover announces
/// `+promoted-slave`, as soon as the replica is promoted; the others announce
/// `+switch-master` only once they hear of the new configuration, up to seconds later.
/// Until the client follows, its renewals go to the old master, so a lease shorter than
/// that delay could run out on the new one.
///
/// `attempted` receives one message after the first subscription attempt, successful or
/// not. After a lost subscription, the master is asked for again: an announcement may have
/// been missed meanwhile.
async fn watch_switch_master(
    shared: Weak<Shared>,
    sentinel: redis::Client,
    mut attempted: Option<mpsc::Sender<()>>,
) {
    let mut failures: u32 = 0;
    let mut subscribed_before = false;
    loop {
        if shared.strong_count() == 0 {
            return;
        }
        let pubsub = match sentinel.get_async_pubsub().await {
            Ok(mut pubsub) => pubsub
                .subscribe(&["+switch-master", "+promoted-slave"])
                .await
                .map(|()| pubsub),
            Err(error) => Err(error),
        };
        if let Some(attempted) = attempted.take() {
            let _ = attempted.try_send(());
        }
        let mut pubsub = match pubsub {
            Ok(pubsub) => pubsub,
            Err(error) => {
                failures += 1;
                let address = sentinel.get_connection_info().addr().to_string();
                tracing::warn!(%error, sentinel = %address, "dlock: cannot subscribe to a sentinel's failover events; retrying");
                tokio::time::sleep(Duration::from_millis(100) * failures.min(20)).await;
                continue;
            }
        };
        failures = 0;
        if std::mem::replace(&mut subscribed_before, true) {
            let Some(strong) = shared.upgrade() else {
                return;
            };
            if let Route::Sentinel(route) = &strong.route
                && let Err(error) = route.resolve(&strong).await
            {
                tracing::warn!(%error, "dlock: cannot ask the sentinels for the master after resubscribing");
            }
        }
        let mut messages = pubsub.on_message();
        while let Some(message) = messages.next().await {
            let payload: String = message.get_payload().unwrap_or_default();
            let Some((name, host, port)) = announced_master(message.get_channel_name(), &payload)
            else {
                continue;
            };
            let Some(strong) = shared.upgrade() else {
                return;
            };
            if let Route::Sentinel(route) = &strong.route {
                if name != route.master_name {
                    continue;
                }
                if let Err(error) = route.follow(&strong, host, port).await {
                    tracing::warn!(%error, "dlock: switching to the announced master failed; asking the sentinels");
                    let _ = route.resolve(&strong).await;
                }
            }
        }
    }
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

    #[test]
    fn sentinel_announcements_name_the_new_master() {
        assert_eq!(
            announced_master("+switch-master", "mymaster 127.0.0.1 6379 127.0.0.1 6380"),
            Some(("mymaster", "127.0.0.1", 6380))
        );
        assert_eq!(
            announced_master(
                "+promoted-slave",
                "slave 127.0.0.1:6380 127.0.0.1 6380 @ mymaster 127.0.0.1 6379"
            ),
            Some(("mymaster", "127.0.0.1", 6380))
        );
        assert_eq!(announced_master("+switch-master", "garbage"), None);
        assert_eq!(
            announced_master("+sdown", "master mymaster 127.0.0.1 6379"),
            None
        );
    }
}
