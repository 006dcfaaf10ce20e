//! Forge's telemetry on OpenTelemetry — the only crate that depends on `opentelemetry*`
//! (`cargo xtask deps` fails the build otherwise).
//!
//! [`Otel`] holds the three SDK providers and hands out the core's [`Telemetry`] built on
//! them: a `tracing` dispatch whose subscriber is the registry with three layers —
//! `tracing-opentelemetry`'s, seeing only the vocabulary's spans, the wait spans' and the log
//! lines' (`trace`, `logs`) — and a meter on the SDK's instruments (`metrics`). Spans pass a
//! processor that drops every attribute outside the core's allowlist before export.
//! - [`Otel::otlp`] exports spans, metrics and logs over OTLP as the standard variables say
//!   (`OTEL_EXPORTER_OTLP_ENDPOINT`, `…_PROTOCOL` = `http/protobuf` (default) or `grpc`,
//!   `…_HEADERS`, `…_TIMEOUT`, the per-signal `…_TRACES_*`/`…_METRICS_*`/`…_LOGS_*` forms,
//!   `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_METRIC_EXPORT_INTERVAL`,
//!   `OTEL_BSP_*`), batching on the Tokio runtime;
//! - `Otel::in_memory` (feature `memory`) keeps what the same pipeline produced, for tests.
//!
//! - [`Otel::prometheus_only`] records metrics for the scrape and nothing else.
//!
//! All of them feed a [`Scrape`], the Prometheus text behind `forge serve`'s `GET /metrics`.
//!
//! Modules: `trace` (spans: the filtered layer, the allowlist processor, the wait spans),
//! `metrics` (instruments, allowlist, Prometheus text), `logs` (JSON lines and OTLP records).

#![deny(missing_docs)]

mod logs;
mod metrics;
mod trace;

use std::sync::Arc;

use forge_core::telemetry::{Dispatch, Telemetry};
use opentelemetry::logs::LoggerProvider as _;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::logs::SdkLoggerProvider;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt as _;

pub use logs::{LineWriter, stderr_lines};
pub use metrics::{Scrape, prometheus_name, prometheus_text};

/// The instrumentation scope every span, instrument and log record is produced under.
pub const SCOPE: &str = "forge";

/// Why telemetry could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` (or a per-signal form) names a protocol Forge does not ship.
    #[error("{variable}={value:?} is not supported: use `http/protobuf` or `grpc`")]
    Protocol {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// An OTLP exporter could not be built (a malformed endpoint or header).
    #[error("the OTLP {signal} exporter could not be built: {reason}")]
    Exporter {
        /// traces, metrics or logs.
        signal: &'static str,
        /// What the exporter said.
        reason: String,
    },
    /// Flushing or shutting down did not complete (the collector is unreachable, say).
    #[error("telemetry could not {action}: {reason}")]
    Flush {
        /// flush or shut down.
        action: &'static str,
        /// What the SDK said.
        reason: String,
    },
}

/// The SDK's providers and the core's telemetry on them.
pub struct Otel {
    tracers: SdkTracerProvider,
    meters: SdkMeterProvider,
    loggers: SdkLoggerProvider,
    scrape: Scrape,
    telemetry: Telemetry,
}

impl std::fmt::Debug for Otel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Otel")
    }
}

fn resource(service: &str) -> Resource {
    let builder = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_some() {
        builder.build()
    } else {
        builder.with_service_name(service.to_owned()).build()
    }
}

const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
const SIGNAL_PROTOCOLS: [&str; 3] = [
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL",
];

/// Refuses a protocol the exporters would silently replace with another.
fn check_protocols() -> Result<(), OtelError> {
    for variable in std::iter::once(PROTOCOL).chain(SIGNAL_PROTOCOLS) {
        if let Ok(value) = std::env::var(variable)
            && !matches!(value.trim(), "" | "grpc" | "http/protobuf")
        {
            return Err(OtelError::Protocol { variable, value });
        }
    }
    Ok(())
}

