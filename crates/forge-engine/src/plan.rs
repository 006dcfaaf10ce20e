//! What a step decided: how it ended ([`StepEnd`]) and, for each tool call the model made,
//! whether it runs or what the model gets instead ([`Prepared`]). Plain values the step's
//! components hand each other, below all of them.

use forge_core::part::ToolCallPart;
use forge_core::ports::model::ModelError;
use forge_core::run::{FailureCode, RunFailure, WaitReason};

/// How a step ended.
pub(crate) enum StepEnd {
    /// Tools ran; the model gets another turn.
    Continue,
    /// The model gave a final answer.
    Completed { text: String },
    /// Cancellation was requested.
    Cancelled,
    /// The run cannot go on.
    Failed(RunFailure),
    /// Calls of this step need a person; the run waits.
    Parked(WaitReason),
}

/// A tool call ready to execute, or the result the model gets instead.
pub(crate) enum Prepared {
    /// Execute it.
    Run { call: ToolCallPart },
    /// Do not; the model gets this error.
    Refused {
        call: ToolCallPart,
        code: &'static str,
        message: String,
    },
    /// Denied by policy, or a tool this run may not see (including one the model invented): the
    /// model gets a `forbidden` error, and the denial is audited.
    Denied {
        call: ToolCallPart,
        message: String,
        reason: String,
    },
    /// Answered by a person (`ask_user`): this is its result.
    Answered {
        call: ToolCallPart,
        output: serde_json::Value,
    },
}

/// The run's failure for a model call that failed: its class, never the provider's own words.
pub(crate) fn model_failure(e: &ModelError) -> RunFailure {
    let code = match e {
        ModelError::MalformedStream(_) => FailureCode::MalformedModelOutput,
        _ => FailureCode::ProviderError,
    };
    // The provider's own words may carry request details; the user sees the class only.
    RunFailure {
        code,
        message: format!("the model call failed ({})", e.code()),
    }
}
