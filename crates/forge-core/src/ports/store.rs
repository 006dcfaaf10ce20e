//! Storage ports: threads with session state, and runs with their event log and atomic step commit.

use std::time::Duration;

use async_trait::async_trait;

use crate::Error;
use crate::agent::AgentRef;
use crate::event::RunEvent;
use crate::id::{MessageId, RunId, ThreadId};
use crate::message::Message;
use crate::part::Part;
use crate::run::{Checkpoint, Run, RunFailure, RunLease, RunStatus};
use crate::scope::Scope;
use crate::thread::{SessionState, Thread, ThreadSummary};

/// What is needed to create a thread.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewThread {
    /// An optional title.
    pub title: Option<String>,
    /// Initial session state values.
    pub state: serde_json::Map<String, serde_json::Value>,
}

impl NewThread {
    /// The thread this describes, created as `id` by `scope`'s principal at `now`: no run yet,
    /// session state at version 0.
    pub fn thread(self, id: ThreadId, scope: &Scope, now: crate::time::Timestamp) -> Thread {
        Thread {
            id,
            tenant_id: scope.tenant_id().clone(),
            created_by: scope.principal_id().clone(),
            title: self.title,
            state: SessionState {
                version: 0,
                values: self.state,
            },
            active_run: None,
            summary: None,
            created_at: now,
            archived_at: None,
        }
    }
}

/// Port: threads, their history and their session state.
#[async_trait]
pub trait ThreadStore: Send + Sync {
    /// Creates a thread owned by the scope's tenant and principal.
    async fn create_thread(&self, scope: &Scope, new: NewThread) -> Result<Thread, Error>;

    /// Reads a thread; another tenant's thread is `NotFound`.
    async fn get_thread(&self, scope: &Scope, id: ThreadId) -> Result<Thread, Error>;

    /// The thread's messages in the order they were written, all of them. For exports and
    /// tests; readers that may meet a long thread page with [`ThreadStore::page_messages`].
    async fn list_messages(&self, scope: &Scope, id: ThreadId) -> Result<Vec<Message>, Error>;

    /// One page of the thread's messages, in the order they were written: those strictly
    /// between `window.after` and `window.before` (either may be open), the first
    /// `window.limit` of them, or the last when `window.from_end`. A cursor is a message id of
    /// the thread; messages appended later land after every cursor, so pages never shift.
    /// A cursor that is not a message of the thread is `NotFound`.
    async fn page_messages(
        &self,
        scope: &Scope,
        id: ThreadId,
        window: &MessageWindow,
    ) -> Result<Vec<Message>, Error>;

    /// The thread and the first page of its history after its summary (from the start without
    /// one), at most `limit` messages: what a run reads as it begins. Another tenant's thread is
    /// `NotFound`. The default reads them apart; a store that can answer in one trip to its
    /// database does, with the same result.
    async fn thread_with_history(
        &self,
        scope: &Scope,
        id: ThreadId,
        limit: usize,
    ) -> Result<(Thread, Vec<Message>), Error> {
        let thread = self.get_thread(scope, id).await?;
        let after = thread.summary.as_ref().map(|s| s.through);
        let page = self
            .page_messages(scope, id, &MessageWindow::after(after, limit))
            .await?;
        Ok((thread, page))
    }

    /// One page of the tenant's threads, newest first ([`crate::thread::ThreadWindow`]).
    async fn page_threads(
        &self,
        scope: &Scope,
        window: &crate::thread::ThreadWindow,
    ) -> Result<Vec<Thread>, Error>;

    /// Retitles, archives or restores a thread; returns it as changed.
    async fn update_thread(
        &self,
        scope: &Scope,
        id: ThreadId,
        change: &crate::thread::ThreadChange,
    ) -> Result<Thread, Error>;

    /// Replaces the session state if it is still at `expected_version`; returns the new state.
    async fn put_session_state(
        &self,
        scope: &Scope,
        id: ThreadId,
        expected_version: u64,
        values: serde_json::Map<String, serde_json::Value>,
    ) -> Result<SessionState, Error>;
}

/// Which page of a thread's history [`ThreadStore::page_messages`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageWindow {
    /// Only messages written after this one.
    pub after: Option<MessageId>,
    /// Only messages written before this one.
    pub before: Option<MessageId>,
    /// At most this many.
    pub limit: usize,
    /// The last `limit` of the range rather than the first (still returned oldest first).
    pub from_end: bool,
}