fn exporter_error(
    signal: &'static str,
) -> impl FnOnce(opentelemetry_otlp::ExporterBuildError) -> OtelError {
    move |e| OtelError::Exporter {
        signal,
        reason: e.to_string(),
    }
}

impl Otel {
    /// Telemetry exported over OTLP as the `OTEL_*` variables configure it, for `service`
    /// (unless `OTEL_SERVICE_NAME` says otherwise); every log line is also written to `also`.
    /// Call it within a Tokio runtime: the exporters batch on it.
    pub fn otlp(service: &str, also: Option<LineWriter>) -> Result<Self, OtelError> {
        use opentelemetry_sdk::runtime::Tokio;
        check_protocols()?;
        // An https endpoint needs a TLS provider; the tree's is ring (a no-op when one is set).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let resource = resource(service);
        let spans = opentelemetry_otlp::SpanExporter::builder()
            .build()
            .map_err(exporter_error("traces"))?;
        let metrics = opentelemetry_otlp::MetricExporter::builder()
            .build()
            .map_err(exporter_error("metrics"))?;
        let logs = opentelemetry_otlp::LogExporter::builder()
            .build()
            .map_err(exporter_error("logs"))?;
        let scrape = Scrape::new();
        let tracers = SdkTracerProvider::builder()
            .with_resource(resource.clone())
            .with_span_processor(trace::Allowlist(
                opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(spans, Tokio)
                    .build(),
            ))
            .build();
        let meters = SdkMeterProvider::builder()
            .with_resource(resource.clone())
            .with_reader(
                opentelemetry_sdk::metrics::periodic_reader_with_async_runtime::PeriodicReader::builder(metrics, Tokio)
                    .build(),
            )
            .with_reader(scrape.reader())
            .build();
        let loggers = SdkLoggerProvider::builder()
            .with_resource(resource)
            .with_log_processor(
                opentelemetry_sdk::logs::log_processor_with_async_runtime::BatchLogProcessor::builder(logs, Tokio)
                    .build(),
            )
            .build();
        Ok(Self::assemble(tracers, meters, loggers, scrape, also, true))
    }

    /// Telemetry that keeps what it produced in memory, synchronously (spans and logs as they
    /// end, metrics on [`Otel::flush`]): the real SDK pipeline with the exporter swapped.
    #[cfg(feature = "memory")]
    pub fn in_memory(service: &str, also: Option<LineWriter>) -> (Self, Memory) {
        use opentelemetry_sdk::logs::InMemoryLogExporter;
        use opentelemetry_sdk::metrics::InMemoryMetricExporter;
        use opentelemetry_sdk::trace::InMemorySpanExporter;
        let memory = Memory {
            spans: InMemorySpanExporter::default(),
            metrics: InMemoryMetricExporter::default(),
            logs: InMemoryLogExporter::default(),
        };
        let resource = resource(service);
        let scrape = Scrape::new();
        let tracers = SdkTracerProvider::builder()
            .with_resource(resource.clone())
            .with_span_processor(trace::Allowlist(
                opentelemetry_sdk::trace::SimpleSpanProcessor::new(memory.spans.clone()),
            ))
            .build();
        let meters = SdkMeterProvider::builder()
            .with_resource(resource.clone())
            .with_periodic_exporter(memory.metrics.clone())
            .with_reader(scrape.reader())
            .build();
        let loggers = SdkLoggerProvider::builder()
            .with_resource(resource)
            .with_simple_exporter(memory.logs.clone())
            .build();
        (
            Self::assemble(tracers, meters, loggers, scrape, also, true),
            memory,
        )
    }

    /// Metrics for the Prometheus scrape only: no export, no spans, log lines to `also` alone.
    /// What `forge serve` records without `--otel`.
    pub fn prometheus_only(service: &str, also: LineWriter) -> Self {
        let scrape = Scrape::new();
        let meters = SdkMeterProvider::builder()
            .with_resource(resource(service))
            .with_reader(scrape.reader())
            .build();
        Self::assemble(
            SdkTracerProvider::builder().build(),
            meters,
            SdkLoggerProvider::builder().build(),
            scrape,
            Some(also),
            false,
        )
    }

