//! The connection that receives unlock messages: a dedicated pub/sub connection to the
//! master, or sharded subscriptions through the cluster connection.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::future::try_join_all;
use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use redis::{FromRedisValue, PushInfo, PushKind, RedisError, RedisResult};
use tokio::sync::mpsc;

use super::{read, Backend, CallError, Route, Shared};

/// A connection that receives unlock messages.
pub(crate) enum Subscriber {
    /// A dedicated pub/sub connection to one server.
    Dedicated {
        sink: PubSubSink,
        stream: PubSubStream,
    },
    /// Sharded subscriptions through a cluster connection of their own (never the
    /// command connection); messages arrive as pushes.
    Sharded {
        conn: ClusterConnection,
        pushes: PushLease,
    },
}

/// The subscriber connections' push receiver, lent to one subscriber at a time: a
/// subscriber dropped after a failed `SSUBSCRIBE` hands it back for the next one, whose
/// connection pushes to the same receiver.
pub(crate) struct PushLease {
    receiver: Option<mpsc::UnboundedReceiver<PushInfo>>,
    shared: Arc<Shared>,
}

impl Drop for PushLease {
    fn drop(&mut self) {
        if let (Some(receiver), Route::Cluster(route)) = (self.receiver.take(), &self.shared.route)
        {
            *route.pushes.lock().unwrap_or_else(|p| p.into_inner()) = Some(receiver);
        }
    }
}

/// What a subscriber reports.
pub(crate) enum SubscriberEvent {
    /// An unlock message on `channel`; its payload names the client to wake, or none.
    Message { channel: String, payload: String },
    /// The server dropped the subscription to this channel (a slot moved).
    Dropped(String),
    /// A connection behind the subscriber was lost and restored: messages may be missing.
    Interrupted,
}

impl Subscriber {
    /// Subscribes to every channel of `channels` and waits for every confirmation.
    ///
    /// A dedicated connection sends one `SUBSCRIBE` for them all. A sharded subscriber
    /// sends one `SSUBSCRIBE` per cluster slot (the server refuses a sharded command whose
    /// channels span slots, CROSSSLOT), all at once, so a batch over many slots costs about
    /// one round trip rather than one per slot. On an error some channels may be subscribed
    /// and others not: the caller must treat none of them as confirmed.
    pub(crate) async fn subscribe(&mut self, channels: &[String]) -> RedisResult<()> {
        if channels.is_empty() {
            return Ok(());
        }
        match self {
            Subscriber::Dedicated { sink, .. } => sink.subscribe(channels).await,
            Subscriber::Sharded { conn, .. } => per_slot(conn, channels, Sharded::Subscribe).await,
        }
    }

    /// Unsubscribes from every channel of `channels` (see [`Subscriber::subscribe`]).
    pub(crate) async fn unsubscribe(&mut self, channels: &[String]) -> RedisResult<()> {
        if channels.is_empty() {
            return Ok(());
        }
        match self {
            Subscriber::Dedicated { sink, .. } => sink.unsubscribe(channels).await,
            Subscriber::Sharded { conn, .. } => {
                per_slot(conn, channels, Sharded::Unsubscribe).await
            }
        }
    }

    /// Checks that the connection still answers. A dedicated connection sends `PING`
    /// (allowed while subscribed); sharded subscriptions ride on the cluster connection,
    /// whose calls find a silent node themselves, so there is nothing to check.
    pub(crate) async fn ping(&mut self) -> RedisResult<()> {
        match self {
            Subscriber::Dedicated { sink, .. } => sink.ping::<redis::Value>().await.map(drop),
            Subscriber::Sharded { .. } => Ok(()),
        }
    }

    /// The next event; `None` when the subscriber is gone and must be replaced.
    pub(crate) async fn next(&mut self) -> Option<SubscriberEvent> {
        match self {
            Subscriber::Dedicated { stream, .. } => {
                let message = stream.next().await?;
                Some(SubscriberEvent::Message {
                    channel: message.get_channel_name().to_owned(),
                    payload: message.get_payload().unwrap_or_default(),
                })
            }
            Subscriber::Sharded { pushes, .. } => loop {
                let push = pushes.receiver.as_mut()?.recv().await?;
                let text = |at: usize| {
                    push.data
                        .get(at)
                        .and_then(|value| String::from_redis_value(value.clone()).ok())
                };
                match (push.kind.clone(), text(0)) {
                    (PushKind::SMessage | PushKind::Message, Some(channel)) => {
                        return Some(SubscriberEvent::Message {
                            channel,
                            payload: text(1).unwrap_or_default(),
                        })
                    }
                    (PushKind::SUnsubscribe, Some(channel)) => {
                        return Some(SubscriberEvent::Dropped(channel))
                    }
                    (PushKind::Disconnection, _) => return Some(SubscriberEvent::Interrupted),
                    _ => {}
                }
            },
        }
    }
}

/// A sharded pub/sub command.
#[derive(Clone, Copy)]
enum Sharded {
    Subscribe,
    Unsubscribe,
}

/// Sends `command` for `channels`, one command per cluster slot, concurrently.
async fn per_slot(
    conn: &ClusterConnection,
    channels: &[String],
    command: Sharded,
) -> RedisResult<()> {
    let mut groups: HashMap<Slot, Vec<&str>> = HashMap::new();
    for channel in channels {
        groups
            .entry(Slot::for_key(channel))
            .or_default()
            .push(channel);
    }
    try_join_all(groups.into_values().map(|group| {
        let mut conn = conn.clone();
        async move {
            match command {
                Sharded::Subscribe => conn.ssubscribe(&group).await,
                Sharded::Unsubscribe => conn.sunsubscribe(&group).await,
            }
        }
    }))
    .await
    .map(drop)
}

impl Backend {
    /// A subscriber on the current deployment, and the generation it belongs to: when
    /// [`generation`](Backend::generation) moves on, the subscriber is stale.
    pub(crate) async fn subscriber(&self) -> Result<Subscriber, CallError> {
        match &self.shared.route {
            Route::Direct(node) => {
                let client = read(node).client;
                self.dedicated(client).await
            }
            Route::Sentinel(route) => {
                let client = route.node().client;
                self.dedicated(client).await
            }
            Route::Cluster(route) => {
                let conn = self
                    .bounded(route.subscriber.get_async_connection())
                    .await?;
                let taken = route
                    .pushes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                match taken {
                    Some(receiver) => Ok(Subscriber::Sharded {
                        conn,
                        pushes: PushLease {
                            receiver: Some(receiver),
                            shared: Arc::clone(&self.shared),
                        },
                    }),
                    // Another subscriber holds it (never: one subscriber task per client).
                    None => Err(CallError::from(RedisError::from((
                        redis::ErrorKind::Io,
                        "the cluster subscriber's message channel is taken",
                    )))),
                }
            }
        }
    }

    async fn dedicated(&self, client: redis::Client) -> Result<Subscriber, CallError> {
        let pubsub = self.bounded(client.get_async_pubsub()).await?;
        let (sink, stream) = pubsub.split();
        Ok(Subscriber::Dedicated { sink, stream })
    }
}
