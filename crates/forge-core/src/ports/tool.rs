//! The tool port: something a model may call, with a JSON-Schema input.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::id::{IdempotencyKey, RunId, ThreadId, ToolCallId};
use crate::scope::Scope;

/// Where the engine takes one of a tool's arguments from instead of the model (the engine's
/// tool registry binds it; an MCP tool's override names it as `bind = { owner = "caller" }`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Argument {
    /// The caller's principal id when the model leaves the argument out ("show my pipeline" is
    /// the caller's, whoever asks). A value the model gives is kept, and authorization decides
    /// it. Offered to the model as optional.
    CallerByDefault,
    /// The caller's principal id, always: the argument is not offered to the model, and a value
    /// it gives anyway is replaced.
    Caller,
    /// The caller's tenant id, always (as [`Argument::Caller`]).
    Tenant,
}

/// What a tool does to the world, which decides approval and idempotency handling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolClassification {
    /// Reads only.
    Read,
    /// Writes Forge-owned or tenant-internal state.
    Write,
    /// Acts on the outside world (sends, pays, publishes): gets an idempotency key and may need
    /// approval.
    ExternalWrite,
}

pub use crate::agent::ApprovalPolicy;

/// Where a tool comes from: compiled into this deployment, or imported from an MCP server.
/// Policies see it as `resource.source` (`"native"` or `"mcp"`) and, for imported tools,
/// `resource.server`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolSource {
    /// Part of this deployment: a native, built-in or skill tool.
    #[default]
    Native,
    /// Imported from the MCP server of this name, as the deployment's configuration names it.
    Mcp {
        /// The server's configured name.
        server: String,
    },
}

impl ToolSource {
    /// `"native"` or `"mcp"`.
    pub fn kind(&self) -> &'static str {
        match self {
            ToolSource::Native => "native",
            ToolSource::Mcp { .. } => "mcp",
        }
    }

    /// Whether the tool is native (the serialized form leaves the field out then).
    pub fn is_native(&self) -> bool {
        matches!(self, ToolSource::Native)
    }
}

/// A tool's declaration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by: `[A-Za-z0-9_.-]{1,64}`.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its input.
    pub input_schema: serde_json::Value,
    /// What it does to the world.
    pub classification: ToolClassification,
    /// When it needs approval.
    pub approval: ApprovalPolicy,
    /// Its version, recorded with every call.
    pub version: String,
    /// The permission a policy may require for it, for example `payments.write`; policies see
    /// it as `resource.permission`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission: Option<String>,
    /// Where it comes from.
    #[serde(default, skip_serializing_if = "ToolSource::is_native")]
    pub source: ToolSource,
}

impl ToolSpec {
    /// Checks the name is one every provider accepts.
    pub fn validate_name(name: &str) -> Result<(), crate::Error> {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if ok {
            Ok(())
        } else {
            Err(crate::Error::invalid(format!(
                "tool name {name:?} must be 1 to 64 characters of letters, digits, '_', '-' or '.'"
            )))
        }
    }
}

/// What a tool call knows about its caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolContext {
    /// Who the run acts for.
    pub scope: Scope,
    /// The run.
    pub run_id: RunId,
    /// Its thread.
    pub thread_id: ThreadId,
    /// The call.
    pub tool_call_id: ToolCallId,
    /// Derived from (run, call): the same on every retry or resume of this call.
    pub idempotency_key: IdempotencyKey,
    /// The run's lease token when the call was made: a fencing token. Each worker that takes
    /// the run over holds a greater one, so a system the tool writes to can keep the greatest it
    /// has seen per run and refuse a writer holding a smaller one (a worker that was frozen past
    /// its lease and woke to act).
    pub lease_token: u64,
    /// How long the call may take: the engine abandons it then (a tool running a process of its
    /// own stops it by then).
    pub timeout: Duration,
    /// The largest output, serialized, the engine accepts from the call.
    pub max_output_bytes: usize,
    /// The session state the step's calls change together (`None` outside a run's step).
    pub session: Option<Session>,
}

