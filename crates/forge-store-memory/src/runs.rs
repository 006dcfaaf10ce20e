//! Threads, runs, leases, the event log and `commit_step`.

use std::time::Duration;

use async_trait::async_trait;
use forge_core::Error;
use forge_core::event::RunEvent;
use forge_core::id::JobId;
use forge_core::id::{RunId, ThreadId};
use forge_core::message::Message;
use forge_core::ports::queue::JobState;
use forge_core::ports::store::{
    Admission, Committed, LeasedRun, MessageWindow, NewRun, NewThread, RunQuery, RunStore,
    StartStrategy, StepCommit, ThreadStore, admit, check_commit, check_summary, renewed_lease,
};
use forge_core::run::{Run, RunLease};
use forge_core::scope::Scope;
use forge_core::thread::{SessionState, Thread, ThreadChange, ThreadWindow};

use crate::MemoryStore;
use crate::queue::JobRow;

#[async_trait]
impl ThreadStore for MemoryStore {
    async fn create_thread(&self, scope: &Scope, new: NewThread) -> Result<Thread, Error> {
        let id = new.id_or_new(self.ids.as_ref());
        let thread = new.thread(id, scope, self.clock.now());
        self.lock().add_thread(thread.clone())?;
        Ok(thread)
    }

    async fn get_thread(&self, scope: &Scope, id: ThreadId) -> Result<Thread, Error> {
        self.lock().thread(scope, id).cloned()
    }

    async fn list_messages(&self, scope: &Scope, id: ThreadId) -> Result<Vec<Message>, Error> {
        let st = self.lock();
        st.thread(scope, id)?;
        Ok(st.messages.get(&id).cloned().unwrap_or_default())
    }

    async fn page_messages(
        &self,
        scope: &Scope,
        id: ThreadId,
        window: &MessageWindow,
    ) -> Result<Vec<Message>, Error> {
        let st = self.lock();
        st.thread(scope, id)?;
        let all = st.messages.get(&id).map(Vec::as_slice).unwrap_or_default();
        Ok(window.apply(id, all)?.to_vec())
    }

    async fn thread_with_history(
        &self,
        scope: &Scope,
        id: ThreadId,
        limit: usize,
    ) -> Result<(Thread, Vec<Message>), Error> {
        self.lock().thread_start(scope.tenant_id(), id, limit)
    }

    async fn page_threads(
        &self,
        scope: &Scope,
        window: &ThreadWindow,
    ) -> Result<Vec<Thread>, Error> {
        let st = self.lock();
        let mine: Vec<Thread> = st
            .threads
            .values()
            .filter(|t| &t.tenant_id == scope.tenant_id())
            .cloned()
            .collect();
        window.apply(mine)
    }

    async fn update_thread(
        &self,
        scope: &Scope,
        id: ThreadId,
        change: &ThreadChange,
    ) -> Result<Thread, Error> {
        let now = self.clock.now();
        let mut st = self.lock();
        let changed = change.apply(st.thread(scope, id)?.clone(), now);
        st.threads.insert(id, changed.clone());
        Ok(changed)
    }

    async fn put_session_state(
        &self,
        scope: &Scope,
        id: ThreadId,
        expected_version: u64,
        values: serde_json::Map<String, serde_json::Value>,
    ) -> Result<SessionState, Error> {
        let mut st = self.lock();
        let actual = st.thread(scope, id)?.state.version;
        forge_core::thread::check_state_version(id, expected_version, actual)?;
        let state = SessionState {
            version: actual + 1,
            values,
        };
        if let Some(t) = st.threads.get_mut(&id) {
            t.state = state.clone();
        }
        Ok(state)
    }
}

