//! Every storage and queue port of `forge-core`, in memory.
//!
//! One mutex guards all state, so each port call (in particular `commit_step`) is atomic. Use it
//! for tests, for `forge run`, and as the executable specification the durable adapters are checked
//! against: it passes the same conformance suite (`forge-testkit`).

#![deny(missing_docs)]

mod erasure;
mod evals;
mod files;
mod interactions;
mod keys;
mod locks;
mod queue;
mod runs;
mod sources;
mod usage;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use forge_core::Error;
use forge_core::event::RunEvent;
use forge_core::id::{IdGenerator, JobId, RunId, ThreadId, UuidV7Generator};
use forge_core::message::Message;
use forge_core::run::Run;
use forge_core::scope::Scope;
use forge_core::thread::Thread;
use forge_core::time::{Clock, SystemClock};
use parking_lot::{Mutex, MutexGuard};

/// The in-memory store: threads, messages, runs, event logs and the job queue.
#[derive(Debug)]
pub struct MemoryStore {
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGenerator>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    threads: HashMap<ThreadId, Thread>,
    messages: HashMap<ThreadId, Vec<Message>>,
    runs: HashMap<RunId, Run>,
    runs_by_thread: HashMap<ThreadId, Vec<RunId>>,
    events: HashMap<RunId, Vec<RunEvent>>,
    jobs: BTreeMap<JobId, queue::JobRow>,
    /// The ids of the jobs that may still be claimed or woken, in age order: every job that is
    /// not completed, dead or discarded is here (one that is may be too, until a claim's walk
    /// meets and drops it), so that claims and wake-ups walk the open jobs, not every job the
    /// store has held.
    open_jobs: std::collections::BTreeSet<JobId>,
    audit: Vec<forge_core::ports::audit::AuditRecord>,
    interactions: BTreeMap<forge_core::id::InteractionId, forge_core::interaction::Interaction>,
    /// Metered calls by id (UUIDv7, so in time order).
    calls: BTreeMap<forge_core::id::ModelCallId, forge_core::metering::ModelCall>,
    locks: HashMap<String, locks::LockRow>,
    /// Retrieval sources by tenant and id (ordered, so listings are by id).
    sources: BTreeMap<(forge_core::scope::TenantId, forge_rag::SourceId), sources::SourceRow>,
    /// File records by tenant and id.
    files: BTreeMap<(forge_core::scope::TenantId, forge_files::FileId), forge_files::FileRecord>,
    /// Scoring runs, their case results and the judge's verdicts.
    evals: evals::Evals,
    /// Claimed request keys by tenant, kind and key.
    keys: HashMap<
        (
            forge_core::scope::TenantId,
            forge_core::ports::keys::KeyKind,
            String,
        ),
        forge_core::ports::keys::KeyClaim,
    >,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new(Arc::new(SystemClock), Arc::new(UuidV7Generator))
    }
}

impl MemoryStore {
    /// A store that reads time from `clock` and mints ids from `ids`.
    pub fn new(clock: Arc<dyn Clock>, ids: Arc<dyn IdGenerator>) -> Self {
        Self {
            clock,
            ids,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-applied commit: every mutation is
        // computed first and applied with infallible assignments.
        self.state.lock()
    }
}

impl State {
    /// After `finished` ends, makes the thread's oldest queued run active and its job ready.
    fn promote_next(
        &mut self,
        thread: ThreadId,
        finished: RunId,
        now: forge_core::time::Timestamp,
    ) {
        let next = self
            .runs_by_thread
            .get(&thread)
            .into_iter()
            .flatten()
            .filter(|id| **id != finished)
            .find(|id| {
                self.runs
                    .get(id)
                    .is_some_and(|r| r.status == forge_core::run::RunStatus::Queued)
            })
            .copied();
        if let Some(t) = self.threads.get_mut(&thread)
            && t.active_run == Some(finished)
        {
            t.active_run = next;
        }
        if let Some(next) = next {
            for id in &self.open_jobs {
                if let Some(job) = self.jobs.get_mut(id) {
                    job.wake(next, now);
                }
            }
        }
    }

    /// Adds a job, open.
    fn add_job(&mut self, id: JobId, row: queue::JobRow) {
        self.jobs.insert(id, row);
        self.open_jobs.insert(id);
    }

    /// Adds a new thread with an empty history; one of the same id, of any tenant, is refused.
    fn add_thread(&mut self, thread: Thread) -> Result<(), Error> {
        if self.threads.contains_key(&thread.id) {
            return Err(Error::invalid(format!(
                "thread {} exists already",
                thread.id
            )));
        }
        self.messages.insert(thread.id, Vec::new());
        self.threads.insert(thread.id, thread);
        Ok(())
    }

    fn thread(&self, scope: &Scope, id: ThreadId) -> Result<&Thread, Error> {
        self.threads
            .get(&id)
            .filter(|t| &t.tenant_id == scope.tenant_id())
            .ok_or_else(|| Error::not_found("thread", id))
    }

    /// Takes the lease of `tenant`'s run `id` for `holder` when `next_lease` allows it, writing
    /// its new fence; returns the lease and the run under it.
    fn take_lease(
        &mut self,
        tenant: &forge_core::scope::TenantId,
        id: RunId,
        holder: &str,
        ttl: std::time::Duration,
        now: forge_core::time::Timestamp,
    ) -> Result<(forge_core::run::RunLease, Run), Error> {
        let run = self
            .runs
            .get_mut(&id)
            .filter(|r| &r.tenant_id == tenant)
            .ok_or_else(|| Error::not_found("run", id))?;
        let lease = forge_core::ports::store::next_lease(run, holder, ttl, now)?;
        run.fence = lease.token;
        run.lease = Some(lease.clone());
        Ok((lease, run.clone()))
    }

    /// What a run begins with: `tenant`'s thread and the first page of its history after its
    /// summary (from the start without one), at most `limit` messages.
    fn thread_start(
        &self,
        tenant: &forge_core::scope::TenantId,
        id: ThreadId,
        limit: usize,
    ) -> Result<(Thread, Vec<Message>), Error> {
        let thread = self
            .threads
            .get(&id)
            .filter(|t| &t.tenant_id == tenant)
            .ok_or_else(|| Error::not_found("thread", id))?;
        let all = self
            .messages
            .get(&id)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let window = forge_core::ports::store::MessageWindow::after(
            thread.summary.as_ref().map(|s| s.through),
            limit,
        );
        let page = window.apply(id, all)?.to_vec();
        Ok((thread.clone(), page))
    }

    fn run(&self, scope: &Scope, id: RunId) -> Result<&Run, Error> {
        self.runs
            .get(&id)
            .filter(|r| &r.tenant_id == scope.tenant_id())
            .ok_or_else(|| Error::not_found("run", id))
    }
}
