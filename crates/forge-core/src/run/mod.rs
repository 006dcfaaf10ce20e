//! Runs: the state machine as a pure transition function, and the stored run record.
//!
//! ```text
//! queued ──start──▶ running ──complete──▶ completed
//!   │                │  ▲  └──fail──────▶ failed
//!   │                park resume
//!   │                ▼  │
//!   │              waiting(approval | question)
//!   └──cancel / fail──── any non-terminal ──cancel──▶ cancelled
//! ```
//!
//! Terminal states absorb: every input to `completed`, `failed` or `cancelled` is refused with a
//! [`TransitionError`] and the state is unchanged.
//!
//! ```
//! use forge_core::run::{transition, RunInput, RunStatus, WaitReason};
//!
//! let s = transition(RunStatus::Queued, RunInput::Start).unwrap();
//! let s = transition(s, RunInput::Park(WaitReason::Approval)).unwrap();
//! assert_eq!(s, RunStatus::Waiting(WaitReason::Approval));
//! let s = transition(s, RunInput::Resume).unwrap();
//! assert_eq!(transition(s, RunInput::Complete).unwrap(), RunStatus::Completed);
//! assert!(transition(RunStatus::Completed, RunInput::Cancel).is_err());
//! ```

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod status;

pub use status::{RunInput, RunStatus, TransitionError, WaitReason, reachable, transition};

use crate::Error;
use crate::agent::AgentRef;
use crate::id::{RunId, ThreadId};
use crate::scope::{PrincipalId, TenantId};
use crate::time::Timestamp;
use crate::usage::Usage;

impl RunStatus {
    /// Rebuilds a status from its stored name and wait reason (as written by [`RunStatus::name`]
    /// and [`WaitReason::name`]).
    pub fn from_stored(name: &str, waiting_for: Option<&str>) -> Result<Self, crate::Error> {
        let reason = match waiting_for {
            None => None,
            Some("approval") => Some(WaitReason::Approval),
            Some("question") => Some(WaitReason::Question),
            Some(other) => {
                return Err(crate::Error::invalid(format!(
                    "unknown wait reason {other:?}"
                )));
            }
        };
        Ok(match (name, reason) {
            ("queued", None) => RunStatus::Queued,
            ("running", None) => RunStatus::Running,
            ("waiting", Some(r)) => RunStatus::Waiting(r),
            ("completed", None) => RunStatus::Completed,
            ("failed", None) => RunStatus::Failed,
            ("cancelled", None) => RunStatus::Cancelled,
            _ => {
                return Err(crate::Error::invalid(format!(
                    "unknown run status {name:?} ({waiting_for:?})"
                )));
            }
        })
    }
}

/// Why a run failed, as a stable code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureCode {
    /// The model still wanted tools when the step limit was reached.
    StepLimitExceeded,
    /// The model provider failed and retrying did not help.
    ProviderError,
    /// The model's stream was malformed.
    MalformedModelOutput,
    /// The agent's model or provider is not configured here.
    ModelUnavailable,
    /// The run's token, cost or step ceiling would be exceeded.
    BudgetExceeded,
    /// The tenant's quota for the period is exhausted.
    QuotaExceeded,
    /// The agent version the run needs is no longer registered.
    AgentVersionUnavailable,
    /// An operator discarded the run's dead-lettered job.
    DeadLettered,
    /// The final answer did not match the agent's output schema, even after a repair.
    StructuredOutputInvalid,
    /// A bug or an unclassified failure in Forge.
    Internal,
}

impl FailureCode {
    /// Every code.
    pub const ALL: [FailureCode; 10] = [
        FailureCode::StepLimitExceeded,
        FailureCode::ProviderError,
        FailureCode::MalformedModelOutput,
        FailureCode::ModelUnavailable,
        FailureCode::BudgetExceeded,
        FailureCode::QuotaExceeded,
        FailureCode::AgentVersionUnavailable,
        FailureCode::DeadLettered,
        FailureCode::StructuredOutputInvalid,
        FailureCode::Internal,
    ];

    /// The code named `name` (as on the wire), if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The code's name, as on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            FailureCode::StepLimitExceeded => "step_limit_exceeded",
            FailureCode::ProviderError => "provider_error",
            FailureCode::MalformedModelOutput => "malformed_model_output",
            FailureCode::ModelUnavailable => "model_unavailable",
            FailureCode::BudgetExceeded => "budget_exceeded",
            FailureCode::QuotaExceeded => "quota_exceeded",
            FailureCode::AgentVersionUnavailable => "agent_version_unavailable",
            FailureCode::DeadLettered => "dead_lettered",
            FailureCode::StructuredOutputInvalid => "structured_output_invalid",
            FailureCode::Internal => "internal",
        }
    }
}

