//! One execution of a run: its position in the log, the state it read when it began, and the
//! current step's writes waiting for their commit.
//!
//! The step and its components add to it (`emit` an event, push a message, an interaction, an
//! audit entry or a settled call, set a state or summary change); the run loop turns it into one
//! [`StepCommit`] ([`Execution::take_commit`]) and applies what the store answered
//! ([`Execution::committed`]). What only the loop may touch — the event numbering, the observer,
//! the claim the run executes under — is private.

use std::sync::Arc;

use forge_core::audit::AuditRecord;
use forge_core::event::{RunEvent, RunEventKind};
use forge_core::interaction::Interaction;
use forge_core::message::Message;
use forge_core::metering::ModelCall;
use forge_core::ports::queue::ClaimedJob;
use forge_core::ports::store::{Committed, StateUpdate, StepCommit};
use forge_core::run::{Checkpoint, Run, RunFailure, RunInput, RunLease, RunStatus, transition};
use forge_core::telemetry::TraceContext;
use forge_core::thread::{SessionState, ThreadSummary};
use forge_core::time::Clock;

use crate::error::EngineError;
use crate::lease::HeldLease;
use crate::observer::{Commit, Emitted, RunObserver};
use crate::plan::StepEnd;

/// The run being executed: its position in the log and the step's pending writes.
pub(crate) struct Execution<'a> {
    pub(crate) run: Run,
    pub(crate) lease: RunLease,
    /// The lease with the local deadline it is vouched for until: checked immediately before
    /// every model call and tool call (`crate::lease`).
    pub(crate) held: Arc<HeldLease>,
    pub(crate) status: RunStatus,
    pub(crate) checkpoint: Checkpoint,
    pub(crate) messages: Vec<Message>,
    /// Interactions the step raised, created by its commit.
    pub(crate) interactions: Vec<Interaction>,
    /// Audit entries of the step (external writes), written by its commit.
    pub(crate) audit: Vec<AuditRecord>,
    /// The step's model calls, settled, recorded by its commit.
    pub(crate) settlements: Vec<ModelCall>,
    /// The thread's committed history, read once when the execution began and extended by each
    /// commit of this execution.
    pub(crate) history: Vec<Message>,
    /// The thread's session state, read when the execution began and kept as this execution
    /// commits changes to it.
    pub(crate) state: SessionState,
    /// The step's change to the session state, written by its commit.
    pub(crate) state_update: Option<StateUpdate>,
    /// The thread's summary, read when the execution began and replaced by its compactions;
    /// `history` holds only the messages after it.
    pub(crate) summary: Option<ThreadSummary>,
    /// The step's new summary, written by its commit.
    pub(crate) summary_update: Option<ThreadSummary>,
    /// The execution's span, parent of its steps' spans.
    pub(crate) trace: Option<TraceContext>,
    /// The current step's span, parent of its model and tool calls' spans.
    pub(crate) step_trace: Option<TraceContext>,
    pending: Vec<RunEvent>,
    next_seq: u64,
    clock: &'a dyn Clock,
    observer: &'a dyn RunObserver,
    /// The queue's claim the execution runs under, completed by the commit that ends or parks
    /// the run; `job_completed` once one has.
    job: Option<ClaimedJob>,
    job_completed: bool,
}

impl<'a> Execution<'a> {
    /// An execution of `run` under `held`, its events shown to `observer` as they are emitted;
    /// `trace` is the span it runs in, `job` the claim it runs under.
    pub(crate) fn new(
        run: Run,
        held: Arc<HeldLease>,
        clock: &'a dyn Clock,
        observer: &'a dyn RunObserver,
        trace: Option<TraceContext>,
        job: Option<ClaimedJob>,
    ) -> Self {
        Self {
            status: run.status,
            checkpoint: run.checkpoint.clone(),
            next_seq: run.last_seq + 1,
            run,
            lease: held.lease(),
            held,
            pending: Vec::new(),
            messages: Vec::new(),
            interactions: Vec::new(),
            audit: Vec::new(),
            settlements: Vec::new(),
            history: Vec::new(),
            state: SessionState::default(),
            state_update: None,
            summary: None,
            summary_update: None,
            clock,
            observer,
            trace,
            step_trace: None,
            job,
            job_completed: false,
        }
    }

