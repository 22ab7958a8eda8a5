//! Support for the code `#[distributed_lock]` generates. Not a public API: names and
//! signatures here change without notice.

use std::future::Future;

use futures_util::future::Either;
use futures_util::FutureExt;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use crate::client::LockClient;
use crate::error::{LockError, Result};
use crate::lock::guard::LockGuard;
use crate::multi::MultiGuard;
use crate::redlock::{RedLockClient, RedLockGuard};
use crate::semaphore::SemaphorePermit;
use crate::sync::observe::{self, Label};
use crate::sync::verbs::Acquire;

pub use crate::client::global::global_client_for;

/// How the expansion turns a [`LockError`] into the function's error type when there is no
/// `on_fail`: through `From`, with a compile error that names the way out when the type
/// has no `From<LockError>` (a foreign type such as axum's `StatusCode` cannot get one: the
/// orphan rule).
#[diagnostic::on_unimplemented(
    message = "#[distributed_lock] cannot turn a `dlock::LockError` into `{Self}`, this function's error type",
    label = "`{Self}` has no `From<dlock::LockError>`",
    note = "add `on_fail = handler` to the attribute: a fn taking the `LockError` and returning this function's type (e.g. `fn busy(e: LockError) -> Result<T, {Self}>`)",
    note = "or return an error type of your own that implements `From<dlock::LockError>`"
)]
pub trait FromLockError {
    /// The error to return for `error`.
    fn from_lock_error(error: LockError) -> Self;
}

impl<E: From<LockError>> FromLockError for E {
    fn from_lock_error(error: LockError) -> Self {
        E::from(error)
    }
}

/// `Err(error)` converted for the function's return type.
pub fn lock_failure<T, E: FromLockError>(error: LockError) -> std::result::Result<T, E> {
    Err(E::from_lock_error(error))
}

/// `on_busy = "skip"` on a function that cannot return an error (`Option<T>` or `()`
/// without `on_fail`): a failure other than a busy lock (Redis down, the lock lost while
/// the body ran) also returns the skipped value, and is logged so that it is not silent.
pub fn skipped_on_failure(function: &str, error: &LockError) {
    tracing::warn!(
        function,
        %error,
        "dlock: #[distributed_lock(on_busy = \"skip\")] returns its skipped value: the lock failed"
    );
}

/// What `client = expr` may evaluate to: a [`LockClient`], a [`RedLockClient`], or a
/// reference or `Arc` of one.
pub trait IntoClient {
    /// The client the attribute acquires from.
    type Client: Source;
    /// A handle to the client (a cheap clone).
    fn to_client(&self) -> Self::Client;
}

impl IntoClient for LockClient {
    type Client = LockClient;
    fn to_client(&self) -> LockClient {
        self.clone()
    }
}

impl IntoClient for RedLockClient {
    type Client = RedLockClient;
    fn to_client(&self) -> RedLockClient {
        self.clone()
    }
}

impl<T: IntoClient + ?Sized> IntoClient for &T {
    type Client = T::Client;
    fn to_client(&self) -> T::Client {
        (**self).to_client()
    }
}

impl<T: IntoClient + ?Sized> IntoClient for Arc<T> {
    type Client = T::Client;
    fn to_client(&self) -> T::Client {
        (**self).to_client()
    }
}

