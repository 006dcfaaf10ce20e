//! `--otel` for `forge serve` and `forge worker`: the telemetry the engine, worker, server and
//! file store record through, and its orderly end.
//!
//! Log lines always go to standard error as JSON (the core's sanitized lines). Without
//! `--otel`, metrics are kept for `GET /metrics` only and spans are not made; with it, spans,
//! metrics and logs are also exported over OTLP as the standard `OTEL_*` variables say.

use std::sync::Arc;

use anyhow::Context as _;
use forge_core::telemetry::Telemetry;
use forge_otel::{Otel, stderr_lines};

/// Telemetry options.
#[derive(Debug, clap::Args)]
pub(crate) struct TelemetryArgs {
    /// Export spans, metrics and logs over OTLP, configured by the standard variables:
    /// OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318, or :4317 for gRPC),
    /// OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf or grpc), OTEL_EXPORTER_OTLP_HEADERS,
    /// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES and the per-signal forms.
    #[arg(long, env = "FORGE_OTEL")]
    otel: bool,
    /// Where this process serves its own `GET /metrics` (Prometheus): an address such as
    /// 127.0.0.1:9464, or `off`. `forge serve` answers it on its API port unless this moves it
    /// (or turns it off); `forge worker` serves it only when given one.
    #[arg(long, env = "FORGE_METRICS_LISTEN")]
    metrics_listen: Option<String>,
}

/// Where a process's scrape is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MetricsAt {
    /// Not here: the default (a worker's), or `off`.
    Nowhere,
    /// On the server's API port, as always: `forge serve`'s default.
    ApiPort,
    /// On a listener of its own.
    Listener(std::net::SocketAddr),
}

/// The running pipeline.
pub(crate) struct Active {
    otel: Otel,
}

impl TelemetryArgs {
    /// Starts the pipeline for `service` (`forge-serve`, `forge-worker`).
    pub(crate) fn start(&self, service: &str) -> anyhow::Result<Active> {
        let otel = if self.otel {
            Otel::otlp(service, Some(stderr_lines())).context("--otel")?
        } else {
            Otel::prometheus_only(service, stderr_lines())
        };
        let active = Active { otel };
        // Every process's scrape says what it runs from its start.
        active.telemetry().meter.record(
            forge_core::telemetry::Instrument::BuildInfo,
            1.0,
            &[("version", env!("CARGO_PKG_VERSION"))],
        );
        Ok(active)
    }

    /// Where this process answers `GET /metrics`: `api_port_by_default` for `forge serve`.
    pub(crate) fn metrics_at(&self, api_port_by_default: bool) -> anyhow::Result<MetricsAt> {
        Ok(match self.metrics_listen.as_deref() {
            None if api_port_by_default => MetricsAt::ApiPort,
            None | Some("off") => MetricsAt::Nowhere,
            Some(addr) => MetricsAt::Listener(addr.parse().with_context(|| {
                format!(
                    "--metrics-listen {addr:?}: expected an address such as 127.0.0.1:9464, or off"
                )
            })?),
        })
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

    /// Serves `GET /metrics` on a listener of its own when `at` says so, until `stop` fires;
    /// prints where.
    pub(crate) async fn serve_metrics(
        &self,
        at: &MetricsAt,
        service: &str,
        stop: tokio_util::sync::CancellationToken,
    ) -> anyhow::Result<()> {
        let MetricsAt::Listener(addr) = at else {
            return Ok(());
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("failed to listen on {addr} for metrics"))?;
        eprintln!(
            "{service}: metrics on http://{}/metrics",
            listener.local_addr()?
        );
        let (text, service) = (self.metrics(), service.to_owned());
        tokio::spawn(async move {
            if let Err(e) = forge_server::serve_metrics(listener, text, stop).await {
                eprintln!("{service}: the metrics listener failed: {e}");
            }
        });
        Ok(())
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
