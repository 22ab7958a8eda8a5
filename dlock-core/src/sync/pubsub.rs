//! Unlock notifications: one subscriber connection per client, channels shared by all the
//! client's waiters on a lock and reference-counted.
//!
//! A release publishes one message; it wakes one local waiter of the channel
//! (`Notify::notify_one`), so a hand-off does not stampede every waiter at Redis. If the
//! woken waiter is cancelled before it runs, tokio passes the wake-up to the next one. When
//! the subscriber connection is re-established every waiter is woken, because messages
//! published while it was down are gone.
//!
//! The lock's release names the one client it wakes (the longest waiting in the lock's
//! waiter registry, see `lock/scripts/release.lua`): a message naming another client wakes
//! nobody here, so one release costs one try at Redis however many clients wait. Messages
//! that name no client (a force unlock, other primitives) wake one waiter in every client.
//! A client whose last waiter on such a lock leaves removes itself from the registry (and
//! passes on a wake-up it may have been sent meanwhile).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::{RedisError, RedisResult};
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

use crate::background::Background;
use crate::redis::{Backend, Subscriber, SubscriberEvent};
use crate::scripts::scripts;
use crate::sync::release::HAND_OFF_RESERVATION;
use crate::sync::retry::backoff;

/// The longest pause between two attempts to reconnect the subscriber. Waiters do not
/// depend on it alone: they re-check the lock every `max_wait_recheck` anyway.
const MAX_RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// The most channels in one SUBSCRIBE or UNSUBSCRIBE (in a cluster, in one batch of
/// per-slot SSUBSCRIBEs). Subscribing one channel per command left thousands of new
/// waiters unsubscribed for seconds; one command for everything queued catches up at
/// once. The bound keeps one command's reply (one confirmation per channel) small and its
/// time at Redis (about a millisecond per thousand channels) far below any sane command
/// timeout, and the messages arriving meanwhile wait no longer than that.
const MAX_BATCH: usize = 1_000;

/// How long a channel stays subscribed after its last waiter left. A task that takes a
/// contended lock again right after releasing it (a loop, a busy endpoint) finds the
/// subscription still confirmed: its first busy try can wait for its wake-up at once,
/// instead of subscribing, waiting for the confirmation and trying once more, and the
/// connection is spared an UNSUBSCRIBE and a SUBSCRIBE per acquisition. Short, so that
/// channels nobody waits on go within a fraction of a second.
const LINGER: Duration = Duration::from_millis(50);

/// The client's subscription service.
pub(crate) struct PubSubService {
    shared: Arc<Shared>,
}

struct Shared {
    channels: Mutex<HashMap<String, Channel>>,
    /// Channels whose wanted state changed (an entry added to or removed from `channels`):
    /// the subscriber task brings the connection in line with the map.
    changes: mpsc::UnboundedSender<String>,
    /// This client's id, as release messages name the client they wake.
    client_id: Arc<str>,
    /// For leaving waiter registries.
    backend: Backend,
    /// Channels whose last waiter left, in the order they left (see [`LINGER`]).
    lingering: Mutex<VecDeque<(Instant, String)>>,
}

struct Channel {
    waiters: usize,
    wake: Arc<Notify>,
    /// Counts unlock messages (and reconnections, which may have lost some) for watchers
    /// that must see every one without taking the wake-up meant for a waiter.
    notices: Arc<watch::Sender<u64>>,
    confirmed: watch::Receiver<bool>,
    confirm: watch::Sender<bool>,
    /// The lock whose waiter registry this client joins while it waits on the channel
    /// (the registry is named like the channel), left when the last waiter goes.
    registry_of: Option<String>,
    /// When the last waiter left: the channel stays subscribed for [`LINGER`].
    idle_since: Option<Instant>,
}

impl Channel {
    /// An unlock message arrived, or may have been missed: wake one waiter (who re-tries
    /// the lock) unless the message woke another client, and tell every watcher.
    fn notify(&self, wakes_here: bool) {
        if wakes_here {
            self.wake.notify_one();
        }
        self.notices
            .send_modify(|count| *count = count.wrapping_add(1));
    }
}

/// One waiter's interest in a channel; dropping it releases the interest.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    channel: String,
    wake: Arc<Notify>,
    notices: watch::Receiver<u64>,
    confirmed: watch::Receiver<bool>,
    /// Its waiter acquired the lock: a wake-up sent to this client was used.
    acquired: bool,
}

