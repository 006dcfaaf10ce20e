//! Telemetry through [`tracing`]: spans and log lines are `tracing` spans and events, metrics go
//! through the [`Meter`] port, and [`Telemetry`] carries both — a `tracing` [`Dispatch`] and a
//! meter — so each engine, worker and server records into the pipeline it was given (a test's
//! in-memory one, a process's OTLP one), never into whatever a global happens to hold.
//! OpenTelemetry lives in `forge-otel`, the only crate that knows it: its subscriber layers turn
//! these spans and events into OTLP spans and log records and enforce the vocabularies below.
//!
//! Spans have closed names ([`SpanName`]) and each is opened here, by [`Telemetry::span`], with
//! the attribute fields it may carry declared up front ([`SPAN_ATTRIBUTES`] is their union); the
//! adapter drops any other span, and any other attribute, whoever made it. Every run event maps
//! to the span it opens, ends or folds into ([`span_for`], a total match: a new event kind without
//! a decision does not compile). A span's trace context travels with the span: a child names its
//! parent [`Span`], and only what crosses a process boundary is a [`TraceContext`] — ids, nothing
//! else — as a W3C `traceparent` stored with each job. [`TraceContext::parse`] treats a malformed
//! value, and the all-zero ids, as absent: a run without a trace link starts its own trace (its
//! claim span says `queue.trace_continued = false`), never joins a made-up one.
//!
//! Instruments are a closed set ([`Instrument`]), each with its unit (also in its name),
//! description and the operational question it answers; their attributes pass the allowlist
//! [`METRIC_ATTRIBUTES`] in the adapter — no run, thread, tenant or user ids. (Metrics are not a
//! `tracing` concept: the OpenTelemetry SDK's instruments, with units and descriptions, sit
//! behind the one-method [`Meter`].)
//!
//! Logs cannot carry content by construction: a line is a [`LogEvent`] (a closed enum, no
//! message string) and fields, emitted with [`log!`](crate::log) as a `tracing` event of target
//! [`TARGET`]. The adapter's layers keep only such events, and of their fields, [`sanitize`]
//! keeps only allowlisted keys ([`LOG_FIELDS`]) with primitive values, caps strings at
//! [`MAX_LOG_STRING`] characters with a visible marker, and reports what it dropped as a
//! [`LogEvent::FieldsDropped`] line naming keys, never values. Errors are logged as a classified
//! code ([`error_code`]), never as their text.
//!
//! Modules: `context` (the `traceparent`), `vocabulary` (the closed sets and allowlists),
//! `fields` (attribute values and the log rules).

mod context;
mod fields;
mod vocabulary;

use std::sync::Arc;

pub use context::TraceContext;
pub use fields::{
    Attr, MAX_LOG_STRING, TRUNCATED, Value, capped, log_lines, log_records, sanitize,
};
pub use tracing::Dispatch;
pub use vocabulary::{
    Instrument, InstrumentKind, LOG_FIELDS, LogEvent, METRIC_ATTRIBUTES, SPAN_ATTRIBUTES, SpanFor,
    SpanKind, SpanName, span_for,
};

#[doc(hidden)]
pub use tracing as __tracing;

use crate::time::Timestamp;

/// The `tracing` target of every span and log line Forge makes; the adapter ignores the rest
/// (a dependency's own `tracing` output can quote a query or a body).
pub const TARGET: &str = "forge";

/// The target of the event that stands for a span which already happened (a wait that outlived
/// the processes it crossed): the adapter makes the span from its two timestamps.
pub const WAIT_TARGET: &str = "forge::wait";

