//! Spans: the core's [`Tracer`] on the OpenTelemetry SDK's tracer.
//!
//! A parent always comes from the [`TraceContext`] the caller passes — the SDK's thread-local
//! "current context" is never read, so a span cannot attach itself to whatever happened to run
//! before it on the same thread. Attribute values are primitives; a string is capped like a log
//! field and structured values are dropped.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use forge_core::telemetry::{Attr, Span, SpanKind, SpanName, TraceContext, Tracer, Value, capped};
use forge_core::time::Timestamp;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, Span as SdkSpan};

/// The core's tracer on an SDK tracer.
pub(crate) struct OtelTracer {
    pub(crate) tracer: SdkTracer,
}

struct OtelSpan(Mutex<SdkSpan>);

fn parent(parent: Option<&TraceContext>) -> Context {
    match parent {
        Some(p) => Context::new().with_remote_span_context(SpanContext::new(
            TraceId::from_bytes(p.trace_id),
            SpanId::from_bytes(p.span_id),
            if p.sampled {
                TraceFlags::SAMPLED
            } else {
                TraceFlags::default()
            },
            true,
            TraceState::default(),
        )),
        None => Context::new(),
    }
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

/// An attribute as the SDK takes it; `None` for structured values.
pub(crate) fn key_value(key: &'static str, value: Value) -> Option<KeyValue> {
    Some(match value {
        Value::Str(s) => KeyValue::new(key, capped(s)),
        Value::Int(i) => KeyValue::new(key, i),
        Value::Float(f) => KeyValue::new(key, f),
        Value::Bool(b) => KeyValue::new(key, b),
        Value::Json(_) => return None,
    })
}

fn key_values(attrs: Vec<Attr>) -> Vec<KeyValue> {
    attrs
        .into_iter()
        .filter_map(|(k, v)| key_value(k, v))
        .collect()
}

fn system_time(t: Timestamp) -> SystemTime {
    let ms = t.unix_millis();
    match u64::try_from(ms) {
        Ok(ms) => SystemTime::UNIX_EPOCH + Duration::from_millis(ms),
        Err(_) => SystemTime::UNIX_EPOCH,
    }
}

impl Tracer for OtelTracer {
    fn start(
        &self,
        name: SpanName,
        parent_cx: Option<&TraceContext>,
        attrs: Vec<Attr>,
    ) -> Box<dyn Span> {
        let span = self
            .tracer
            .span_builder(name.as_str())
            .with_kind(kind(name.kind()))
            .with_attributes(key_values(attrs))
            .start_with_context(&self.tracer, &parent(parent_cx));
        Box::new(OtelSpan(Mutex::new(span)))
    }

    fn record(
        &self,
        name: SpanName,
        parent_cx: Option<&TraceContext>,
        start: Timestamp,
        end: Timestamp,
        attrs: Vec<Attr>,
    ) {
        let mut span = self
            .tracer
            .span_builder(name.as_str())
            .with_kind(kind(name.kind()))
            .with_start_time(system_time(start))
            .with_attributes(key_values(attrs))
            .start_with_context(&self.tracer, &parent(parent_cx));
        span.end_with_timestamp(system_time(end.max(start)));
    }
}

impl OtelSpan {
    fn with<T>(&self, f: impl FnOnce(&mut SdkSpan) -> T) -> T {
        let mut span = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut span)
    }
}

impl Span for OtelSpan {
    fn context(&self) -> Option<TraceContext> {
        self.with(|span| {
            let cx = span.span_context();
            cx.is_valid().then(|| TraceContext {
                trace_id: cx.trace_id().to_bytes(),
                span_id: cx.span_id().to_bytes(),
                sampled: cx.is_sampled(),
            })
        })
    }

    fn set(&self, key: &'static str, value: Value) {
        if let Some(kv) = key_value(key, value) {
            self.with(|span| span.set_attribute(kv));
        }
    }

    fn fail(&self, code: &str) {
        let code = capped(code.to_owned());
        self.with(|span| {
            span.set_attribute(KeyValue::new("error.type", code.clone()));
            span.set_status(Status::error(code));
        });
    }

    fn end(&self) {
        self.with(|span| span.end());
    }
}
