//! Logs: the core's [`Logger`] on the SDK's logger, exported as OTLP log records.
//!
//! A record is what [`log_records`] makes of a line — the sanitized fields and, when some were
//! dropped, the `telemetry.fields_dropped` record naming them — so OTLP carries exactly what the
//! JSON lines on standard error carry. The body is the event's name; there is no message text.

use std::sync::Arc;
use std::time::SystemTime;

use forge_core::telemetry::{Attr, LogEvent, Logger, Value, log_records};
use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, Severity};
use opentelemetry_sdk::logs::SdkLogger;

/// The core's logger on an SDK logger, also writing every line to `also` (standard error).
pub(crate) struct OtelLogger {
    pub(crate) logger: SdkLogger,
    pub(crate) also: Option<Arc<dyn Logger>>,
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

impl Logger for OtelLogger {
    fn log(&self, event: LogEvent, fields: Vec<Attr>) {
        if let Some(also) = &self.also {
            also.log(event, fields.clone());
        }
        for (event, fields) in log_records(event, fields) {
            let mut record = self.logger.create_log_record();
            record.set_event_name(event.as_str());
            record.set_body(AnyValue::from(event.as_str()));
            record.set_severity_number(severity(event));
            record.set_timestamp(SystemTime::now());
            for (key, value) in fields {
                if let Some(value) = any(value) {
                    record.add_attribute(key, value);
                }
            }
            self.logger.emit(record);
        }
    }
}
