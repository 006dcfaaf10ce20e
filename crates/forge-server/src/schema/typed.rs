//! Typed twins of the wire contract for the fields clients branch on: a run's token usage, a
//! message's parts as a union, an event's type as an enum. The `JSON` fields in the wire
//! encoding stay beside them, for forward compatibility (a client that meets a part or event
//! kind it does not know still reads it there).

use async_graphql::{Enum, Json, SimpleObject, Union};
use forge_core::event::RunEventKind;
use forge_core::part::{ApprovalStatus, Part, Trust};
use forge_core::usage::Usage;
use serde_json::Value;

/// Tokens a model call (or a run) consumed.
#[derive(SimpleObject)]
#[graphql(name = "Usage")]
pub struct UsageObject {
    /// Prompt tokens, cached ones included.
    pub input_tokens: u64,
    /// Completion tokens, reasoning included.
    pub output_tokens: u64,
    /// Prompt tokens read from the provider's cache.
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's cache.
    pub cache_write_tokens: u64,
    /// Output tokens spent on hidden reasoning.
    pub reasoning_tokens: u64,
    /// Requests of the provider's own tools.
    pub server_tool_requests: u64,
}

impl From<Usage> for UsageObject {
    fn from(u: Usage) -> Self {
        Self {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
            reasoning_tokens: u.reasoning_tokens,
            server_tool_requests: u.server_tool_requests,
        }
    }
}

/// The type of a run event.
#[derive(Enum, Copy, Clone, Eq, PartialEq, Debug)]
pub enum EventType {
    /// `run.queued`.
    RunQueued,
    /// `run.started`.
    RunStarted,
    /// `step.started`.
    StepStarted,
    /// `part.added`.
    PartAdded,
    /// `part.updated`.
    PartUpdated,
    /// `usage.updated`.
    UsageUpdated,
    /// `approval.requested`.
    ApprovalRequested,
    /// `question.requested`.
    QuestionRequested,
    /// `state.updated`.
    StateUpdated,
    /// `thread.compacted`.
    ThreadCompacted,
    /// `run.checkpointed`.
    RunCheckpointed,
    /// `run.completed`.
    RunCompleted,
    /// `run.failed`.
    RunFailed,
    /// `run.cancelled`.
    RunCancelled,
}

impl From<&RunEventKind> for EventType {
    fn from(k: &RunEventKind) -> Self {
        match k {
            RunEventKind::RunQueued { .. } => EventType::RunQueued,
            RunEventKind::RunStarted { .. } => EventType::RunStarted,
            RunEventKind::StepStarted { .. } => EventType::StepStarted,
            RunEventKind::PartAdded { .. } => EventType::PartAdded,
            RunEventKind::PartUpdated { .. } => EventType::PartUpdated,
            RunEventKind::UsageUpdated { .. } => EventType::UsageUpdated,
            RunEventKind::ApprovalRequested { .. } => EventType::ApprovalRequested,
            RunEventKind::QuestionRequested { .. } => EventType::QuestionRequested,
            RunEventKind::StateUpdated { .. } => EventType::StateUpdated,
            RunEventKind::ThreadCompacted { .. } => EventType::ThreadCompacted,
            RunEventKind::RunCheckpointed { .. } => EventType::RunCheckpointed,
            RunEventKind::RunCompleted { .. } => EventType::RunCompleted,
            RunEventKind::RunFailed { .. } => EventType::RunFailed,
            RunEventKind::RunCancelled { .. } => EventType::RunCancelled,
        }
    }
}

/// Prose.
#[derive(SimpleObject)]
pub struct TextPart {
    /// The text.
    pub text: String,
}

/// The model asks for a tool to run.
#[derive(SimpleObject)]
pub struct ToolCallPart {
    /// The provider's id for the call.
    pub tool_call_id: String,
    /// The tool.
    pub tool_name: String,
    /// The parsed input (null while it streams, or when it was not JSON).
    pub input: Json<Value>,
}

/// What a tool returned, or why it failed.
#[derive(SimpleObject)]
pub struct ToolResultPart {
    /// The call it answers.
    pub tool_call_id: String,
    /// The tool.
    pub tool_name: String,
    /// The output, or for an error `code` and `message`.
    pub output: Json<Value>,
    /// Whether it describes a failure.
    pub is_error: bool,
    /// Whether the content may be trusted (`untrusted` for every tool output).
    pub trusted: bool,
    /// The version of the tool that ran (absent when none ran: refused, denied, unknown).
    pub tool_version: Option<String>,
}

/// A request for a person to approve one exact tool call.
#[derive(SimpleObject)]
pub struct ApprovalPart {
    /// The interaction carrying the decision.
    pub interaction_id: String,
    /// The call.
    pub tool_call_id: String,
    /// The tool.
    pub tool_name: String,
    /// SHA-256 of the call's canonical input, hex.
    pub input_hash: String,
    /// `pending`, `approved`, `rejected` or `expired`.
    pub status: String,
    /// What the call will do in the application's terms, when its tool has a previewer.
    pub preview: Option<ApprovalPreview>,
}

/// What the person asked to approve a call sees beside its exact input, written by the tool's
/// previewer when the approval was raised (it informs; the approval binds the input).
#[derive(SimpleObject)]
pub struct ApprovalPreview {
    /// One line: what the call will do.
    pub summary: String,
    /// Named facts the decision rests on, in order.
    pub facts: Vec<PreviewFact>,
    /// The text the call replaces and the text it writes, when it replaces one.
    pub change: Option<TextChange>,
}

