//! The recent committed events of the runs this process's subscribers follow, shared by them.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use forge_core::event::RunEvent;
use forge_core::id::RunId;
use forge_core::ports::store::RunStore;
use forge_core::scope::{Scope, TenantId};

use super::stream::StreamError;

/// Events kept per run in [`LogCache`].
const TAIL_EVENTS: usize = 4096;
/// Runs kept in [`LogCache`]; the least recently used is dropped beyond it.
const TAIL_RUNS: usize = 1024;
/// Bytes of events a [`LogCache`] holds by default, across runs.
pub const CACHE_BYTES: usize = 64 * 1024 * 1024;

#[derive(Default)]
struct Tail {
    /// The most recent committed events of the run, contiguous, with their encoded sizes.
    events: VecDeque<(RunEvent, usize)>,
    /// The sum of those sizes.
    bytes: usize,
    /// When the store was last asked for newer events (the answer reflects every commit before).
    checked: Option<Instant>,
    used: Option<Instant>,
}

impl Tail {
    fn last(&self) -> u64 {
        self.events.back().map_or(0, |(e, _)| e.seq)
    }

    fn pop_front(&mut self) -> usize {
        let size = self.events.pop_front().map_or(0, |(_, size)| size);
        self.bytes -= size;
        size
    }
}

/// An event's size as JSON, the unit of the cache's budget.
fn size_of(event: &RunEvent) -> usize {
    serde_json::to_vec(event).map_or(0, |v| v.len())
}

/// The recent committed events of the runs this server's subscribers follow, shared by them:
/// however many subscribers a run has, one of them reads the store per wake-up and the others are
/// served what it read. Entries are keyed by tenant and run, and only streams that have checked
/// the caller may read the run consult them. Reads wait on a per-run lock, so a wake-up makes one
/// store query, not one per subscriber. The events held, across runs, stay within a byte budget
/// (`CACHE_BYTES` by default; no run holds more than an eighth of it): past it the least
/// recently used runs are dropped, and a reader further behind than the cache reads the store.
pub struct LogCache {
    runs: parking_lot::Mutex<HashMap<(TenantId, RunId), SharedTail>>,
    /// Bytes of events held, across runs.
    bytes: std::sync::atomic::AtomicUsize,
    budget: usize,
}

impl Default for LogCache {
    fn default() -> Self {
        Self::with_budget(CACHE_BYTES)
    }
}

type SharedTail = Arc<tokio::sync::Mutex<Tail>>;

impl std::fmt::Debug for LogCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogCache").finish_non_exhaustive()
    }
}

impl LogCache {
    /// A cache holding at most `bytes` of events (as JSON) across runs.
    pub fn with_budget(bytes: usize) -> Self {
        Self {
            runs: parking_lot::Mutex::default(),
            bytes: std::sync::atomic::AtomicUsize::new(0),
            budget: bytes,
        }
    }