/// A client the attribute takes one lock from.
pub trait Source: Clone {
    /// What it hands out.
    type Guard: Guard;
    /// The `kind` label of the metrics of an acquisition of `kind` from this client.
    fn kind_label(kind: Kind) -> &'static str;
    /// Acquires the lock of `kind` called `key` the way the attribute's `wait` / `lease`
    /// options say (`wait: None`: the client's `default_wait`); `template` labels the
    /// acquisition's span and metrics.
    fn acquire(
        self,
        kind: Kind,
        key: String,
        template: &'static str,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<Self::Guard>> + Send;

    /// Counts an `on_busy = "skip"` call that found the lock busy.
    fn count_skip(&self);
}

/// What the attribute does with a guard: run the body in its scope, watch for its loss,
/// give it back after.
pub trait Guard {
    /// Runs the body as part of the guard's call chain (re-entry inside works).
    fn scope<F: Future>(&self, body: F) -> impl Future<Output = F::Output>;
    /// Completes with [`LockError::Lost`] when the lock is lost while held; never once
    /// released. Owns what it needs.
    fn lost(&self) -> impl Future<Output = LockError> + Send + 'static;
    /// The loss, if the guard knows of one now (a passed deadline counts).
    fn loss(&self) -> Option<LockError>;
    /// The `dlock.hold` span the body runs in.
    fn hold_span(&self) -> tracing::Span;
    /// Releases after the body; a failure cannot change the body's result any more, so
    /// it is logged (quietly when the loss was already reported: the release then finds
    /// the lock not held, as expected).
    fn release(self) -> impl Future<Output = ()>;
}

/// The lock was lost while the body ran (`on_lost = "cancel"` or `"error"`).
#[derive(Debug)]
pub struct Lost<T> {
    /// What the body returned, if it ran to its end; `None` when it was cancelled.
    pub output: Option<T>,
    /// The [`LockError::Lost`] to report.
    pub error: LockError,
}

/// `on_lost = "cancel"`: runs the body in the guard's scope until it finishes or the lock
/// is lost, whichever comes first. On a loss the body's future is dropped at once, so the
/// body stops at the `.await` it is suspended in and none of its later writes happen.
///
/// The loss is checked before the body is polled each time, so a loss known when the body
/// is woken wins; a body that finished while the guard was already lost (its last steps ran
/// unprotected) also reports the loss, with its output.
pub async fn run_cancelling<G: Guard, F: Future>(
    guard: &G,
    body: F,
) -> Result<F::Output, Lost<F::Output>> {
    let ended = {
        let lost = guard.lost();
        let body = guard.scope(body).instrument(guard.hold_span());
        futures_util::pin_mut!(lost, body);
        // `select` polls its first future first: the loss wins a tie.
        match futures_util::future::select(lost, body).await {
            Either::Left((error, _)) => Err(error),
            Either::Right((output, _)) => Ok(output),
        }
        // The body's future is dropped here, at the end of its block: before the release.
    };
    match ended {
        Ok(output) => finished(guard, output),
        Err(error) => Err(Lost {
            output: None,
            error,
        }),
    }
}

/// `on_lost = "error"`: runs the body in the guard's scope to its end, then reports a
/// loss that happened meanwhile.
pub async fn run_to_end<G: Guard, F: Future>(
    guard: &G,
    body: F,
) -> Result<F::Output, Lost<F::Output>> {
    let output = guard.scope(body).instrument(guard.hold_span()).await;
    finished(guard, output)
}

/// `on_lost = "ignore"`: runs the body in the guard's scope to its end and returns its
/// output even if the lock was lost meanwhile, with a warning.
pub async fn run_ignoring_loss<G: Guard, F: Future>(guard: &G, body: F) -> F::Output {
    let output = guard.scope(body).instrument(guard.hold_span()).await;
    if let Some(error) = guard.loss() {
        let lock = match &error {
            LockError::Lost { name, .. } => name.as_str(),
            _ => "",
        };
        tracing::warn!(
            %lock,
            %error,
            "dlock: #[distributed_lock] body ran while its lock was lost; on_lost = \"ignore\" returns its result anyway"
        );
    }
    output
}

fn finished<G: Guard, T>(guard: &G, output: T) -> Result<T, Lost<T>> {
    match guard.loss() {
        None => Ok(output),
        Some(error) => Err(Lost {
            output: Some(output),
            error,
        }),
    }
}

/// Whether a `lease` of `secs` s + `nanos` ns is within [`MAX_LEASE`](crate::limits::MAX_LEASE);
/// the attribute checks its `lease` with it at compile time.
pub const fn lease_fits(secs: u64, nanos: u32) -> bool {
    let max = crate::lease::MAX_LEASE.as_secs();
    secs < max || (secs == max && nanos == 0)
}

/// When a `min_hold` that starts now ends (the attribute checks `min_hold` against
/// [`MAX_LEASE`](crate::limits::MAX_LEASE) at compile time, so this cannot overflow in practice).
pub fn min_hold_end(min_hold: Duration) -> std::time::Instant {
    let now = std::time::Instant::now();
    now.checked_add(min_hold).unwrap_or(now)
}

/// Which lock the attribute's `kind` option names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The reentrant lock ([`LockClient::lock`]), the default.
    Reentrant,
    /// The fair lock ([`LockClient::fair_lock`]).
    Fair,
    /// The read side of the read-write lock ([`LockClient::rw_lock`]).
    Read,
    /// The write side of the read-write lock.
    Write,
    /// One permit of the semaphore ([`LockClient::semaphore`]) with this capacity.
    Permits(u32),
}

