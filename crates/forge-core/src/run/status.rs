//! The run state machine: the states a run may be in, the inputs that move it, and which
//! moves are allowed. It imports nothing else of the crate, so the error type can name its
//! refusal ([`TransitionError`]) without a circle.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a waiting run waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// A person's approval of a tool call.
    Approval,
    /// The user's answer to a question.
    Question,
}

impl WaitReason {
    /// The reason's stored name.
    pub fn name(&self) -> &'static str {
        match self {
            WaitReason::Approval => "approval",
            WaitReason::Question => "question",
        }
    }
}

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "state", content = "waiting_for", rename_all = "snake_case")]
pub enum RunStatus {
    /// Created, not yet started (possibly behind another run of its thread).
    Queued,
    /// A worker is executing it, step by step.
    Running,
    /// Parked until an interaction is resolved; holds no worker.
    Waiting(WaitReason),
    /// Finished with a final answer.
    Completed,
    /// Stopped by an error or a limit.
    Failed,
    /// Stopped on request.
    Cancelled,
}

impl RunStatus {
    /// Every status, each wait reason apart.
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Waiting(WaitReason::Approval),
        RunStatus::Waiting(WaitReason::Question),
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];

    /// The status as one string: its name, and a waiting run's reason after a colon
    /// (`waiting:approval`). A store's SQL spells it `status || coalesce(':' || waiting_for, '')`.
    pub fn key(&self) -> String {
        match self.wait_reason() {
            Some(reason) => format!("{}:{}", self.name(), reason.name()),
            None => self.name().to_owned(),
        }
    }

    /// Whether no input can move the run any more.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled
        )
    }

    /// What a waiting run waits for.
    pub fn wait_reason(&self) -> Option<WaitReason> {
        match self {
            RunStatus::Waiting(r) => Some(*r),
            _ => None,
        }
    }

    /// The state's name as stored and shown (`waiting` for both wait reasons).
    pub fn name(&self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Waiting(_) => "waiting",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }
}

/// An input to the run state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunInput {
    /// A worker begins executing a queued run.
    Start,
    /// The run needs a person; it releases its worker.
    Park(WaitReason),
    /// The awaited interaction was resolved.
    Resume,
    /// The model gave a final answer.
    Complete,
    /// An error or a limit stopped the run.
    Fail,
    /// Someone asked the run to stop.
    Cancel,
}

impl RunInput {
    /// Every input, each wait reason included.
    pub const ALL: [RunInput; 7] = [
        RunInput::Start,
        RunInput::Park(WaitReason::Approval),
        RunInput::Park(WaitReason::Question),
        RunInput::Resume,
        RunInput::Complete,
        RunInput::Fail,
        RunInput::Cancel,
    ];
}

/// A transition the state machine forbids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a {} run cannot {input:?}", from.name())]
pub struct TransitionError {
    /// The state the run was in (and stays in).
    pub from: RunStatus,
    /// The refused input.
    pub input: RunInput,
}

/// The run state machine: the next state for `input` in state `from`, or why not.
pub fn transition(from: RunStatus, input: RunInput) -> Result<RunStatus, TransitionError> {
    use RunInput as I;
    use RunStatus as S;
    let to = match (from, input) {
        (S::Queued, I::Start) => S::Running,
        (S::Running, I::Park(reason)) => S::Waiting(reason),
        (S::Waiting(_), I::Resume) => S::Running,
        (S::Running, I::Complete) => S::Completed,
        (S::Queued | S::Running | S::Waiting(_), I::Fail) => S::Failed,
        (S::Queued | S::Running | S::Waiting(_), I::Cancel) => S::Cancelled,
        _ => return Err(TransitionError { from, input }),
    };
    Ok(to)
}

/// Whether a sequence of inputs moves `from` to `to` (or `from == to` for a live run): what one
/// committed step may do, since a step can hold several transitions (a one-step run goes from
/// `queued` through `running` to `completed`). Leaving a terminal state is never reachable.
pub fn reachable(from: RunStatus, to: RunStatus) -> bool {
    if from.is_terminal() {
        return false;
    }
    let mut seen = vec![from];
    let mut i = 0;
    while i < seen.len() {
        if seen[i] == to {
            return true;
        }
        for input in RunInput::ALL {
            if let Ok(next) = transition(seen[i], input)
                && !seen.contains(&next)
            {
                seen.push(next);
            }
        }
        i += 1;
    }
    false
}
