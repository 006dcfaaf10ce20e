//! Threads: conversations that carry versioned session state across runs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::id::{RunId, ThreadId};
use crate::scope::{PrincipalId, TenantId};
use crate::time::Timestamp;

/// State an agent keeps across the runs of one thread, versioned for optimistic concurrency.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionState {
    /// Bumped by every write; a writer states the version it read.
    pub version: u64,
    /// The state itself: a JSON object.
    pub values: serde_json::Map<String, serde_json::Value>,
}

/// The rule every store applies to a session-state write: it must state the version it read.
pub fn check_state_version(
    thread: ThreadId,
    expected: u64,
    actual: u64,
) -> Result<(), crate::Error> {
    if expected == actual {
        Ok(())
    } else {
        Err(crate::Error::VersionConflict {
            entity: crate::ports::store::SESSION_STATE,
            id: thread.to_string(),
            expected,
            actual,
        })
    }
}

/// A stored thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Thread {
    /// The thread's id.
    pub id: ThreadId,
    /// The owning tenant.
    pub tenant_id: TenantId,
    /// Who created it.
    pub created_by: PrincipalId,
    /// A title for lists, if the application gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Session state.
    pub state: SessionState,
    /// The run currently executing or waiting on this thread, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_run: Option<RunId>,
    /// When it was created.
    pub created_at: Timestamp,
}
