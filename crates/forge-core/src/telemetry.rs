//! The telemetry port: a [`Tracer`], a [`Meter`] and a [`Logger`], bundled as [`Telemetry`],
//! with [`Telemetry::noop`] as the default so no call site asks whether telemetry is on.
//! OpenTelemetry lives behind it in `forge-otel`, the only crate that knows it.
//!
//! What crosses a process boundary is a [`TraceContext`] — ids, nothing else — as a W3C
//! `traceparent` stored with each job. [`TraceContext::parse`] treats a malformed value, and the
//! all-zero ids, as absent: a run without a trace link starts its own trace (its claim span says
//! `queue.trace_continued = false`), never joins a made-up one.
//!
//! Spans have closed names ([`SpanName`]); every run event maps to the span it opens, ends or
//! folds into ([`span_for`], a total match: a new event kind without a decision does not
//! compile). Instruments are a closed set ([`Instrument`]), each with its unit (also in its
//! name), description and the operational question it answers; their attributes pass the
//! allowlist [`METRIC_ATTRIBUTES`] in the adapter — no run, thread, tenant or user ids.
//!
//! Logs cannot carry content by construction: a line is a [`LogEvent`] (a closed enum, no
//! message string) and fields; [`sanitize`] keeps only allowlisted keys ([`LOG_FIELDS`]) with
//! primitive values (an object or array is dropped even under an allowed key), caps strings at
//! [`MAX_LOG_STRING`] characters with a visible marker, and reports what it dropped as a
//! [`LogEvent::FieldsDropped`] line naming keys, never values. Errors are logged as a
//! classified code ([`error_code`]), never as their text.

use std::sync::Arc;

use crate::event::RunEventKind;
use crate::time::Timestamp;

/// A span's identity as it crosses a process boundary: trace id, span id, whether sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    /// The trace (never all zeros).
    pub trace_id: [u8; 16],
    /// The span (never all zeros).
    pub span_id: [u8; 8],
    /// Whether the trace is sampled.
    pub sampled: bool,
}

fn hex_bytes<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != N * 2 || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[i * 2..i * 2 + 2], 16).ok()?;
    }
    Some(out)
}

impl TraceContext {
    /// A W3C `traceparent` (`00-{32 hex}-{16 hex}-{2 hex}`, lower case), or `None` when it is
    /// malformed, of an unknown version's shape, or names the all-zero trace or span.
    pub fn parse(traceparent: &str) -> Option<Self> {
        let mut parts = traceparent.trim().split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || version != "00" {
            return None;
        }
        let trace_id: [u8; 16] = hex_bytes(trace)?;
        let span_id: [u8; 8] = hex_bytes(span)?;
        let [flags]: [u8; 1] = hex_bytes(flags)?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(Self {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }

    /// The `traceparent` of this context.
    pub fn traceparent(&self) -> String {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        format!(
            "00-{}-{}-{}",
            hex(&self.trace_id),
            hex(&self.span_id),
            if self.sampled { "01" } else { "00" }
        )
    }

    /// The trace id in hex.
    pub fn trace_hex(&self) -> String {
        self.trace_id.iter().map(|x| format!("{x:02x}")).collect()
    }
}

/// What a span is, as a collector draws it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// Serving a request.
    Server,
    /// Handing work to a queue.
    Producer,
    /// Taking work from a queue.
    Consumer,
    /// Calling out (a model, a tool).
    Client,
    /// Work within the process.
    Internal,
}

/// Every span Forge produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpanName {
    /// An HTTP request to the server (`Server`).
    HttpRequest,
    /// A run handed to the queue (`Producer`).
    RunEnqueue,
    /// A run's job taken from the queue (`Consumer`).
    RunClaim,
    /// A worker executing a run.
    RunExecute,
    /// One step of a run: a model call and its tools.
    StepExecute,
    /// One model call (`Client`).
    ModelCall,
    /// One tool call (`Client`).
    ToolCall,
    /// A person's approval, from request to decision (two timestamps: it spans processes).
    ApprovalWait,
    /// A person's answer to a question, likewise.
    QuestionWait,
}

