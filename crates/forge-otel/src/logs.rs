//! Logs: the core's log lines — `tracing` events of target [`TARGET`] with an `event` field
//! naming a [`LogEvent`] — written as JSON lines and exported as OTLP log records by one layer.
//!
//! Every other event is ignored (a dependency's `tracing` output can quote a query or a body),
//! and so is an event whose name is not in the vocabulary. A line's fields go through the core's
//! [`log_records`] — allowlisted keys, primitive values (a formatted `?`/`%` value is dropped
//! as a structured one would be), strings capped, and a
//! `telemetry.fields_dropped` record naming what was dropped — so the JSON lines on standard
//! error and OTLP carry exactly the same thing. The body is the event's name; there is no
//! message text.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use forge_core::telemetry::{Attr, LogEvent, TARGET, Value, log_lines, log_records};
use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, Severity};
use opentelemetry_sdk::logs::SdkLogger;
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;

/// Where JSON log lines are written (standard error in the binaries, a buffer in tests).
pub type LineWriter = Arc<Mutex<dyn Write + Send>>;

/// JSON lines on standard error.
pub fn stderr_lines() -> LineWriter {
    Arc::new(Mutex::new(std::io::stderr()))
}

/// The layer: OTLP records through `otel`, JSON lines to `lines`, either or both.
pub(crate) struct Logs {
    pub(crate) otel: Option<SdkLogger>,
    pub(crate) lines: Option<LineWriter>,
}

/// How severe a line is.
pub(crate) fn severity(event: LogEvent) -> Severity {
    match event {
        LogEvent::InternalError | LogEvent::JobDeadLettered => Severity::Error,
        LogEvent::WorkerStoreFailed
        | LogEvent::McpServerProblem
        | LogEvent::FileScanUnavailable
        | LogEvent::FieldsDropped => Severity::Warn,
        LogEvent::WorkerStoreRecovered | LogEvent::WorkerTakenOver => Severity::Info,
        LogEvent::McpServerOutput => Severity::Debug,
    }
}

fn any(value: Value) -> Option<AnyValue> {
    Some(match value {
        Value::Str(s) => AnyValue::from(s),
        Value::Int(i) => AnyValue::Int(i),
        Value::Float(f) => AnyValue::Double(f),
        Value::Bool(b) => AnyValue::Boolean(b),
        Value::Json(_) => return None,
    })
}

/// An event's `event` name and its other fields, as the core's values.
#[derive(Default)]
struct Fields {
    event: Option<String>,
    fields: Vec<Attr>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "event" => self.event = Some(value.to_owned()),
            name => self.fields.push((name, Value::from(value))),
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.fields.push((field.name(), Value::from(value)));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.fields.push((field.name(), Value::from(value)));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.fields.push((field.name(), Value::from(value)));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.fields.push((field.name(), Value::from(value)));
    }

    /// A formatted value (`?x`, `%x`) may be anything, a structure or a quoted input: it is
    /// dropped like a structured one, and named as dropped.
    fn record_debug(&mut self, field: &Field, _: &dyn std::fmt::Debug) {
        self.fields
            .push((field.name(), Value::Json(serde_json::Value::Null)));
    }
}

impl Logs {
    fn write_lines(&self, lines: &LineWriter, event: LogEvent, fields: Vec<Attr>) {
        let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let mut out = lines.lock().unwrap_or_else(|e| e.into_inner());
        for line in log_lines(event, fields) {
            // `{"event"…` becomes `{"ts":"…","event"…`. A log sink that cannot write has nowhere
            // to report it.
            let rest = line.strip_prefix('{').unwrap_or(&line);
            let _ = writeln!(out, "{{\"ts\":\"{ts}\",{rest}");
        }
    }

    fn export(logger: &SdkLogger, event: LogEvent, fields: Vec<Attr>) {
        for (event, fields) in log_records(event, fields) {
            let mut record = logger.create_log_record();
            record.set_event_name(event.as_str());
            record.set_body(AnyValue::from(event.as_str()));
            record.set_severity_number(severity(event));
            record.set_timestamp(SystemTime::now());
            for (key, value) in fields {
                if let Some(value) = any(value) {
                    record.add_attribute(key, value);
                }
            }
            logger.emit(record);
        }
    }
}

/// Whether a callsite is Forge's (target `forge` or `forge::…`): the rest — a dependency's
/// `tracing` output, a driver's or an HTTP stack's, which a request runs beside — is disabled at
/// its callsite for the whole pipeline, so it is neither built nor dispatched.
pub(crate) fn forge_callsite(meta: &tracing::Metadata<'_>) -> bool {
    let target = meta.target();
    target == TARGET
        || target
            .strip_prefix(TARGET)
            .is_some_and(|rest| rest.starts_with("::"))
}

impl<S: Subscriber> Layer<S> for Logs {
    fn register_callsite(
        &self,
        meta: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        if forge_callsite(meta) {
            tracing::subscriber::Interest::always()
        } else {
            tracing::subscriber::Interest::never()
        }
    }

    fn enabled(&self, meta: &tracing::Metadata<'_>, _: Context<'_, S>) -> bool {
        forge_callsite(meta)
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != TARGET {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let Some(event) = fields.event.as_deref().and_then(LogEvent::parse) else {
            return;
        };
        if let Some(lines) = &self.lines {
            self.write_lines(lines, event, fields.fields.clone());
        }
        if let Some(logger) = &self.otel {
            Self::export(logger, event, fields.fields);
        }
    }
}
