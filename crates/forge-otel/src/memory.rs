//! What the in-memory pipeline kept, in the core's terms, so tests elsewhere read spans and
//! metrics without depending on `opentelemetry*` themselves.

use std::time::SystemTime;

use forge_core::telemetry::SpanKind;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};

use crate::Memory;

/// An ended span.
#[derive(Debug, Clone)]
pub struct RecordedSpan {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: SpanKind,
    /// Its trace.
    pub trace_id: [u8; 16],
    /// Itself.
    pub span_id: [u8; 8],
    /// Its parent (all zeros for a root).
    pub parent_span_id: [u8; 8],
    /// Its attributes, values as text.
    pub attributes: Vec<(String, String)>,
    /// The code it failed with, if it did.
    pub error: Option<String>,
    /// When it started.
    pub start: SystemTime,
    /// When it ended.
    pub end: SystemTime,
}

impl RecordedSpan {
    /// An attribute's value as text.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A metric of the last export, summed over its data points.
#[derive(Debug, Clone)]
pub struct RecordedMetric {
    /// Its name.
    pub name: String,
    /// Its unit.
    pub unit: String,
    /// Its description.
    pub description: String,
    /// Each data point's attributes (values as text) and value (a histogram's count).
    pub points: Vec<(Vec<(String, String)>, f64)>,
}

fn kind(kind: &opentelemetry::trace::SpanKind) -> SpanKind {
    use opentelemetry::trace::SpanKind as K;
    match kind {
        K::Server => SpanKind::Server,
        K::Producer => SpanKind::Producer,
        K::Consumer => SpanKind::Consumer,
        K::Client => SpanKind::Client,
        K::Internal => SpanKind::Internal,
    }
}

fn text<'a>(attrs: impl Iterator<Item = &'a opentelemetry::KeyValue>) -> Vec<(String, String)> {
    attrs
        .map(|kv| (kv.key.as_str().to_owned(), kv.value.as_str().into_owned()))
        .collect()
}

impl Memory {
    /// The spans ended so far.
    pub fn spans(&self) -> Vec<RecordedSpan> {
        self.spans
            .get_finished_spans()
            .unwrap_or_default()
            .into_iter()
            .map(|s| RecordedSpan {
                name: s.name.into_owned(),
                kind: kind(&s.span_kind),
                trace_id: s.span_context.trace_id().to_bytes(),
                span_id: s.span_context.span_id().to_bytes(),
                parent_span_id: s.parent_span_id.to_bytes(),
                attributes: text(s.attributes.iter()),
                error: match s.status {
                    opentelemetry::trace::Status::Error { description } => {
                        Some(description.into_owned())
                    }
                    _ => None,
                },
                start: s.start_time,
                end: s.end_time,
            })
            .collect()
    }

    /// The metrics of the last export ([`crate::Otel::flush`] exports).
    pub fn metrics(&self) -> Vec<RecordedMetric> {
        let exported = self.metrics.get_finished_metrics().unwrap_or_default();
        let Some(last) = exported.last() else {
            return Vec::new();
        };
        last.scope_metrics()
            .flat_map(|s| s.metrics())
            .map(|m| {
                #[allow(clippy::cast_precision_loss)]
                let points = match m.data() {
                    AggregatedMetrics::F64(MetricData::Sum(d)) => d
                        .data_points()
                        .map(|p| (text(p.attributes()), p.value()))
                        .collect(),
                    AggregatedMetrics::F64(MetricData::Gauge(d)) => d
                        .data_points()
                        .map(|p| (text(p.attributes()), p.value()))
                        .collect(),
                    AggregatedMetrics::F64(MetricData::Histogram(d)) => d
                        .data_points()
                        .map(|p| (text(p.attributes()), p.count() as f64))
                        .collect(),
                    _ => Vec::new(),
                };
                RecordedMetric {
                    name: m.name().to_owned(),
                    unit: m.unit().to_owned(),
                    description: m.description().to_owned(),
                    points,
                }
            })
            .collect()
    }

    /// The log records emitted so far: event name and attributes as text.
    pub fn logs(&self) -> Vec<(String, Vec<(String, String)>)> {
        self.logs
            .get_emitted_logs()
            .unwrap_or_default()
            .into_iter()
            .map(|l| {
                (
                    l.record.event_name().unwrap_or_default().to_owned(),
                    l.record
                        .attributes_iter()
                        .map(|(k, v)| (k.as_str().to_owned(), format!("{v:?}")))
                        .collect(),
                )
            })
            .collect()
    }
}
