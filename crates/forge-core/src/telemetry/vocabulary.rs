//! The closed vocabularies: every span ([`SpanName`]), instrument ([`Instrument`]) and log line
//! ([`LogEvent`]) Forge produces, and the attribute keys each signal may carry.

use crate::event::RunEventKind;

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
    /// Every span.
    pub const ALL: [SpanName; 9] = [
        SpanName::HttpRequest,
        SpanName::RunEnqueue,
        SpanName::RunClaim,
        SpanName::RunExecute,
        SpanName::StepExecute,
        SpanName::ModelCall,
        SpanName::ToolCall,
        SpanName::ApprovalWait,
        SpanName::QuestionWait,
    ];

    /// The span named `name`, if it is one of the vocabulary's.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

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

/// The attribute keys a span may carry — the union of what [`super::Telemetry::span`] declares
/// per name, and the fields `tracing-opentelemetry` reads for a span's kind and status; the
/// adapter drops every other key from every span. No content: ids, names, counts and codes.
pub const SPAN_ATTRIBUTES: &[&str] = &[
    "otel.kind",
    "otel.status_description",
    "error.type",
    "http.route",
    "http.status_code",
    "agent",
    "run_id",
    "job_id",
    "attempt",
    "queue.trace_continued",
    "outcome",
    "step",
    "model",
    "tool",
];

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
    /// A line's fields were dropped by [`sanitize`](super::sanitize).
    FieldsDropped,
}

impl LogEvent {
    /// Every line.
    pub const ALL: [LogEvent; 9] = [
        LogEvent::WorkerStoreFailed,
        LogEvent::WorkerStoreRecovered,
        LogEvent::WorkerTakenOver,
        LogEvent::JobDeadLettered,
        LogEvent::McpServerProblem,
        LogEvent::McpServerOutput,
        LogEvent::FileScanUnavailable,
        LogEvent::InternalError,
        LogEvent::FieldsDropped,
    ];

    /// The line named `name`, if it is one of the vocabulary's.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == name)
    }

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

#[cfg(test)]
mod tests {
    use super::*;

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
                preview: None,
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
