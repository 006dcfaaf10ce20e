//! The job-queue port: durable run jobs with leases, attempts and a dead-letter state.
//!
//! Enqueueing is tenant-scoped; claiming spans tenants and so takes a [`SystemScope`]. A claim is a
//! lease: it lapses unless heartbeated, after which another worker may claim the job again with a
//! higher fencing token.

use std::time::Duration;

use async_trait::async_trait;

use crate::Error;
use crate::agent::AgentRef;
use crate::id::{JobId, RunId};
use crate::scope::{Scope, SystemScope, TenantId};
use crate::time::Timestamp;

/// A job to execute (or continue) one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    /// The run to execute.
    pub run_id: RunId,
    /// Earliest time it may be claimed; `None` means now.
    pub not_before: Option<Timestamp>,
    /// Claims allowed before the job is dead-lettered.
    pub max_attempts: u32,
    /// The `traceparent` of the span that enqueued it.
    pub traceparent: Option<String>,
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Held back until the runs ahead of it on its thread end.
    Waiting,
    /// Waiting to be claimed.
    Ready,
    /// Claimed under a live lease.
    Claimed,
    /// Done.
    Completed,
    /// Out of attempts; waits for an operator to replay or discard it.
    Dead,
    /// An operator gave it up.
    Discarded,
}

impl JobState {
    /// The state's stored name.
    pub fn name(&self) -> &'static str {
        match self {
            JobState::Waiting => "waiting",
            JobState::Ready => "ready",
            JobState::Claimed => "claimed",
            JobState::Completed => "completed",
            JobState::Dead => "dead",
            JobState::Discarded => "discarded",
        }
    }

    /// The state named `name`.
    pub fn from_name(name: &str) -> Result<Self, Error> {
        Ok(match name {
            "waiting" => JobState::Waiting,
            "ready" => JobState::Ready,
            "claimed" => JobState::Claimed,
            "completed" => JobState::Completed,
            "dead" => JobState::Dead,
            "discarded" => JobState::Discarded,
            other => return Err(Error::invalid(format!("unknown job state {other:?}"))),
        })
    }
}

/// What an operator sees of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// The job.
    pub id: JobId,
    /// Its tenant.
    pub tenant_id: TenantId,
    /// Its run.
    pub run_id: RunId,
    /// Where it is.
    pub state: JobState,
    /// Claims so far.
    pub attempts: u32,
    /// Claims allowed.
    pub max_attempts: u32,
    /// Why the last attempt failed, if one did.
    pub last_error: Option<String>,
}

/// A job a worker holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedJob {
    /// The job.
    pub id: JobId,
    /// Its tenant.
    pub tenant_id: TenantId,
    /// Its run.
    pub run_id: RunId,
    /// 1 for the first claim.
    pub attempt: u32,
    /// The fencing token of this claim.
    pub token: u64,
    /// When the claim lapses unless heartbeated.
    pub expires_at: Timestamp,
    /// When it became claimable (the claim latency runs from here).
    pub available_at: Timestamp,
    /// The `traceparent` it was enqueued with, as stored (parse it with
    /// `telemetry::TraceContext::parse`; a job from before traces has none).
    pub traceparent: Option<String>,
}

/// The last error of a job dead-lettered because its claims lapsed: its workers died (or froze)
/// holding it until it ran out of attempts.
pub const WORKER_LOST: &str = "lease expired (worker lost)";

/// Which jobs a claim may take. Adapters apply it in the claim's own query, so a worker never
/// takes (and spends an attempt of) a job it cannot run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimFilter {
    /// Only jobs of runs of these agent versions; `None` takes any. A worker names the versions
    /// it has, so in a rolling deploy or a mixed fleet each run waits for a worker that can run
    /// it instead of being failed (and dead-lettered) by those that cannot.
    pub agents: Option<Vec<AgentRef>>,
    /// Only this run's job (`forge run` executes its own run and nobody else's).
    pub run: Option<RunId>,
}

impl ClaimFilter {
    /// Takes any job.
    pub fn any() -> Self {
        Self::default()
    }

    /// Takes jobs of runs of these agent versions only.
    pub fn agents(agents: impl IntoIterator<Item = AgentRef>) -> Self {
        Self {
            agents: Some(agents.into_iter().collect()),
            run: None,
        }
    }

    /// Narrows the filter to one run.
    pub fn only_run(mut self, run: RunId) -> Self {
        self.run = Some(run);
        self
    }