impl MessageWindow {
    /// The first `limit` messages after `after` (from the start when `None`).
    pub fn after(after: Option<MessageId>, limit: usize) -> Self {
        Self {
            after,
            before: None,
            limit,
            from_end: false,
        }
    }

    /// The last `limit` messages before `before` (up to the newest when `None`).
    pub fn before(before: Option<MessageId>, limit: usize) -> Self {
        Self {
            after: None,
            before,
            limit,
            from_end: true,
        }
    }

    /// The error for a cursor that is not a message of `thread`.
    pub fn unknown_cursor(thread: ThreadId, cursor: MessageId) -> Error {
        Error::not_found("message", format!("{cursor} in thread {thread}"))
    }

    /// `messages` (the whole history, oldest first) cut to this window: the rule every adapter's
    /// query encodes, and the memory store's implementation.
    pub fn apply<'m>(
        &self,
        thread: ThreadId,
        messages: &'m [Message],
    ) -> Result<&'m [Message], Error> {
        let position = |cursor: MessageId| {
            messages
                .iter()
                .position(|m| m.id == cursor)
                .ok_or_else(|| Self::unknown_cursor(thread, cursor))
        };
        let start = match self.after {
            Some(c) => position(c)? + 1,
            None => 0,
        };
        let end = match self.before {
            Some(c) => position(c)?,
            None => messages.len(),
        };
        if start >= end {
            return Ok(&[]);
        }
        let range = &messages[start..end];
        Ok(if self.from_end {
            &range[range.len().saturating_sub(self.limit)..]
        } else {
            &range[..self.limit.min(range.len())]
        })
    }
}

/// What a new run does when its thread already has an active run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum StartStrategy {
    /// Wait behind the active run (and any queued before it); emits `run.queued`.
    #[default]
    Enqueue,
    /// Refuse to start: `ThreadBusy`.
    Reject,
    /// Ask the active run, and every run queued before this one, to cancel; then start.
    Interrupt,
}

/// What is needed to create a run.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    /// The thread to run on.
    pub thread_id: ThreadId,
    /// The agent version to execute.
    pub agent: AgentRef,
    /// The user's message that starts the run.
    pub input: Vec<Part>,
    /// What to do when the thread is busy.
    pub strategy: StartStrategy,
    /// Claims allowed before the run's job is dead-lettered.
    pub max_attempts: u32,
    /// The W3C `traceparent` of the span that enqueued it, stored with its job so the worker's
    /// spans join the request's trace.
    pub traceparent: Option<String>,
    /// What the run is for (kept in its checkpoint).
    pub purpose: crate::run::RunPurpose,
    /// The thread to create for the run, as `thread_id`, in the same transaction as the run
    /// ([`NewRun::on_new_thread`]); `None` runs on a thread that exists.
    pub new_thread: Option<NewThread>,
}

impl NewRun {
    /// This run as a new run `id` of `scope`, queued, at version 0 with no events, leases or
    /// checkpoint: what every store's `create_run` writes.
    pub fn queued(&self, id: RunId, scope: &Scope, now: crate::time::Timestamp) -> Run {
        Run {
            id,
            tenant_id: scope.tenant_id().clone(),
            principal_id: scope.principal_id().clone(),
            role_ids: scope.role_ids().to_vec(),
            thread_id: self.thread_id,
            agent: self.agent.clone(),
            input: self.input.clone(),
            status: RunStatus::Queued,
            version: 0,
            last_seq: 0,
            checkpoint: Checkpoint {
                purpose: self.purpose,
                ..Checkpoint::default()
            },
            failure: None,
            lease: None,
            fence: 0,
            cancel_requested: false,
            created_at: now,
            updated_at: now,
        }
    }

    /// A run of `agent` on `thread_id` with `input`, enqueued behind any active run, with 5 attempts.
    pub fn new(thread_id: ThreadId, agent: AgentRef, input: Vec<Part>) -> Self {
        Self {
            thread_id,
            agent,
            input,
            strategy: StartStrategy::Enqueue,
            max_attempts: 5,
            traceparent: None,
            purpose: crate::run::RunPurpose::Turn,
            new_thread: None,
        }
    }