/// A run's failure, safe to show to its user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunFailure {
    /// The classified cause.
    pub code: FailureCode,
    /// A human-readable explanation with no internal detail or secrets.
    pub message: String,
}

/// What a resuming worker needs to continue a run from its last committed step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Checkpoint {
    /// Steps (model calls) completed so far.
    pub step: u32,
    /// Usage summed over those steps.
    pub usage: Usage,
    /// Cost of those steps, in micro-units of the price table's currency.
    #[serde(default)]
    pub cost_micros: u64,
    /// Repairs asked of the model after a final answer that did not match the output schema.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub repairs: u32,
    /// What the run is for; fixed when it is created.
    #[serde(default, skip_serializing_if = "RunPurpose::is_turn")]
    pub purpose: RunPurpose,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What a run is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunPurpose {
    /// A turn of the conversation: the agent answers the run's input.
    #[default]
    Turn,
    /// Compacting the thread's history on request (`forge threads compact`): the run summarises
    /// what it can and ends; it adds no message and calls no tool. Queued like any run, so it
    /// never writes to a thread another run is writing to.
    Compaction,
}

impl RunPurpose {
    fn is_turn(&self) -> bool {
        *self == RunPurpose::Turn
    }
}

/// A lease on a run: the right to commit its steps until `expires_at`.
///
/// `token` increases every time the lease changes hands; the store refuses a commit whose token is
/// not the current one, so a worker that lost its lease cannot write (fencing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunLease {
    /// The leased run.
    pub run_id: RunId,
    /// Who holds it (a worker id).
    pub holder: String,
    /// The fencing token.
    pub token: u64,
    /// When it lapses unless renewed.
    pub expires_at: Timestamp,
}

/// A stored run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Run {
    /// The run's id.
    pub id: RunId,
    /// The owning tenant.
    pub tenant_id: TenantId,
    /// Who started it.
    pub principal_id: PrincipalId,
    /// The roles they held when they started it: the run's tool calls are authorized with
    /// these, by whichever worker executes it.
    #[serde(default)]
    pub role_ids: Vec<crate::scope::RoleId>,
    /// The thread it runs on.
    pub thread_id: ThreadId,
    /// The agent version it executes.
    pub agent: AgentRef,
    /// The user's message that starts it; it joins the thread's history when the run starts.
    pub input: Vec<crate::part::Part>,
    /// Where it is in its life.
    pub status: RunStatus,
    /// Bumped by every committed step; `commit_step` expects it.
    pub version: u64,
    /// Sequence number of its last committed event (0 before any).
    pub last_seq: u64,
    /// State to resume from.
    pub checkpoint: Checkpoint,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<RunFailure>,
    /// The current lease, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<RunLease>,
    /// Highest fencing token ever issued for this run.
    pub fence: u64,
    /// Someone asked the run to cancel.
    #[serde(default)]
    pub cancel_requested: bool,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

impl Run {
    /// The state to show people at `now`: `running` for a run still `queued` in the log whose
    /// lease a worker holds (its first step is in flight and nothing is committed yet); the
    /// stored state otherwise. The log's state machine is unchanged.
    pub fn shown_status(&self, now: Timestamp) -> RunStatus {
        match (&self.status, &self.lease) {
            (RunStatus::Queued, Some(lease)) if lease.expires_at > now => RunStatus::Running,
            (status, _) => *status,
        }
    }
}

/// A run taken under its lease, as [`crate::ports::store::RunStore::lease_run_with_history`] and
/// [`crate::ports::queue::JobQueue::claim_leased`] give it.
#[derive(Debug, Clone, PartialEq)]
pub struct LeasedRun {
    /// The new lease.
    pub lease: RunLease,
    /// The run as it stands under the lease (its `lease` and `fence` are the new lease's).
    pub run: Run,
    /// The run's thread and the first page of its history, read after the lease was taken, when
    /// the adapter read them with it; `None` when it did not.
    pub history: Option<(crate::thread::Thread, Vec<crate::message::Message>)>,
}

/// Which of a tenant's runs [`crate::ports::store::RunStore::query_runs`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunQuery {
    /// Only runs in this state, by its stored name (`queued`, `running`, `waiting`, `completed`,
    /// `failed`, `cancelled`); see [`RunQuery::status`].
    pub status: Option<String>,
    /// Only runs of this thread.
    pub thread_id: Option<ThreadId>,
    /// Only runs of this agent (by name).
    pub agent_name: Option<String>,
    /// Only runs of this agent version (with or without `agent_name`).
    pub agent_version: Option<String>,
    /// Only runs created at or after this time.
    pub since: Option<Timestamp>,
    /// Only runs created before this time.
    pub until: Option<Timestamp>,
    /// Only runs that failed with this code.
    pub failure_code: Option<FailureCode>,
    /// At most this many, newest first.
    pub limit: usize,
    /// Only runs older than this one (a cursor: the last run of the previous page). A run that
    /// is not the tenant's is `NotFound`.
    pub before: Option<RunId>,
}

