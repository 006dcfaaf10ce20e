//! One execution of a run: its position in the log, the state it read when it began, and the
//! current step's writes waiting for their commit.
//!
//! Every field is private. The step and its components read it through accessors and add to it
//! through what they do (`emit` an event, push a message, charge a call, park on interactions,
//! add audit entries, record a compaction); the run loop turns it into one [`StepCommit`]
//! ([`Execution::take_commit`]) and applies what the store answered ([`Execution::committed`]).

use std::sync::Arc;

use forge_core::audit::AuditRecord;
use forge_core::event::{RunEvent, RunEventKind};
use forge_core::interaction::Interaction;
use forge_core::message::Message;
use forge_core::metering::ModelCall;
use forge_core::ports::queue::ClaimedJob;
use forge_core::ports::store::{Committed, RunStore, StateUpdate, StepCommit};
use forge_core::run::{Checkpoint, Run, RunFailure, RunInput, RunLease, RunStatus, transition};
use forge_core::scope::Scope;
use forge_core::telemetry::Span;
use forge_core::thread::{SessionState, ThreadSummary};
use forge_core::time::Clock;
use forge_core::usage::Usage;

use crate::error::EngineError;
use crate::lease::HeldLease;
use crate::observer::{Commit, Emitted, RunObserver};
use crate::plan::StepEnd;

/// The run being executed: its position in the log and the step's pending writes.
pub(crate) struct Execution<'a> {
    run: Run,
    lease: RunLease,
    /// The lease with the local deadline it is vouched for until: checked immediately before
    /// every model call and tool call (`crate::lease`).
    held: Arc<HeldLease>,
    status: RunStatus,
    checkpoint: Checkpoint,
    messages: Vec<Message>,
    /// Interactions the step raised, created by its commit.
    interactions: Vec<Interaction>,
    /// Audit entries of the step (external writes), written by its commit.
    audit: Vec<AuditRecord>,
    /// The step's model calls, settled, recorded by its commit.
    settlements: Vec<ModelCall>,
    /// The thread's committed history, read once when the execution began and extended by each
    /// commit of this execution.
    history: Vec<Message>,
    /// The thread's session state, read when the execution began and kept as this execution
    /// commits changes to it.
    state: SessionState,
    /// The step's change to the session state, written by its commit.
    state_update: Option<StateUpdate>,
    /// The thread's summary, read when the execution began and replaced by its compactions;
    /// `history` holds only the messages after it.
    summary: Option<ThreadSummary>,
    /// The step's new summary, written by its commit.
    summary_update: Option<ThreadSummary>,
    /// The execution's span, parent of its steps' spans.
    trace: Span,
    /// The current step's span, parent of its model and tool calls' spans.
    step_span: Span,
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
        trace: Span,
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
            step_span: Span::none(),
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

    /// The run as this execution has committed it so far.
    pub(crate) fn run(&self) -> &Run {
        &self.run
    }

    /// The run's lease this execution holds.
    pub(crate) fn lease(&self) -> &RunLease {
        &self.lease
    }

    /// Makes sure of the run's lease immediately before a model or tool call (`crate::lease`).
    pub(crate) async fn ensure_lease(
        &self,
        runs: &dyn RunStore,
        clock: &dyn Clock,
        scope: &Scope,
    ) -> Result<(), forge_core::Error> {
        self.held.ensure(runs, clock, scope).await
    }

    /// The run's state, as the step has moved it.
    pub(crate) fn status(&self) -> RunStatus {
        self.status
    }

    /// The run's progress: its step, usage, cost and repairs, as the step has moved it.
    pub(crate) fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// The thread's history after its summary: read when the execution began, extended by each
    /// commit.
    pub(crate) fn history(&self) -> &[Message] {
        &self.history
    }

    /// The messages the step has added, not yet committed.
    pub(crate) fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The thread's session state as this execution knows it.
    pub(crate) fn state(&self) -> &SessionState {
        &self.state
    }

    /// The thread's summary as this execution knows it.
    pub(crate) fn summary(&self) -> Option<&ThreadSummary> {
        self.summary.as_ref()
    }

    /// The execution's span, parent of its steps' spans.
    pub(crate) fn trace(&self) -> &Span {
        &self.trace
    }

    /// The current step's span, parent of its model and tool calls' spans.
    pub(crate) fn step_span(&self) -> &Span {
        &self.step_span
    }

    /// Sets the current step's span (ended: [`Span::none`]).
    pub(crate) fn set_step_span(&mut self, span: Span) {
        self.step_span = span;
    }

    /// What the thread held when the execution began: its session state, the history after its
    /// summary, and the summary.
    pub(crate) fn read_thread(
        &mut self,
        state: SessionState,
        history: Vec<Message>,
        summary: Option<ThreadSummary>,
    ) {
        self.state = state;
        self.history = history;
        self.summary = summary;
    }

    /// Records that the step `step` has made its model call.
    pub(crate) fn record_step(&mut self, step: u32) {
        self.checkpoint.step = step;
    }

    /// Adds a settled call's cost and usage to the run's.
    pub(crate) fn charge(&mut self, cost_micros: u64, usage: Usage) {
        self.checkpoint.cost_micros = self.checkpoint.cost_micros.saturating_add(cost_micros);
        self.checkpoint.usage += usage;
    }

    /// Counts a request to repair a structured answer.
    pub(crate) fn count_repair(&mut self) {
        self.checkpoint.repairs += 1;
    }

    /// Adds a message to the step.
    pub(crate) fn push_message(&mut self, message: Message) {
        self.messages.push(message);
    }

    /// Adds audit entries to the step.
    pub(crate) fn add_audit(&mut self, audit: Vec<AuditRecord>) {
        self.audit.extend(audit);
    }

    /// Adds a settled model call to the step.
    pub(crate) fn add_settlement(&mut self, call: ModelCall) {
        self.settlements.push(call);
    }

    /// The interactions the parking step raised, created by its commit.
    pub(crate) fn park(&mut self, raised: Vec<Interaction>) {
        self.interactions = raised;
    }

    /// The step's change to the session state, written by its commit.
    pub(crate) fn set_state_update(&mut self, update: StateUpdate) {
        self.state_update = Some(update);
    }

    /// A compaction folded the oldest `folded` messages of the history into `summary`, which
    /// the step's commit writes.
    pub(crate) fn compacted(&mut self, summary: ThreadSummary, folded: usize) {
        self.history.drain(..folded);
        self.summary = Some(summary.clone());
        self.summary_update = Some(summary);
    }

    /// Whether a commit of this execution completed the claim it runs under.
    pub(crate) fn job_completed(&self) -> bool {
        self.job_completed
    }
}
