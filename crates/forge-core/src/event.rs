//! Run events: the closed set of things that happen to a run, each with a per-run sequence number.
//!
//! The event log is the source of truth for every stream. Sequence numbers start at 1 and are
//! gapless per run; a client that reconnects asks for the events after the last sequence it saw.
//! The JSON form is a public contract: golden files in `tests/golden/events/` and the generated
//! schema in `schemas/run-event.schema.json` (consumed by the web client and other languages).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::agent::AgentRef;
use crate::id::{InteractionId, MessageId, RunId, ThreadId, ToolCallId};
use crate::message::Role;
use crate::part::{Part, PartUpdate};
use crate::run::RunFailure;
use crate::time::Timestamp;
use crate::usage::Usage;

/// One event of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunEvent {
    /// The run it belongs to.
    pub run_id: RunId,
    /// Position in the run's log: 1, 2, 3, … without gaps.
    pub seq: u64,
    /// When it happened.
    pub at: Timestamp,
    /// What happened.
    #[serde(flatten)]
    pub kind: RunEventKind,
}

/// What happened. The `type` field names the variant on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type")]
pub enum RunEventKind {
    /// The run waits behind the active run of its thread.
    #[serde(rename = "run.queued")]
    RunQueued {
        /// The thread.
        thread_id: ThreadId,
        /// The run it waits behind.
        behind: RunId,
    },
    /// A worker began executing the run.
    #[serde(rename = "run.started")]
    RunStarted {
        /// The thread.
        thread_id: ThreadId,
        /// The agent version executed.
        agent: AgentRef,
        /// The model, as `provider:model`.
        model: String,
    },
    /// A step (one model call and the tools it asks for) began.
    #[serde(rename = "step.started")]
    StepStarted {
        /// 1-based step number.
        step: u32,
    },
    /// A new part of a message appeared.
    #[serde(rename = "part.added")]
    PartAdded {
        /// The message it belongs to.
        message_id: MessageId,
        /// Who wrote the message.
        role: Role,
        /// Its position in the message.
        index: u32,
        /// Its content so far.
        part: Part,
    },
    /// A streaming part changed.
    #[serde(rename = "part.updated")]
    PartUpdated {
        /// The message.
        message_id: MessageId,
        /// The part's position in the message.
        index: u32,
        /// The change.
        update: PartUpdate,
    },
    /// A model call's usage was recorded.
    #[serde(rename = "usage.updated")]
    UsageUpdated {
        /// The step whose model call this was.
        step: u32,
        /// That call's usage.
        call: Usage,
        /// The run's usage so far.
        total: Usage,
    },
    /// A tool call waits for a person's approval.
    #[serde(rename = "approval.requested")]
    ApprovalRequested {
        /// The interaction to resolve.
        interaction_id: InteractionId,
        /// The call awaiting approval.
        tool_call_id: ToolCallId,
        /// The tool's name.
        tool_name: String,
        /// SHA-256 of the call's canonical input, hex.
        input_hash: String,
        /// What the call will do in the application's terms, when its tool has a previewer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        preview: Option<crate::interaction::ApprovalPreview>,
    },
    /// The agent asked its user a question.
    #[serde(rename = "question.requested")]
    QuestionRequested {
        /// The interaction to answer.
        interaction_id: InteractionId,
        /// The question.
        prompt: String,
        /// JSON Schema of an acceptable answer.
        answer_schema: serde_json::Value,
    },
    /// The run changed its thread's session state, committed with this step.
    #[serde(rename = "state.updated")]
    StateUpdated {
        /// The state's version after the change.
        version: u64,
        /// The keys set or removed (never their values, which may be large or private).
        keys: Vec<String>,
    },
    /// The run compacted its thread: the oldest messages, up to and including `through`, are now
    /// sent to the model as one summary (committed with this step; the messages stay stored).
    #[serde(rename = "thread.compacted")]
    ThreadCompacted {
        /// The thread summary's version after this compaction (1 for the first).
        version: u64,
        /// The last message the summary covers.
        through: MessageId,
        /// How many messages, from the thread's first, the summary covers.
        covered: u64,
        /// The model that wrote the summary, as `provider:model`.
        model: String,
    },
    /// A step was committed; a crashed worker's successor resumes from here.
    #[serde(rename = "run.checkpointed")]
    RunCheckpointed {
        /// Steps completed.
        step: u32,
        /// The run's version after this commit.
        version: u64,
    },
    /// The run finished with a final answer.
    #[serde(rename = "run.completed")]
    RunCompleted {
        /// The final answer's text.
        text: String,
        /// Usage over the whole run.
        usage: Usage,
    },
    /// The run stopped on an error or a limit.
    #[serde(rename = "run.failed")]
    RunFailed {
        /// What went wrong.
        failure: RunFailure,
    },
    /// The run was stopped on request.
    #[serde(rename = "run.cancelled")]
    RunCancelled {
        /// Why, if the canceller said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

impl RunEventKind {
    /// The wire name of this event's type, as in its `type` field.
    pub fn type_name(&self) -> &'static str {
        match self {
            RunEventKind::RunQueued { .. } => "run.queued",
            RunEventKind::RunStarted { .. } => "run.started",
            RunEventKind::StepStarted { .. } => "step.started",
            RunEventKind::PartAdded { .. } => "part.added",
            RunEventKind::PartUpdated { .. } => "part.updated",
            RunEventKind::UsageUpdated { .. } => "usage.updated",
            RunEventKind::ApprovalRequested { .. } => "approval.requested",
            RunEventKind::QuestionRequested { .. } => "question.requested",
            RunEventKind::StateUpdated { .. } => "state.updated",
            RunEventKind::ThreadCompacted { .. } => "thread.compacted",
            RunEventKind::RunCheckpointed { .. } => "run.checkpointed",
            RunEventKind::RunCompleted { .. } => "run.completed",
            RunEventKind::RunFailed { .. } => "run.failed",
            RunEventKind::RunCancelled { .. } => "run.cancelled",
        }
    }

    /// Whether this event ends the run.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            RunEventKind::RunCompleted { .. }
                | RunEventKind::RunFailed { .. }
                | RunEventKind::RunCancelled { .. }
        )
    }
}

/// Checks that `events` continue a log whose last sequence is `last_seq`: same run, consecutive
/// sequence numbers. Stores call this inside `commit_step`.
pub fn check_contiguous(
    run_id: RunId,
    last_seq: u64,
    events: &[RunEvent],
) -> Result<(), crate::Error> {
    for (i, e) in events.iter().enumerate() {
        let expected = last_seq + 1 + i as u64;
        if e.run_id != run_id {
            return Err(crate::Error::invalid(format!(
                "event {} belongs to run {}, not {run_id}",
                e.seq, e.run_id
            )));
        }
        if e.seq != expected {
            return Err(crate::Error::invalid(format!(
                "event sequence must continue at {expected}, got {}",
                e.seq
            )));
        }
    }
    Ok(())
}

/// The JSON Schema (draft 2020-12) of [`RunEvent`], as committed in `schemas/run-event.schema.json`.
pub fn run_event_schema() -> serde_json::Value {
    let schema = schemars::schema_for!(RunEvent);
    schema.to_value()
}