#[async_trait]
impl RunStore for MemoryStore {
    async fn create_run(&self, scope: &Scope, new: NewRun) -> Result<Run, Error> {
        forge_core::ports::rules::check_new_run(&new)?;
        let now = self.clock.now();
        let mut st = self.lock();
        // A thread created for the run is admitted to as it will be, and added (or refused, as
        // one that exists) before anything else is written.
        let created = new.thread_to_create(scope, now);
        let thread = match &created {
            Some(t) => t,
            None => st.thread(scope, new.thread_id)?,
        };
        let admission = admit(thread.id, thread.active_run, new.strategy)?;
        let mut run = new.queued(new.id_or_new(self.ids.as_ref()), scope, now);
        if st.runs.contains_key(&run.id) {
            return Err(Error::invalid(format!("a run {} exists already", run.id)));
        }
        let events: Vec<RunEvent> = admission.begin(&mut run, now).into_iter().collect();
        if let Some(t) = created {
            st.add_thread(t)?;
        }
        let job_state = match admission {
            Admission::Active => {
                if let Some(t) = st.threads.get_mut(&new.thread_id) {
                    t.active_run = Some(run.id);
                }
                JobState::Ready
            }
            Admission::Queued { .. } => {
                if new.strategy == StartStrategy::Interrupt {
                    let ahead: Vec<RunId> = st
                        .runs_by_thread
                        .get(&new.thread_id)
                        .cloned()
                        .unwrap_or_default();
                    for id in ahead {
                        if let Some(r) = st.runs.get_mut(&id)
                            && !r.status.is_terminal()
                        {
                            r.cancel_requested = true;
                        }
                    }
                }
                JobState::Waiting
            }
        };
        let job_id = JobId::generate(self.ids.as_ref());
        st.add_job(
            job_id,
            JobRow::new(
                scope.tenant_id().clone(),
                run.id,
                job_state,
                now,
                new.max_attempts,
                new.traceparent.clone(),
            ),
        );
        st.runs.insert(run.id, run.clone());
        st.runs_by_thread
            .entry(new.thread_id)
            .or_default()
            .push(run.id);
        st.events.insert(run.id, events);
        Ok(run)
    }

    async fn cancels_requested(&self, scope: &Scope, ids: &[RunId]) -> Result<Vec<RunId>, Error> {
        let st = self.lock();
        Ok(ids
            .iter()
            .filter(|id| {
                st.run(scope, **id)
                    .is_ok_and(|r| r.cancel_requested && !r.status.is_terminal())
            })
            .copied()
            .collect())
    }