/// One named fact of a preview.
#[derive(SimpleObject)]
pub struct PreviewFact {
    /// What it is.
    pub label: String,
    /// Its value.
    pub value: String,
}

/// A text a call replaces and the text it writes.
#[derive(SimpleObject)]
pub struct TextChange {
    /// The text now.
    pub before: String,
    /// The text after the call.
    pub after: String,
}

impl From<forge_core::interaction::ApprovalPreview> for ApprovalPreview {
    fn from(p: forge_core::interaction::ApprovalPreview) -> Self {
        Self {
            summary: p.summary,
            facts: p
                .facts
                .into_iter()
                .map(|f| PreviewFact {
                    label: f.label,
                    value: f.value,
                })
                .collect(),
            change: p.change.map(|c| TextChange {
                before: c.before,
                after: c.after,
            }),
        }
    }
}

/// A question to the user.
#[derive(SimpleObject)]
pub struct QuestionPart {
    /// The interaction carrying the answer.
    pub interaction_id: String,
    /// The question.
    pub prompt: String,
    /// JSON Schema of an acceptable answer.
    pub answer_schema: Json<Value>,
    /// The answer, once given.
    pub answer: Option<Json<Value>>,
}

/// An exact span of a source.
#[derive(SimpleObject)]
pub struct CitationPart {
    /// The source.
    pub source_id: String,
    /// Its version.
    pub source_version: String,
    /// First byte of the span.
    pub start: u64,
    /// Last byte, exclusive.
    pub end: u64,
    /// The text at the span.
    pub excerpt: String,
    /// 1-based line of the span's start.
    pub line: Option<u32>,
    /// 1-based page.
    pub page: Option<u32>,
    /// The nearest heading above it.
    pub heading: Option<String>,
}

/// A stored file attached to a message.
#[derive(SimpleObject)]
pub struct FilePart {
    /// The file.
    pub file_id: String,
    /// Its name as uploaded.
    pub name: String,
    /// Its media type, as inspected.
    pub media_type: String,
    /// Its size in bytes.
    pub size_bytes: u64,
}

/// A final answer that satisfies the agent's output schema.
#[derive(SimpleObject)]
pub struct StructuredOutputPart {
    /// The value.
    pub value: Json<Value>,
}

/// Why a message could not be produced.
#[derive(SimpleObject)]
pub struct ErrorPart {
    /// A stable code.
    pub code: String,
    /// A safe explanation.
    pub message: String,
}

/// One piece of a message, typed.
#[derive(Union)]
#[graphql(name = "Part")]
pub enum PartObject {
    /// Prose.
    Text(TextPart),
    /// A tool call.
    ToolCall(ToolCallPart),
    /// A tool's result.
    ToolResult(ToolResultPart),
    /// An approval request.
    Approval(ApprovalPart),
    /// A question.
    Question(QuestionPart),
    /// A citation.
    Citation(CitationPart),
    /// A file.
    File(FilePart),
    /// A structured answer.
    StructuredOutput(StructuredOutputPart),
    /// An error.
    Error(ErrorPart),
}

fn approval_status(s: ApprovalStatus) -> &'static str {
    match s {
        ApprovalStatus::Pending => "pending",
        ApprovalStatus::Approved => "approved",
        ApprovalStatus::Rejected => "rejected",
        ApprovalStatus::Expired => "expired",
    }
}

impl From<&Part> for PartObject {
    fn from(p: &Part) -> Self {
        match p.clone() {
            Part::Text(t) => PartObject::Text(TextPart { text: t.text }),
            Part::ToolCall(c) => PartObject::ToolCall(ToolCallPart {
                tool_call_id: c.tool_call_id.0,
                tool_name: c.tool_name,
                input: Json(c.input),
            }),
            Part::ToolResult(r) => PartObject::ToolResult(ToolResultPart {
                tool_call_id: r.tool_call_id.0,
                tool_name: r.tool_name,
                output: Json(r.output),
                is_error: r.is_error,
                trusted: r.trust == Trust::Trusted,
                tool_version: r.tool_version,
            }),
            Part::Approval(a) => PartObject::Approval(ApprovalPart {
                interaction_id: a.interaction_id.to_string(),
                tool_call_id: a.tool_call_id.0,
                tool_name: a.tool_name,
                input_hash: a.input_hash,
                status: approval_status(a.status).into(),
                preview: a.preview.map(Into::into),
            }),
            Part::Question(q) => PartObject::Question(QuestionPart {
                interaction_id: q.interaction_id.to_string(),
                prompt: q.prompt,
                answer_schema: Json(q.answer_schema),
                answer: q.answer.map(Json),
            }),
            Part::Citation(c) => PartObject::Citation(CitationPart {
                source_id: c.source_id,
                source_version: c.source_version,
                start: c.span.start,
                end: c.span.end,
                excerpt: c.excerpt,
                line: c.line,
                page: c.page,
                heading: c.heading,
            }),
            Part::File(f) => PartObject::File(FilePart {
                file_id: f.file_id,
                name: f.name,
                media_type: f.media_type,
                size_bytes: f.size_bytes,
            }),
            Part::StructuredOutput(s) => PartObject::StructuredOutput(StructuredOutputPart {
                value: Json(s.value),
            }),
            Part::Error(e) => PartObject::Error(ErrorPart {
                code: e.code,
                message: e.message,
            }),
        }
    }
}