/// Port: metrics. Values are recorded as given; an adapter drops attributes not in
/// [`METRIC_ATTRIBUTES`] and a negative duration (clock skew), rather than clamping it.
pub trait Meter: Send + Sync {
    /// Adds `value` to a counter, or records it in a histogram, or sets a gauge.
    fn record(&self, instrument: Instrument, value: f64, attrs: &[(&'static str, &str)]);
}

/// A meter that records nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Noop;

impl Meter for Noop {
    fn record(&self, _: Instrument, _: f64, _: &[(&'static str, &str)]) {}
}

/// A classified code for an error, never its text: a Forge error's kind, else `error`. Text
/// and cause chains carry URLs with tokens and the inputs that failed; a code carries neither.
pub fn error_code(e: &crate::Error) -> &'static str {
    use crate::ErrorKind::*;
    match e.kind() {
        NotFound => "not_found",
        Conflict => "conflict",
        Invalid => "invalid",
        Retryable => "retryable",
        Fatal => "fatal",
        Cancelled => "cancelled",
        Forbidden => "forbidden",
    }
}

/// How the pipeline behind a [`Telemetry`] reads and sets the trace ids of its spans, for the
/// core, which does not know OpenTelemetry: [`Span::context`] and remote parents go through it.
/// Without one, spans have no ids.
#[derive(Debug, Clone, Copy)]
pub struct TraceIds {
    /// The trace context of a span of this pipeline.
    pub context: fn(&tracing::Span) -> Option<TraceContext>,
    /// Makes a span of this pipeline, not yet entered, a child of a remote span.
    pub set_remote_parent: fn(&tracing::Span, &TraceContext),
}

/// An open span of the vocabulary; it ends when [`Span::end`] is called or the last clone is
/// dropped.
#[derive(Debug, Clone)]
pub struct Span {
    inner: tracing::Span,
    ids: Option<TraceIds>,
}

impl Span {
    /// A span that records nothing (the parent of a root).
    pub fn none() -> Self {
        Self {
            inner: tracing::Span::none(),
            ids: None,
        }
    }

    /// Its identity, for children in other processes (`None` when nothing records it).
    pub fn context(&self) -> Option<TraceContext> {
        self.ids.and_then(|ids| (ids.context)(&self.inner))
    }

    /// Sets an attribute declared for its name (others are ignored: see [`SPAN_ATTRIBUTES`]).
    pub fn set(&self, key: &'static str, value: Value) {
        match value {
            Value::Str(s) => self.inner.record(key, s.as_str()),
            Value::Int(i) => self.inner.record(key, i),
            Value::Float(f) => self.inner.record(key, f),
            Value::Bool(b) => self.inner.record(key, b),
            Value::Json(_) => &self.inner,
        };
    }

    /// Marks it failed with a classified code (its `error.type` and its status).
    pub fn fail(&self, code: &str) {
        self.inner.record("error.type", code);
        self.inner.record("otel.status_description", code);
    }

    /// Ends it now (unless a clone still holds it open).
    pub fn end(self) {}

    /// The `tracing` span, to instrument a future with.
    pub fn as_tracing(&self) -> &tracing::Span {
        &self.inner
    }
}

impl Drop for Span {
    /// Closes the `tracing` span within its own dispatch: the registry releases a closed span's
    /// parent through the thread's default dispatch, and outside it the parent would never end.
    fn drop(&mut self) {
        let inner = std::mem::replace(&mut self.inner, tracing::Span::none());
        if let Some(dispatch) = inner.with_subscriber(|(_, dispatch)| dispatch.clone()) {
            tracing::dispatcher::with_default(&dispatch, || drop(inner));
        }
    }
}

impl Default for Span {
    fn default() -> Self {
        Self::none()
    }
}

/// Where a new span hangs.
#[derive(Debug, Clone, Copy)]
pub enum Parent<'a> {
    /// Under a span of this process.
    Span(&'a Span),
    /// Under the span of this telemetry the code is running in (a request's, which the server
    /// runs the request within), or at the root of a trace of its own when there is none.
    Current,
    /// Under a span of another process (a job's or a request's `traceparent`), or, with `None`,
    /// at the root of a trace of its own.
    Remote(Option<&'a TraceContext>),
}

/// Spans and log lines (a `tracing` dispatch) and metrics, as every component takes them.
#[derive(Clone)]
pub struct Telemetry {
    /// Where spans and log lines go.
    pub dispatch: Dispatch,
    /// Metrics.
    pub meter: Arc<dyn Meter>,
    /// How the pipeline's spans get their trace ids (`None`: they have none).
    pub ids: Option<TraceIds>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Telemetry")
    }
}

impl Telemetry {
    /// Telemetry that records nothing: the default.
    pub fn noop() -> Self {
        Self {
            dispatch: Dispatch::none(),
            meter: Arc::new(Noop),
            ids: None,
        }
    }

    /// Runs `f` with this telemetry's dispatch as the thread's default: the `tracing` spans and
    /// events `f` makes go here.
    pub fn in_scope<T>(&self, f: impl FnOnce() -> T) -> T {
        tracing::dispatcher::with_default(&self.dispatch, f)
    }

    /// Opens `name` under `parent`, with its attribute fields declared.
    pub fn span(&self, name: SpanName, parent: Parent<'_>) -> Span {
        let inner = self.in_scope(|| {
            let parent_id = match parent {
                Parent::Span(span) => span.inner.id(),
                Parent::Current => tracing::Span::current().id(),
                Parent::Remote(_) => None,
            };
            open(name, parent_id)
        });
        if let (Parent::Remote(Some(remote)), Some(ids)) = (parent, self.ids) {
            (ids.set_remote_parent)(&inner, remote);
        }
        Span {
            inner,
            ids: self.ids,
        }
    }

    /// Records `name`, a wait from `start` to `end` under `parent`, that happened across
    /// processes: built from the two times, not timed around a call.
    pub fn record_wait(
        &self,
        name: SpanName,
        parent: &Span,
        start: Timestamp,
        end: Timestamp,
        run_id: &str,
        outcome: &str,
    ) {
        let parent = parent.inner.id();
        self.in_scope(|| {
            tracing::info!(
                target: WAIT_TARGET,
                parent: parent,
                span = name.as_str(),
                start_ms = start.unix_millis(),
                end_ms = end.unix_millis(),
                run_id,
                outcome,
            );
        });
    }
}

impl Default for Telemetry {
    fn default() -> Self {
        Self::noop()
    }
}

/// The `tracing` span of `name`, every attribute it may carry declared (empty until set).
fn open(name: SpanName, parent: Option<tracing::Id>) -> tracing::Span {
    use tracing::field::Empty;
    macro_rules! open {
        ($name:literal, $kind:literal $(, $($field:tt)+)?) => {
            tracing::info_span!(
                target: TARGET,
                parent: parent,
                $name,
                otel.kind = $kind,
                otel.status_description = Empty,
                error.type = Empty
                $(, $($field)+)?
            )
        };
    }
    match name {
        SpanName::HttpRequest => open!(
            "http.request",
            "server",
            http.route = Empty,
            http.status_code = Empty
        ),
        SpanName::RunEnqueue => open!("run.enqueue", "producer", agent = Empty, run_id = Empty),
        SpanName::RunClaim => open!(
            "run.claim",
            "consumer",
            run_id = Empty,
            job_id = Empty,
            attempt = Empty,
            queue.trace_continued = Empty,
            outcome = Empty
        ),
        SpanName::RunExecute => open!("run.execute", "internal", run_id = Empty, outcome = Empty),
        SpanName::StepExecute => open!("step.execute", "internal", step = Empty, outcome = Empty),
        SpanName::ModelCall => open!("model.call", "client", model = Empty, outcome = Empty),
        SpanName::ToolCall => open!("tool.call", "client", tool = Empty, outcome = Empty),
        SpanName::ApprovalWait => {
            open!("approval.wait", "internal", run_id = Empty, outcome = Empty)
        }
        SpanName::QuestionWait => {
            open!("question.wait", "internal", run_id = Empty, outcome = Empty)
        }
    }
}

/// A log field's value as a `tracing` field: text, an integer, a number or a flag — nothing
/// structured can be logged ([`log!`](crate::log) takes only these), and the adapter drops any
/// formatted (`?`/`%`) value another caller records.
pub trait IntoField {
    /// The `tracing` value.
    type Field: tracing::Value;
    /// Converts.
    fn into_field(self) -> Self::Field;
}

macro_rules! into_field {
    ($($ty:ty => $field:ty),* $(,)?) => {
        $(impl IntoField for $ty {
            type Field = $field;
            fn into_field(self) -> $field {
                self.into()
            }
        })*
    };
}

into_field!(
    String => String,
    i64 => i64,
    i32 => i64,
    u32 => u64,
    u64 => u64,
    bool => bool,
    f64 => f64,
);

impl<'a> IntoField for &'a str {
    type Field = &'a str;
    fn into_field(self) -> &'a str {
        self
    }
}

impl<'a> IntoField for &'a String {
    type Field = &'a str;
    fn into_field(self) -> &'a str {
        self
    }
}

impl IntoField for usize {
    type Field = u64;
    fn into_field(self) -> u64 {
        u64::try_from(self).unwrap_or(u64::MAX)
    }
}

/// Logs a [`LogEvent`] with fields through `telemetry` (a [`Telemetry`]): a `tracing` event of
/// target [`TARGET`] whose `event` field is the event's name and whose other fields are
/// `key = value` pairs of [`IntoField`] values; the adapter keeps the allowlisted ones.
///
/// ```ignore
/// forge_core::log!(telemetry, WorkerTakenOver, worker = id.as_str(), run_id = run.to_string());
/// ```
#[macro_export]
macro_rules! log {
    ($telemetry:expr, $event:ident $(, $key:ident = $value:expr)* $(,)?) => {
        $telemetry.in_scope(|| {
            $crate::telemetry::__tracing::info!(
                target: $crate::telemetry::TARGET,
                event = $crate::telemetry::LogEvent::$event.as_str(),
                $($key = $crate::telemetry::IntoField::into_field($value),)*
            )
        })
    };
}