/// The run states [`RunQuery::status`] may name.
pub const RUN_STATUS_NAMES: [&str; 6] = [
    "queued",
    "running",
    "waiting",
    "completed",
    "failed",
    "cancelled",
];

impl RunQuery {
    /// The newest `limit` runs.
    pub fn newest(limit: usize) -> Self {
        Self {
            status: None,
            thread_id: None,
            agent_name: None,
            agent_version: None,
            since: None,
            until: None,
            failure_code: None,
            limit,
            before: None,
        }
    }

    /// Narrows to failures with the code named `name`, refusing a name no failure can have.
    pub fn failure_code(mut self, name: &str) -> Result<Self, Error> {
        let code = FailureCode::from_name(name).ok_or_else(|| {
            let names: Vec<&str> = FailureCode::ALL.iter().map(FailureCode::name).collect();
            Error::invalid(format!(
                "unknown failure code {name:?}: one of {}",
                names.join(", ")
            ))
        })?;
        self.failure_code = Some(code);
        Ok(self)
    }

    /// Narrows to a state, refusing a name no run can have.
    pub fn status(mut self, name: &str) -> Result<Self, Error> {
        if !RUN_STATUS_NAMES.contains(&name) {
            return Err(Error::invalid(format!(
                "unknown run status {name:?}: one of {}",
                RUN_STATUS_NAMES.join(", ")
            )));
        }
        self.status = Some(name.to_owned());
        Ok(self)
    }