impl PubSubService {
    /// Starts the subscriber task; it runs until the service is dropped.
    ///
    /// `command_timeout` bounds every subscribe and unsubscribe: on a half-open connection
    /// they would wait forever, and with them every waiter's wake-up.
    pub(crate) fn start(
        backend: Backend,
        client_id: Arc<str>,
        retry_delay: Duration,
        command_timeout: Duration,
        background: &Background,
    ) -> PubSubService {
        let (changes, receiver) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            channels: Mutex::new(HashMap::new()),
            changes,
            client_id,
            backend: backend.clone(),
            lingering: Mutex::default(),
        });
        let receiver = Arc::new(tokio::sync::Mutex::new(receiver));
        let weak = Arc::downgrade(&shared);
        background.start("subscriber", move || {
            run(
                weak.clone(),
                Arc::clone(&receiver),
                backend.clone(),
                Timing {
                    retry_delay,
                    command_timeout,
                },
            )
        });
        PubSubService { shared }
    }

    /// Registers interest in `channel`; the subscription may not be confirmed yet.
    pub(crate) fn subscribe(&self, channel: &str) -> Subscription {
        self.subscribe_to(channel, None)
    }

    /// [`subscribe`](PubSubService::subscribe) for a waiter of the lock `lock_key`, whose
    /// tries register this client in the lock's waiter registry: when the client's last
    /// subscription to the channel ends, the client leaves the registry.
    pub(crate) fn subscribe_registered(&self, channel: &str, lock_key: &str) -> Subscription {
        self.subscribe_to(channel, Some(lock_key))
    }

    /// [`subscribe_registered`](PubSubService::subscribe_registered), but only if the
    /// channel is subscribed and confirmed already (other waiters of the client, or a
    /// channel lingering after its last waiter): a try made while holding it needs no
    /// re-try after a confirmation, since no message sent after it can be missed.
    pub(crate) fn subscribe_if_confirmed(
        &self,
        channel: &str,
        lock_key: &str,
    ) -> Option<Subscription> {
        let confirmed = self
            .shared
            .lock_channels()
            .get(channel)
            .is_some_and(|entry| *entry.confirmed.borrow());
        confirmed.then(|| self.subscribe_to(channel, Some(lock_key)))
    }

    /// A waiter of the lock `lock_key` stopped while a try of it was at Redis, before it
    /// had a subscription: that try may have registered this client as waiting, and no
    /// subscription's end will take it out. Unless another waiter of the client waits on
    /// the channel (its subscription's end leaves), the client leaves the registry and
    /// passes on a wake-up it may have been sent.
    ///
    /// The leave is sent after the try on the same connection (the lock's slot), so it
    /// runs after the try at Redis.
    pub(crate) fn leave_unless_waiting(&self, channel: &str, lock_key: &str) {
        let waiting = self
            .shared
            .lock_channels()
            .get(channel)
            .is_some_and(|entry| entry.waiters > 0);
        if !waiting {
            self.shared
                .leave_registry(lock_key.to_owned(), channel.to_owned(), false);
        }
    }

    fn subscribe_to(&self, channel: &str, registry_of: Option<&str>) -> Subscription {
        let mut channels = self.shared.lock_channels();
        if let Some(entry) = channels.get_mut(channel) {
            if entry.idle_since.take().is_some() {
                // A wake-up stored while nobody waited belongs to nobody now.
                entry.wake = Arc::new(Notify::new());
            }
        }
        let entry = channels.entry(channel.to_owned()).or_insert_with(|| {
            let (confirm, confirmed) = watch::channel(false);
            let _ = self.shared.changes.send(channel.to_owned());
            Channel {
                waiters: 0,
                wake: Arc::new(Notify::new()),
                notices: Arc::new(watch::channel(0).0),
                confirmed,
                confirm,
                registry_of: None,
                idle_since: None,
            }
        });
        if entry.registry_of.is_none() {
            entry.registry_of = registry_of.map(str::to_owned);
        }
        entry.waiters += 1;
        Subscription {
            shared: Arc::clone(&self.shared),
            channel: channel.to_owned(),
            wake: Arc::clone(&entry.wake),
            notices: entry.notices.subscribe(),
            confirmed: entry.confirmed.clone(),
            acquired: false,
        }
    }
}

impl Shared {
    fn lock_channels(&self) -> std::sync::MutexGuard<'_, HashMap<String, Channel>> {
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake_all(&self) {
        for channel in self.lock_channels().values() {
            channel.wake.notify_waiters();
            channel.notify(true);
        }
    }

    /// When the oldest lingering channel's time is up.
    fn next_expiry(&self) -> Option<Instant> {
        let lingering = self.lingering.lock().unwrap_or_else(|p| p.into_inner());
        lingering.front().map(|(since, _)| *since + LINGER)
    }

