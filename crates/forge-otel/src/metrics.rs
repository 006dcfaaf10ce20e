//! Metrics: the core's [`Meter`] on SDK instruments, and the Prometheus text exposition of them.
//!
//! Every [`Instrument`] is created once, with its unit and description. A recorded value keeps
//! only the attributes in [`METRIC_ATTRIBUTES`] (ids would make a time series per run); a
//! negative or non-finite value — a duration under clock skew — is dropped, not clamped to zero,
//! so it cannot pull a latency distribution toward an instant that never happened.
//!
//! The scrape reads the same SDK pipeline through a [`ManualReader`] shared with the provider
//! ([`Scrape`]), so `GET /metrics` and OTLP export agree on every number.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Weak};
use std::time::Duration;

use forge_core::telemetry::{Instrument, InstrumentKind, METRIC_ATTRIBUTES, Meter, capped};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{ManualReader, Pipeline, Temporality};

/// Histogram bucket bounds, in milliseconds: every Forge histogram is a duration.
const MS_BOUNDS: [f64; 16] = [
    1.0,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1_000.0,
    2_500.0,
    5_000.0,
    10_000.0,
    30_000.0,
    60_000.0,
    300_000.0,
    1_800_000.0,
];

enum Handle {
    Counter(Counter<f64>),
    Histogram(Histogram<f64>),
    Gauge(Gauge<f64>),
}

/// The core's meter on SDK instruments.
pub(crate) struct OtelMeter {
    instruments: HashMap<Instrument, Handle>,
}

impl OtelMeter {
    pub(crate) fn new(meter: &opentelemetry::metrics::Meter) -> Self {
        let instruments = Instrument::ALL
            .into_iter()
            .map(|i| {
                let handle = match i.kind() {
                    InstrumentKind::Counter => Handle::Counter(
                        meter
                            .f64_counter(i.name())
                            .with_unit(i.unit())
                            .with_description(i.description())
                            .build(),
                    ),
                    InstrumentKind::Histogram => Handle::Histogram(
                        meter
                            .f64_histogram(i.name())
                            .with_unit(i.unit())
                            .with_description(i.description())
                            .with_boundaries(MS_BOUNDS.to_vec())
                            .build(),
                    ),
                    InstrumentKind::Gauge => Handle::Gauge(
                        meter
                            .f64_gauge(i.name())
                            .with_unit(i.unit())
                            .with_description(i.description())
                            .build(),
                    ),
                };
                (i, handle)
            })
            .collect();
        Self { instruments }
    }
}

