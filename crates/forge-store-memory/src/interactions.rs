//! Interactions: approvals and questions of parked runs, resolved once under the store's mutex.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::id::{InteractionId, JobId, RunId};
use forge_core::interaction::{
    Decided, Interaction, InteractionStatus, Resolve, audit_record, decide,
};
use forge_core::ports::interaction::{
    InteractionFilter, InteractionStore, RESUME_MAX_ATTEMPTS, Resolved,
};
use forge_core::ports::queue::JobState;
use forge_core::run::RunStatus;
use forge_core::scope::{Scope, SystemScope};
use forge_core::time::Timestamp;

use crate::queue::JobRow;
use crate::{MemoryStore, State};

impl State {
    /// Readies a job for `run` when it waits with nothing pending and has no live job.
    fn resume_if_ready(&mut self, run: RunId, job_id: JobId, now: Timestamp) -> bool {
        self.wake_waiting(run, job_id, now, true)
    }

    /// Readies a job for a waiting `run` that has no live job; with `unless_pending`, only when
    /// none of its interactions is pending (a cancel request wakes it regardless).
    pub(crate) fn wake_waiting(
        &mut self,
        run: RunId,
        job_id: JobId,
        now: Timestamp,
        unless_pending: bool,
    ) -> bool {
        let Some(r) = self.runs.get(&run) else {
            return false;
        };
        let waiting = matches!(r.status, RunStatus::Waiting(_));
        let pending = unless_pending
            && self
                .interactions
                .values()
                .any(|i| i.run_id == run && i.status == InteractionStatus::Pending);
        let live = self
            .open_jobs
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .any(|j| j.is_live_for(run));
        if !waiting || pending || live {
            return false;
        }
        let tenant = r.tenant_id.clone();
        // A resumed run's job keeps the trace its run was enqueued under.
        let trace = self
            .jobs
            .values()
            .filter(|j| j.run_id() == run)
            .find_map(|j| j.traceparent().cloned());
        self.add_job(
            job_id,
            JobRow::new(
                tenant,
                run,
                JobState::Ready,
                now,
                RESUME_MAX_ATTEMPTS,
                trace,
            ),
        );
        true
    }
}

#[async_trait]
impl InteractionStore for MemoryStore {
    async fn get_interaction(
        &self,
        scope: &Scope,
        id: InteractionId,
    ) -> Result<Interaction, Error> {
        let st = self.lock();
        st.interactions
            .get(&id)
            .filter(|i| &i.tenant_id == scope.tenant_id())
            .cloned()
            .ok_or_else(|| Error::not_found("interaction", id))
    }

    async fn list_interactions(
        &self,
        scope: &Scope,
        filter: InteractionFilter,
    ) -> Result<Vec<Interaction>, Error> {
        let st = self.lock();
        if let InteractionFilter::Run(run) = filter {
            st.run(scope, run)?;
        }
        let mine = |i: &&Interaction| &i.tenant_id == scope.tenant_id();
        let mut found: Vec<Interaction> = st
            .interactions
            .values()
            .filter(mine)
            .filter(|i| match filter {
                InteractionFilter::Pending | InteractionFilter::PendingPage { .. } => {
                    i.status == InteractionStatus::Pending
                }
                InteractionFilter::Run(run) => i.run_id == run,
            })
            .cloned()
            .collect();
        found.sort_by_key(|i| (i.created_at, i.id));
        if let InteractionFilter::PendingPage { after, limit } = filter {
            if let Some(after) = after {
                let cursor = st
                    .interactions
                    .get(&after)
                    .filter(mine)
                    .map(|i| (i.created_at, i.id))
                    .ok_or_else(|| Error::not_found("interaction", after))?;
                found.retain(|i| (i.created_at, i.id) > cursor);
            }
            found.truncate(limit);
        }
        Ok(found)
    }

    async fn resolve_interaction(&self, scope: &Scope, req: Resolve) -> Result<Resolved, Error> {
        let now = self.clock.now();
        let job_id = JobId::generate(self.ids.as_ref());
        let mut st = self.lock();
        let current = st
            .interactions
            .get(&req.id)
            .filter(|i| &i.tenant_id == scope.tenant_id())
            .cloned()
            .ok_or_else(|| Error::not_found("interaction", req.id))?;
        match decide(&current, &req, now)? {
            Decided::Replay => Ok(Resolved {
                interaction: current,
                replayed: true,
                resumed: false,
            }),
            Decided::Expire(expired) => {
                st.audit.push(audit_record(&expired, now));
                st.interactions.insert(expired.id, expired.clone());
                st.resume_if_ready(expired.run_id, job_id, now);
                Err(Error::Expired {
                    id: expired.id.to_string(),
                    at: expired.expires_at,
                })
            }
            Decided::Apply(resolved) => {
                st.audit.push(audit_record(&resolved, now));
                st.interactions.insert(resolved.id, resolved.clone());
                let resumed = st.resume_if_ready(resolved.run_id, job_id, now);
                Ok(Resolved {
                    interaction: resolved,
                    replayed: false,
                    resumed,
                })
            }
        }
    }

    async fn expire_interactions(&self, _system: &SystemScope) -> Result<usize, Error> {
        let now = self.clock.now();
        let mut st = self.lock();
        let due: Vec<Interaction> = st
            .interactions
            .values()
            .filter(|i| i.status == InteractionStatus::Pending && i.expires_at <= now)
            .cloned()
            .collect();
        for mut i in due.iter().cloned() {
            i.status = InteractionStatus::Expired;
            st.audit.push(audit_record(&i, now));
            st.interactions.insert(i.id, i);
        }
        for i in &due {
            let job_id = JobId::generate(self.ids.as_ref());
            st.resume_if_ready(i.run_id, job_id, now);
        }
        Ok(due.len())
    }
}
