//! The live-tail port: how the events of a step in flight leave the process that produces them.
//!
//! A worker hands each event to its [`LiveSink`]s the moment it exists, and tells them when a
//! commit made the run's log durable up to a sequence. Sinks are best effort and must not block the
//! step: a lost [`LiveMessage`] costs latency, never correctness, because the committed log is the
//! history and subscribers reconcile the two (`crate::stream`). The in-process sink is the
//! engine's live tail; across processes a pub/sub adapter (Redis) carries the same messages.

use serde::{Deserialize, Serialize};

use crate::event::RunEvent;
use crate::id::{RunId, ThreadId};
use crate::scope::TenantId;

/// One message of the live tail.
// Built once per event and passed by reference: boxing the event would cost an allocation per
// streamed token to shrink the rare `Committed` variant.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LiveMessage {
    /// An event of a step in flight, not committed yet.
    Event {
        /// The run's tenant: tails are kept per tenant and run.
        tenant_id: TenantId,
        /// The run's thread, so thread subscribers are woken.
        thread_id: ThreadId,
        /// The lease (fencing) token of the execution that produced it: events of a re-executed
        /// step carry a greater one.
        attempt: u64,
        /// The event.
        event: RunEvent,
    },
    /// A step's commit made the run's log durable through `last_seq`.
    Committed {
        /// The run's tenant.
        tenant_id: TenantId,
        /// The run.
        run_id: RunId,
        /// Its thread.
        thread_id: ThreadId,
        /// The last committed sequence number.
        last_seq: u64,
    },
}

impl LiveMessage {
    /// The run the message concerns.
    pub fn run_id(&self) -> RunId {
        match self {
            LiveMessage::Event { event, .. } => event.run_id,
            LiveMessage::Committed { run_id, .. } => *run_id,
        }
    }
}

/// Where live messages go: the in-process tail, a pub/sub. Must return quickly and never fail the
/// step: a sink that cannot deliver drops the message.
pub trait LiveSink: Send + Sync {
    /// Delivers (or drops) one message.
    fn send(&self, message: &LiveMessage);
}