/// The attributes a metric may carry: allowlisted keys, values capped.
pub(crate) fn allowed(attrs: &[(&'static str, &str)]) -> Vec<KeyValue> {
    attrs
        .iter()
        .filter(|(k, _)| METRIC_ATTRIBUTES.contains(k))
        .map(|(k, v)| KeyValue::new(*k, capped((*v).to_owned())))
        .collect()
}

impl Meter for OtelMeter {
    fn record(&self, instrument: Instrument, value: f64, attrs: &[(&'static str, &str)]) {
        if !value.is_finite() || value < 0.0 {
            return;
        }
        let attrs = allowed(attrs);
        match self.instruments.get(&instrument) {
            Some(Handle::Counter(c)) => c.add(value, &attrs),
            Some(Handle::Histogram(h)) => h.record(value, &attrs),
            Some(Handle::Gauge(g)) => g.record(value, &attrs),
            None => {}
        }
    }
}

/// The reader behind `GET /metrics`: one [`ManualReader`] registered with the meter provider
/// and kept here to collect from on each scrape.
#[derive(Clone, Debug)]
pub struct Scrape {
    reader: Arc<ManualReader>,
}

impl Scrape {
    pub(crate) fn new() -> Self {
        Self {
            reader: Arc::new(
                ManualReader::builder()
                    .with_temporality(Temporality::Cumulative)
                    .build(),
            ),
        }
    }

    pub(crate) fn reader(&self) -> SharedReader {
        SharedReader(self.reader.clone())
    }

    /// The Prometheus text exposition (format 0.0.4) of every instrument with data.
    pub fn render(&self) -> String {
        let mut rm = ResourceMetrics::default();
        match self.reader.collect(&mut rm) {
            Ok(()) => prometheus_text(&rm),
            // Shut down: nothing to expose.
            Err(_) => String::new(),
        }
    }
}

/// A [`ManualReader`] the provider and the [`Scrape`] share.
#[derive(Debug)]
pub(crate) struct SharedReader(Arc<ManualReader>);

impl MetricReader for SharedReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline);
    }
    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
    fn temporality(&self, kind: opentelemetry_sdk::metrics::InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

/// An instrument's name as Prometheus spells it (`forge.run.duration_ms` →
/// `forge_run_duration_ms`).
pub fn prometheus_name(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn labels<'a>(attrs: impl Iterator<Item = &'a KeyValue>, extra: Option<(&str, String)>) -> String {
    let mut parts: Vec<String> = attrs
        .map(|kv| {
            format!(
                "{}=\"{}\"",
                prometheus_name(kv.key.as_str()),
                escape_label(&kv.value.as_str())
            )
        })
        .collect();
    parts.sort();
    if let Some((k, v)) = extra {
        parts.push(format!("{k}=\"{v}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

fn number(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{v}")
    }
}

fn write_data<T: Copy>(out: &mut String, name: &str, data: &MetricData<T>, f: fn(T) -> f64) {
    match data {
        MetricData::Sum(sum) => {
            let _ = writeln!(out, "# TYPE {name} counter");
            for p in sum.data_points() {
                let _ = writeln!(
                    out,
                    "{name}{} {}",
                    labels(p.attributes(), None),
                    number(f(p.value()))
                );
            }
        }
        MetricData::Gauge(gauge) => {
            let _ = writeln!(out, "# TYPE {name} gauge");
            for p in gauge.data_points() {
                let _ = writeln!(
                    out,
                    "{name}{} {}",
                    labels(p.attributes(), None),
                    number(f(p.value()))
                );
            }
        }
        MetricData::Histogram(h) => {
            let _ = writeln!(out, "# TYPE {name} histogram");
            for p in h.data_points() {
                let mut cumulative = 0u64;
                let bounds: Vec<f64> = p.bounds().collect();
                for (i, count) in p.bucket_counts().enumerate() {
                    cumulative += count;
                    let le = bounds.get(i).copied().unwrap_or(f64::INFINITY);
                    let _ = writeln!(
                        out,
                        "{name}_bucket{} {cumulative}",
                        labels(p.attributes(), Some(("le", number(le))))
                    );
                }
                let l = labels(p.attributes(), None);
                let _ = writeln!(out, "{name}_sum{l} {}", number(f(p.sum())));
                let _ = writeln!(out, "{name}_count{l} {}", p.count());
            }
        }
        // Forge records no exponential histograms.
        MetricData::ExponentialHistogram(_) => {}
    }
}

/// `rm` in the Prometheus text format: `# HELP` (the description, with the unit), `# TYPE`, and
/// a sample per data point, labels sorted.
pub fn prometheus_text(rm: &ResourceMetrics) -> String {
    let mut out = String::new();
    for scope in rm.scope_metrics() {
        for metric in scope.metrics() {
            let name = prometheus_name(metric.name());
            let help = format!("{} Unit: {}.", metric.description(), metric.unit())
                .replace('\\', "\\\\")
                .replace('\n', "\\n");
            let _ = writeln!(out, "# HELP {name} {help}");
            match metric.data() {
                AggregatedMetrics::F64(d) => write_data(&mut out, &name, d, |v| v),
                #[allow(clippy::cast_precision_loss)]
                AggregatedMetrics::U64(d) => write_data(&mut out, &name, d, |v| v as f64),
                #[allow(clippy::cast_precision_loss)]
                AggregatedMetrics::I64(d) => write_data(&mut out, &name, d, |v| v as f64),
            }
        }
    }
    out
}