    /// A run of `agent` with `input` on a thread created for it, `thread`, with a new id: the
    /// thread and the run are created together or not at all (one commit where the store has
    /// two for `create_thread` and `create_run`), and the run is the thread's active run.
    /// Creating it fails if a thread of that id exists already, of any tenant.
    pub fn on_new_thread(
        ids: &dyn crate::id::IdGenerator,
        thread: NewThread,
        agent: AgentRef,
        input: Vec<Part>,
    ) -> Self {
        Self {
            new_thread: Some(thread),
            ..Self::new(ThreadId::generate(ids), agent, input)
        }
    }

    /// The thread [`NewRun::new_thread`] asks for, as the store creates it for `scope` at `now`.
    pub fn thread_to_create(&self, scope: &Scope, now: crate::time::Timestamp) -> Option<Thread> {
        self.new_thread
            .as_ref()
            .map(|new| new.clone().thread(self.thread_id, scope, now))
    }

    /// The same run with another start strategy.
    pub fn strategy(mut self, strategy: StartStrategy) -> Self {
        self.strategy = strategy;
        self
    }
}

/// Everything one step writes, committed atomically or not at all.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCommit {
    /// The run.
    pub run_id: RunId,
    /// The run version the step was computed from; another value means a concurrent writer won.
    pub expected_version: u64,
    /// The lease the step was computed under; a stale token means the lease was lost.
    pub lease: RunLease,
    /// The step's events, continuing the run's log without a gap.
    pub events: Vec<RunEvent>,
    /// Messages the step completed, appended to the thread's history.
    pub messages: Vec<Message>,
    /// State to resume from.
    pub checkpoint: Checkpoint,
    /// The run's status after the step.
    pub status: RunStatus,
    /// Why the run failed, when `status` is `failed`.
    pub failure: Option<RunFailure>,
    /// Approvals and questions the step raised (it parks the run), created with the commit.
    pub interactions: Vec<crate::interaction::Interaction>,
    /// Audit entries of the step (external writes it made), written with the commit.
    pub audit: Vec<crate::ports::audit::AuditRecord>,
    /// The step's model calls, settled: each replaces its reservation (if one was made) or is
    /// recorded as it is, with the commit.
    pub settlements: Vec<crate::metering::ModelCall>,
    /// The thread's new session state, if the step changed it: applied with the commit only
    /// while the state is still at its expected version, else the whole commit is refused with
    /// [`Error::VersionConflict`] for `"session state"` (nothing of it is written).
    pub state: Option<StateUpdate>,
    /// The thread's new summary, if the step compacted it: applied with the commit only while
    /// it builds on the thread's current summary ([`crate::thread::check_summary_version`]),
    /// else the whole commit is refused with [`Error::VersionConflict`].
    pub summary: Option<ThreadSummary>,
    /// The queue's claim the run is executed under, if a worker claimed it. A commit that ends
    /// or parks the run ([`completes_job`]) also completes this job in the same write, when the
    /// claim is still current (its job, token and time to live, as [`JobQueue::complete`]
    /// checks them); a claim that is not current is left as it is and the step is written all
    /// the same ([`Committed::job_completed`] says which).
    ///
    /// [`JobQueue::complete`]: crate::ports::queue::JobQueue::complete
    pub job: Option<crate::ports::queue::ClaimedJob>,
}

impl StepCommit {
    /// Whether this commit gives the run's lease up with it: a run that ends has nothing left
    /// for its holder to do, so the store clears the lease in the same write and the engine
    /// makes no release call after it. A run that parks keeps it: a cancel requested while it
    /// parked is committed under the same lease.
    pub fn releases_lease(&self) -> bool {
        releases_lease(self.status)
    }

    /// The claim this commit completes with it, for a commit of `tenant`: [`StepCommit::job`]
    /// when the run ends or parks ([`completes_job`]) and the claim is of this run and tenant;
    /// else none.
    pub fn completes(
        &self,
        tenant: &crate::scope::TenantId,
    ) -> Option<&crate::ports::queue::ClaimedJob> {
        self.job.as_ref().filter(|j| {
            completes_job(self.status) && j.run_id == self.run_id && &j.tenant_id == tenant
        })
    }

