//! The streams a subscriber reads: a run's (or a thread's) committed events after its cursor, then
//! the step in flight as it happens, reconciled by a `Follower` per run.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use forge_core::id::{RunId, ThreadId};
use forge_core::ports::store::RunStore;
use forge_core::scope::Scope;
use forge_core::stream::{Follower, StreamItem, TailFit};
use futures_util::Stream;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::bus::{EventBus, Wake};
use super::cache::LogCache;
use super::tail::LiveTail;

/// Why a stream ended early.
pub type StreamError = forge_core::Error;

/// How streams read.
#[derive(Debug, Clone, Copy)]
pub struct StreamSettings {
    /// Longest wait between reads of the log without a wake-up (covers lost notifications).
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

/// What every stream reads through.
#[derive(Clone)]
pub struct StreamContext {
    /// The store.
    pub runs: Arc<dyn RunStore>,
    /// The shared recent committed events.
    pub cache: Arc<LogCache>,
    /// The live tail; without one, streams deliver committed events only.
    pub tail: Option<Arc<LiveTail>>,
    /// How to read.
    pub settings: StreamSettings,
    /// Ends the stream.
    pub shutdown: CancellationToken,
}

impl std::fmt::Debug for StreamContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamContext")
            .field("settings", &self.settings)
            .field("live", &self.tail.is_some())
            .finish_non_exhaustive()
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

/// One run followed by one subscriber.
struct Followed {
    follower: Follower,
    /// The log must be read before the tail (a commit wake-up, a poll, the start).
    log: bool,
    /// The tail was found ahead of the log at this (committed, attempt): the log was read once
    /// for it; until a commit, the follower waits rather than re-reading the store per token.
    stuck: Option<(u64, u64)>,
}

impl Followed {
    fn new(run: RunId, after: u64) -> Self {
        Self {
            follower: Follower::new(run, after),
            log: true,
            stuck: None,
        }
    }

    /// Reads what is new for this run into `out`: the log when due, then the live tail.
    async fn read(
        &mut self,
        cx: &StreamContext,
        scope: &Scope,
        since: Instant,
        out: &mut Vec<StreamItem>,
    ) -> Result<(), StreamError> {
        let run = self.follower.run_id();
        let mut since = since;
        loop {
            if self.log {
                let events = cx
                    .cache
                    .read(
                        cx.runs.as_ref(),
                        scope,
                        run,
                        self.follower.committed(),
                        cx.settings.batch,
                        since,
                    )
                    .await?;
                self.follower.on_log(&events, out);
                if events.len() >= cx.settings.batch {
                    // More to read: deliver this batch first.
                    return Ok(());
                }
                self.log = false;
            }
            let Some(tail) = &cx.tail else {
                return Ok(());
            };
            let follower = &self.follower;
            let Some((attempt, events)) =
                tail.read(scope.tenant_id(), run, |a| follower.tail_after(a))
            else {
                return Ok(());
            };
            match self.follower.on_tail(attempt, &events, out) {
                TailFit::Applied => {
                    self.stuck = None;
                    return Ok(());
                }
                TailFit::Behind => {
                    let at = (self.follower.committed(), attempt);
                    if self.stuck == Some(at) {
                        return Ok(());
                    }
                    // Commits may be readable that this subscriber was not woken for yet.
                    self.stuck = Some(at);
                    self.log = true;
                    since = Instant::now();
                }
            }
        }
    }