impl SpanName {
    /// Its name, sharing its first word with the run events it stands for.
    pub fn as_str(&self) -> &'static str {
        match self {
            SpanName::HttpRequest => "http.request",
            SpanName::RunEnqueue => "run.enqueue",
            SpanName::RunClaim => "run.claim",
            SpanName::RunExecute => "run.execute",
            SpanName::StepExecute => "step.execute",
            SpanName::ModelCall => "model.call",
            SpanName::ToolCall => "tool.call",
            SpanName::ApprovalWait => "approval.wait",
            SpanName::QuestionWait => "question.wait",
        }
    }

    /// The kind it is produced with.
    pub fn kind(&self) -> SpanKind {
        match self {
            SpanName::HttpRequest => SpanKind::Server,
            SpanName::RunEnqueue => SpanKind::Producer,
            SpanName::RunClaim => SpanKind::Consumer,
            SpanName::ModelCall | SpanName::ToolCall => SpanKind::Client,
            SpanName::RunExecute
            | SpanName::StepExecute
            | SpanName::ApprovalWait
            | SpanName::QuestionWait => SpanKind::Internal,
        }
    }
}

/// What a run event means for the spans of its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanFor {
    /// The event happens as this span starts.
    Opens(SpanName),
    /// The event ends this span.
    Ends(SpanName),
    /// The event is recorded within this span (no span of its own: one per streamed part would
    /// be thousands per run and bury the model and tool spans).
    FoldsInto(SpanName),
}

/// The span each run event belongs to. A total match: a new event kind is a compile error here
/// until someone decides.
pub fn span_for(kind: &RunEventKind) -> SpanFor {
    match kind {
        RunEventKind::RunQueued { .. } => SpanFor::Opens(SpanName::RunEnqueue),
        RunEventKind::RunStarted { .. } => SpanFor::Opens(SpanName::RunExecute),
        RunEventKind::StepStarted { .. } => SpanFor::Opens(SpanName::StepExecute),
        RunEventKind::PartAdded { .. }
        | RunEventKind::PartUpdated { .. }
        | RunEventKind::UsageUpdated { .. }
        | RunEventKind::StateUpdated { .. }
        | RunEventKind::ThreadCompacted { .. }
        | RunEventKind::RunCheckpointed { .. } => SpanFor::FoldsInto(SpanName::StepExecute),
        RunEventKind::ApprovalRequested { .. } => SpanFor::Opens(SpanName::ApprovalWait),
        RunEventKind::QuestionRequested { .. } => SpanFor::Opens(SpanName::QuestionWait),
        RunEventKind::RunCompleted { .. }
        | RunEventKind::RunFailed { .. }
        | RunEventKind::RunCancelled { .. } => SpanFor::Ends(SpanName::RunExecute),
    }
}