    /// Forgets the lingering channels whose time is up and nobody took again; returns
    /// them, to be unsubscribed.
    fn expire_lingering(&self, now: Instant) -> Vec<String> {
        let mut expired = Vec::new();
        let mut lingering = self.lingering.lock().unwrap_or_else(|p| p.into_inner());
        let mut channels = self.lock_channels();
        while let Some((since, _)) = lingering.front() {
            if *since + LINGER > now {
                break;
            }
            let Some((since, name)) = lingering.pop_front() else {
                break;
            };
            if channels
                .get(&name)
                .is_some_and(|entry| entry.waiters == 0 && entry.idle_since == Some(since))
            {
                channels.remove(&name);
                expired.push(name);
            }
        }
        expired
    }

    /// Whether an unlock message with `payload` wakes a waiter of this client: unless it
    /// names another client (a release that chose whom to wake).
    fn wakes_here(&self, payload: &str) -> bool {
        payload == &*self.client_id || uuid::Uuid::try_parse(payload).is_err()
    }

    /// Takes this client out of the waiter registry of `lock_key` (named `channel`), in
    /// the background; unless the last waiter `acquired` the lock, a wake-up this client
    /// may have been sent is passed on. A failure only costs the next waiter there one
    /// recheck interval.
    fn leave_registry(&self, lock_key: String, channel: String, acquired: bool) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let backend = self.backend.clone();
        let client_id = Arc::clone(&self.client_id);
        runtime.spawn(async move {
            let mut invocation = scripts().leave.prepare_invoke();
            invocation
                .key(&lock_key)
                .key(&channel)
                .arg(&*client_id)
                .arg(backend.publish_command())
                .arg(if acquired { "0" } else { "1" })
                .arg(HAND_OFF_RESERVATION.as_millis() as u64);
            if let Err(error) = backend.invoke::<i64>(&invocation).await {
                tracing::debug!(%channel, %error, "dlock: leaving the waiter registry failed");
            }
        });
    }
}

impl Subscription {
    /// Whether Redis has confirmed the subscription (unlock messages arrive).
    pub(crate) fn is_confirmed(&self) -> bool {
        *self.confirmed.borrow()
    }

    /// Completes once Redis confirmed the subscription (unlock messages will arrive).
    pub(crate) async fn confirmed(&mut self) {
        // The sender lives in the shared map as long as this subscription exists.
        let _ = self.confirmed.wait_for(|confirmed| *confirmed).await;
    }

    /// Its waiter acquired the lock: if this is the client's last subscription to the
    /// channel, leaving the waiter registry passes no wake-up on (this one used it).
    pub(crate) fn acquired(&mut self) {
        self.acquired = true;
    }

    /// Completes when an unlock message for the channel arrives (or the subscriber
    /// reconnected and messages may have been missed).
    pub(crate) async fn notified(&self) {
        self.wake.notified().await;
    }

    /// Completes at the next unlock message for the channel (or reconnection), whoever
    /// else is woken by it: for watching a lock rather than re-trying it.
    pub(crate) async fn noticed(&mut self) {
        // The sender lives in the shared map as long as this subscription exists.
        let _ = self.notices.changed().await;
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut channels = self.shared.lock_channels();
        if let Some(entry) = channels.get_mut(&self.channel) {
            entry.waiters -= 1;
            if entry.waiters == 0 {
                let now = Instant::now();
                entry.idle_since = Some(now);
                let registry_of = entry.registry_of.clone();
                drop(channels);
                self.shared
                    .lingering
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push_back((now, self.channel.clone()));
                // Tells the subscriber task there is a lingering channel to time.
                let _ = self.shared.changes.send(self.channel.clone());
                if let Some(lock_key) = registry_of {
                    self.shared
                        .leave_registry(lock_key, self.channel.clone(), self.acquired);
                }
            }
        }
    }
}

/// The subscriber's pauses and bounds.
#[derive(Clone, Copy)]
struct Timing {
    retry_delay: Duration,
    command_timeout: Duration,
}