/// The session state a run's step changes: the thread's state as the step was shown it, with
/// the step's calls applied in order; the step's commit writes it only while the thread is still
/// at the version the step was shown (the built-in `update_session_state` is its tool).
pub trait SessionDraft: Send + Sync {
    /// Applies a change — the `expected_version` read, the keys to `set` (with their values) and
    /// to `remove` — and answers the new version and every key the step changed so far. A version
    /// other than the one shown is refused with `state_conflict`.
    fn update(&self, input: &serde_json::Value) -> Result<serde_json::Value, ToolError>;
}

/// A step's [`SessionDraft`], as a tool call receives it.
#[derive(Clone)]
pub struct Session(pub Arc<dyn SessionDraft>);

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Session")
    }
}

/// The same draft: two handles are equal when they share it.
impl PartialEq for Session {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Session {}

/// How a tool call failed. The message goes back to the model, so it must hold no secrets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The input was unusable (beyond what the schema catches).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The tool failed.
    #[error("{0}")]
    Failed(String),
    /// The tool failed transiently.
    #[error("temporarily unavailable: {0}")]
    Unavailable(String),
    /// The tool refused the call for a reason it names with a stable code of its own
    /// (`forbidden`, `state_conflict`, `invalid_citation`…); the message is shown as it is.
    #[error("{message}")]
    Refused {
        /// The code.
        code: &'static str,
        /// What the model is told.
        message: String,
    },
}

impl ToolError {
    /// A stable code for the tool-result part.
    pub fn code(&self) -> &'static str {
        match self {
            ToolError::InvalidInput(_) => "invalid_input",
            ToolError::Failed(_) => "tool_failed",
            ToolError::Unavailable(_) => "tool_unavailable",
            ToolError::Refused { code, .. } => code,
        }
    }
}

/// Port: a callable tool.
#[async_trait]
pub trait Tool: Send + Sync {
    /// Its declaration.
    fn spec(&self) -> &ToolSpec;

    /// Whether the tool may be offered and called now. A tool that is not available is treated
    /// as if it did not exist: absent from requests, listings and search, and a call of it is
    /// refused like a call of an invented tool. An imported tool whose server changed its
    /// definition since it was pinned is the case this exists for.
    fn available(&self) -> bool {
        true
    }

    /// Runs it. `input` has already been validated against `spec().input_schema`.
    async fn call(
        &self,
        ctx: &ToolContext,
        input: serde_json::Value,
    ) -> Result<serde_json::Value, ToolError>;
}

/// Port: decides, per call, whether a tool whose policy is [`ApprovalPolicy::Policy`] needs a
/// person's approval. An engine without one asks for approval (the safe answer).
#[async_trait::async_trait]
pub trait ApprovalRule: Send + Sync {
    /// Whether `scope` calling `tool` with `input` needs approval. An error counts as "yes".
    async fn requires_approval(
        &self,
        scope: &crate::scope::Scope,
        tool: &ToolSpec,
        input: &serde_json::Value,
    ) -> Result<bool, crate::Error>;
}

/// What a previewer knows about the call it previews.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewContext {
    /// Who the run acts for.
    pub scope: Scope,
    /// The run.
    pub run_id: RunId,
    /// Its thread.
    pub thread_id: ThreadId,
    /// The call awaiting approval.
    pub tool_call_id: ToolCallId,
}

/// Port: what the person asked to approve a call of one tool sees beside the call's exact
/// input (the engine's builder registers one per tool, native or imported). Called once, when
/// the approval is raised, with the input as it will run (validated, arguments bound); it must
/// only read. A previewer that fails or takes longer than the engine allows leaves the approval
/// without a preview: it never holds up or blocks the approval itself.
#[async_trait]
pub trait ApprovalPreviewer: Send + Sync {
    /// The preview of the call `ctx` describes with `input`.
    async fn preview(
        &self,
        ctx: &PreviewContext,
        input: &serde_json::Value,
    ) -> Result<crate::preview::ApprovalPreview, ToolError>;
}

#[async_trait]
impl ApprovalPreviewer for crate::preview::PreviewTemplate {
    async fn preview(
        &self,
        _ctx: &PreviewContext,
        input: &serde_json::Value,
    ) -> Result<crate::preview::ApprovalPreview, ToolError> {
        Ok(self.render(input))
    }
}