    /// Bytes of events held now.
    pub fn bytes(&self) -> usize {
        self.bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Drops the least recently used runs nobody is reading until the cache is within budget.
    fn shrink(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let mut runs = self.runs.lock();
        while self.bytes.load(Relaxed) > self.budget {
            // Only a tail no reader holds (the map's is the only reference; readers take theirs
            // under the map's lock), so no bytes are added to a tail after it is dropped.
            let victim = runs
                .iter()
                .filter(|(_, t)| Arc::strong_count(t) == 1)
                .filter_map(|(k, t)| {
                    t.try_lock()
                        .ok()
                        .filter(|t| t.bytes > 0)
                        .map(|t| (k.clone(), t.used))
                })
                .min_by_key(|(_, used)| *used)
                .map(|(k, _)| k);
            let Some(k) = victim else { break };
            if let Some(t) = runs.remove(&k)
                && let Ok(t) = t.try_lock()
            {
                self.bytes.fetch_sub(t.bytes, Relaxed);
            }
        }
    }

    /// Drops what is held of every run of `tenant` (after a deletion rewrote quotes in their
    /// logs), as [`LogCache::forget`] does.
    pub fn forget_tenant(&self, tenant: &TenantId) {
        let runs: Vec<RunId> = {
            let held = self.runs.lock();
            held.keys()
                .filter(|(t, _)| t == tenant)
                .map(|(_, run)| *run)
                .collect()
        };
        self.forget(tenant, &runs);
    }

    /// Drops what is held of `runs` (of `tenant`), after they were erased. A tail a reader
    /// holds at this moment stays until it is dropped for the budget; its reader finds the run
    /// gone in the store.
    pub fn forget(&self, tenant: &TenantId, runs: &[RunId]) {
        let mut held = self.runs.lock();
        for run in runs {
            let key = (tenant.clone(), *run);
            let idle = held
                .get(&key)
                .is_some_and(|t| Arc::strong_count(t) == 1 && t.try_lock().is_ok());
            if idle
                && let Some(t) = held.remove(&key)
                && let Ok(t) = t.try_lock()
            {
                self.bytes
                    .fetch_sub(t.bytes, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    fn tail(&self, tenant: &TenantId, run: RunId) -> SharedTail {
        let mut runs = self.runs.lock();
        if runs.len() >= TAIL_RUNS && !runs.contains_key(&(tenant.clone(), run)) {
            // Drop the least recently used entry that nobody is reading right now.
            let victim = runs
                .iter()
                .filter(|(_, t)| Arc::strong_count(t) == 1)
                .filter_map(|(k, t)| t.try_lock().ok().map(|t| (k.clone(), t.used)))
                .min_by_key(|(_, used)| *used)
                .map(|(k, _)| k);
            if let Some(t) = victim.and_then(|k| runs.remove(&k))
                && let Ok(t) = t.try_lock()
            {
                self.bytes
                    .fetch_sub(t.bytes, std::sync::atomic::Ordering::Relaxed);
            }
        }
        runs.entry((tenant.clone(), run)).or_default().clone()
    }

    /// Committed events of `run` after `after`, at most `batch`, at least as fresh as `since`
    /// (every commit that happened before `since` is reflected).
    pub async fn read(
        &self,
        runs: &dyn RunStore,
        scope: &Scope,
        run: RunId,
        after: u64,
        batch: usize,
        since: Instant,
    ) -> Result<Vec<RunEvent>, StreamError> {
        let tail = self.tail(scope.tenant_id(), run);
        let mut t = tail.lock().await;
        t.used = Some(Instant::now());
        let first = t.events.front().map_or(u64::MAX, |(e, _)| e.seq);
        let last = t.last();
        if after < last && after + 1 >= first {
            return Ok(t
                .events
                .iter()
                .map(|(e, _)| e)
                .filter(|e| e.seq > after)
                .take(batch)
                .cloned()
                .collect());
        }
        if after < last {
            // Further behind than the cache reaches: a replay, read straight from the store.
            drop(t);
            return runs.read_events(scope, run, after, batch).await;
        }
        if after == last && t.checked.is_some_and(|c| c >= since) {
            // Someone asked the store after this caller's wake-up: nothing newer exists.
            return Ok(Vec::new());
        }
        let asked = Instant::now();
        let events = runs.read_events(scope, run, after, batch).await?;
        use std::sync::atomic::Ordering::Relaxed;
        if after != last {
            // The client is ahead of the cache (a resume): the cache restarts at its position.
            self.bytes.fetch_sub(t.bytes, Relaxed);
            t.events.clear();
            t.bytes = 0;
        }
        let mut added = 0;
        for e in &events {
            let size = size_of(e);
            added += size;
            t.events.push_back((e.clone(), size));
        }
        t.bytes += added;
        let mut dropped = 0;
        while t.events.len() > TAIL_EVENTS || (t.bytes > self.budget / 8 && !t.events.is_empty()) {
            dropped += t.pop_front();
        }
        self.bytes.fetch_add(added, Relaxed);
        self.bytes.fetch_sub(dropped, Relaxed);
        t.checked = Some(asked);
        drop(t);
        if self.bytes.load(Relaxed) > self.budget {
            self.shrink();
        }
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;
    use forge_core::Error;
    use forge_core::agent::{AgentDefinition, AgentRef, RunLimits};
    use forge_core::part::Part;
    use forge_core::ports::store::{Committed, NewRun, NewThread, StepCommit, ThreadStore};
    use forge_core::run::{Run, RunLease};
    use forge_store_memory::MemoryStore;

    use std::time::Duration;

    use forge_core::id::ThreadId;
    use tokio_util::sync::CancellationToken;

    use super::*;

    /// Counts the store reads a cache makes.
    struct Counting {
        inner: Arc<MemoryStore>,
        reads: AtomicUsize,
    }

    #[async_trait]
    impl RunStore for Counting {
        async fn create_run(&self, scope: &Scope, new: NewRun) -> Result<Run, Error> {
            self.inner.create_run(scope, new).await
        }
        async fn request_cancel(&self, scope: &Scope, id: RunId) -> Result<bool, Error> {
            self.inner.request_cancel(scope, id).await
        }
        async fn cancels_requested(
            &self,
            scope: &Scope,
            ids: &[RunId],
        ) -> Result<Vec<RunId>, Error> {
            self.inner.cancels_requested(scope, ids).await
        }
        async fn get_run(&self, scope: &Scope, id: RunId) -> Result<Run, Error> {
            self.inner.get_run(scope, id).await
        }
        async fn list_runs(&self, scope: &Scope, thread_id: ThreadId) -> Result<Vec<Run>, Error> {
            self.inner.list_runs(scope, thread_id).await
        }
        async fn query_runs(
            &self,
            scope: &Scope,
            query: &forge_core::ports::store::RunQuery,
        ) -> Result<Vec<Run>, Error> {
            self.inner.query_runs(scope, query).await
        }
        async fn acquire_lease(
            &self,
            scope: &Scope,
            id: RunId,
            holder: &str,
            ttl: Duration,
        ) -> Result<RunLease, Error> {
            self.inner.acquire_lease(scope, id, holder, ttl).await
        }
        async fn renew_lease(
            &self,
            scope: &Scope,
            lease: &RunLease,
            ttl: Duration,
        ) -> Result<RunLease, Error> {
            self.inner.renew_lease(scope, lease, ttl).await
        }
        async fn release_lease(&self, scope: &Scope, lease: &RunLease) -> Result<(), Error> {
            self.inner.release_lease(scope, lease).await
        }
        async fn commit_step(&self, scope: &Scope, commit: StepCommit) -> Result<Committed, Error> {
            self.inner.commit_step(scope, commit).await
        }
        async fn read_events(
            &self,
            scope: &Scope,
            id: RunId,
            after_seq: u64,
            limit: usize,
        ) -> Result<Vec<RunEvent>, Error> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            self.inner.read_events(scope, id, after_seq, limit).await
        }
    }

    /// The cache's events stay within its byte budget however many runs are read (issue 17,
    /// item 8), and readers still get every event (from the store when the cache let it go).
    #[tokio::test]
    async fn the_cache_stays_within_its_byte_budget() {
        let store = Arc::new(MemoryStore::default());
        let scope = Scope::parse("acme", "alice", &[]).unwrap();
        let thread = store
            .create_thread(&scope, NewThread::default())
            .await
            .unwrap();
        let agent = AgentRef {
            name: "a".into(),
            version: "1".into(),
        };
        let mut runs = vec![];
        for i in 0..20 {
            // Each run's input is large; its log is one big event.
            let run = store
                .create_run(
                    &scope,
                    NewRun::new(
                        thread.id,
                        agent.clone(),
                        vec![Part::text("x".repeat(4_000))],
                    ),
                )
                .await
                .unwrap();
            let lease = store
                .acquire_lease(&scope, run.id, "w", Duration::from_secs(60))
                .await
                .unwrap();
            let event = RunEvent {
                run_id: run.id,
                seq: 1,
                at: forge_core::time::Timestamp::from_unix_millis(i).unwrap(),
                kind: forge_core::event::RunEventKind::RunFailed {
                    failure: forge_core::run::RunFailure {
                        code: forge_core::run::FailureCode::Internal,
                        message: "y".repeat(1_000),
                    },
                },
            };
            store
                .commit_step(
                    &scope,
                    StepCommit {
                        run_id: run.id,
                        expected_version: 0,
                        lease,
                        events: vec![event],
                        messages: vec![],
                        checkpoint: Default::default(),
                        status: forge_core::run::RunStatus::Failed,
                        failure: None,
                        interactions: vec![],
                        audit: vec![],
                        settlements: vec![],
                        state: None,
                        summary: None,
                        job: None,
                    },
                )
                .await
                .unwrap();
            runs.push(run.id);
        }
        let budget = 16 * 1024;
        let cache = LogCache::with_budget(budget);
        for run in &runs {
            let got = cache
                .read(store.as_ref(), &scope, *run, 0, 10, Instant::now())
                .await
                .unwrap();
            assert_eq!(got.len(), 1);
            assert!(cache.bytes() <= budget, "{} > {budget}", cache.bytes());
        }
        assert!(cache.bytes() > 0, "it still caches what fits");
        // An evicted run reads again, from the store.
        let again = cache
            .read(store.as_ref(), &scope, runs[0], 0, 10, Instant::now())
            .await
            .unwrap();
        assert_eq!(again.len(), 1);
    }

    #[tokio::test]
    async fn many_readers_of_one_run_make_one_store_read_per_wake_up() {
        let store = Arc::new(MemoryStore::default());
        let script = forge_providers::Script::parse(
            "[[conversation]]\n[[conversation.turn]]\ntext = [\"hi\"]\n",
            "t",
        )
        .unwrap();
        let def = AgentDefinition {
            agent: AgentRef {
                name: "a".into(),
                version: "1".into(),
            },
            instructions: "i".into(),
            model: "scripted:t".into(),
            tools: vec![],
            skills: vec![],
            output_schema: None,
            limits: RunLimits::default(),
            approvals: Default::default(),
            compaction: None,
        };
        let engine = forge_engine::Engine::builder()
            .store(store.clone())
            .model(Arc::new(
                forge_providers::ScriptedProvider::empty().with_script("t", script),
            ))
            .agent(def.clone())
            .build()
            .unwrap();
        let scope = Scope::parse("acme", "alice", &[]).unwrap();
        let thread = store
            .create_thread(&scope, NewThread::default())
            .await
            .unwrap();
        let run = engine
            .start_run(&scope, thread.id, &def.agent, vec![Part::text("go")])
            .await
            .unwrap();
        let done = engine
            .execute(
                &scope,
                run.id,
                &CancellationToken::new(),
                &forge_engine::NoopObserver,
            )
            .await
            .unwrap();
        let counting = Counting {
            inner: store,
            reads: AtomicUsize::new(0),
        };
        let cache = LogCache::default();
        let woken = Instant::now();
        let reads = (0..50).map(|_| cache.read(&counting, &scope, run.id, 0, 256, woken));
        for got in futures_util::future::join_all(reads).await {
            let seqs: Vec<u64> = got.unwrap().iter().map(|e| e.seq).collect();
            assert_eq!(seqs, (1..=done.last_seq).collect::<Vec<_>>());
        }
        assert_eq!(
            counting.reads.load(Ordering::SeqCst),
            1,
            "one read for 50 readers"
        );

        // Woken again: one reader asks the store, the rest know nothing newer exists.
        let woken = Instant::now();
        let reads =
            (0..50).map(|_| cache.read(&counting, &scope, run.id, done.last_seq, 256, woken));
        for got in futures_util::future::join_all(reads).await {
            assert!(got.unwrap().is_empty());
        }
        assert_eq!(counting.reads.load(Ordering::SeqCst), 2);

        // Another tenant shares nothing with it.
        let other = Scope::parse("globex", "mallory", &[]).unwrap();
        let got = cache
            .read(&counting, &other, run.id, 0, 256, Instant::now())
            .await;
        assert!(got.map_or(true, |e| e.is_empty()));
    }
}
