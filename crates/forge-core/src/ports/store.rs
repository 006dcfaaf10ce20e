//! Storage ports: threads with session state, and runs with their event log and atomic step commit.

use std::time::Duration;

use async_trait::async_trait;

use crate::Error;
use crate::agent::AgentRef;
use crate::event::RunEvent;
use crate::id::{RunId, ThreadId};
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
    /// The id to create it as (a keyed request's claim, [`crate::ports::keys`]); a fresh one
    /// when `None`. A thread of that id that exists already fails the create. A run's new
    /// thread ([`NewRun::new_thread`]) takes the run's `thread_id` instead.
    pub id: Option<ThreadId>,
}

impl NewThread {
    /// The id to create it as: [`NewThread::id`], or a fresh one from `ids`.
    pub fn id_or_new(&self, ids: &dyn crate::id::IdGenerator) -> ThreadId {
        self.id.unwrap_or_else(|| ThreadId::generate(ids))
    }

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

pub use crate::message::MessageWindow;

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
    /// The id to create it as (a keyed request's claim, [`crate::ports::keys`]); a fresh one
    /// when `None`. A run of that id that exists already is never changed: the create fails,
    /// or, where the store cannot tell it from its own create sent again after a dropped
    /// connection (PostgreSQL, while the run is its thread's active run), answers as that would.
    pub id: Option<RunId>,
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
            id: None,
        }
    }

    /// The id to create it as: [`NewRun::id`], or a fresh one from `ids`.
    pub fn id_or_new(&self, ids: &dyn crate::id::IdGenerator) -> RunId {
        self.id.unwrap_or_else(|| RunId::generate(ids))
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

/// A session-state change made by a step.
#[derive(Debug, Clone, PartialEq)]
pub struct StateUpdate {
    /// The version the step read.
    pub expected_version: u64,
    /// The whole new state.
    pub values: serde_json::Map<String, serde_json::Value>,
}

pub use crate::ports::rules::{
    admit, check_commit, check_commit_alone, check_summary, completes_job, foreign_settlement,
    next_lease, not_an_open_call, releases_lease, renewed_lease, statuses_reaching,
};
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
    + crate::ports::keys::RequestKeys
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
        + crate::ports::keys::RequestKeys
        + ?Sized,
> Store for T
{
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

/// A tenant's runs in flight, and its principal's ([`RunStore::runs_in_flight`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InFlight {
    /// The tenant's, up to the limit asked.
    pub tenant: usize,
    /// Of those, the ones the principal started.
    pub principal: usize,
}

pub use crate::run::{RUN_STATUS_NAMES, RunQuery};
