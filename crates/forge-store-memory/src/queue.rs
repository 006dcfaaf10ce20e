//! The job queue: claims are leases with fencing tokens; spent attempts dead-letter the job.

use std::time::Duration;

use async_trait::async_trait;
use forge_core::Error;
use forge_core::id::{JobId, RunId};
use forge_core::ports::audit::{AuditLog, AuditRecord};
use forge_core::ports::queue::{
    ClaimFilter, Claimed, ClaimedJob, DeadJob, JobInfo, JobQueue, JobState, LeaseRequest, NewJob,
};
use forge_core::scope::{Scope, SystemScope, TenantId};
use forge_core::time::Timestamp;

use crate::MemoryStore;

#[derive(Debug, Clone)]
pub(crate) struct JobRow {
    tenant_id: TenantId,
    run_id: RunId,
    state: JobState,
    available_at: Timestamp,
    attempts: u32,
    max_attempts: u32,
    token: u64,
    expires_at: Option<Timestamp>,
    last_error: Option<String>,
    traceparent: Option<String>,
}

impl JobRow {
    pub(crate) fn new(
        tenant_id: TenantId,
        run_id: RunId,
        state: JobState,
        now: Timestamp,
        max_attempts: u32,
        traceparent: Option<String>,
    ) -> Self {
        Self {
            tenant_id,
            run_id,
            state,
            available_at: now,
            attempts: 0,
            max_attempts,
            token: 0,
            expires_at: None,
            last_error: None,
            traceparent,
        }
    }

    /// The run it executes.
    pub(crate) fn run_id(&self) -> RunId {
        self.run_id
    }

    /// The trace it was enqueued under.
    pub(crate) fn traceparent(&self) -> Option<&String> {
        self.traceparent.as_ref()
    }

    /// Whether this is a job of `run` waiting to be claimed. A claimed job does not count: its
    /// worker parked the run and is about to complete it without looking again.
    pub(crate) fn is_live_for(&self, run: RunId) -> bool {
        self.run_id == run && matches!(self.state, JobState::Ready | JobState::Waiting)
    }

    /// Makes the held-back job of `run` ready.
    pub(crate) fn wake(&mut self, run: RunId, now: Timestamp) {
        if self.run_id == run && self.state == JobState::Waiting {
            self.state = JobState::Ready;
            self.available_at = now;
        }
    }
}

impl JobRow {
    fn info(&self, id: JobId) -> JobInfo {
        JobInfo {
            id,
            tenant_id: self.tenant_id.clone(),
            run_id: self.run_id,
            state: self.state,
            attempts: self.attempts,
            max_attempts: self.max_attempts,
            last_error: self.last_error.clone(),
        }
    }
}

impl MemoryStore {
    /// Moves a dead job to `to` (a replay resets its attempts) and audits it, atomically.
    fn operate_dead(&self, id: JobId, actor: &str, operation: DeadJob) -> Result<JobInfo, Error> {
        let (action, to) = (operation.action(), operation.to());
        let now = self.clock.now();
        let mut st = self.lock();
        let row = st
            .jobs
            .get_mut(&id)
            .ok_or_else(|| Error::not_found("job", id))?;
        if row.state != JobState::Dead {
            return Err(Error::invalid(format!(
                "job {id} is {}, not dead",
                row.state.name()
            )));
        }
        row.state = to;
        if to == JobState::Ready {
            row.attempts = 0;
            row.available_at = now;
        }
        let info = row.info(id);
        if to == JobState::Ready {
            st.open_jobs.insert(id);
        }
        st.audit.push(AuditRecord {
            tenant_id: info.tenant_id.clone(),
            at: now,
            actor: actor.to_owned(),
            action: action.to_owned(),
            subject: format!("job {id}"),
            detail: serde_json::json!({ "run_id": info.run_id, "last_error": info.last_error }),
        });
        Ok(info)
    }
}

#[async_trait]
impl AuditLog for MemoryStore {
    async fn read_audit(
        &self,
        scope: &Scope,
        query: &forge_core::ports::audit::AuditQuery,
    ) -> Result<Vec<AuditRecord>, Error> {
        let st = self.lock();
        Ok(st
            .audit
            .iter()
            .rev()
            .filter(|r| &r.tenant_id == scope.tenant_id() && query.matches(r))
            .take(query.limit)
            .cloned()
            .collect())
    }

