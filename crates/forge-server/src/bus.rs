//! Wake-ups for subscribers, and the log-backed event streams they drive.
//!
//! A wake-up says only "this run (or thread) has new events": it carries no event. A subscriber
//! that wakes reads the run's log after the last sequence it delivered, so a wake-up that is lost,
//! late, duplicated or spurious changes nothing but latency; a poll every
//! [`StreamSettings::poll`] covers lost ones. Wake-ups come from the in-process worker's commits
//! ([`BusObserver`]), from this server's own mutations, and — across processes — from PostgreSQL
//! `LISTEN/NOTIFY` (fed in by the composition root).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use forge_core::event::{RunEvent, RunEventKind};
use forge_core::id::{RunId, ThreadId};
use forge_core::ports::store::RunStore;
use forge_core::scope::{Scope, TenantId};
use forge_engine::RunObserver;
use futures_util::Stream;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

/// Something may have new events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// This run, on this thread.
    Run {
        /// The run.
        run_id: RunId,
        /// Its thread.
        thread_id: ThreadId,
    },
    /// Anything: every subscriber re-reads (after a listener reconnects, say).
    All,
}

impl Wake {
    fn concerns_run(&self, run: RunId) -> bool {
        match self {
            Wake::Run { run_id, .. } => *run_id == run,
            Wake::All => true,
        }
    }

    fn concerns_thread(&self, thread: ThreadId) -> bool {
        match self {
            Wake::Run { thread_id, .. } => *thread_id == thread,
            Wake::All => true,
        }
    }
}

/// The in-process fan-out of wake-ups.
#[derive(Debug, Clone)]
pub struct EventBus {
    tx: broadcast::Sender<Wake>,
}

impl Default for EventBus {
    fn default() -> Self {
        Self::new(4096)
    }
}

impl EventBus {
    /// A bus buffering `capacity` wake-ups per slow subscriber (one that falls further behind
    /// just re-reads: it is woken as if by [`Wake::All`]).
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(16));
        Self { tx }
    }

    /// Wakes the subscribers it concerns.
    pub fn publish(&self, wake: Wake) {
        // No receiver is fine: nobody is subscribed.
        let _ = self.tx.send(wake);
    }

    /// A receiver of every wake-up from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Wake> {
        self.tx.subscribe()
    }
}

/// A [`RunObserver`] that wakes subscribers when a step's commit makes its events readable.
#[derive(Debug, Clone)]
pub struct BusObserver(pub EventBus);

impl RunObserver for BusObserver {
    fn on_event(&self, _event: &RunEvent) {}

    fn on_commit(&self, run_id: RunId, thread_id: ThreadId, _last_seq: u64) {
        self.0.publish(Wake::Run { run_id, thread_id });
    }
}

/// How streams read the log.
#[derive(Debug, Clone, Copy)]
pub struct StreamSettings {
    /// Longest wait between reads without a wake-up (covers lost notifications).
    pub poll: Duration,
    /// Events read per query.
    pub batch: usize,
}

impl Default for StreamSettings {
    fn default() -> Self {
        Self {
            poll: Duration::from_secs(2),
            batch: 256,
        }
    }
}

fn is_terminal(e: &RunEvent) -> bool {
    matches!(
        e.kind,
        RunEventKind::RunCompleted { .. }
            | RunEventKind::RunFailed { .. }
            | RunEventKind::RunCancelled { .. }
    )
}

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

/// Waits for a wake-up `concerns` accepts (returned), the poll interval or a lag (`Some(None)`:
/// anything may have changed), or shutdown (`None`).
async fn wait(
    rx: &mut broadcast::Receiver<Wake>,
    concerns: impl Fn(&Wake) -> bool,
    poll: Duration,
    shutdown: &CancellationToken,
) -> Option<Option<Wake>> {
    let deadline = tokio::time::sleep(poll);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = &mut deadline => return Some(None),
            got = rx.recv() => match got {
                Ok(w) if concerns(&w) => return Some(Some(w)),
                Ok(_) => {}
                // Fell behind: something may have been missed, so read.
                Err(broadcast::error::RecvError::Lagged(_)) => return Some(None),
                Err(broadcast::error::RecvError::Closed) => {
                    deadline.as_mut().await;
                    return Some(None);
                }
            },
        }
    }
}

/// Why a stream ended early.
pub type StreamError = forge_core::Error;

/// What every stream reads through.
#[derive(Clone)]
pub struct StreamContext {
    /// The store.
    pub runs: Arc<dyn RunStore>,
    /// The shared tail of recent events.
    pub cache: Arc<LogCache>,
    /// How to read.
    pub settings: StreamSettings,
    /// Ends the stream.
    pub shutdown: CancellationToken,
}

impl std::fmt::Debug for StreamContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamContext")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

struct RunStream {
    cx: StreamContext,
    scope: Scope,
    run: RunId,
    last: u64,
    buf: VecDeque<RunEvent>,
    ended: bool,
    /// When the caller was last woken: reads must be at least this fresh.
    since: Instant,
    rx: broadcast::Receiver<Wake>,
}