    /// Whether `run` is selected (the rule each adapter's query encodes).
    pub fn admits(&self, run: &Run) -> bool {
        self.status
            .as_deref()
            .is_none_or(|s| run.status.name() == s)
            && self.thread_id.is_none_or(|t| run.thread_id == t)
            && self
                .agent_name
                .as_deref()
                .is_none_or(|a| run.agent.name == a)
            && self
                .agent_version
                .as_deref()
                .is_none_or(|v| run.agent.version == v)
            && self.since.is_none_or(|t| run.created_at >= t)
            && self.until.is_none_or(|t| run.created_at < t)
            && self
                .failure_code
                .is_none_or(|c| run.failure.as_ref().is_some_and(|f| f.code == c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_status_has_one_key_that_reads_back() {
        let keys: Vec<String> = RunStatus::ALL.iter().map(RunStatus::key).collect();
        assert_eq!(
            keys,
            [
                "queued",
                "running",
                "waiting:approval",
                "waiting:question",
                "completed",
                "failed",
                "cancelled"
            ]
        );
        for status in RunStatus::ALL {
            let key = status.key();
            let (name, reason) = key
                .split_once(':')
                .map_or((key.as_str(), None), |(n, r)| (n, Some(r)));
            assert_eq!(RunStatus::from_stored(name, reason).ok(), Some(status));
        }
    }

    #[test]
    fn the_statuses_a_step_may_leave_are_those_that_reach_its_own() {
        use crate::ports::store::statuses_reaching;
        let from = |to| statuses_reaching(to).collect::<Vec<_>>();
        assert_eq!(
            from(RunStatus::Completed),
            ["queued", "running", "waiting:approval", "waiting:question"]
        );
        assert_eq!(from(RunStatus::Queued), ["queued"]);
        assert_eq!(
            from(RunStatus::Waiting(WaitReason::Question)),
            ["queued", "running", "waiting:approval", "waiting:question"]
        );
        assert_eq!(
            from(RunStatus::Running),
            ["queued", "running", "waiting:approval", "waiting:question"]
        );
        assert!(from(RunStatus::Failed).iter().all(|s| s != "failed"));
    }

    fn any_status() -> impl Strategy<Value = RunStatus> {
        prop_oneof![
            Just(RunStatus::Queued),
            Just(RunStatus::Running),
            Just(RunStatus::Waiting(WaitReason::Approval)),
            Just(RunStatus::Waiting(WaitReason::Question)),
            Just(RunStatus::Completed),
            Just(RunStatus::Failed),
            Just(RunStatus::Cancelled),
        ]
    }

    fn any_input() -> impl Strategy<Value = RunInput> {
        prop_oneof![
            Just(RunInput::Start),
            Just(RunInput::Park(WaitReason::Approval)),
            Just(RunInput::Park(WaitReason::Question)),
            Just(RunInput::Resume),
            Just(RunInput::Complete),
            Just(RunInput::Fail),
            Just(RunInput::Cancel),
        ]
    }

    /// The states a run can actually be in, found by exploring from `queued`.
    fn reachable_states() -> Vec<RunStatus> {
        let inputs = RunInput::ALL;
        let mut seen = vec![RunStatus::Queued];
        let mut i = 0;
        while i < seen.len() {
            for input in inputs {
                if let Ok(next) = transition(seen[i], input)
                    && !seen.contains(&next)
                {
                    seen.push(next);
                }
            }
            i += 1;
        }
        seen
    }

    #[test]
    fn names_match_the_wire_format() {
        use FailureCode as F;
        let codes = [
            F::StepLimitExceeded,
            F::ProviderError,
            F::MalformedModelOutput,
            F::ModelUnavailable,
            F::BudgetExceeded,
            F::QuotaExceeded,
            F::AgentVersionUnavailable,
            F::DeadLettered,
            F::StructuredOutputInvalid,
            F::Internal,
        ];
        for c in codes {
            assert_eq!(serde_json::to_value(c).unwrap(), c.name(), "{c:?}");
        }
        use crate::message::Role;
        for r in [Role::User, Role::Assistant, Role::Tool] {
            assert_eq!(serde_json::to_value(r).unwrap(), r.name());
            assert_eq!(Role::from_name(r.name()).unwrap(), r);
        }
        assert!(Role::from_name("system").is_err());
    }

    #[test]
    fn stored_form_round_trips_for_every_state() {
        for s in reachable_states() {
            let back = RunStatus::from_stored(s.name(), s.wait_reason().map(|r| r.name())).unwrap();
            assert_eq!(back, s);
        }
        assert!(RunStatus::from_stored("waiting", None).is_err());
        assert!(RunStatus::from_stored("paused", None).is_err());
    }

    #[test]
    fn a_step_may_hold_several_transitions_but_never_leave_a_terminal_state() {
        assert!(reachable(RunStatus::Queued, RunStatus::Completed));
        assert!(reachable(
            RunStatus::Waiting(WaitReason::Approval),
            RunStatus::Completed
        ));
        assert!(reachable(RunStatus::Running, RunStatus::Running));
        for t in [
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Cancelled,
        ] {
            for to in reachable_states() {
                assert!(!reachable(t, to), "{t:?} -> {to:?}");
            }
        }
    }

    #[test]
    fn every_state_is_reachable_from_queued() {
        assert_eq!(reachable_states().len(), 7, "{:?}", reachable_states());
    }

    #[test]
    fn table_of_legal_transitions() {
        // One line per legal (state, input) pair; everything else must be refused.
        let legal: Vec<String> = reachable_states()
            .into_iter()
            .flat_map(|s| {
                RunInput::ALL.into_iter().filter_map(move |i| {
                    transition(s, i)
                        .ok()
                        .map(|t| format!("{s:?} + {i:?} -> {t:?}"))
                })
            })
            .collect();
        assert_eq!(
            legal.join("\n"),
            "Queued + Start -> Running
Queued + Fail -> Failed
Queued + Cancel -> Cancelled
Running + Park(Approval) -> Waiting(Approval)
Running + Park(Question) -> Waiting(Question)
Running + Complete -> Completed
Running + Fail -> Failed
Running + Cancel -> Cancelled
Waiting(Approval) + Resume -> Running
Waiting(Approval) + Fail -> Failed
Waiting(Approval) + Cancel -> Cancelled
Waiting(Question) + Resume -> Running
Waiting(Question) + Fail -> Failed
Waiting(Question) + Cancel -> Cancelled"
        );
    }

    proptest! {
        /// Any input sequence from `queued` only ever visits reachable states; a refused input
        /// leaves the state unchanged and names it; once terminal, always terminal and unchanged.
        #[test]
        fn input_sequences_stay_valid(inputs in proptest::collection::vec(any_input(), 0..64)) {
            let valid = reachable_states();
            let mut state = RunStatus::Queued;
            let mut terminal_at: Option<RunStatus> = None;
            for input in inputs {
                match transition(state, input) {
                    Ok(next) => {
                        prop_assert!(terminal_at.is_none(), "{state:?} moved after terminal");
                        prop_assert!(valid.contains(&next));
                        state = next;
                    }
                    Err(e) => {
                        prop_assert_eq!(e, TransitionError { from: state, input });
                    }
                }
                if state.is_terminal() {
                    if let Some(t) = terminal_at {
                        prop_assert_eq!(t, state);
                    }
                    terminal_at = Some(state);
                }
            }
        }

        /// The function is total: every (state, input) pair gives a state or a typed error, and
        /// terminal states absorb every input.
        #[test]
        fn transition_is_total_and_terminals_absorb(s in any_status(), i in any_input()) {
            match transition(s, i) {
                Ok(next) => {
                    prop_assert!(!s.is_terminal());
                    prop_assert!(reachable(s, next));
                }
                Err(e) => {
                    prop_assert_eq!(e.from, s);
                    let prefix = format!("a {} run cannot", s.name());
                    prop_assert!(e.to_string().starts_with(&prefix));
                }
            }
        }
    }
}
