//! Observers: live delivery of a run's events as the engine produces them.
//!
//! The engine hands every event to its observer the moment it exists, before the step that holds it
//! is committed, so a person sees tokens as they stream. The committed log stays the source of
//! truth: if a worker dies mid-step, the events it had shown for that step are not in the log, and
//! the step is executed again from the last checkpoint with the same sequence numbers, by an
//! execution holding a greater lease token ([`Emitted::attempt`]). Subscribers reconcile the two
//! through `forge_core::stream`; the server's streams and `forge run` do it through
//! `forge_live`.

use std::sync::Arc;

use forge_core::event::RunEvent;
use forge_core::id::{RunId, ThreadId};
use forge_core::ports::live::{LiveMessage, LiveSink};
use forge_core::scope::TenantId;

/// An event as the execution that produced it emitted it.
#[derive(Debug, Clone, Copy)]
pub struct Emitted<'a> {
    /// The run's tenant.
    pub tenant_id: &'a TenantId,
    /// The run's thread.
    pub thread_id: ThreadId,
    /// The lease (fencing) token of the execution.
    pub attempt: u64,
    /// The event.
    pub event: &'a RunEvent,
}

/// A step's commit, as its execution saw it.
#[derive(Debug, Clone, Copy)]
pub struct Commit<'a> {
    /// The run's tenant.
    pub tenant_id: &'a TenantId,
    /// The run.
    pub run_id: RunId,
    /// Its thread.
    pub thread_id: ThreadId,
    /// The last sequence number now durable.
    pub last_seq: u64,
}

/// Receives a run's events live.
pub trait RunObserver: Send + Sync {
    /// Called once per event, in sequence order, as it is produced.
    fn on_event(&self, event: &RunEvent);

    /// Called instead of [`Self::on_event`] by the engine, with the execution that produced the
    /// event; by default forwards to it.
    fn on_emitted(&self, emitted: &Emitted<'_>) {
        self.on_event(emitted.event)
    }

    /// Called after a step's commit made the run's log durable up to `commit.last_seq`: the
    /// moment a reader of the log can see those events (a server wakes its subscribers here).
    fn on_commit(&self, commit: &Commit<'_>) {
        let _ = commit;
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

/// Hands every event and commit to live sinks as [`LiveMessage`]s: the in-process tail
/// (`forge_live::LiveTail`) and, across processes, a pub/sub adapter.
#[derive(Clone, Default)]
pub struct LiveObserver {
    sinks: Vec<Arc<dyn LiveSink>>,
}

impl std::fmt::Debug for LiveObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveObserver")
            .field("sinks", &self.sinks.len())
            .finish()
    }
}

impl LiveObserver {
    /// An observer feeding `sinks`.
    pub fn new(sinks: Vec<Arc<dyn LiveSink>>) -> Self {
        Self { sinks }
    }

    /// Adds a sink.
    pub fn with(mut self, sink: Arc<dyn LiveSink>) -> Self {
        self.sinks.push(sink);
        self
    }
}

impl RunObserver for LiveObserver {
    fn on_event(&self, _event: &RunEvent) {}

    fn on_emitted(&self, e: &Emitted<'_>) {
        if self.sinks.is_empty() {
            return;
        }
        let message = LiveMessage::Event {
            tenant_id: e.tenant_id.clone(),
            thread_id: e.thread_id,
            attempt: e.attempt,
            event: e.event.clone(),
        };
        for sink in &self.sinks {
            sink.send(&message);
        }
    }

    fn on_commit(&self, c: &Commit<'_>) {
        let message = LiveMessage::Committed {
            tenant_id: c.tenant_id.clone(),
            run_id: c.run_id,
            thread_id: c.thread_id,
            last_seq: c.last_seq,
        };
        for sink in &self.sinks {
            sink.send(&message);
        }
    }
}

/// Two observers, each told everything.
pub struct Both<A, B>(pub A, pub B);

impl<A: RunObserver, B: RunObserver> RunObserver for Both<A, B> {
    fn on_event(&self, event: &RunEvent) {
        self.0.on_event(event);
        self.1.on_event(event);
    }

    fn on_emitted(&self, emitted: &Emitted<'_>) {
        self.0.on_emitted(emitted);
        self.1.on_emitted(emitted);
    }

    fn on_commit(&self, commit: &Commit<'_>) {
        self.0.on_commit(commit);
        self.1.on_commit(commit);
    }
}