    async fn request_cancel(&self, scope: &Scope, id: RunId) -> Result<bool, Error> {
        let job = forge_core::id::JobId::generate(self.ids.as_ref());
        let now = self.clock.now();
        let mut st = self.lock();
        st.run(scope, id)?;
        match st.runs.get_mut(&id) {
            Some(r) if !r.status.is_terminal() && !r.cancel_requested => {
                r.cancel_requested = true;
                // A waiting run holds no job: give it one, so a worker comes and cancels it.
                st.wake_waiting(id, job, now, false);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn get_run(&self, scope: &Scope, id: RunId) -> Result<Run, Error> {
        self.lock().run(scope, id).cloned()
    }

    async fn list_runs(&self, scope: &Scope, thread_id: ThreadId) -> Result<Vec<Run>, Error> {
        let st = self.lock();
        st.thread(scope, thread_id)?;
        Ok(st
            .runs_by_thread
            .get(&thread_id)
            .into_iter()
            .flatten()
            .filter_map(|id| st.runs.get(id).cloned())
            .collect())
    }

    async fn query_runs(&self, scope: &Scope, query: &RunQuery) -> Result<Vec<Run>, Error> {
        let st = self.lock();
        let mut found: Vec<Run> = st
            .runs
            .values()
            .filter(|r| &r.tenant_id == scope.tenant_id() && query.admits(r))
            .cloned()
            .collect();
        found.sort_by_key(|r| std::cmp::Reverse((r.created_at, r.id)));
        if let Some(before) = query.before {
            let cursor = st.run(scope, before)?;
            let cursor = (cursor.created_at, cursor.id);
            found.retain(|r| (r.created_at, r.id) < cursor);
        }
        found.truncate(query.limit);
        Ok(found)
    }

    async fn acquire_lease(
        &self,
        scope: &Scope,
        id: RunId,
        holder: &str,
        ttl: Duration,
    ) -> Result<RunLease, Error> {
        let now = self.clock.now();
        let (lease, _) = self
            .lock()
            .take_lease(scope.tenant_id(), id, holder, ttl, now)?;
        Ok(lease)
    }

    async fn lease_run_with_history(
        &self,
        scope: &Scope,
        id: RunId,
        holder: &str,
        ttl: Duration,
        limit: usize,
    ) -> Result<LeasedRun, Error> {
        let now = self.clock.now();
        let mut st = self.lock();
        let (lease, run) = st.take_lease(scope.tenant_id(), id, holder, ttl, now)?;
        let history = st
            .thread_start(scope.tenant_id(), run.thread_id, limit)
            .ok();
        Ok(LeasedRun {
            lease,
            run,
            history,
        })
    }

    async fn renew_lease(
        &self,
        scope: &Scope,
        lease: &RunLease,
        ttl: Duration,
    ) -> Result<RunLease, Error> {
        let now = self.clock.now();
        let mut st = self.lock();
        let renewed = renewed_lease(st.run(scope, lease.run_id)?, lease, ttl, now)?;
        if let Some(r) = st.runs.get_mut(&lease.run_id) {
            r.lease = Some(renewed.clone());
        }
        Ok(renewed)
    }

    async fn release_lease(&self, scope: &Scope, lease: &RunLease) -> Result<(), Error> {
        let mut st = self.lock();
        st.run(scope, lease.run_id)?;
        if let Some(r) = st.runs.get_mut(&lease.run_id)
            && r.lease.as_ref().is_some_and(|l| l.token == lease.token)
        {
            r.lease = None;
        }
        Ok(())
    }

    async fn commit_step(&self, scope: &Scope, commit: StepCommit) -> Result<Committed, Error> {
        let now = self.clock.now();
        let mut st = self.lock();
        let run = st.run(scope, commit.run_id)?;
        let committed = check_commit(run, &commit, now)?;
        let thread_id = run.thread_id;
        if let Some(update) = &commit.state {
            let actual = st.thread(scope, thread_id)?.state.version;
            forge_core::thread::check_state_version(thread_id, update.expected_version, actual)?;
        }
        if let Some(summary) = &commit.summary {
            check_summary(run, summary)?;
            let current = st.thread(scope, thread_id)?.summary.as_ref();
            forge_core::thread::check_summary_version(thread_id, current, summary)?;
        }
        // Settled calls are checked before anything is applied, like every other part of the
        // commit: each belongs to this run and replaces at most a reservation.
        for call in &commit.settlements {
            let replaces_settled = st
                .calls
                .get(&call.id)
                .is_some_and(|c| c.status != forge_core::metering::CallStatus::Reserved);
            if call.run_id != run.id || call.tenant_id != run.tenant_id || replaces_settled {
                return Err(forge_core::ports::store::not_an_open_call(call.id));
            }
        }
        let settled_calls = commit.settlements.clone();
        let releases = commit.releases_lease();
        // The claim the run ends or parks under is completed with the step while it is current;
        // one that is not is left as it is.
        let job_completed = commit
            .completes(scope.tenant_id())
            .is_some_and(|job| crate::queue::complete_claim(&mut st.jobs, job, now).is_ok());
        // Every check passed: apply all of it.
        if let Some(r) = st.runs.get_mut(&commit.run_id) {
            if releases {
                r.lease = None;
            }
            r.version = committed.version;
            r.last_seq = committed.last_seq;
            r.status = commit.status;
            r.checkpoint = commit.checkpoint;
            r.failure = commit.failure;
            r.updated_at = now;
        }
        if let Some(update) = commit.state
            && let Some(t) = st.threads.get_mut(&thread_id)
        {
            t.state = SessionState {
                version: update.expected_version + 1,
                values: update.values,
            };
        }
        if let Some(summary) = commit.summary
            && let Some(t) = st.threads.get_mut(&thread_id)
        {
            t.summary = Some(summary);
        }
        st.events
            .entry(commit.run_id)
            .or_default()
            .extend(commit.events);
        st.messages
            .entry(thread_id)
            .or_default()
            .extend(commit.messages);
        for i in commit.interactions {
            st.interactions.insert(i.id, i);
        }
        st.audit.extend(commit.audit);
        for settled in settled_calls {
            st.calls.insert(settled.id, settled);
        }
        if commit.status.is_terminal() {
            // A run that ends leaves nothing for a person to decide.
            for i in st.interactions.values_mut() {
                if i.run_id == commit.run_id
                    && i.status == forge_core::interaction::InteractionStatus::Pending
                {
                    i.status = forge_core::interaction::InteractionStatus::Expired;
                }
            }
            st.promote_next(thread_id, commit.run_id, now);
        }
        Ok(Committed {
            job_completed,
            ..committed
        })
    }

    async fn read_events(
        &self,
        scope: &Scope,
        id: RunId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<RunEvent>, Error> {
        let st = self.lock();
        st.run(scope, id)?;
        let log = st.events.get(&id).map(Vec::as_slice).unwrap_or_default();
        // Sequence numbers are gapless from 1, so the event after `after_seq` sits at that index.
        let start = usize::try_from(after_seq)
            .unwrap_or(usize::MAX)
            .min(log.len());
        Ok(log[start..].iter().take(limit).cloned().collect())
    }
}