/// A span or log attribute's value: primitives only.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Text.
    Str(String),
    /// An integer.
    Int(i64),
    /// A number.
    Float(f64),
    /// A flag.
    Bool(bool),
    /// Structured data — which [`sanitize`] drops from logs even under an allowed key.
    Json(serde_json::Value),
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.to_owned())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(s)
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Value::Int(i64::from(v))
    }
}
impl From<usize> for Value {
    fn from(v: usize) -> Self {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

/// A key and its value.
pub type Attr = (&'static str, Value);

/// An open span; ended by [`Span::end`] (or when dropped).
pub trait Span: Send + Sync {
    /// Its identity, for children elsewhere (`None` from the no-op tracer).
    fn context(&self) -> Option<TraceContext>;
    /// Adds an attribute.
    fn set(&self, key: &'static str, value: Value);
    /// Marks it failed with a classified code.
    fn fail(&self, code: &str);
    /// Ends it now.
    fn end(&self);
}

/// Port: spans.
pub trait Tracer: Send + Sync {
    /// Starts `name` as a child of `parent` (a new trace without one).
    fn start(
        &self,
        name: SpanName,
        parent: Option<&TraceContext>,
        attrs: Vec<Attr>,
    ) -> Box<dyn Span>;

    /// Records a span that already happened, from `start` to `end` (a wait that outlived the
    /// processes it crossed).
    fn record(
        &self,
        name: SpanName,
        parent: Option<&TraceContext>,
        start: Timestamp,
        end: Timestamp,
        attrs: Vec<Attr>,
    );
}

/// How an instrument aggregates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstrumentKind {
    /// A monotonic count.
    Counter,
    /// A distribution of values.
    Histogram,
    /// A current value.
    Gauge,
}

/// Every instrument Forge records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Instrument {
    /// Tokens used, by model and `token_type` (input, output, cache_read, cache_write,
    /// reasoning).
    ModelTokens,
    /// Cost of model calls, in micro-units, by model.
    ModelCost,
    /// Steps executed, by agent.
    RunSteps,
    /// Tool calls, by tool and outcome (ok, error, denied).
    ToolCalls,
    /// Tool calls that failed, by tool and code.
    ToolErrors,
    /// Model call latency, by model and outcome.
    ModelCallDuration,
    /// Time to the first streamed token, by model.
    TimeToFirstToken,
    /// Time a job waited in the queue before its claim.
    ClaimLatency,
    /// Run duration, by outcome (completed, failed, cancelled, parked, retried).
    RunDuration,
    /// Time the store took to commit a step, by outcome (ok, error) and error code.
    StepCommitDuration,
    /// Jobs ready and waiting to be claimed.
    QueueDepth,
    /// Jobs dead-lettered.
    DeadLetters,
    /// Store errors a worker met (and survived).
    StoreErrors,
    /// HTTP requests a server answered, by `route` (the matched path, never the raw one) and
    /// `outcome` (the status class: `2xx`, `4xx`, …).
    HttpRequests,
    /// Requests, operations and connections a server refused for a limit, by `limit`
    /// (`cost`, `bytes`, `requests`, `subscriptions`, `connections`, `response_bytes`,
    /// `execute_time`, `slow_reader`). Never by tenant: the count says which limit binds.
    Refusals,
    /// Each limit a server holds tenants and principals to, by `limit`, in the limit's own
    /// unit (places, cost, bytes, runs).
    Limit,
    /// How much of each limit the busiest tenant (or principal, for a `principal_` limit) uses
    /// now, by `limit`: 0 to 1, above 1 for a bucket in debt. Never by tenant.
    LimitUse,
    /// Always 1, with the process's `version`: every process's scrape says what it runs from its
    /// start, before it has done anything else worth counting.
    BuildInfo,
}

impl Instrument {
    /// Every instrument.
    pub const ALL: [Instrument; 18] = [
        Instrument::ModelTokens,
        Instrument::ModelCost,
        Instrument::RunSteps,
        Instrument::ToolCalls,
        Instrument::ToolErrors,
        Instrument::ModelCallDuration,
        Instrument::TimeToFirstToken,
        Instrument::ClaimLatency,
        Instrument::RunDuration,
        Instrument::StepCommitDuration,
        Instrument::QueueDepth,
        Instrument::DeadLetters,
        Instrument::StoreErrors,
        Instrument::HttpRequests,
        Instrument::Refusals,
        Instrument::Limit,
        Instrument::LimitUse,
        Instrument::BuildInfo,
    ];

    /// Its name, ending in its unit.
    pub fn name(&self) -> &'static str {
        match self {
            Instrument::ModelTokens => "forge.model.tokens_total",
            Instrument::ModelCost => "forge.model.cost_micros_total",
            Instrument::RunSteps => "forge.run.steps_total",
            Instrument::ToolCalls => "forge.tool.calls_total",
            Instrument::ToolErrors => "forge.tool.errors_total",
            Instrument::ModelCallDuration => "forge.model.call_duration_ms",
            Instrument::TimeToFirstToken => "forge.model.time_to_first_token_ms",
            Instrument::ClaimLatency => "forge.queue.claim_latency_ms",
            Instrument::RunDuration => "forge.run.duration_ms",
            Instrument::StepCommitDuration => "forge.run.step_commit_duration_ms",
            Instrument::QueueDepth => "forge.queue.depth_jobs",
            Instrument::DeadLetters => "forge.queue.dead_letters_total",
            Instrument::StoreErrors => "forge.worker.store_errors_total",
            Instrument::HttpRequests => "forge.http.requests_total",
            Instrument::Refusals => "forge.server.refusals_total",
            Instrument::Limit => "forge.server.limit",
            Instrument::LimitUse => "forge.server.limit_use_ratio",
            Instrument::BuildInfo => "forge.build_info",
        }
    }

    /// Its unit (UCUM).
    pub fn unit(&self) -> &'static str {
        match self {
            Instrument::ModelTokens => "{token}",
            Instrument::ModelCost => "{micro}",
            Instrument::RunSteps => "{step}",
            Instrument::ToolCalls | Instrument::ToolErrors => "{call}",
            Instrument::ModelCallDuration
            | Instrument::TimeToFirstToken
            | Instrument::ClaimLatency
            | Instrument::RunDuration
            | Instrument::StepCommitDuration => "ms",
            Instrument::QueueDepth | Instrument::DeadLetters => "{job}",
            Instrument::StoreErrors => "{error}",
            Instrument::HttpRequests | Instrument::Refusals => "{request}",
            Instrument::Limit => "{limit}",
            Instrument::LimitUse | Instrument::BuildInfo => "1",
        }
    }