/// The subscriber task: (re)connects, keeps the wanted channels subscribed, routes messages.
async fn run(
    shared: Weak<Shared>,
    changes: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>>,
    backend: Backend,
    timing: Timing,
) {
    let Timing {
        retry_delay,
        command_timeout,
    } = timing;
    let mut changes = changes.lock().await;
    let mut generation = backend.generation();
    let mut failures: u32 = 0;
    loop {
        generation.mark_unchanged();
        let mut subscriber = match backend.subscriber().await {
            Ok(subscriber) => subscriber,
            Err(error) => {
                if shared.strong_count() == 0 {
                    return;
                }
                tracing::warn!(%error, attempt = failures + 1, "dlock: subscriber connection failed; retrying");
                back_off(retry_delay, &mut failures).await;
                continue;
            }
        };
        // The channels this connection is subscribed to, as Redis confirmed them.
        let mut subscribed = HashSet::new();

        // Subscribe everything wanted right now, in batches; later changes arrive on
        // `changes`.
        let Some(wanted) = wanted(&shared, None) else {
            return;
        };
        let mut healthy = true;
        for batch in wanted.chunks(MAX_BATCH) {
            if let Err(error) =
                subscribe(&mut subscriber, &mut subscribed, batch, command_timeout).await
            {
                // Back off as for a failed connection: a server that refuses the
                // subscription (an ACL without the channel, say) must not be hammered.
                tracing::warn!(%error, channels = batch.len(), attempt = failures + 1, "dlock: subscribing failed; reconnecting");
                healthy = false;
                break;
            }
        }
        if !healthy {
            unconfirm_all(&shared);
            back_off(retry_delay, &mut failures).await;
            continue;
        }
        if failures > 0 {
            tracing::info!("dlock: subscriber connection re-established");
        }
        failures = 0;
        if let Some(shared) = shared.upgrade() {
            shared.wake_all();
        }

        while healthy {
            let expiry = shared.upgrade().and_then(|shared| shared.next_expiry());
            tokio::select! {
                () = sleep_until_some(expiry) => {
                    let Some(expired) = shared.upgrade().map(|shared| shared.expire_lingering(Instant::now())) else {
                        return;
                    };
                    for batch in expired.chunks(MAX_BATCH) {
                        if let Err(error) = apply(&shared, &mut subscriber, &mut subscribed, batch, command_timeout).await {
                            tracing::warn!(%error, channels = batch.len(), "dlock: unsubscribing failed; reconnecting");
                            healthy = false;
                            break;
                        }
                    }
                }
                change = changes.recv() => match change {
                    None => return,
                    Some(first) => {
                        let batch = drain(first, &mut changes);
                        if let Err(error) = apply(&shared, &mut subscriber, &mut subscribed, &batch, command_timeout).await {
                            tracing::warn!(%error, channels = batch.len(), "dlock: (un)subscribing failed; reconnecting");
                            healthy = false;
                        }
                    }
                },
                event = subscriber.next() => match event {
                    Some(SubscriberEvent::Message { channel, payload }) => {
                        notify(&shared, &channel, Some(&payload));
                    }
                    Some(SubscriberEvent::Dropped(channel)) => {
                        // A slot moved: subscribe again (routed to the new owner) and let
                        // the waiters re-check, since a release may have been missed.
                        subscribed.remove(&channel);
                        if confirmation(&shared, &channel).is_some() {
                            tracing::debug!(%channel, "dlock: sharded subscription dropped by the server; resubscribing");
                            let again = [channel];
                            if within(command_timeout, subscriber.subscribe(&again)).await.is_err() {
                                healthy = false;
                            } else {
                                subscribed.extend(again.iter().cloned());
                            }
                            notify(&shared, &again[0], None);
                        }
                    }
                    Some(SubscriberEvent::Interrupted) => {
                        if let Some(shared) = shared.upgrade() {
                            shared.wake_all();
                        }
                    }
                    None => healthy = false,
                },
                _ = generation.changed() => {
                    tracing::info!("dlock: master moved; moving the subscriber connection");
                    healthy = false;
                }
            }
        }
        tracing::warn!("dlock: subscriber connection lost; reconnecting");
        unconfirm_all(&shared);
    }
}

/// Sleeps until `at`, or forever without it.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// `first` and every change already queued behind it, up to [`MAX_BATCH`], without
/// duplicates: whatever the history of a channel within the batch, only its state in the
/// shared map now counts.
fn drain(first: String, changes: &mut mpsc::UnboundedReceiver<String>) -> Vec<String> {
    let mut seen = HashSet::from([first.clone()]);
    let mut batch = vec![first];
    while seen.len() < MAX_BATCH {
        match changes.try_recv() {
            Ok(channel) => {
                if seen.insert(channel.clone()) {
                    batch.push(channel);
                }
            }
            Err(_) => break,
        }
    }
    batch
}