    /// Whether a run of `agent` with id `run` passes (the rule each adapter's query encodes).
    pub fn admits(&self, run: RunId, agent: &AgentRef) -> bool {
        self.run.is_none_or(|r| r == run)
            && self
                .agents
                .as_ref()
                .is_none_or(|agents| agents.contains(agent))
    }

    /// The agent filter as a JSON array of `[name, version]` pairs, for SQL adapters (`None` when
    /// any agent passes).
    pub fn agents_json(&self) -> Option<String> {
        self.agents.as_ref().map(|agents| {
            serde_json::Value::Array(
                agents
                    .iter()
                    .map(|a| serde_json::json!([a.name, a.version]))
                    .collect(),
            )
            .to_string()
        })
    }
}

/// Whose lease [`JobQueue::claim_leased`] takes of the claimed job's run, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRequest {
    /// The lease's holder (the executing engine's worker id).
    pub holder: String,
    /// Its time to live.
    pub ttl: Duration,
    /// When set, the most messages of the run's history to read with the lease, where the
    /// adapter can in the same trip ([`crate::ports::store::RunStore::lease_run_with_history`]).
    pub history: Option<usize>,
}

impl LeaseRequest {
    /// The scope the holder reads a claimed run of `tenant` under (the tenant's, as the holder,
    /// with no roles): where an adapter takes the lease, or reads the history, apart from the
    /// claim. `Invalid` for a holder that is no principal id.
    pub fn reader(&self, tenant: &TenantId) -> Result<Scope, Error> {
        let holder = crate::scope::PrincipalId::new(self.holder.clone())?;
        Ok(Scope::new(tenant.clone(), holder, vec![]))
    }
}

/// A claim made by [`JobQueue::claim_leased`], with its run's lease when the adapter took it.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    /// The claim.
    pub job: ClaimedJob,
    /// The run's new lease and the run as it stands under it, if taken with the claim, with its
    /// history when [`LeaseRequest::history`] asked for it and the adapter read it.
    pub lease: Option<crate::run::LeasedRun>,
}

/// Up to `max` claims made one at a time through `queue`'s [`JobQueue::claim_leased`]: what
/// [`JobQueue::claim_leased_batch`] does by default, for an adapter that batches only sometimes.
/// An error after a claim ends the batch with the claims made.
pub async fn claim_leased_each<Q: JobQueue + ?Sized>(
    queue: &Q,
    system: &SystemScope,
    worker: &str,
    ttl: Duration,
    filter: &ClaimFilter,
    lease: &LeaseRequest,
    max: usize,
) -> Result<Vec<Claimed>, Error> {
    let mut claimed = Vec::new();
    while claimed.len() < max {
        match queue.claim_leased(system, worker, ttl, filter, lease).await {
            Ok(Some(claim)) => claimed.push(claim),
            Ok(None) => break,
            Err(e) if claimed.is_empty() => return Err(e),
            Err(_) => break,
        }
    }
    Ok(claimed)
}

/// Port: the durable run queue.
#[async_trait]
pub trait JobQueue: Send + Sync {
    /// Adds a job for a run of the scope's tenant.
    async fn enqueue(&self, scope: &Scope, job: NewJob) -> Result<JobId, Error>;

    /// Claims the oldest ready job (or one whose claim lapsed) that `filter` admits, for `ttl`.
    async fn claim(
        &self,
        system: &SystemScope,
        worker: &str,
        ttl: Duration,
        filter: &ClaimFilter,
    ) -> Result<Option<ClaimedJob>, Error>;

    /// [`JobQueue::claim`], and in the same write, where the adapter can, the claimed job's run's
    /// lease for `lease.holder` as [`RunStore::lease_run`] would take it, when the lease is free
    /// (no one else holds it unexpired): the lease and the run as it stands under it. A lease not
    /// taken here (it was held, or the adapter takes none with a claim) is `None`, and the caller
    /// takes it with `lease_run`, which then says why it cannot; the claim stands either way.
    ///
    /// [`RunStore::lease_run`]: crate::ports::store::RunStore::lease_run
    async fn claim_leased(
        &self,
        system: &SystemScope,
        worker: &str,
        ttl: Duration,
        filter: &ClaimFilter,
        lease: &LeaseRequest,
    ) -> Result<Option<Claimed>, Error> {
        let _ = lease;
        Ok(self
            .claim(system, worker, ttl, filter)
            .await?
            .map(|job| Claimed { job, lease: None }))
    }