    /// Whether the step writes more than its run's log and row: thread state, a summary,
    /// interactions or audit entries (stores judge such a step on the run before writing).
    pub fn writes_beside_the_log(&self) -> bool {
        self.state.is_some()
            || self.summary.is_some()
            || !self.interactions.is_empty()
            || !self.audit.is_empty()
    }
}

/// Whether a commit leaving the run at `status` gives its lease up ([`StepCommit::releases_lease`]).
pub fn releases_lease(status: RunStatus) -> bool {
    status.is_terminal()
}

/// Whether a commit leaving the run at `status` completes the job it is executed under
/// ([`StepCommit::job`]): a run that ends needs no job, and a parked run holds none (resolving
/// its interaction enqueues a new one).
pub fn completes_job(status: RunStatus) -> bool {
    status.is_terminal() || matches!(status, RunStatus::Waiting(_))
}

/// A session-state change made by a step.
#[derive(Debug, Clone, PartialEq)]
pub struct StateUpdate {
    /// The version the step read.
    pub expected_version: u64,
    /// The whole new state.
    pub values: serde_json::Map<String, serde_json::Value>,
}

pub use crate::thread::SESSION_STATE;

/// The result of a successful [`RunStore::commit_step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Committed {
    /// The run's new version.
    pub version: u64,
    /// The run's last event sequence.
    pub last_seq: u64,
    /// Whether someone asked the run to cancel (the engine stops after this step).
    pub cancel_requested: bool,
    /// Whether the commit also completed the job it was executed under
    /// ([`StepCommit::completes`]); the worker then makes no `complete` call of its own.
    pub job_completed: bool,
}

pub use crate::run::LeasedRun;