    /// Adds an event to the step, numbering it, and shows it to the observer at once.
    pub(crate) fn emit(&mut self, kind: RunEventKind) {
        let event = RunEvent {
            run_id: self.run.id,
            seq: self.next_seq,
            at: self.clock.now(),
            kind,
        };
        self.next_seq += 1;
        self.observer.on_emitted(&Emitted {
            tenant_id: &self.run.tenant_id,
            thread_id: self.run.thread_id,
            attempt: self.lease.token,
            event: &event,
        });
        self.pending.push(event);
    }

    /// Moves the run's state machine, or refuses the input it forbids.
    pub(crate) fn apply(&mut self, input: RunInput) -> Result<(), EngineError> {
        self.status = transition(self.status, input).map_err(forge_core::Error::from)?;
        Ok(())
    }

    /// The step's writes as one commit, ending the run with `failure` if given; the step's
    /// messages are handed back too, for [`Execution::committed`] to add to the history.
    pub(crate) fn take_commit(
        &mut self,
        failure: Option<RunFailure>,
    ) -> (StepCommit, Vec<Message>) {
        let messages = std::mem::take(&mut self.messages);
        let commit = StepCommit {
            run_id: self.run.id,
            expected_version: self.run.version,
            lease: self.lease.clone(),
            events: std::mem::take(&mut self.pending),
            messages: messages.clone(),
            checkpoint: self.checkpoint.clone(),
            status: self.status,
            failure,
            interactions: std::mem::take(&mut self.interactions),
            audit: std::mem::take(&mut self.audit),
            settlements: std::mem::take(&mut self.settlements),
            state: self.state_update.take(),
            summary: self.summary_update.take(),
            job: self.job.clone().filter(|_| !self.job_completed),
        };
        (commit, messages)
    }

    /// Applies a commit the store accepted: the new session state (`state`, the commit's), the
    /// step's `messages` joining the history, the run's new version and position; the observer
    /// hears of it.
    pub(crate) fn committed(
        &mut self,
        committed: &Committed,
        state: Option<StateUpdate>,
        messages: Vec<Message>,
    ) {
        if let Some(update) = state {
            self.state = SessionState {
                version: update.expected_version + 1,
                values: update.values,
            };
        }
        self.observer.on_commit(&Commit {
            tenant_id: &self.run.tenant_id,
            run_id: self.run.id,
            thread_id: self.run.thread_id,
            last_seq: committed.last_seq,
        });
        self.history.extend(messages);
        self.run.version = committed.version;
        self.run.last_seq = committed.last_seq;
        self.run.status = self.status;
        self.job_completed |= committed.job_completed;
    }

    /// Moves the run as the step's `end` says (`Continue` checkpoints it) and emits the event
    /// that says so; the failure, if the run fails, for its commit.
    pub(crate) fn conclude(&mut self, end: StepEnd) -> Result<Option<RunFailure>, EngineError> {
        Ok(match end {
            StepEnd::Continue => {
                let version = self.run.version + 1;
                self.emit(RunEventKind::RunCheckpointed {
                    step: self.checkpoint.step,
                    version,
                });
                None
            }
            StepEnd::Completed { text } => {
                self.apply(RunInput::Complete)?;
                self.emit(RunEventKind::RunCompleted {
                    text,
                    usage: self.checkpoint.usage,
                });
                None
            }
            StepEnd::Cancelled => {
                self.apply(RunInput::Cancel)?;
                self.emit(RunEventKind::RunCancelled {
                    reason: Some("cancelled by request".into()),
                });
                None
            }
            StepEnd::Failed(failure) => {
                self.apply(RunInput::Fail)?;
                self.emit(RunEventKind::RunFailed {
                    failure: failure.clone(),
                });
                Some(failure)
            }
            StepEnd::Parked(reason) => {
                self.apply(RunInput::Park(reason))?;
                None
            }
        })
    }

    /// Whether a commit of this execution completed the claim it runs under.
    pub(crate) fn job_completed(&self) -> bool {
        self.job_completed
    }
}