    /// Up to `max` claims, each what [`JobQueue::claim_leased`] would make after the ones before
    /// it (the same order, the same leases), in one write where the adapter can: how a worker
    /// whose claim loops free up together claims for all of them at once. Fewer (none) when
    /// fewer jobs are ready. The default claims one at a time; an error after a claim ends the
    /// batch with what it holds, so no claim is lost, and the next claim meets the error again.
    async fn claim_leased_batch(
        &self,
        system: &SystemScope,
        worker: &str,
        ttl: Duration,
        filter: &ClaimFilter,
        lease: &LeaseRequest,
        max: usize,
    ) -> Result<Vec<Claimed>, Error> {
        claim_leased_each(self, system, worker, ttl, filter, lease, max).await
    }

    /// Extends a claim that is still current; `Fenced` if another claim replaced it.
    async fn heartbeat(
        &self,
        system: &SystemScope,
        job: &ClaimedJob,
        ttl: Duration,
    ) -> Result<ClaimedJob, Error>;

    /// Marks a claimed job done.
    async fn complete(&self, system: &SystemScope, job: &ClaimedJob) -> Result<(), Error>;

    /// Gives a claimed job back after a failure, recording `reason`: ready again after `retry_in`,
    /// or dead when its attempts are spent. Returns the job's new state.
    async fn fail(
        &self,
        system: &SystemScope,
        job: &ClaimedJob,
        retry_in: Duration,
        reason: &str,
    ) -> Result<JobState, Error>;

    /// Dead-lettered jobs, oldest first, at most `limit`.
    async fn dead_jobs(&self, system: &SystemScope, limit: usize) -> Result<Vec<JobInfo>, Error>;

    /// How many jobs, across tenants, are in each state (states with none are absent): the
    /// queue's depth for operators' gauges.
    async fn job_counts(
        &self,
        system: &SystemScope,
    ) -> Result<std::collections::BTreeMap<&'static str, u64>, Error>;

    /// One job as an operator sees it.
    async fn job(&self, system: &SystemScope, id: JobId) -> Result<JobInfo, Error>;

    /// Does `operation` to a dead job, recording its audit entry ([`DeadJob::action`]) for
    /// `actor` in the same transaction. Any other state is `Invalid`. What [`JobQueue::replay`]
    /// and [`JobQueue::discard`] call.
    async fn operate(
        &self,
        system: &SystemScope,
        id: JobId,
        actor: &str,
        operation: DeadJob,
    ) -> Result<JobInfo, Error>;

    /// Makes a dead job ready again with a fresh attempt budget, recording an audit entry for
    /// `actor` in the same transaction. Any other state is `Invalid`.
    async fn replay(&self, system: &SystemScope, id: JobId, actor: &str) -> Result<JobInfo, Error> {
        self.operate(system, id, actor, DeadJob::Replay).await
    }

    /// Gives a dead job up for good, recording an audit entry for `actor` in the same transaction.
    /// Any other state is `Invalid`.
    async fn discard(
        &self,
        system: &SystemScope,
        id: JobId,
        actor: &str,
    ) -> Result<JobInfo, Error> {
        self.operate(system, id, actor, DeadJob::Discard).await
    }

    /// Gives a claimed job back without spending an attempt (a worker draining for shutdown, or a
    /// run still leased by a crashed worker): ready again at `not_before`.
    async fn release(
        &self,
        system: &SystemScope,
        job: &ClaimedJob,
        not_before: Timestamp,
    ) -> Result<(), Error>;

    /// The state of a job.
    async fn job_state(&self, system: &SystemScope, id: JobId) -> Result<JobState, Error> {
        Ok(self.job(system, id).await?.state)
    }
}

/// What an operator does to a dead job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadJob {
    /// Ready again, with a fresh attempt budget.
    Replay,
    /// Given up for good.
    Discard,
}

impl DeadJob {
    /// The audit action recorded.
    pub fn action(self) -> &'static str {
        match self {
            Self::Replay => "job.replayed",
            Self::Discard => "job.discarded",
        }
    }

    /// The state the job is left in.
    pub fn to(self) -> JobState {
        match self {
            Self::Replay => JobState::Ready,
            Self::Discard => JobState::Discarded,
        }
    }
}