/// Port: runs, their leases, their event log and the atomic step commit.
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Creates a queued run with its input (which joins the thread's history only when the run
    /// starts, in its first step's commit) and its job, all at once. If the thread has no active run, the run becomes it and its job is ready.
    /// Otherwise, by `new.strategy`: `Enqueue` records `run.queued` (sequence 1) and holds the job
    /// back until the runs ahead end; `Reject` fails with `ThreadBusy`; `Interrupt` also asks the
    /// active and queued runs to cancel. When a run commits a terminal status, its thread's next
    /// queued run becomes active and its job ready, in the same transaction. With
    /// [`NewRun::new_thread`] the thread is created first, in the same transaction (so the run
    /// is its active run); a thread of that id that exists already fails the call, and nothing
    /// is written.
    async fn create_run(&self, scope: &Scope, new: NewRun) -> Result<Run, Error>;

    /// Asks a run to cancel; the executing worker stops after its current step (a queued run is
    /// cancelled when its turn comes). Returns whether this call asked: `false` when the run has
    /// ended or was already asked.
    async fn request_cancel(&self, scope: &Scope, id: RunId) -> Result<bool, Error>;

    /// Which of `ids` (the scope's tenant's runs; others are not found, and left out) have been
    /// asked to cancel and have not ended. An executing run polls this so that a request made
    /// through another process stops its step in flight.
    async fn cancels_requested(&self, scope: &Scope, ids: &[RunId]) -> Result<Vec<RunId>, Error>;

    /// Reads a run; another tenant's run is `NotFound`.
    async fn get_run(&self, scope: &Scope, id: RunId) -> Result<Run, Error>;

    /// The thread's runs, oldest first.
    async fn list_runs(&self, scope: &Scope, thread_id: ThreadId) -> Result<Vec<Run>, Error>;

    /// The tenant's runs that `query` selects, newest first (for operators: `forge runs list`).
    async fn query_runs(&self, scope: &Scope, query: &RunQuery) -> Result<Vec<Run>, Error>;

    /// How many of the tenant's runs, and of those the scope's principal started, are in flight
    /// (queued or running; a run waiting for a person is not), counted up to `at_most` (once the
    /// tenant's reach it, the principal's are of those counted): a server's limits on runs in
    /// flight ask before each start. The default reads them with [`RunStore::query_runs`]; a
    /// SQL store counts over an index of the runs in flight.
    async fn runs_in_flight(&self, scope: &Scope, at_most: usize) -> Result<InFlight, Error> {
        let mut counted = InFlight::default();
        for status in ["queued", "running"] {
            if counted.tenant >= at_most {
                break;
            }
            let query = RunQuery {
                status: Some(status.to_owned()),
                ..RunQuery::newest(at_most - counted.tenant)
            };
            for run in self.query_runs(scope, &query).await? {
                counted.tenant += 1;
                counted.principal += usize::from(&run.principal_id == scope.principal_id());
            }
        }
        Ok(counted)
    }

    /// Takes the run's lease for `ttl`, issuing a new fencing token. Fails with `LeaseHeld` while
    /// another holder's lease is unexpired; the same holder re-acquiring gets a new token.
    async fn acquire_lease(
        &self,
        scope: &Scope,
        id: RunId,
        holder: &str,
        ttl: Duration,
    ) -> Result<RunLease, Error>;

    /// [`RunStore::acquire_lease`], then the run as it stands under that lease (its `lease` and
    /// `fence` are the new lease's). Adapters that can do both in one transaction override this.
    async fn lease_run(
        &self,
        scope: &Scope,
        id: RunId,
        holder: &str,
        ttl: Duration,
    ) -> Result<(RunLease, Run), Error> {
        let lease = self.acquire_lease(scope, id, holder, ttl).await?;
        let run = self.get_run(scope, id).await?;
        Ok((lease, run))
    }

    /// [`RunStore::lease_run`], and, where the adapter can in the same trip to its database,
    /// what the run begins with: its thread and the first page of its history, at most `limit`
    /// messages, as [`ThreadStore::thread_with_history`] reads them, read after the lease was
    /// taken (so no step committed before the lease is missing from it). The default leaves
    /// [`LeasedRun::history`] `None`, and the caller reads them itself.
    async fn lease_run_with_history(
        &self,
        scope: &Scope,
        id: RunId,
        holder: &str,
        ttl: Duration,
        limit: usize,
    ) -> Result<LeasedRun, Error> {
        let _ = limit;
        let (lease, run) = self.lease_run(scope, id, holder, ttl).await?;
        Ok(LeasedRun {
            lease,
            run,
            history: None,
        })
    }

    /// [`RunStore::create_run`], then the new run's lease for `holder` with what it begins with,
    /// as [`RunStore::lease_run_with_history`] takes and reads them: for an application that
    /// executes the run it starts itself (`Engine::submit_and_execute`). Adapters that can do
    /// both in one transaction override this (PostgreSQL, for a run its idle thread admits at
    /// once: one commit fewer on the way to the first model call). Either way the run is created
    /// exactly as `create_run` creates it, its job included, and the lease is exactly the one
    /// `lease_run_with_history` would take right after.
    async fn create_run_leased(
        &self,
        scope: &Scope,
        new: NewRun,
        holder: &str,
        ttl: Duration,
        limit: usize,
    ) -> Result<LeasedRun, Error> {
        let run = self.create_run(scope, new).await?;
        self.lease_run_with_history(scope, run.id, holder, ttl, limit)
            .await
    }

    /// Extends a lease that is still current; `Fenced` if it is not.
    async fn renew_lease(
        &self,
        scope: &Scope,
        lease: &RunLease,
        ttl: Duration,
    ) -> Result<RunLease, Error>;

    /// Gives a current lease up; releasing a stale lease is a no-op.
    async fn release_lease(&self, scope: &Scope, lease: &RunLease) -> Result<(), Error>;

    /// Writes one step atomically: events, messages, checkpoint and status. A commit that ends
    /// the run also gives its lease up ([`StepCommit::releases_lease`]).
    ///
    /// Refused, with nothing written, when the lease is not current or has expired (`Fenced`), the
    /// run is not at `expected_version` (`VersionConflict`), the events do not continue the log
    /// (`Invalid`), or the status change is not a legal transition (`Transition`/`Invalid`).
    async fn commit_step(&self, scope: &Scope, commit: StepCommit) -> Result<Committed, Error>;

    /// The run's committed events with `seq > after_seq`, in order, at most `limit` of them.
    async fn read_events(
        &self,
        scope: &Scope,
        id: RunId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<RunEvent>, Error>;
}

/// Every storage port at once: what a configuration-chosen adapter provides (`Arc<dyn Store>`
/// upcasts to each port).
pub trait Store:
    ThreadStore
    + RunStore
    + crate::ports::queue::JobQueue
    + crate::ports::audit::AuditLog
    + crate::ports::interaction::InteractionStore
    + crate::ports::usage::UsageLedger
    + crate::ports::erasure::DataErasure
{
}

impl<
    T: ThreadStore
        + RunStore
        + crate::ports::queue::JobQueue
        + crate::ports::audit::AuditLog
        + crate::ports::interaction::InteractionStore
        + crate::ports::usage::UsageLedger
        + crate::ports::erasure::DataErasure
        + ?Sized,
> Store for T
{
}

/// The checks every adapter applies inside `commit_step`, against the run as its transaction sees
/// it: the lease is current and unexpired, the version matches, the events continue the log, the
/// status change is legal and the messages belong to the run. Returns what the commit yields.
pub fn check_commit(
    run: &Run,
    commit: &StepCommit,
    now: crate::time::Timestamp,
) -> Result<Committed, Error> {
    match &run.lease {
        Some(l) if l.token == commit.lease.token && l.expires_at > now => {}
        _ => {
            return Err(Error::Fenced {
                resource: format!("run {}", run.id),
            });
        }
    }
    if run.version != commit.expected_version {
        return Err(Error::VersionConflict {
            entity: "run",
            id: run.id.to_string(),
            expected: commit.expected_version,
            actual: run.version,
        });
    }
    crate::event::check_contiguous(run.id, run.last_seq, &commit.events)?;
    if !crate::run::reachable(run.status, commit.status) {
        return Err(Error::invalid(format!(
            "a {} run cannot become {}",
            run.status.name(),
            commit.status.name()
        )));
    }
    check_own(commit, run.id, &run.tenant_id)?;
    Ok(Committed {
        version: run.version + 1,
        last_seq: run.last_seq + commit.events.len() as u64,
        cancel_requested: run.cancel_requested,
        job_completed: false,
    })
}

/// What `check_commit` checks after the status change, which needs only the run's id and tenant:
/// the interactions and messages are the run's own, and interactions park it.
fn check_own(
    commit: &StepCommit,
    run: RunId,
    tenant: &crate::scope::TenantId,
) -> Result<(), Error> {
    if commit
        .interactions
        .iter()
        .any(|i| i.run_id != run || &i.tenant_id != tenant)
    {
        return Err(Error::invalid(
            "a step may only raise interactions of its own run",
        ));
    }
    if !commit.interactions.is_empty() && !matches!(commit.status, RunStatus::Waiting(_)) {
        return Err(Error::invalid(
            "a step that raises interactions parks its run",
        ));
    }
    if commit.messages.iter().any(|m| m.run_id != run) {
        return Err(Error::invalid(
            "a step may only commit messages of its own run",
        ));
    }
    Ok(())
}

/// The checks of [`check_commit`] that need no run row, made on `commit` alone for its run of
/// `tenant`: its events follow each other from the first and are the run's, and its interactions
/// and messages are the run's own. For an adapter whose database decides the rest in the
/// statement that writes the step: where the row's log ends right before the first event, this
/// holds exactly when the same checks of `check_commit` hold.
pub fn check_commit_alone(
    commit: &StepCommit,
    tenant: &crate::scope::TenantId,
) -> Result<(), Error> {
    if let Some(first) = commit.events.first() {
        crate::event::check_contiguous(commit.run_id, first.seq.saturating_sub(1), &commit.events)?;
    }
    check_own(commit, commit.run_id, tenant)
}

/// The statuses a run may be in for a step to leave it `to` (what `check_commit` allows), as
/// [`RunStatus::key`]s.
pub fn statuses_reaching(to: RunStatus) -> impl Iterator<Item = String> {
    RunStatus::ALL
        .into_iter()
        .filter(move |from| crate::run::reachable(*from, to))
        .map(|from| from.key())
}

/// The error every adapter gives for a step that settles call `call` when it is not an open call
/// of the committing run (another run's or tenant's, or settled already).
pub fn not_an_open_call(call: crate::id::ModelCallId) -> Error {
    Error::invalid(format!("model call {call} is not an open call of this run"))
}

/// The first of `commit`'s settled calls that is not of the committing run `run` of `tenant`:
/// checked before anything is written.
pub fn foreign_settlement<'c>(
    commit: &'c StepCommit,
    tenant: &crate::scope::TenantId,
) -> Option<&'c crate::metering::ModelCall> {
    commit
        .settlements
        .iter()
        .find(|c| c.run_id != commit.run_id || &c.tenant_id != tenant)
}

