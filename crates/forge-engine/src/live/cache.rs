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

#[derive(Default)]
struct Tail {
    /// The most recent committed events of the run, contiguous.
    events: VecDeque<RunEvent>,
    /// When the store was last asked for newer events (the answer reflects every commit before).
    checked: Option<Instant>,
    used: Option<Instant>,
}

impl Tail {
    fn last(&self) -> u64 {
        self.events.back().map_or(0, |e| e.seq)
    }
}

/// The recent committed events of the runs this server's subscribers follow, shared by them:
/// however many subscribers a run has, one of them reads the store per wake-up and the others are
/// served what it read. Entries are keyed by tenant and run, and only streams that have checked
/// the caller may read the run consult them. Reads wait on a per-run lock, so a wake-up makes one
/// store query, not one per subscriber.
#[derive(Default)]
pub struct LogCache {
    runs: std::sync::Mutex<HashMap<(TenantId, RunId), SharedTail>>,
}

type SharedTail = Arc<tokio::sync::Mutex<Tail>>;

impl std::fmt::Debug for LogCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogCache").finish_non_exhaustive()
    }
}

impl LogCache {
    fn tail(&self, tenant: &TenantId, run: RunId) -> SharedTail {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        if runs.len() >= TAIL_RUNS && !runs.contains_key(&(tenant.clone(), run)) {
            // Drop the least recently used entry that nobody is reading right now.
            let victim = runs
                .iter()
                .filter_map(|(k, t)| t.try_lock().ok().map(|t| (k.clone(), t.used)))
                .min_by_key(|(_, used)| *used)
                .map(|(k, _)| k);
            if let Some(k) = victim {
                runs.remove(&k);
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
        let first = t.events.front().map_or(u64::MAX, |e| e.seq);
        let last = t.last();
        if after < last && after + 1 >= first {
            return Ok(t
                .events
                .iter()
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
        if after != last {
            // The client is ahead of the cache (a resume): the cache restarts at its position.
            t.events.clear();
        }
        t.events.extend(events.iter().cloned());
        while t.events.len() > TAIL_EVENTS {
            t.events.pop_front();
        }
        t.checked = Some(asked);
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
        };
        let engine = crate::Engine::builder()
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
                &crate::NoopObserver,
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