    /// Notes a wake-up for this run.
    fn woken(&mut self, wake: Option<Wake>) {
        if !matches!(wake, Some(Wake::Live { .. })) {
            self.log = true;
            self.stuck = None;
        }
    }
}

struct RunStream {
    cx: StreamContext,
    scope: Scope,
    run: Followed,
    buf: VecDeque<StreamItem>,
    /// When the caller was last woken: log reads must be at least this fresh.
    since: Instant,
    rx: broadcast::Receiver<Wake>,
    ended: bool,
}

/// The run's committed events after `after_seq`, then the step in flight as it happens
/// (provisional events, confirmed or discarded by the commits), in order, without gaps or
/// duplicates; ends after the run's committed terminal event (or on shutdown). Without a live
/// tail in `cx`, committed events only. The caller has checked the run is visible to `scope`.
/// Subscribes to `bus` before the first read, so nothing falls between the two.
pub fn run_events(
    cx: StreamContext,
    bus: &EventBus,
    scope: Scope,
    run: RunId,
    after_seq: u64,
) -> impl Stream<Item = Result<StreamItem, StreamError>> + Send + 'static {
    let state = RunStream {
        rx: bus.subscribe(),
        since: Instant::now(),
        cx,
        scope,
        run: Followed::new(run, after_seq),
        buf: VecDeque::new(),
        ended: false,
    };
    futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.buf.pop_front() {
                return Some((Ok(item), st));
            }
            if st.ended || st.run.follower.ended() || st.cx.shutdown.is_cancelled() {
                return None;
            }
            let mut out = Vec::new();
            let read = st.run.read(&st.cx, &st.scope, st.since, &mut out).await;
            st.buf.extend(out);
            if let Err(e) = read {
                st.buf.clear();
                st.ended = true;
                return Some((Err(e), st));
            }
            if !st.buf.is_empty() || st.run.log {
                continue;
            }
            let run = st.run.follower.run_id();
            let woken = wait(
                &mut st.rx,
                |w| w.concerns_run(run),
                st.cx.settings.poll,
                &st.cx.shutdown,
            )
            .await?;
            st.run.woken(woken);
            st.since = Instant::now();
        }
    })
}

struct ThreadStream {
    cx: StreamContext,
    scope: Scope,
    thread: ThreadId,
    /// Runs of the thread in creation order.
    runs: Vec<Followed>,
    /// Whether the run list must be read again (at start, after a poll or a lag, or a wake-up
    /// for a run not followed yet).
    relist: bool,
    /// Runs to read on the next pass.
    dirty: Vec<RunId>,
    buf: VecDeque<StreamItem>,
    since: Instant,
    rx: broadcast::Receiver<Wake>,
}

/// Every run's items on a thread, as [`run_events`] gives them; never ends on its own (a thread
/// takes new runs). Each run's items arrive in order without gaps or duplicates; runs that overlap
/// (a queued run's `run.queued` while another still runs) interleave. `after` holds the last
/// committed sequence the client holds of each run; runs it does not name are delivered from their
/// first event.
pub fn thread_events(
    cx: StreamContext,
    bus: &EventBus,
    scope: Scope,
    thread: ThreadId,
    after: Vec<(RunId, u64)>,
) -> impl Stream<Item = Result<StreamItem, StreamError>> + Send + 'static {
    let state = ThreadStream {
        rx: bus.subscribe(),
        since: Instant::now(),
        cx,
        scope,
        thread,
        runs: after
            .into_iter()
            .map(|(r, s)| Followed::new(r, s))
            .collect(),
        relist: true,
        dirty: Vec::new(),
        buf: VecDeque::new(),
    };
    futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.buf.pop_front() {
                return Some((Ok(item), st));
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
                    let f = match st.runs.iter().position(|f| f.follower.run_id() == run.id) {
                        Some(at) => &mut st.runs[at],
                        None => {
                            st.runs.push(Followed::new(run.id, 0));
                            let at = st.runs.len() - 1;
                            &mut st.runs[at]
                        }
                    };
                    if f.follower.ended() {
                        continue;
                    }
                    // A log read only where the run's log passed the cursor; the tail regardless.
                    f.log = run.last_seq > f.follower.committed();
                    if !to_read.contains(&run.id) {
                        to_read.push(run.id);
                    }
                }
                st.relist = false;
            }
            for run in to_read {
                let Some(f) = st.runs.iter_mut().find(|f| f.follower.run_id() == run) else {
                    continue;
                };
                if f.follower.ended() {
                    continue;
                }
                let mut out = Vec::new();
                let read = f.read(&st.cx, &st.scope, st.since, &mut out).await;
                st.buf.extend(out);
                if let Err(e) = read {
                    return Some((Err(e), st));
                }
                if f.log {
                    // More of its log to read on the next pass.
                    st.dirty.push(run);
                }
            }
            if !st.buf.is_empty() || !st.dirty.is_empty() {
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
                Some(w @ (Wake::Run { run_id, .. } | Wake::Live { run_id, .. })) => {
                    match st.runs.iter_mut().find(|f| f.follower.run_id() == run_id) {
                        Some(f) => {
                            f.woken(Some(w));
                            st.dirty.push(run_id);
                        }
                        None => st.relist = true,
                    }
                }
                _ => st.relist = true,
            }
        }
    })
}
