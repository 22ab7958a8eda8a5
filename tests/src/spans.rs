//! Every closed `tracing` span of a test binary, with its fields and how long it was
//! open, for tests that check the spans dlock opens.
//!
//! A test binary has one global subscriber: the first call to [`capture_spans`] installs
//! it; later calls keep it. Use it instead of [`logs`](crate::logs) in its binary (the two
//! do not combine). Tests of one binary run in parallel, so a test should look only at
//! spans that name its own lock.
//!
//! ```
//! use dlock_tests::spans::{capture_spans, closed_spans};
//!
//! capture_spans();
//! tracing::info_span!("work", lock = "report").in_scope(|| {});
//! let span = closed_spans().into_iter().find(|s| s.name == "work").unwrap();
//! assert_eq!(span.field("lock"), Some("report"));
//! ```

use std::collections::BTreeMap;
use std::sync::{Mutex, Once, PoisonError};
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

static CLOSED: Mutex<Vec<ClosedSpan>> = Mutex::new(Vec::new());

/// A span that was closed: its name, its fields as last recorded, and its life.
#[derive(Debug, Clone)]
pub struct ClosedSpan {
    /// The span's name (`dlock.acquire`).
    pub name: &'static str,
    /// Every field that has a value, as text (a string without quotes).
    pub fields: BTreeMap<String, String>,
    /// From the span's creation to its close.
    pub lasted: Duration,
    /// The name of the span it was created in, if any.
    pub parent: Option<&'static str>,
}

impl ClosedSpan {
    /// The value of `field`, if it was recorded.
    pub fn field(&self, field: &str) -> Option<&str> {
        self.fields.get(field).map(String::as_str)
    }
}

/// What the layer keeps in an open span's extensions.
struct Open {
    fields: BTreeMap<String, String>,
    opened: Instant,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

struct Capture;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Open {
                fields,
                opened: Instant::now(),
            });
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(open) = span.extensions_mut().get_mut::<Open>()
        {
            values.record(&mut Fields(&mut open.fields));
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(open) = span.extensions_mut().remove::<Open>() else {
            return;
        };
        let closed = ClosedSpan {
            name: span.name(),
            fields: open.fields,
            lasted: open.opened.elapsed(),
            parent: span.parent().map(|parent| parent.name()),
        };
        CLOSED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(closed);
    }
}

/// Starts capturing every span (once per test binary).
///
/// # Panics
///
/// When another global subscriber was installed first.
pub fn capture_spans() {
    static START: Once = Once::new();
    START.call_once(|| {
        tracing_subscriber::registry()
            .with(Capture)
            .try_init()
            .expect("no other global subscriber in this test binary");
    });
}

/// Every span closed so far, in the order they closed.
pub fn closed_spans() -> Vec<ClosedSpan> {
    CLOSED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}
