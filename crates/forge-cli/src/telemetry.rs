//! `--otel` for `forge serve` and `forge worker`: the telemetry the engine, worker, server and
//! file store record through, and its orderly end.
//!
//! Log lines always go to standard error as JSON (the core's sanitized lines). Without
//! `--otel`, metrics are kept for `GET /metrics` only and spans are not made; with it, spans,
//! metrics and logs are also exported over OTLP as the standard `OTEL_*` variables say.

use std::sync::Arc;

use anyhow::Context as _;
use forge_core::telemetry::{JsonLines, Logger, Telemetry};
use forge_otel::Otel;

/// Telemetry options.
#[derive(Debug, clap::Args)]
pub(crate) struct TelemetryArgs {
    /// Export spans, metrics and logs over OTLP, configured by the standard variables:
    /// OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318, or :4317 for gRPC),
    /// OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf or grpc), OTEL_EXPORTER_OTLP_HEADERS,
    /// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES and the per-signal forms.
    #[arg(long, env = "FORGE_OTEL")]
    otel: bool,
}

/// The running pipeline.
pub(crate) struct Active {
    otel: Otel,
}

/// JSON log lines on standard error.
pub(crate) fn stderr_logger() -> Arc<dyn Logger> {
    Arc::new(JsonLines::new(std::io::stderr()))
}

impl TelemetryArgs {
    /// Starts the pipeline for `service` (`forge-serve`, `forge-worker`).
    pub(crate) fn start(&self, service: &str) -> anyhow::Result<Active> {
        let otel = if self.otel {
            Otel::otlp(service, Some(stderr_logger())).context("--otel")?
        } else {
            Otel::prometheus_only(service, stderr_logger())
        };
        Ok(Active { otel })
    }
}

impl Active {
    /// What everything records through.
    pub(crate) fn telemetry(&self) -> Telemetry {
        self.otel.telemetry()
    }

    /// What `GET /metrics` serves.
    pub(crate) fn metrics(&self) -> forge_server::MetricsText {
        let scrape = self.otel.scrape();
        Arc::new(move || scrape.render())
    }

    /// Exports what is left; a collector that cannot be reached is reported, not fatal.
    pub(crate) async fn shutdown(self) {
        let otel = self.otel;
        let done = tokio::task::spawn_blocking(move || otel.shutdown()).await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("forge: {e}"),
            Err(e) => eprintln!("forge: telemetry shutdown did not finish: {e}"),
        }
    }
}