/// Brings the connection in line with the shared map for the channels of `batch`: one
/// command subscribes those now wanted and not subscribed, one unsubscribes those
/// subscribed and no longer wanted (a channel wanted and dropped again within the batch
/// is neither). A channel is confirmed only once Redis confirmed its subscription.
async fn apply(
    shared: &Weak<Shared>,
    subscriber: &mut Subscriber,
    subscribed: &mut HashSet<String>,
    batch: &[String],
    timeout: Duration,
) -> RedisResult<()> {
    let Some(wanted) = wanted(shared, Some(batch)) else {
        return Ok(()); // the service is gone: the next `recv` ends the task
    };
    let wanted_names: HashSet<&str> = wanted.iter().map(|(name, _)| name.as_str()).collect();
    let unwanted: Vec<String> = batch
        .iter()
        .filter(|channel| subscribed.contains(*channel) && !wanted_names.contains(channel.as_str()))
        .cloned()
        .collect();
    let mut missing = Vec::with_capacity(wanted.len());
    for (channel, confirm) in wanted {
        if subscribed.contains(&channel) {
            // Wanted again before its unsubscription was sent: still subscribed.
            confirm.send_replace(true);
        } else {
            missing.push((channel, confirm));
        }
    }
    subscribe(subscriber, subscribed, &missing, timeout).await?;
    if unwanted.is_empty() {
        return Ok(());
    }
    within(timeout, subscriber.unsubscribe(&unwanted)).await?;
    for channel in &unwanted {
        subscribed.remove(channel);
    }
    Ok(())
}

/// Subscribes to `channels` in one command and, once Redis confirmed them all, records and
/// confirms each of them.
async fn subscribe(
    subscriber: &mut Subscriber,
    subscribed: &mut HashSet<String>,
    channels: &[(String, watch::Sender<bool>)],
    timeout: Duration,
) -> RedisResult<()> {
    let names: Vec<String> = channels.iter().map(|(name, _)| name.clone()).collect();
    within(timeout, subscriber.subscribe(&names)).await?;
    for (name, confirm) in channels {
        confirm.send_replace(true);
        subscribed.insert(name.clone());
    }
    Ok(())
}

/// The wanted channels (all of them, or those of `among`) with their confirmation
/// senders; `None` when the service is gone.
fn wanted(
    shared: &Weak<Shared>,
    among: Option<&[String]>,
) -> Option<Vec<(String, watch::Sender<bool>)>> {
    let shared = shared.upgrade()?;
    let channels = shared.lock_channels();
    let entry = |name: &String, channel: &Channel| (name.clone(), channel.confirm.clone());
    Some(match among {
        None => channels.iter().map(|(name, c)| entry(name, c)).collect(),
        Some(names) => names
            .iter()
            .filter_map(|name| channels.get(name).map(|c| entry(name, c)))
            .collect(),
    })
}

/// A subscribe or unsubscribe, failed with a timeout error when Redis does not answer
/// within `timeout`: the connection is then replaced.
async fn within(
    timeout: Duration,
    call: impl std::future::Future<Output = RedisResult<()>>,
) -> RedisResult<()> {
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or_else(|_| {
            Err(RedisError::from((
                redis::ErrorKind::Io,
                "no answer within the command timeout",
            )))
        })
}

/// Waits before the next reconnection attempt and counts the failure.
async fn back_off(retry_delay: Duration, failures: &mut u32) {
    let pause = backoff(retry_delay, *failures).min(MAX_RECONNECT_PAUSE);
    *failures += 1;
    tokio::time::sleep(pause).await;
}

/// Marks every channel as not subscribed until the next connection confirms it.
fn unconfirm_all(shared: &Weak<Shared>) {
    if let Some(shared) = shared.upgrade() {
        for channel in shared.lock_channels().values() {
            channel.confirm.send_replace(false);
        }
    }
}

fn confirmation(shared: &Weak<Shared>, channel: &str) -> Option<watch::Sender<bool>> {
    let shared = shared.upgrade()?;
    let channels = shared.lock_channels();
    channels.get(channel).map(|c| c.confirm.clone())
}

/// Passes an unlock message with `payload` on (see [`Channel::notify`]); `None` means
/// messages may have been missed: every waiter of the channel is woken.
fn notify(shared: &Weak<Shared>, channel: &str, payload: Option<&str>) {
    let Some(shared) = shared.upgrade() else {
        return;
    };
    let wakes_here = payload.is_none_or(|payload| shared.wakes_here(payload));
    let channels = shared.lock_channels();
    if let Some(channel) = channels.get(channel) {
        if payload.is_none() {
            channel.wake.notify_waiters();
        }
        channel.notify(wakes_here);
    }
}
