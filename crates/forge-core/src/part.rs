//! Message parts: the structured pieces of a message that the UI and quality gates read.
//!
//! The JSON form of every part is a public contract (golden files in `tests/golden/`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::id::{InteractionId, ToolCallId};

/// Where a part's content came from, and so whether it may be treated as instructions.
///
/// Tool results, retrieved text and file content are `untrusted`: they are data for the model to
/// read and never widen what a run is allowed to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Trust {
    /// Written by the platform, the agent's author or the end user.
    Trusted,
    /// Came from a tool, a retrieved document, a file or a remote server.
    Untrusted,
}

/// One piece of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    /// Prose.
    Text(TextPart),
    /// The model asks for a tool to run.
    ToolCall(ToolCallPart),
    /// What a tool returned, or why it failed.
    ToolResult(ToolResultPart),
    /// A request for a person to approve a tool call.
    Approval(ApprovalPart),
    /// A question the agent asks its user.
    Question(QuestionPart),
    /// A claim's source: an exact span of a source document.
    Citation(CitationPart),
    /// A file attached to the message.
    File(FilePart),
    /// A final answer that satisfies the agent's output schema.
    StructuredOutput(StructuredOutputPart),
    /// Something went wrong producing this message.
    Error(ErrorPart),
}

/// Prose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TextPart {
    /// The text.
    pub text: String,
}

/// The model asks for a tool to run with this input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCallPart {
    /// The provider's id for the call.
    pub tool_call_id: ToolCallId,
    /// The tool's name.
    pub tool_name: String,
    /// The parsed input; `null` while the input is still streaming or when it was not valid JSON.
    pub input: serde_json::Value,
}

/// A tool's result, or the reason it produced none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolResultPart {
    /// The call this answers.
    pub tool_call_id: ToolCallId,
    /// The tool's name.
    pub tool_name: String,
    /// The output, or for an error an object with `code` and `message`.
    pub output: serde_json::Value,
    /// Whether `output` describes a failure.
    pub is_error: bool,
    /// Always `untrusted` for tool output.
    pub trust: Trust,
    /// The version of the tool that ran (absent when no tool ran: refused, denied or unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_version: Option<String>,
}

/// The state of an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for a decision.
    Pending,
    /// Approved; the call runs.
    Approved,
    /// Refused; the model is told so.
    Rejected,
    /// Nobody decided in time.
    Expired,
}

/// A request for a person to approve one exact tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalPart {
    /// The interaction that carries the decision.
    pub interaction_id: InteractionId,
    /// The call awaiting approval.
    pub tool_call_id: ToolCallId,
    /// The tool's name.
    pub tool_name: String,
    /// SHA-256 of the call's canonical input, hex; binds the approval to this exact input.
    pub input_hash: String,
    /// Where the decision stands.
    pub status: ApprovalStatus,
    /// What the call will do in the application's terms, when its tool has a previewer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<crate::interaction::ApprovalPreview>,
}

/// A question the agent asks its user, with the shape the answer must have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QuestionPart {
    /// The interaction that carries the answer.
    pub interaction_id: InteractionId,
    /// The question.
    pub prompt: String,
    /// JSON Schema the answer must satisfy.
    pub answer_schema: serde_json::Value,
    /// The answer, once given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<serde_json::Value>,
}

/// A byte span of a source document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Span {
    /// First byte, inclusive.
    pub start: u64,
    /// Last byte, exclusive.
    pub end: u64,
}

/// An exact, checkable reference to the text that supports a claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CitationPart {
    /// The cited source.
    pub source_id: String,
    /// The version of the source the span refers to.
    pub source_version: String,
    /// Where in the source.
    pub span: Span,
    /// The source text at `span`, verbatim.
    pub excerpt: String,
    /// 1-based line of the span's start, where the format has lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// 1-based page, where the format has pages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
    /// The nearest heading above the span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heading: Option<String>,
}

/// A file attached to a message, referenced rather than inlined.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FilePart {
    /// The stored file's id.
    pub file_id: String,
    /// The file's name as uploaded.
    pub name: String,
    /// Its media type, as inspected (not as claimed).
    pub media_type: String,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// Files from users or tools are `untrusted`.
    pub trust: Trust,
}

/// A final answer that satisfied the agent's output schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StructuredOutputPart {
    /// The value.
    pub value: serde_json::Value,
}

/// Why a message could not be produced, as a classified code and a safe message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorPart {
    /// A stable machine-readable code, for example `provider_error` or `forbidden`.
    pub code: String,
    /// A human-readable explanation with no internal detail.
    pub message: String,
}

/// A change to a part that is still streaming.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PartUpdate {
    /// Append `text` to a text part.
    TextDelta {
        /// The appended text.
        text: String,
    },
    /// Append a fragment of a tool call's JSON input as the model streams it.
    InputDelta {
        /// The appended JSON text (not valid JSON on its own).
        json: String,
    },
    /// The part's final value, replacing what the deltas built.
    Replaced {
        /// The final part.
        part: Part,
    },
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Part::Text(TextPart { text: text.into() })
    }

    /// The wire name of this part's type, as in its `type` field.
    pub fn type_name(&self) -> &'static str {
        match self {
            Part::Text(_) => "text",
            Part::ToolCall(_) => "tool_call",
            Part::ToolResult(_) => "tool_result",
            Part::Approval(_) => "approval",
            Part::Question(_) => "question",
            Part::Citation(_) => "citation",
            Part::File(_) => "file",
            Part::StructuredOutput(_) => "structured_output",
            Part::Error(_) => "error",
        }
    }

    /// Applies a streaming update to this part in place.
    pub fn apply(&mut self, update: &PartUpdate) -> Result<(), crate::Error> {
        match (self, update) {
            (Part::Text(t), PartUpdate::TextDelta { text }) => {
                t.text.push_str(text);
                Ok(())
            }
            (Part::ToolCall(_), PartUpdate::InputDelta { .. }) => Ok(()),
            (this, PartUpdate::Replaced { part }) if this.type_name() == part.type_name() => {
                *this = part.clone();
                Ok(())
            }
            (this, update) => Err(crate::Error::invalid(format!(
                "cannot apply {update:?} to a {} part",
                this.type_name()
            ))),
        }
    }
}
/// The text parts of `parts`, joined: what a message says, for display and for matching.
pub fn joined_text(parts: &[Part]) -> String {
    parts
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect()
}
