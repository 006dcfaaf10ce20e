//! Observers: live delivery of a run's events as the engine produces them.
//!
//! The engine hands every event to its observer the moment it exists, before the step that holds it
//! is committed, so a person sees tokens as they stream. The committed log stays the source of
//! truth: if a worker dies mid-step, the events it had shown for that step are not in the log, and
//! the step is executed again from the last checkpoint with the same sequence numbers. A client
//! that reconnects therefore resumes from the last sequence it saw *committed* (the last
//! `run.checkpointed` or terminal event).

use forge_core::event::RunEvent;
use forge_core::id::{RunId, ThreadId};

/// Receives a run's events live.
pub trait RunObserver: Send + Sync {
    /// Called once per event, in sequence order, as it is produced.
    fn on_event(&self, event: &RunEvent);

    /// Called after a step's commit made the run's log durable up to `last_seq`: the moment a
    /// reader of the log can see those events (a server wakes its subscribers here).
    fn on_commit(&self, run_id: RunId, thread_id: ThreadId, last_seq: u64) {
        let _ = (run_id, thread_id, last_seq);
    }
}

/// Ignores every event.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopObserver;

impl RunObserver for NoopObserver {
    fn on_event(&self, _event: &RunEvent) {}
}

impl<F: Fn(&RunEvent) + Send + Sync> RunObserver for F {
    fn on_event(&self, event: &RunEvent) {
        self(event)
    }
}