/// The run's events after `after_seq`, then live, in order, without gaps or duplicates; ends after
/// the run's terminal event (or on shutdown). The caller has checked the run is visible to
/// `scope`. Subscribes to `bus` before the first read, so nothing falls between the two.
pub fn run_events(
    cx: StreamContext,
    bus: &EventBus,
    scope: Scope,
    run: RunId,
    after_seq: u64,
) -> impl Stream<Item = Result<RunEvent, StreamError>> + Send + 'static {
    let state = RunStream {
        rx: bus.subscribe(),
        since: Instant::now(),
        cx,
        scope,
        run,
        last: after_seq,
        buf: VecDeque::new(),
        ended: false,
    };
    futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(e) = st.buf.pop_front() {
                st.last = e.seq;
                st.ended |= is_terminal(&e);
                return Some((Ok(e), st));
            }
            if st.ended || st.cx.shutdown.is_cancelled() {
                return None;
            }
            let read = st
                .cx
                .cache
                .read(
                    st.cx.runs.as_ref(),
                    &st.scope,
                    st.run,
                    st.last,
                    st.cx.settings.batch,
                    st.since,
                )
                .await;
            match read {
                Ok(events) if !events.is_empty() => {
                    st.buf
                        .extend(events.into_iter().filter(|e| e.seq > st.last));
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    st.ended = true;
                    return Some((Err(e), st));
                }
            }
            let run = st.run;
            wait(
                &mut st.rx,
                |w| w.concerns_run(run),
                st.cx.settings.poll,
                &st.cx.shutdown,
            )
            .await?;
            st.since = Instant::now();
        }
    })
}

struct ThreadStream {
    cx: StreamContext,
    scope: Scope,
    thread: ThreadId,
    /// Runs of the thread in creation order, with the last sequence delivered of each.
    cursor: Vec<(RunId, u64)>,
    /// Whether the run list must be read again (at start, after a poll or a lag, or a wake-up
    /// for a run not in `cursor`).
    relist: bool,
    /// Runs to read on the next pass (all when relisting).
    dirty: Vec<RunId>,
    buf: VecDeque<RunEvent>,
    since: Instant,
    rx: broadcast::Receiver<Wake>,
}

/// Every run's events on a thread, then live; never ends on its own (a thread takes new runs).
/// Each run's events arrive in order without gaps or duplicates; runs that overlap (a queued run's
/// `run.queued` while another still runs) interleave. `after` holds the last sequence the client
/// saw of each run; runs it does not name are delivered from their first event.
pub fn thread_events(
    cx: StreamContext,
    bus: &EventBus,
    scope: Scope,
    thread: ThreadId,
    after: Vec<(RunId, u64)>,
) -> impl Stream<Item = Result<RunEvent, StreamError>> + Send + 'static {
    let state = ThreadStream {
        rx: bus.subscribe(),
        since: Instant::now(),
        cx,
        scope,
        thread,
        cursor: after,
        relist: true,
        dirty: Vec::new(),
        buf: VecDeque::new(),
    };
    futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(e) = st.buf.pop_front() {
                if let Some(c) = st.cursor.iter_mut().find(|(r, _)| *r == e.run_id) {
                    c.1 = e.seq;
                }
                return Some((Ok(e), st));
            }
            if st.cx.shutdown.is_cancelled() {
                return None;
            }
            let mut to_read = std::mem::take(&mut st.dirty);
            if st.relist {
                let listed = match st.cx.runs.list_runs(&st.scope, st.thread).await {
                    Ok(l) => l,
                    Err(e) => return Some((Err(e), st)),
                };
                for run in &listed {
                    let last = match st.cursor.iter().find(|(r, _)| *r == run.id) {
                        Some((_, s)) => *s,
                        None => {
                            st.cursor.push((run.id, 0));
                            0
                        }
                    };
                    if run.last_seq > last && !to_read.contains(&run.id) {
                        to_read.push(run.id);
                    }
                }
                st.relist = false;
            }
            for run in to_read {
                let last = st
                    .cursor
                    .iter()
                    .find(|(r, _)| *r == run)
                    .map_or(0, |(_, s)| *s);
                let read = st
                    .cx
                    .cache
                    .read(
                        st.cx.runs.as_ref(),
                        &st.scope,
                        run,
                        last,
                        st.cx.settings.batch,
                        st.since,
                    )
                    .await;
                match read {
                    Ok(events) => st.buf.extend(events.into_iter().filter(|e| e.seq > last)),
                    Err(e) => return Some((Err(e), st)),
                }
                if st.buf.len() >= st.cx.settings.batch {
                    // Read the rest on the next pass.
                    st.dirty.push(run);
                }
            }
            if !st.buf.is_empty() {
                continue;
            }
            let thread = st.thread;
            let woken = wait(
                &mut st.rx,
                |w| w.concerns_thread(thread),
                st.cx.settings.poll,
                &st.cx.shutdown,
            )
            .await?;
            st.since = Instant::now();
            match woken {
                Some(Wake::Run { run_id, .. }) if st.cursor.iter().any(|(r, _)| *r == run_id) => {
                    st.dirty.push(run_id);
                }
                _ => st.relist = true,
            }
        }
    })
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