    /// How it aggregates.
    pub fn kind(&self) -> InstrumentKind {
        match self {
            Instrument::ModelCallDuration
            | Instrument::TimeToFirstToken
            | Instrument::ClaimLatency
            | Instrument::RunDuration
            | Instrument::StepCommitDuration => InstrumentKind::Histogram,
            Instrument::QueueDepth
            | Instrument::Limit
            | Instrument::LimitUse
            | Instrument::BuildInfo => InstrumentKind::Gauge,
            _ => InstrumentKind::Counter,
        }
    }

    /// What it measures.
    pub fn description(&self) -> &'static str {
        match self {
            Instrument::ModelTokens => "Tokens used by model calls, by model and token type.",
            Instrument::ModelCost => "Cost of model calls in micro-units, by model.",
            Instrument::RunSteps => "Steps executed (one model call and its tools each).",
            Instrument::ToolCalls => "Tool calls, by tool and outcome.",
            Instrument::ToolErrors => "Tool calls that failed, by tool and error code.",
            Instrument::ModelCallDuration => "Model call latency, from request to last byte.",
            Instrument::TimeToFirstToken => {
                "Time from a model request to its first streamed output."
            }
            Instrument::ClaimLatency => {
                "Time a run's job waited in the queue before a worker claimed it."
            }
            Instrument::RunDuration => "Time a worker spent on a run's execution, by outcome.",
            Instrument::StepCommitDuration => {
                "Time the store took to commit a step (its events, messages and run row)."
            }
            Instrument::QueueDepth => "Jobs ready to be claimed now.",
            Instrument::DeadLetters => "Jobs that gave up and were dead-lettered.",
            Instrument::StoreErrors => "Store errors a worker's claim loop or sweep met.",
            Instrument::HttpRequests => "HTTP requests answered, by route and status class.",
            Instrument::Refusals => "Requests and connections refused for a limit, by limit.",
            Instrument::Limit => "Each per-tenant and per-principal limit, in its own unit.",
            Instrument::LimitUse => {
                "How much of each limit the busiest tenant or principal uses, 0 to 1."
            }
            Instrument::BuildInfo => "Always 1, labelled with the version the process runs.",
        }
    }

    /// The operational question it answers.
    pub fn question(&self) -> &'static str {
        match self {
            Instrument::ModelTokens => "Which model is consuming tokens, and are caches hitting?",
            Instrument::ModelCost => "What are we spending, on which model?",
            Instrument::RunSteps => "Are agents taking more steps than they used to?",
            Instrument::ToolCalls => "Which tools are used, and are they being denied?",
            Instrument::ToolErrors => "Which tool is failing, and how?",
            Instrument::ModelCallDuration => "Is a provider slow?",
            Instrument::TimeToFirstToken => "How long do users wait before anything streams?",
            Instrument::ClaimLatency => "Is the queue backing up (are there enough workers)?",
            Instrument::RunDuration => "Are runs getting slower, including the ones that fail?",
            Instrument::StepCommitDuration => "Is the database what makes runs slow?",
            Instrument::QueueDepth => "How much work is waiting?",
            Instrument::DeadLetters => "Are runs being given up on?",
            Instrument::StoreErrors => "Is the database failing under the workers?",
            Instrument::HttpRequests => "Is the API answering, and with errors on which route?",
            Instrument::Refusals => "Is a tenant hitting a limit, and which one binds?",
            Instrument::Limit => "What is each tenant allowed?",
            Instrument::LimitUse => "Is some tenant close to a limit before it is refused?",
            Instrument::BuildInfo => "Which version is each process running, and is it up?",
        }
    }
}