    async fn append_audit(&self, _: &Scope, record: AuditRecord) -> Result<(), Error> {
        self.lock().audit.push(record);
        Ok(())
    }
}

#[async_trait]
impl JobQueue for MemoryStore {
    async fn enqueue(&self, scope: &Scope, job: NewJob) -> Result<JobId, Error> {
        forge_core::ports::rules::check_attempts(job.max_attempts)?;
        let id = JobId::generate(self.ids.as_ref());
        let now = self.clock.now();
        let mut st = self.lock();
        st.run(scope, job.run_id)?;
        st.add_job(
            id,
            JobRow {
                tenant_id: scope.tenant_id().clone(),
                run_id: job.run_id,
                state: JobState::Ready,
                available_at: job.not_before.unwrap_or(now),
                attempts: 0,
                max_attempts: job.max_attempts,
                token: 0,
                expires_at: None,
                last_error: None,
                traceparent: job.traceparent,
            },
        );
        Ok(id)
    }

    async fn claim(
        &self,
        _system: &SystemScope,
        _worker: &str,
        ttl: Duration,
        filter: &ClaimFilter,
    ) -> Result<Option<ClaimedJob>, Error> {
        let now = self.clock.now();
        let mut st = self.lock();
        let st = &mut *st;
        // The open jobs in age order; finished ones met on the way are dropped from the walk's
        // set.
        let mut finished = Vec::new();
        let mut claimed = None;
        for id in &st.open_jobs {
            let Some(row) = st.jobs.get_mut(id) else {
                finished.push(*id);
                continue;
            };
            if matches!(
                row.state,
                JobState::Completed | JobState::Dead | JobState::Discarded
            ) {
                finished.push(*id);
                continue;
            }
            let lapsed = row.state == JobState::Claimed && row.expires_at.is_some_and(|t| t <= now);
            if lapsed && row.attempts >= row.max_attempts {
                row.state = JobState::Dead;
                row.last_error = Some(forge_core::ports::queue::WORKER_LOST.to_owned());
                finished.push(*id);
                continue;
            }
            // The run is looked up only for a job that could be claimed: the lookup (a hash and
            // the agent's name compared) was most of a claim's CPU.
            let claimable = (row.state == JobState::Ready && row.available_at <= now) || lapsed;
            if claimable
                && st
                    .runs
                    .get(&row.run_id)
                    .is_some_and(|run| filter.admits(row.run_id, &run.agent))
            {
                row.state = JobState::Claimed;
                row.attempts += 1;
                row.token += 1;
                let expires_at = now.plus(ttl);
                row.expires_at = Some(expires_at);
                claimed = Some(ClaimedJob {
                    id: *id,
                    tenant_id: row.tenant_id.clone(),
                    run_id: row.run_id,
                    attempt: row.attempts,
                    token: row.token,
                    expires_at,
                    available_at: row.available_at,
                    traceparent: row.traceparent.clone(),
                });
                break;
            }
        }
        for id in finished {
            st.open_jobs.remove(&id);
        }
        Ok(claimed)
    }

    async fn claim_leased(
        &self,
        system: &SystemScope,
        worker: &str,
        ttl: Duration,
        filter: &ClaimFilter,
        lease: &LeaseRequest,
    ) -> Result<Option<Claimed>, Error> {
        let Some(job) = self.claim(system, worker, ttl, filter).await? else {
            return Ok(None);
        };
        let now = self.clock.now();
        let mut st = self.lock();
        let leased = st
            .take_lease(&job.tenant_id, job.run_id, &lease.holder, lease.ttl, now)
            .ok()
            .map(|(taken, run)| {
                // Read in the same critical section as the lease, as the SQL adapters do in one
                // statement.
                let history = lease
                    .history
                    .and_then(|limit| st.thread_start(&job.tenant_id, run.thread_id, limit).ok());
                forge_core::ports::store::LeasedRun {
                    lease: taken,
                    run,
                    history,
                }
            });
        Ok(Some(Claimed { job, lease: leased }))
    }

