//! Wake-ups for subscribers, and the log-backed event streams they drive.
//!
//! A wake-up says only "this run (or thread) has new events": it carries no event. A subscriber
//! that wakes reads the run's log after the last sequence it delivered, so a wake-up that is lost,
//! late, duplicated or spurious changes nothing but latency; a poll every
//! [`StreamSettings::poll`] covers lost ones. Wake-ups come from the in-process worker's commits
//! ([`BusObserver`]), from this server's own mutations, and — across processes — from PostgreSQL
//! `LISTEN/NOTIFY` (fed in by the composition root).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use forge_core::event::{RunEvent, RunEventKind};
use forge_core::id::{RunId, ThreadId};
use forge_core::ports::store::RunStore;
use forge_core::scope::Scope;
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

/// Waits for a wake-up `concerns` accepts, the poll interval, or shutdown (`false`).
async fn wait(
    rx: &mut broadcast::Receiver<Wake>,
    concerns: impl Fn(&Wake) -> bool,
    poll: Duration,
    shutdown: &CancellationToken,
) -> bool {
    let deadline = tokio::time::sleep(poll);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = &mut deadline => return true,
            got = rx.recv() => match got {
                Ok(w) if concerns(&w) => return true,
                Ok(_) => {}
                // Fell behind: something may have been missed, so read.
                Err(broadcast::error::RecvError::Lagged(_)) => return true,
                Err(broadcast::error::RecvError::Closed) => {
                    deadline.as_mut().await;
                    return true;
                }
            },
        }
    }
}

/// Why a stream ended early.
pub type StreamError = forge_core::Error;

struct RunStream {
    runs: Arc<dyn RunStore>,
    scope: Scope,
    run: RunId,
    last: u64,
    buf: VecDeque<RunEvent>,
    ended: bool,
    rx: broadcast::Receiver<Wake>,
    settings: StreamSettings,
    shutdown: CancellationToken,
}

/// The run's events after `after_seq`, then live, in order, without gaps or duplicates; ends after
/// the run's terminal event (or on shutdown). The caller has checked the run is visible to
/// `scope`. Subscribes to `bus` before the first read, so nothing falls between the two.
pub fn run_events(
    runs: Arc<dyn RunStore>,
    bus: &EventBus,
    scope: Scope,
    run: RunId,
    after_seq: u64,
    settings: StreamSettings,
    shutdown: CancellationToken,
) -> impl Stream<Item = Result<RunEvent, StreamError>> + Send + 'static {
    let state = RunStream {
        runs,
        scope,
        run,
        last: after_seq,
        buf: VecDeque::new(),
        ended: false,
        rx: bus.subscribe(),
        settings,
        shutdown,
    };
    futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(e) = st.buf.pop_front() {
                st.last = e.seq;
                st.ended |= is_terminal(&e);
                return Some((Ok(e), st));
            }
            if st.ended || st.shutdown.is_cancelled() {
                return None;
            }
            match st
                .runs
                .read_events(&st.scope, st.run, st.last, st.settings.batch)
                .await
            {
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
            if !wait(
                &mut st.rx,
                |w| w.concerns_run(run),
                st.settings.poll,
                &st.shutdown,
            )
            .await
            {
                return None;
            }
        }
    })
}

struct ThreadStream {
    runs: Arc<dyn RunStore>,
    scope: Scope,
    thread: ThreadId,
    /// Runs of the thread in creation order, with the last sequence delivered of each.
    cursor: Vec<(RunId, u64)>,
    buf: VecDeque<RunEvent>,
    rx: broadcast::Receiver<Wake>,
    settings: StreamSettings,
    shutdown: CancellationToken,
}

/// Every run's events on a thread, then live; never ends on its own (a thread takes new runs).
/// Each run's events arrive in order without gaps or duplicates; runs that overlap (a queued run's
/// `run.queued` while another still runs) interleave. `after` holds the last sequence the client
/// saw of each run; runs it does not name are delivered from their first event.
pub fn thread_events(
    runs: Arc<dyn RunStore>,
    bus: &EventBus,
    scope: Scope,
    thread: ThreadId,
    after: Vec<(RunId, u64)>,
    settings: StreamSettings,
    shutdown: CancellationToken,
) -> impl Stream<Item = Result<RunEvent, StreamError>> + Send + 'static {
    let state = ThreadStream {
        runs,
        scope,
        thread,
        cursor: after,
        buf: VecDeque::new(),
        rx: bus.subscribe(),
        settings,
        shutdown,
    };
    futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(e) = st.buf.pop_front() {
                if let Some(c) = st.cursor.iter_mut().find(|(r, _)| *r == e.run_id) {
                    c.1 = e.seq;
                }
                return Some((Ok(e), st));
            }
            if st.shutdown.is_cancelled() {
                return None;
            }
            let listed = match st.runs.list_runs(&st.scope, st.thread).await {
                Ok(l) => l,
                Err(e) => return Some((Err(e), st)),
            };
            for run in &listed {
                if !st.cursor.iter().any(|(r, _)| *r == run.id) {
                    st.cursor.push((run.id, 0));
                }
            }
            for run in &listed {
                let last = st
                    .cursor
                    .iter()
                    .find(|(r, _)| *r == run.id)
                    .map_or(0, |(_, s)| *s);
                if run.last_seq <= last {
                    continue;
                }
                match st
                    .runs
                    .read_events(&st.scope, run.id, last, st.settings.batch)
                    .await
                {
                    Ok(events) => st.buf.extend(events.into_iter().filter(|e| e.seq > last)),
                    Err(e) => return Some((Err(e), st)),
                }
            }
            if !st.buf.is_empty() {
                continue;
            }
            let thread = st.thread;
            if !wait(
                &mut st.rx,
                |w| w.concerns_thread(thread),
                st.settings.poll,
                &st.shutdown,
            )
            .await
            {
                return None;
            }
        }
    })
}