/// The attribute keys an instrument may carry; every other key is dropped by the adapter. No
/// ids: one time series per run is a cardinality incident.
pub const METRIC_ATTRIBUTES: &[&str] = &[
    "model",
    "token_type",
    "agent",
    "tool",
    "outcome",
    "code",
    "route",
    "version",
    "limit",
];

/// Port: metrics. Values are recorded as given; an adapter drops attributes not in
/// [`METRIC_ATTRIBUTES`] and a negative duration (clock skew), rather than clamping it.
pub trait Meter: Send + Sync {
    /// Adds `value` to a counter, or records it in a histogram, or sets a gauge.
    fn record(&self, instrument: Instrument, value: f64, attrs: &[(&'static str, &str)]);
}

/// Every line Forge logs. There is no message string: a line is one of these and its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogEvent {
    /// A worker's claim loop or sweep met a store error (it retries).
    WorkerStoreFailed,
    /// The store answers a worker again.
    WorkerStoreRecovered,
    /// A worker's run or job was taken over by another; it changed nothing.
    WorkerTakenOver,
    /// A job was dead-lettered.
    JobDeadLettered,
    /// An MCP server is down (restarting with backoff), or reported drift.
    McpServerProblem,
    /// An MCP server's own stderr line (its length only).
    McpServerOutput,
    /// A file was refused because the scanner could not be asked.
    FileScanUnavailable,
    /// An internal error answered with a reference.
    InternalError,
    /// A line's fields were dropped by [`sanitize`].
    FieldsDropped,
}

impl LogEvent {
    /// Its name.
    pub fn as_str(&self) -> &'static str {
        match self {
            LogEvent::WorkerStoreFailed => "worker.store_failed",
            LogEvent::WorkerStoreRecovered => "worker.store_recovered",
            LogEvent::WorkerTakenOver => "worker.taken_over",
            LogEvent::JobDeadLettered => "job.dead_lettered",
            LogEvent::McpServerProblem => "mcp.server_problem",
            LogEvent::McpServerOutput => "mcp.server_output",
            LogEvent::FileScanUnavailable => "file.scan_unavailable",
            LogEvent::InternalError => "server.internal_error",
            LogEvent::FieldsDropped => "telemetry.fields_dropped",
        }
    }
}

/// The field keys a log line may carry; the rest are dropped (and reported).
pub const LOG_FIELDS: &[&str] = &[
    "worker",
    "run_id",
    "job_id",
    "thread_id",
    "tenant",
    "attempt",
    "code",
    "reference",
    "server",
    "tool",
    "bytes",
    "count",
    "outcome",
    "dropped",
];

/// The longest string a log field keeps, in characters.
pub const MAX_LOG_STRING: usize = 120;

/// The marker a cut string ends with.
pub const TRUNCATED: &str = "…[truncated]";

/// A log line's fields made safe: allowlisted keys with primitive values, strings capped. The
/// second value names the keys dropped (never their values), to be logged as
/// [`LogEvent::FieldsDropped`].
pub fn sanitize(fields: Vec<Attr>) -> (Vec<Attr>, Vec<&'static str>) {
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for (key, value) in fields {
        if !LOG_FIELDS.contains(&key) {
            dropped.push(key);
            continue;
        }
        let value = match value {
            Value::Json(serde_json::Value::String(s)) | Value::Str(s) => Value::Str(capped(s)),
            Value::Json(serde_json::Value::Bool(b)) => Value::Bool(b),
            Value::Json(serde_json::Value::Number(n)) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Float(n.as_f64().unwrap_or(0.0)),
            },
            Value::Json(_) => {
                dropped.push(key);
                continue;
            }
            other => other,
        };
        kept.push((key, value));
    }
    (kept, dropped)
}

/// `s`, cut at [`MAX_LOG_STRING`] characters with [`TRUNCATED`] at the end when longer.
pub fn capped(s: String) -> String {
    if crate::text::prefix_chars(&s, MAX_LOG_STRING).len() == s.len() {
        return s;
    }
    crate::text::capped(&s, MAX_LOG_STRING, TRUNCATED)
}