    /// The providers, and the core's telemetry on them: spans only when `traced`, log records
    /// exported only then too (without it, lines go to `also` alone).
    fn assemble(
        tracers: SdkTracerProvider,
        meters: SdkMeterProvider,
        loggers: SdkLoggerProvider,
        scrape: Scrape,
        also: Option<LineWriter>,
        traced: bool,
    ) -> Self {
        let tracer = traced.then(|| tracers.tracer(SCOPE));
        let logs = logs::Logs {
            otel: traced.then(|| loggers.logger(SCOPE)),
            lines: also,
        };
        let registry = tracing_subscriber::registry();
        let dispatch = match tracer {
            Some(tracer) => Dispatch::new(
                registry
                    .with(trace::layer(tracer.clone()))
                    .with(trace::Waits::new(tracer))
                    .with(logs),
            ),
            None => Dispatch::new(registry.with(logs)),
        };
        let telemetry = Telemetry {
            dispatch,
            meter: Arc::new(metrics::OtelMeter::new(&meters.meter(SCOPE))),
            ids: traced.then_some(trace::IDS),
        };
        Self {
            tracers,
            meters,
            loggers,
            scrape,
            telemetry,
        }
    }

    /// The core's telemetry, for the engine, the worker, the server and the file store.
    pub fn telemetry(&self) -> Telemetry {
        self.telemetry.clone()
    }

    /// The Prometheus scrape of this pipeline's instruments.
    pub fn scrape(&self) -> Scrape {
        self.scrape.clone()
    }

    /// Exports everything recorded so far. Blocking: from async code, call it on a blocking
    /// thread (`tokio::task::spawn_blocking`).
    pub fn flush(&self) -> Result<(), OtelError> {
        let fail = |reason: String| OtelError::Flush {
            action: "flush",
            reason,
        };
        self.tracers
            .force_flush()
            .map_err(|e| fail(e.to_string()))?;
        self.meters.force_flush().map_err(|e| fail(e.to_string()))?;
        self.loggers.force_flush().map_err(|e| fail(e.to_string()))
    }

    /// Exports what is left and stops the exporters. Blocking, like [`Otel::flush`].
    pub fn shutdown(&self) -> Result<(), OtelError> {
        let fail = |reason: String| OtelError::Flush {
            action: "shut down",
            reason,
        };
        let spans = self.tracers.shutdown().map_err(|e| fail(e.to_string()));
        let metrics = self.meters.shutdown().map_err(|e| fail(e.to_string()));
        let logs = self.loggers.shutdown().map_err(|e| fail(e.to_string()));
        spans.and(metrics).and(logs)
    }
}

#[cfg(feature = "memory")]
mod memory;
#[cfg(feature = "memory")]
pub use memory::{RecordedMetric, RecordedSpan};

/// Telemetry that writes log lines to `lines` and records nothing else: for a process (or a
/// command) that has no pipeline but must still log in the vocabulary.
pub fn lines_only(lines: LineWriter) -> Telemetry {
    let subscriber = tracing_subscriber::registry().with(logs::Logs {
        otel: None,
        lines: Some(lines),
    });
    Telemetry {
        dispatch: Dispatch::new(subscriber),
        ..Telemetry::noop()
    }
}

/// What [`Otel::in_memory`] produced.
#[cfg(feature = "memory")]
#[derive(Clone, Debug)]
pub struct Memory {
    /// Ended spans.
    pub spans: opentelemetry_sdk::trace::InMemorySpanExporter,
    /// Metric exports (one per flush).
    pub metrics: opentelemetry_sdk::metrics::InMemoryMetricExporter,
    /// Emitted log records.
    pub logs: opentelemetry_sdk::logs::InMemoryLogExporter,
}
