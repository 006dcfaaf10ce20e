//! The job queue: claims are leases with fencing tokens; spent attempts dead-letter the job.

use std::time::Duration;

use async_trait::async_trait;
use forge_core::Error;
use forge_core::id::{JobId, RunId};
use forge_core::ports::queue::{ClaimedJob, JobQueue, JobState, NewJob};
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
}

impl JobRow {
    pub(crate) fn new(
        tenant_id: TenantId,
        run_id: RunId,
        state: JobState,
        now: Timestamp,
        max_attempts: u32,
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
        }
    }

    /// Makes the held-back job of `run` ready.
    pub(crate) fn wake(&mut self, run: RunId, now: Timestamp) {
        if self.run_id == run && self.state == JobState::Waiting {
            self.state = JobState::Ready;
            self.available_at = now;
        }
    }
}

#[async_trait]
impl JobQueue for MemoryStore {
    async fn enqueue(&self, scope: &Scope, job: NewJob) -> Result<JobId, Error> {
        if job.max_attempts == 0 {
            return Err(Error::invalid("max_attempts must be at least 1"));
        }
        let id = JobId::generate(self.ids.as_ref());
        let now = self.clock.now();
        let mut st = self.lock();
        st.run(scope, job.run_id)?;
        st.jobs.insert(
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
            },
        );
        Ok(id)
    }

    async fn claim(
        &self,
        _system: &SystemScope,
        _worker: &str,
        ttl: Duration,
    ) -> Result<Option<ClaimedJob>, Error> {
        let now = self.clock.now();
        let mut st = self.lock();
        for (id, row) in st.jobs.iter_mut() {
            let lapsed = row.state == JobState::Claimed && row.expires_at.is_some_and(|t| t <= now);
            if lapsed && row.attempts >= row.max_attempts {
                row.state = JobState::Dead;
                continue;
            }
            if (row.state == JobState::Ready && row.available_at <= now) || lapsed {
                row.state = JobState::Claimed;
                row.attempts += 1;
                row.token += 1;
                let expires_at = now.plus(ttl);
                row.expires_at = Some(expires_at);
                return Ok(Some(ClaimedJob {
                    id: *id,
                    tenant_id: row.tenant_id.clone(),
                    run_id: row.run_id,
                    attempt: row.attempts,
                    token: row.token,
                    expires_at,
                }));
            }
        }
        Ok(None)
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
        let mut st = self.lock();
        let row = current(&mut st.jobs, job, now)?;
        row.state = JobState::Completed;
        row.expires_at = None;
        Ok(())
    }

    async fn fail(
        &self,
        _system: &SystemScope,
        job: &ClaimedJob,
        retry_in: Duration,
    ) -> Result<JobState, Error> {
        let now = self.clock.now();
        let mut st = self.lock();
        let row = current(&mut st.jobs, job, now)?;
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

    async fn job_state(&self, _system: &SystemScope, id: JobId) -> Result<JobState, Error> {
        self.lock()
            .jobs
            .get(&id)
            .map(|r| r.state)
            .ok_or_else(|| Error::not_found("job", id))
    }
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