/// What a sink writes for `event` and `fields`: the line after [`sanitize`], then the
/// [`LogEvent::FieldsDropped`] line that reports what was dropped, if anything was.
pub fn log_records(event: LogEvent, fields: Vec<Attr>) -> Vec<(LogEvent, Vec<Attr>)> {
    let (kept, dropped) = sanitize(fields);
    let mut records = vec![(event, kept)];
    if !dropped.is_empty() {
        records.push((
            LogEvent::FieldsDropped,
            vec![
                ("count", Value::from(dropped.len())),
                ("dropped", Value::Str(capped(dropped.join(",")))),
            ],
        ));
    }
    records
}

/// [`log_records`] as JSON lines: `{"event": …, fields…}`.
pub fn log_lines(event: LogEvent, fields: Vec<Attr>) -> Vec<String> {
    log_records(event, fields)
        .into_iter()
        .map(|(event, fields)| {
            let mut map = serde_json::Map::new();
            map.insert("event".into(), event.as_str().into());
            for (k, v) in fields {
                let v = match v {
                    Value::Str(s) => serde_json::Value::String(s),
                    Value::Int(i) => i.into(),
                    Value::Float(f) => serde_json::Number::from_f64(f)
                        .map_or(serde_json::Value::Null, serde_json::Value::Number),
                    Value::Bool(b) => b.into(),
                    Value::Json(_) => serde_json::Value::Null,
                };
                map.insert(k.into(), v);
            }
            serde_json::Value::Object(map).to_string()
        })
        .collect()
}

/// Port: logs.
pub trait Logger: Send + Sync {
    /// Logs `event` with `fields` (sanitized by the sink with [`sanitize`]).
    fn log(&self, event: LogEvent, fields: Vec<Attr>);
}

/// A logger writing [`log_lines`] to `W` (standard error in the binaries), one line each, each
/// starting with `"ts"`: when it was logged, UTC, RFC 3339 to the millisecond.
pub struct JsonLines<W> {
    out: std::sync::Mutex<W>,
}

impl<W> JsonLines<W> {
    /// Logs to `out`.
    pub fn new(out: W) -> Self {
        Self {
            out: std::sync::Mutex::new(out),
        }
    }