/// One acquisition of `handle` the way the attribute's `wait` / `lease` options say: the
/// handle's one acquisition, with the client's `default_wait` when `wait` is absent.
async fn acquire_with<H: Acquire>(
    handle: &H,
    template: &'static str,
    wait: Option<Duration>,
    lease: Option<Duration>,
) -> Result<H::Guard> {
    let wait = wait.or_else(|| handle.default_wait());
    handle.acquire(wait, lease, Some(template)).await
}

impl Kind {
    /// The `kind` label of this kind's metrics on a [`LockClient`].
    fn label(self) -> &'static str {
        match self {
            Kind::Reentrant => "lock",
            Kind::Fair => "fair_lock",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Permits(_) => "semaphore",
        }
    }
}

impl Source for LockClient {
    type Guard = LockGuard;

    fn kind_label(kind: Kind) -> &'static str {
        kind.label()
    }

    async fn acquire(
        self,
        kind: Kind,
        key: String,
        template: &'static str,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<LockGuard> {
        match kind {
            Kind::Reentrant => acquire_with(&self.lock(&key), template, wait, lease).await,
            Kind::Fair => acquire_with(&self.fair_lock(&key), template, wait, lease).await,
            Kind::Read => acquire_with(&self.rw_lock(&key).read(), template, wait, lease).await,
            Kind::Write => acquire_with(&self.rw_lock(&key).write(), template, wait, lease).await,
            Kind::Permits(permits) => {
                let semaphore = self.semaphore(&key, permits);
                let wait = wait.or_else(|| semaphore.default_wait());
                semaphore
                    .acquire_permits(1, wait, lease, Some(template))
                    .await
                    .map(SemaphorePermit::into_guard)
            }
        }
    }

    fn count_skip(&self) {
        self.inner.metrics.skipped();
    }
}

impl Source for RedLockClient {
    type Guard = RedLockGuard;

    fn kind_label(_: Kind) -> &'static str {
        "redlock"
    }

    async fn acquire(
        self,
        kind: Kind,
        key: String,
        template: &'static str,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<RedLockGuard> {
        if kind != Kind::Reentrant {
            return Err(LockError::Config(format!(
                "#[distributed_lock] on lock {key:?}: a RedLockClient takes plain exclusive locks; \
                 remove `kind` / `permits`, or pass a LockClient as `client`"
            )));
        }
        acquire_with(&self.lock(&key), template, wait, lease).await
    }

    /// A RedLockClient keeps no statistics of its own; the skip is still traced.
    fn count_skip(&self) {}
}

/// Acquires one lock from `client`; `template` is the attribute's key as written
/// (`goods:<id>`), the label of the acquisition's span and metrics.
pub async fn acquire<S: Source>(
    client: Result<S>,
    kind: Kind,
    template: &'static str,
    key: String,
    wait: Option<Duration>,
    lease: Option<Duration>,
) -> Result<S::Guard> {
    client?.acquire(kind, key, template, wait, lease).await
}

