//! Spans: the core's `tracing` spans made OpenTelemetry spans by `tracing-opentelemetry`, with
//! the vocabulary enforced on the way out.
//!
//! - [`layer`]: `tracing-opentelemetry`'s layer behind a per-layer filter that lets through only
//!   the vocabulary's spans ([`SpanName`] under the core's [`TARGET`]) and no events — a
//!   dependency's span, or one made up with a familiar name elsewhere, is never exported, and log
//!   lines stay log records instead of becoming span events. No location, thread, target or
//!   timing attributes: a span carries what the core declared for it.
//! - [`Allowlist`]: a span processor in front of the exporter that drops every attribute not in
//!   [`SPAN_ATTRIBUTES`] and caps strings like a log field, whoever set them.
//! - [`Waits`]: a layer that makes a wait span (approval, question) from the two timestamps of a
//!   [`WAIT_TARGET`] event — a wait outlives the processes it crosses, so it is never timed.
//! - [`IDS`]: how the core reads a span's ids and sets a remote parent.
//!
//! A parent always comes from the span the core names or the remote context it passes: the
//! SDK's thread-local "current context" is neither read nor activated, so a span cannot attach
//! itself to whatever happened to run before it on the same thread.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use forge_core::telemetry::{
    MAX_LOG_STRING, SPAN_ATTRIBUTES, SpanKind, SpanName, TARGET, TraceContext, TraceIds,
    WAIT_TARGET, capped,
};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
    Tracer as _,
};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracer, Span as SdkSpan, SpanData, SpanProcessor};
use tracing::Subscriber;
use tracing::dispatcher::WeakDispatch;
use tracing::field::{Field, Visit};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::Context as LayerContext;
use tracing_subscriber::registry::LookupSpan;

/// `tracing-opentelemetry`'s layer on `tracer`, seeing the vocabulary's spans and nothing else.
pub(crate) fn layer<S>(tracer: SdkTracer) -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_level(false)
        .with_tracked_inactivity(false)
        .with_context_activation(false)
        .with_filter(filter_fn(|meta| {
            meta.is_span() && meta.target() == TARGET && SpanName::parse(meta.name()).is_some()
        }))
}

/// How the core reads and sets the ids of this pipeline's spans.
pub(crate) const IDS: TraceIds = TraceIds {
    context,
    set_remote_parent,
};

fn context(span: &tracing::Span) -> Option<TraceContext> {
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let cx = cx.span();
    let cx = cx.span_context();
    cx.is_valid().then(|| TraceContext {
        trace_id: cx.trace_id().to_bytes(),
        span_id: cx.span_id().to_bytes(),
        sampled: cx.is_sampled(),
    })
}

fn set_remote_parent(span: &tracing::Span, remote: &TraceContext) {
    // A span already started keeps its parent; the core sets it right after opening it.
    let _ = span.set_parent(remote_context(remote));
}

fn remote_context(remote: &TraceContext) -> Context {
    Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from_bytes(remote.trace_id),
        SpanId::from_bytes(remote.span_id),
        if remote.sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        },
        true,
        TraceState::default(),
    ))
}

fn kind(kind: SpanKind) -> opentelemetry::trace::SpanKind {
    use opentelemetry::trace::SpanKind as K;
    match kind {
        SpanKind::Server => K::Server,
        SpanKind::Producer => K::Producer,
        SpanKind::Consumer => K::Consumer,
        SpanKind::Client => K::Client,
        SpanKind::Internal => K::Internal,
    }
}

/// A span processor that drops, before `P` exports it, every attribute not in
/// [`SPAN_ATTRIBUTES`], and caps string values at the log field's length.
#[derive(Debug)]
pub(crate) struct Allowlist<P>(pub(crate) P);

impl<P: SpanProcessor> SpanProcessor for Allowlist<P> {
    fn on_start(&self, span: &mut SdkSpan, cx: &Context) {
        self.0.on_start(span, cx);
    }

    fn on_end(&self, mut span: SpanData) {
        let before = span.attributes.len();
        span.attributes
            .retain(|kv| SPAN_ATTRIBUTES.contains(&kv.key.as_str()));
        let dropped = u32::try_from(before - span.attributes.len()).unwrap_or(u32::MAX);
        span.dropped_attributes_count = span.dropped_attributes_count.saturating_add(dropped);
        for kv in &mut span.attributes {
            // No longer in bytes than the cap in characters: short enough, nothing to copy.
            if let Value::String(s) = &kv.value
                && s.as_str().len() > MAX_LOG_STRING
            {
                let cut = capped(s.as_str().to_owned());
                if cut.len() != s.as_str().len() {
                    kv.value = Value::from(cut);
                }
            }
        }
        self.0.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}

/// Makes the wait spans from [`WAIT_TARGET`] events.
pub(crate) struct Waits {
    tracer: SdkTracer,
    /// The dispatch this layer is part of, to read a parent's context with: within a callback,
    /// `tracing`'s default dispatch is none.
    dispatch: OnceLock<WeakDispatch>,
}

impl Waits {
    pub(crate) fn new(tracer: SdkTracer) -> Self {
        Self {
            tracer,
            dispatch: OnceLock::new(),
        }
    }
}

#[derive(Default)]
struct WaitFields {
    span: Option<String>,
    start_ms: Option<i64>,
    end_ms: Option<i64>,
    attributes: Vec<KeyValue>,
}

impl Visit for WaitFields {
    fn record_i64(&mut self, field: &Field, value: i64) {
        match field.name() {
            "start_ms" => self.start_ms = Some(value),
            "end_ms" => self.end_ms = Some(value),
            name => self.attributes.push(KeyValue::new(name, value)),
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "span" => self.span = Some(value.to_owned()),
            name => self.attributes.push(KeyValue::new(name, value.to_owned())),
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }
}

fn system_time(ms: i64) -> SystemTime {
    u64::try_from(ms).map_or(SystemTime::UNIX_EPOCH, |ms| {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    })
}

impl<S> Layer<S> for Waits
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_register_dispatch(&self, dispatch: &tracing::Dispatch) {
        let _ = self.dispatch.set(dispatch.downgrade());
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: LayerContext<'_, S>) {
        if event.metadata().target() != WAIT_TARGET {
            return;
        }
        let mut fields = WaitFields::default();
        event.record(&mut fields);
        let (Some(name), Some(start), Some(end)) = (
            fields.span.as_deref().and_then(SpanName::parse),
            fields.start_ms,
            fields.end_ms,
        ) else {
            return;
        };
        let parent_id = match event.parent() {
            Some(id) => Some(id.clone()),
            None if event.is_contextual() => ctx.current_span().id().cloned(),
            None => None,
        };
        let dispatch = self.dispatch.get().and_then(WeakDispatch::upgrade);
        let parent = parent_id
            .zip(dispatch)
            .and_then(|(id, dispatch)| tracing_opentelemetry::get_otel_context(&id, &dispatch))
            .unwrap_or_default();
        let mut span = self
            .tracer
            .span_builder(name.as_str())
            .with_kind(kind(name.kind()))
            .with_start_time(system_time(start))
            .with_attributes(fields.attributes)
            .start_with_context(&self.tracer, &parent);
        span.end_with_timestamp(system_time(end.max(start)));
    }
}