    /// What it was writing to.
    pub fn into_inner(self) -> W {
        self.out.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

impl<W: std::io::Write + Send> Logger for JsonLines<W> {
    fn log(&self, event: LogEvent, fields: Vec<Attr>) {
        let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        for line in log_lines(event, fields) {
            // `{"event"…` becomes `{"ts":"…","event"…`. A log sink that cannot write has nowhere
            // to report it.
            let rest = line.strip_prefix('{').unwrap_or(&line);
            let _ = writeln!(out, "{{\"ts\":\"{ts}\",{rest}");
        }
    }
}

/// Two loggers, each given every line.
pub struct Both(pub Arc<dyn Logger>, pub Arc<dyn Logger>);

impl Logger for Both {
    fn log(&self, event: LogEvent, fields: Vec<Attr>) {
        self.0.log(event, fields.clone());
        self.1.log(event, fields);
    }
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

struct NoopSpan;

impl Span for NoopSpan {
    fn context(&self) -> Option<TraceContext> {
        None
    }
    fn set(&self, _: &'static str, _: Value) {}
    fn fail(&self, _: &str) {}
    fn end(&self) {}
}

/// Telemetry that records nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Noop;

impl Tracer for Noop {
    fn start(&self, _: SpanName, _: Option<&TraceContext>, _: Vec<Attr>) -> Box<dyn Span> {
        Box::new(NoopSpan)
    }
    fn record(
        &self,
        _: SpanName,
        _: Option<&TraceContext>,
        _: Timestamp,
        _: Timestamp,
        _: Vec<Attr>,
    ) {
    }
}

impl Meter for Noop {
    fn record(&self, _: Instrument, _: f64, _: &[(&'static str, &str)]) {}
}

impl Logger for Noop {
    fn log(&self, _: LogEvent, _: Vec<Attr>) {}
}

/// The three together, as every component takes them.
#[derive(Clone)]
pub struct Telemetry {
    /// Spans.
    pub tracer: Arc<dyn Tracer>,
    /// Metrics.
    pub meter: Arc<dyn Meter>,
    /// Logs.
    pub logger: Arc<dyn Logger>,
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
            tracer: Arc::new(Noop),
            meter: Arc::new(Noop),
            logger: Arc::new(Noop),
        }
    }

    /// The same, logging through `logger`.
    pub fn with_logger(mut self, logger: Arc<dyn Logger>) -> Self {
        self.logger = logger;
        self
    }
}

impl Default for Telemetry {
    fn default() -> Self {
        Self::noop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Any Unicode in a log field: kept whole within [`MAX_LOG_STRING`] characters, else
        /// its first [`MAX_LOG_STRING`] characters and [`TRUNCATED`].
        #[test]
        fn any_unicode_log_string_is_capped_by_characters(
            s in proptest::prop_oneof![
                crate::text::strategy::unicode(400),
                crate::text::strategy::unicode_runs(400),
            ],
        ) {
            let out = capped(s.clone());
            if s.chars().count() <= MAX_LOG_STRING {
                proptest::prop_assert_eq!(out, s);
            } else {
                let kept = out.strip_suffix(TRUNCATED).unwrap_or_default();
                proptest::prop_assert_eq!(kept.chars().count(), MAX_LOG_STRING);
                proptest::prop_assert!(s.starts_with(kept));
            }
        }
    }

    #[test]
    fn traceparents_are_strict() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let ctx = TraceContext::parse(ok).expect("valid");
        assert_eq!(ctx.traceparent(), ok);
        assert!(ctx.sampled);
        for bad in [
            "",
            "garbage",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad:?}");
        }
    }

    /// The events without a span of their own, listed: an exception is documented here, not
    /// left out.
    #[test]
    fn every_event_kind_has_its_span_and_the_folded_ones_are_listed() {
        use crate::event::RunEventKind as K;
        use crate::id::{InteractionId, MessageId, RunId, ThreadId, ToolCallId};
        let (thread, run) = (ThreadId(uuid::Uuid::nil()), RunId(uuid::Uuid::nil()));
        let agent = crate::agent::AgentRef {
            name: "a".into(),
            version: "1".into(),
        };
        // One of each kind, in declaration order; the match below fails to compile when a kind
        // is added, so this list is kept whole.
        let samples = vec![
            K::RunQueued {
                thread_id: thread,
                behind: run,
            },
            K::RunStarted {
                thread_id: thread,
                agent,
                model: "m".into(),
            },
            K::StepStarted { step: 1 },
            K::PartAdded {
                message_id: MessageId(uuid::Uuid::nil()),
                role: crate::message::Role::Assistant,
                index: 0,
                part: crate::part::Part::text("x"),
            },
            K::PartUpdated {
                message_id: MessageId(uuid::Uuid::nil()),
                index: 0,
                update: crate::part::PartUpdate::TextDelta { text: "x".into() },
            },
            K::UsageUpdated {
                step: 1,
                call: crate::usage::Usage::default(),
                total: crate::usage::Usage::default(),
            },
            K::ApprovalRequested {
                interaction_id: InteractionId(uuid::Uuid::nil()),
                tool_call_id: ToolCallId("c".into()),
                tool_name: "t".into(),
                input_hash: "h".into(),
            },
            K::QuestionRequested {
                interaction_id: InteractionId(uuid::Uuid::nil()),
                prompt: "p".into(),
                answer_schema: serde_json::json!({}),
            },
            K::StateUpdated {
                version: 1,
                keys: vec![],
            },
            K::ThreadCompacted {
                version: 1,
                through: MessageId(uuid::Uuid::nil()),
                covered: 2,
                model: "m".into(),
            },
            K::RunCheckpointed {
                step: 1,
                version: 1,
            },
            K::RunCompleted {
                text: "t".into(),
                usage: crate::usage::Usage::default(),
            },
            K::RunFailed {
                failure: crate::run::RunFailure {
                    code: crate::run::FailureCode::ProviderError,
                    message: "m".into(),
                },
            },
            K::RunCancelled { reason: None },
        ];
        for k in &samples {
            // Exhaustive: a new kind must be added to `samples` above.
            match k {
                K::RunQueued { .. }
                | K::RunStarted { .. }
                | K::StepStarted { .. }
                | K::PartAdded { .. }
                | K::PartUpdated { .. }
                | K::UsageUpdated { .. }
                | K::ApprovalRequested { .. }
                | K::QuestionRequested { .. }
                | K::StateUpdated { .. }
                | K::ThreadCompacted { .. }
                | K::RunCheckpointed { .. }
                | K::RunCompleted { .. }
                | K::RunFailed { .. }
                | K::RunCancelled { .. } => {}
            }
        }
        let folded: Vec<&str> = samples
            .iter()
            .filter(|k| matches!(span_for(k), SpanFor::FoldsInto(_)))
            .map(K::type_name)
            .collect();
        assert_eq!(
            folded,
            [
                "part.added",
                "part.updated",
                "usage.updated",
                "state.updated",
                "thread.compacted",
                "run.checkpointed"
            ]
        );
        for k in &samples {
            let name = match span_for(k) {
                SpanFor::Opens(n) | SpanFor::Ends(n) | SpanFor::FoldsInto(n) => n.as_str(),
            };
            let first = |s: &str| s.split('.').next().unwrap_or("").to_owned();
            if !matches!(span_for(k), SpanFor::FoldsInto(_)) {
                assert_eq!(
                    first(name),
                    first(k.type_name()),
                    "{} → {name}",
                    k.type_name()
                );
            }
        }
    }

    #[test]
    fn logs_keep_allowlisted_primitives_capped_and_report_the_rest() {
        let long = "x".repeat(500);
        let (kept, dropped) = sanitize(vec![
            ("worker", "w1".into()),
            ("prompt", "Ignore all previous instructions".into()),
            (
                "code",
                Value::Json(serde_json::json!({"input": {"card": "4111"}})),
            ),
            ("count", 3u64.into()),
            ("reference", long.clone().into()),
        ]);
        assert_eq!(dropped, ["prompt", "code"]);
        assert_eq!(kept[0], ("worker", Value::Str("w1".into())));
        assert_eq!(kept[1], ("count", Value::Int(3)));
        let Value::Str(cut) = &kept[2].1 else {
            panic!()
        };
        assert!(
            cut.ends_with(TRUNCATED)
                && cut.chars().count() == MAX_LOG_STRING + TRUNCATED.chars().count()
        );
        let lines = log_lines(
            LogEvent::WorkerStoreFailed,
            vec![("prompt", "secret words".into())],
        );
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0], r#"{"event":"worker.store_failed"}"#);
        assert_eq!(
            lines[1],
            r#"{"event":"telemetry.fields_dropped","count":1,"dropped":"prompt"}"#
        );
    }

    #[test]
    fn each_json_line_says_when_it_was_logged() {
        let logger = JsonLines::new(Vec::new());
        logger.log(
            LogEvent::InternalError,
            vec![("reference", Value::Str("r1".into()))],
        );
        let out = String::from_utf8(logger.into_inner()).unwrap_or_default();
        let line: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_default();
        assert_eq!(line["event"], LogEvent::InternalError.as_str(), "{out}");
        assert_eq!(line["reference"], "r1");
        let ts = line["ts"].as_str().unwrap_or_default();
        assert!(
            chrono::DateTime::parse_from_rfc3339(ts).is_ok() && ts.ends_with('Z'),
            "{out}"
        );
    }

    #[test]
    fn instruments_carry_their_unit_in_their_name_and_say_why_they_exist() {
        for i in Instrument::ALL {
            let suffixes: &[&str] = match i.unit() {
                "ms" => &["_ms"],
                "{job}" if i.kind() == InstrumentKind::Gauge => &["_jobs"],
                // Each limit in its own unit: the `limit` attribute says which.
                "{limit}" if i.kind() == InstrumentKind::Gauge => &[".limit"],
                // Dimensionless: a constant 1 with labels, or a ratio.
                "1" if i.kind() == InstrumentKind::Gauge => &["_info", "_ratio"],
                _ => &["_total"],
            };
            assert!(
                suffixes.iter().any(|s| i.name().ends_with(s)),
                "{}",
                i.name()
            );
            assert!(i.description().ends_with('.') && i.question().ends_with('?'));
        }
        for id in ["run_id", "thread_id", "tenant", "principal"] {
            assert!(!METRIC_ATTRIBUTES.contains(&id));
        }
    }
}