/// Counts a body the attribute did not run because its lock was busy
/// (`on_busy = "skip"`) in `dlock_skips_total`, labelled like the acquisition that found
/// the lock busy: its kind label and the key template.
fn record_skip(kind: &'static str, template: &'static str) {
    observe::skipped(Label {
        kind,
        template: Some(template),
    });
}

/// `on_busy = "skip"`: tries once; `Ok(None)` when the lock is busy (counted in the
/// client's [`Stats::skipped`](crate::inspect::Stats::skipped) and in `dlock_skips_total`, and
/// traced at debug level). `template` as for [`acquire`].
pub async fn acquire_or_skip<S: Source>(
    client: Result<S>,
    kind: Kind,
    template: &'static str,
    key: String,
    lease: Option<Duration>,
) -> Result<Option<S::Guard>> {
    let client = client?;
    let acquired = client
        .clone()
        .acquire(kind, key.clone(), template, Some(Duration::ZERO), lease)
        .await;
    skip_if_busy(acquired, &key, || {
        client.count_skip();
        record_skip(S::kind_label(kind), template);
    })
}

/// `keys = [...]` with `on_busy = "skip"`: all or none, tried once; `Ok(None)` when one
/// of them is busy. `template` as for [`acquire_all`].
pub async fn acquire_all_or_skip(
    client: Result<LockClient>,
    template: &'static str,
    keys: Vec<String>,
    lease: Option<Duration>,
) -> Result<Option<MultiGuard>> {
    let client = client?;
    let names = keys.join(", ");
    let acquired = acquire_all(
        Ok(client.clone()),
        template,
        keys,
        Some(Duration::ZERO),
        lease,
    )
    .await;
    skip_if_busy(acquired, &names, || {
        client.count_skip();
        record_skip("multi_lock", template);
    })
}

fn skip_if_busy<G>(acquired: Result<G>, lock: &str, count: impl FnOnce()) -> Result<Option<G>> {
    match acquired {
        Ok(guard) => Ok(Some(guard)),
        Err(error) if error.is_timeout() => {
            count();
            tracing::debug!(
                %lock,
                "dlock: #[distributed_lock(on_busy = \"skip\")] found the lock busy; the body did not run"
            );
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

/// Acquires every lock of `keys`, all or none (`keys = [...]`): in one script when they
/// share a cluster slot, else one after another in the canonical order. `template` is
/// the attribute's keys as written, joined by `", "`.
pub async fn acquire_all(
    client: Result<LockClient>,
    template: &'static str,
    keys: Vec<String>,
    wait: Option<Duration>,
    lease: Option<Duration>,
) -> Result<MultiGuard> {
    let multi = client?.multi_lock(&keys)?;
    acquire_with(&multi, template, wait, lease).await
}

/// Logs a release that failed after the body ran. After a loss the guard already
/// reported, "not held" is the expected answer, not news.
fn log_release_failure(name: &str, error: &LockError, was_lost: bool) {
    if was_lost && matches!(error, LockError::NotHeld { .. }) {
        tracing::debug!(lock = %name, %error, "dlock: #[distributed_lock] release after a loss found the lock not held");
    } else {
        tracing::warn!(lock = %name, %error, "dlock: #[distributed_lock] release failed after the body ran");
    }
}

impl Guard for LockGuard {
    fn scope<F: Future>(&self, body: F) -> impl Future<Output = F::Output> {
        LockGuard::scope(self, body)
    }

    fn lost(&self) -> impl Future<Output = LockError> + Send + 'static {
        LockGuard::lost(self)
    }

    fn loss(&self) -> Option<LockError> {
        // Ready at once when the guard knows of a loss (it checks the deadline first).
        LockGuard::lost(self).now_or_never()
    }

    fn hold_span(&self) -> tracing::Span {
        LockGuard::hold_span(self)
    }

    async fn release(self) {
        let name = self.name().to_owned();
        let was_lost = self.is_lost();
        if let Err(error) = self.unlock().await {
            log_release_failure(&name, &error, was_lost);
        }
    }
}

impl Guard for MultiGuard {
    fn scope<F: Future>(&self, body: F) -> impl Future<Output = F::Output> {
        MultiGuard::scope(self, body)
    }

    fn lost(&self) -> impl Future<Output = LockError> + Send + 'static {
        MultiGuard::lost(self)
    }

    fn loss(&self) -> Option<LockError> {
        MultiGuard::lost(self).now_or_never()
    }

    fn hold_span(&self) -> tracing::Span {
        MultiGuard::hold_span(self)
    }

    async fn release(self) {
        let names = self.names().join(", ");
        let was_lost = self.is_lost();
        if let Err(error) = self.unlock().await {
            log_release_failure(&names, &error, was_lost);
        }
    }
}

/// `min_hold = "..."`: a guard whose lock can stay taken after the body, until the
/// minimum hold ends. Only the reentrant lock of a [`LockClient`] can.
#[diagnostic::on_unimplemented(
    message = "`min_hold` needs the reentrant lock of a `LockClient`, not `{Self}`",
    label = "this client's lock cannot be held past the body",
    note = "remove `min_hold`, or pass a `LockClient` as `client`"
)]
pub trait HoldAfterExit {
    /// Gives the lock back after the body, leaving it taken until `until` when that is
    /// still in the future; a failure is logged like any release after the body.
    fn release_at(self, until: std::time::Instant) -> impl Future<Output = ()>;
}