/// The check every adapter applies to a step's summary before the version rule: it is the
/// committing run's own.
pub fn check_summary(run: &Run, summary: &ThreadSummary) -> Result<(), Error> {
    if summary.run_id != run.id {
        return Err(Error::invalid(
            "a step may only commit its own run's summary",
        ));
    }
    Ok(())
}

/// How a new run enters its thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// It becomes the thread's active run; its job is ready.
    Active,
    /// It waits behind `behind`, the thread's active run; its job is held back.
    Queued {
        /// The thread's active run.
        behind: RunId,
    },
}

impl Admission {
    /// What a new `run` starts with under this admission: for a run queued behind another, the
    /// `run.queued` event that begins its log (sequence 1, recorded in `run.last_seq`); nothing
    /// for the thread's active run. The rule every store's `create_run` applies.
    pub fn begin(&self, run: &mut Run, at: crate::time::Timestamp) -> Option<RunEvent> {
        match *self {
            Admission::Active => None,
            Admission::Queued { behind } => {
                run.last_seq = 1;
                Some(RunEvent {
                    run_id: run.id,
                    seq: 1,
                    at,
                    kind: crate::event::RunEventKind::RunQueued {
                        thread_id: run.thread_id,
                        behind,
                    },
                })
            }
        }
    }
}