    async fn heartbeat(
        &self,
        _system: &SystemScope,
        job: &ClaimedJob,
        ttl: Duration,
    ) -> Result<ClaimedJob, Error> {
        let now = self.clock.now();
        let mut st = self.lock();
        let row = current(&mut st.jobs, job, now)?;
        let expires_at = now.plus(ttl);
        row.expires_at = Some(expires_at);
        Ok(ClaimedJob {
            expires_at,
            ..job.clone()
        })
    }

    async fn complete(&self, _system: &SystemScope, job: &ClaimedJob) -> Result<(), Error> {
        let now = self.clock.now();
        complete_claim(&mut self.lock().jobs, job, now)
    }

    async fn fail(
        &self,
        _system: &SystemScope,
        job: &ClaimedJob,
        retry_in: Duration,
        reason: &str,
    ) -> Result<JobState, Error> {
        let now = self.clock.now();
        let mut st = self.lock();
        let row = current(&mut st.jobs, job, now)?;
        row.last_error = Some(reason.to_owned());
        row.expires_at = None;
        if row.attempts >= row.max_attempts {
            row.state = JobState::Dead;
        } else {
            row.state = JobState::Ready;
            row.available_at = now.plus(retry_in);
        }
        Ok(row.state)
    }

    async fn release(
        &self,
        _system: &SystemScope,
        job: &ClaimedJob,
        not_before: Timestamp,
    ) -> Result<(), Error> {
        let now = self.clock.now();
        let mut st = self.lock();
        let row = current(&mut st.jobs, job, now)?;
        row.state = JobState::Ready;
        row.attempts = row.attempts.saturating_sub(1);
        row.available_at = not_before;
        row.expires_at = None;
        Ok(())
    }

    async fn dead_jobs(&self, _system: &SystemScope, limit: usize) -> Result<Vec<JobInfo>, Error> {
        let st = self.lock();
        Ok(st
            .jobs
            .iter()
            .filter(|(_, r)| r.state == JobState::Dead)
            .take(limit)
            .map(|(id, r)| r.info(*id))
            .collect())
    }

    async fn job_counts(
        &self,
        _system: &SystemScope,
    ) -> Result<std::collections::BTreeMap<&'static str, u64>, Error> {
        let mut counts = std::collections::BTreeMap::new();
        for job in self.lock().jobs.values() {
            *counts.entry(job.state.name()).or_insert(0) += 1;
        }
        Ok(counts)
    }

    async fn job(&self, _system: &SystemScope, id: JobId) -> Result<JobInfo, Error> {
        self.lock()
            .jobs
            .get(&id)
            .map(|r| r.info(id))
            .ok_or_else(|| Error::not_found("job", id))
    }

    async fn operate(
        &self,
        _system: &SystemScope,
        id: JobId,
        actor: &str,
        operation: DeadJob,
    ) -> Result<JobInfo, Error> {
        self.operate_dead(id, actor, operation)
    }
}

/// Completes the job if `job` is its current, unexpired claim; `Fenced` otherwise. Shared by
/// `complete` and the step that ends or parks the job's run.
pub(crate) fn complete_claim(
    jobs: &mut std::collections::BTreeMap<JobId, JobRow>,
    job: &ClaimedJob,
    now: Timestamp,
) -> Result<(), Error> {
    let row = current(jobs, job, now)?;
    row.state = JobState::Completed;
    row.expires_at = None;
    Ok(())
}

/// The job's row if `job` is its current, unexpired claim.
fn current<'a>(
    jobs: &'a mut std::collections::BTreeMap<JobId, JobRow>,
    job: &ClaimedJob,
    now: Timestamp,
) -> Result<&'a mut JobRow, Error> {
    let row = jobs
        .get_mut(&job.id)
        .ok_or_else(|| Error::not_found("job", job.id))?;
    let live = row.state == JobState::Claimed
        && row.token == job.token
        && row.expires_at.is_some_and(|t| t > now);
    if live {
        Ok(row)
    } else {
        Err(Error::Fenced {
            resource: format!("job {}", job.id),
        })
    }
}