impl HoldAfterExit for LockGuard {
    async fn release_at(self, until: std::time::Instant) {
        let name = self.name().to_owned();
        let was_lost = self.is_lost();
        if let Err(error) = self.hold_until(until).await {
            log_release_failure(&name, &error, was_lost);
        }
    }
}

/// A RedLock is not reentrant: the body runs as it is.
impl Guard for RedLockGuard {
    fn scope<F: Future>(&self, body: F) -> impl Future<Output = F::Output> {
        RedLockGuard::scope(self, body)
    }

    fn lost(&self) -> impl Future<Output = LockError> + Send + 'static {
        RedLockGuard::lost(self)
    }

    fn loss(&self) -> Option<LockError> {
        if !self.is_lost() {
            return None;
        }
        // `is_lost` also counts a passed deadline the renewal task has not recorded yet.
        Some(
            RedLockGuard::lost(self)
                .now_or_never()
                .unwrap_or_else(|| LockError::Lost {
                    name: self.name().to_owned(),
                    reason: crate::error::LossReason::LeaseExpired,
                }),
        )
    }

    fn hold_span(&self) -> tracing::Span {
        RedLockGuard::hold_span(self)
    }

    async fn release(self) {
        let name = self.name().to_owned();
        let was_lost = self.is_lost();
        if let Err(error) = self.unlock().await {
            log_release_failure(&name, &error, was_lost);
        }
    }
}

/// Gives the body's future the function's declared output type, so that `?` and `return`
/// inside it infer exactly as in the original function.
pub fn typed_body<T, F: Future<Output = T>>(body: F) -> F {
    body
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use super::*;

    #[test]
    fn a_skip_is_counted_under_its_kind_and_template() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            record_skip(LockClient::kind_label(Kind::Fair), "jobs:<id>");
            record_skip(RedLockClient::kind_label(Kind::Reentrant), "jobs:<id>");
            record_skip(RedLockClient::kind_label(Kind::Reentrant), "jobs:<id>");
        });
        let text = handle.render();
        assert!(
            text.contains(r#"dlock_skips_total{kind="fair_lock",key_template="jobs:<id>"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"dlock_skips_total{kind="redlock",key_template="jobs:<id>"} 2"#),
            "{text}"
        );
    }
}
