//! Wake-ups: "this run may have new events", fanned out in process.
//!
//! A wake-up carries no event. A subscriber that wakes reads the log (and, for a live wake-up, the
//! live tail) after what it delivered, so a wake-up that is lost, late, duplicated or spurious
//! changes nothing but latency; a poll covers lost ones.

use forge_core::id::{RunId, ThreadId};
use tokio::sync::broadcast;

/// Something may have new events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// This run's committed log grew (or may have: a mutation, a notification).
    Run {
        /// The run.
        run_id: RunId,
        /// Its thread.
        thread_id: ThreadId,
    },
    /// This run's live tail grew: only the tail needs reading.
    Live {
        /// The run.
        run_id: RunId,
        /// Its thread.
        thread_id: ThreadId,
    },
    /// Anything: every subscriber re-reads (after a listener reconnects, say).
    All,
}

impl Wake {
    /// Whether it concerns `run`.
    pub fn concerns_run(&self, run: RunId) -> bool {
        match self {
            Wake::Run { run_id, .. } | Wake::Live { run_id, .. } => *run_id == run,
            Wake::All => true,
        }
    }

    /// Whether it concerns `thread`.
    pub fn concerns_thread(&self, thread: ThreadId) -> bool {
        match self {
            Wake::Run { thread_id, .. } | Wake::Live { thread_id, .. } => *thread_id == thread,
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