/// Decides how a new run enters a thread whose active run is `active`. `Reject` on a busy thread
/// is `ThreadBusy`; `Interrupt` queues like `Enqueue` (the adapter also requests cancellation of
/// the runs ahead).
pub fn admit(
    thread: ThreadId,
    active: Option<RunId>,
    strategy: StartStrategy,
) -> Result<Admission, Error> {
    match (active, strategy) {
        (None, _) => Ok(Admission::Active),
        (Some(active), StartStrategy::Reject) => Err(Error::ThreadBusy {
            thread: thread.to_string(),
            active: active.to_string(),
        }),
        (Some(behind), StartStrategy::Enqueue | StartStrategy::Interrupt) => {
            Ok(Admission::Queued { behind })
        }
    }
}

/// A tenant's runs in flight, and its principal's ([`RunStore::runs_in_flight`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InFlight {
    /// The tenant's, up to the limit asked.
    pub tenant: usize,
    /// Of those, the ones the principal started.
    pub principal: usize,
}

/// Which of a tenant's runs [`RunStore::query_runs`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunQuery {
    /// Only runs in this state, by its stored name (`queued`, `running`, `waiting`, `completed`,
    /// `failed`, `cancelled`); see [`RunQuery::status`].
    pub status: Option<String>,
    /// Only runs of this thread.
    pub thread_id: Option<ThreadId>,
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
            limit,
            before: None,
        }
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
    }
}

/// The lease `holder` gets on `run` for `ttl`, or `LeaseHeld` while another holder's is unexpired.
pub fn next_lease(
    run: &Run,
    holder: &str,
    ttl: Duration,
    now: crate::time::Timestamp,
) -> Result<RunLease, Error> {
    if let Some(l) = &run.lease
        && l.holder != holder
        && l.expires_at > now
    {
        return Err(Error::LeaseHeld {
            resource: format!("run {}", run.id),
            until: l.expires_at,
        });
    }
    Ok(RunLease {
        run_id: run.id,
        holder: holder.to_owned(),
        token: run.fence + 1,
        expires_at: now.plus(ttl),
    })
}

/// The renewed lease, or `Fenced` when `lease` is no longer the run's current, unexpired lease.
pub fn renewed_lease(
    run: &Run,
    lease: &RunLease,
    ttl: Duration,
    now: crate::time::Timestamp,
) -> Result<RunLease, Error> {
    match &run.lease {
        Some(l) if l.token == lease.token && l.expires_at > now => Ok(RunLease {
            expires_at: now.plus(ttl),
            ..lease.clone()
        }),
        _ => Err(Error::Fenced {
            resource: format!("run {}", run.id),
        }),
    }
}
