//! Identifiers: UUIDv7 entity ids and the id-generator port.
//!
//! Entity ids (threads, runs, messages, jobs, interactions) are UUIDv7 so that they sort by creation
//! time in every store. They are minted through the [`IdGenerator`] port so that tests pin them.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Port: mints fresh UUIDs. Production uses [`UuidV7Generator`]; tests use [`SequentialIds`].
pub trait IdGenerator: Send + Sync + fmt::Debug {
    /// Returns a fresh, never-before-returned UUID.
    fn next_uuid(&self) -> Uuid;
}

/// Mints random, time-ordered UUIDv7 values from the system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct UuidV7Generator;

impl IdGenerator for UuidV7Generator {
    fn next_uuid(&self) -> Uuid {
        Uuid::now_v7()
    }
}

/// Deterministic ids for tests: version-7-shaped UUIDs counting up from 1.
#[derive(Debug, Default)]
pub struct SequentialIds {
    next: AtomicU64,
}

impl SequentialIds {
    /// Creates a generator whose first id ends in `...0001`.
    pub fn new() -> Self {
        Self::default()
    }
}

impl IdGenerator for SequentialIds {
    fn next_uuid(&self) -> Uuid {
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let counter = u128::from(n).to_be_bytes();
        let mut tail = [0u8; 10];
        tail.copy_from_slice(&counter[6..]);
        uuid::Builder::from_unix_timestamp_millis(0, &tail).into_uuid()
    }
}

macro_rules! entity_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// Mints a fresh id from the given generator.
            pub fn generate(ids: &dyn IdGenerator) -> Self {
                Self(ids.next_uuid())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl std::str::FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }
    };
}

entity_id!(
    /// Identifies a thread: a conversation that carries session state across runs.
    ThreadId
);
entity_id!(
    /// Identifies a run: one execution of an agent on a thread.
    RunId
);
entity_id!(
    /// Identifies a message within a thread's history.
    MessageId
);
entity_id!(
    /// Identifies a job in the run queue.
    JobId
);
entity_id!(
    /// Identifies an interaction: a pending approval or question.
    InteractionId
);
entity_id!(
    /// Identifies one metered model call (its reservation and settlement).
    ModelCallId
);

/// A tool call's id as the model provider assigned it (for example `call_abc123`).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(transparent)]
pub struct ToolCallId(pub String);

impl fmt::Display for ToolCallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for ToolCallId {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}

/// The key handed to a tool so that an external write happens at most once.
///
/// It is derived only from the run and the tool call, so a resumed or retried run hands the tool
/// the same key again and the tool (or the system it writes to) can recognise the repeat.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct IdempotencyKey(pub String);

impl IdempotencyKey {
    /// Derives the key for one tool call of one run.
    pub fn for_tool_call(run_id: RunId, tool_call_id: &ToolCallId) -> Self {
        Self(format!("forge:{run_id}:{tool_call_id}"))
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_ids_count_up_and_stay_version_7() {
        let ids = SequentialIds::new();
        let a = ids.next_uuid();
        let b = ids.next_uuid();
        assert_eq!(a.get_version_num(), 7);
        assert!(a < b, "{a} should sort before {b}");
        assert_eq!(a.to_string(), "00000000-0000-7000-8000-000000000001");
    }

    #[test]
    fn v7_ids_sort_by_creation() {
        let g = UuidV7Generator;
        let first = RunId::generate(&g);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = RunId::generate(&g);
        assert!(first < second);
        assert_eq!(first.0.get_version_num(), 7);
    }

    #[test]
    fn idempotency_key_depends_only_on_run_and_call() {
        let run = RunId(Uuid::nil());
        let call = ToolCallId::from("call_1");
        assert_eq!(
            IdempotencyKey::for_tool_call(run, &call),
            IdempotencyKey::for_tool_call(run, &call)
        );
        assert_ne!(
            IdempotencyKey::for_tool_call(run, &call),
            IdempotencyKey::for_tool_call(run, &ToolCallId::from("call_2"))
        );
    }
}
