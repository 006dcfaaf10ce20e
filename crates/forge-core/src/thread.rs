//! Threads: conversations that carry versioned session state across runs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::id::{MessageId, RunId, ThreadId};
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

/// The entity a stale session-state write names in [`crate::Error::VersionConflict`].
pub const SESSION_STATE: &str = "session state";

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
            entity: SESSION_STATE,
            id: thread.to_string(),
            expected,
            actual,
        })
    }
}

/// What a thread's oldest messages are sent to the model as, once compacted: a summary of
/// every message from the thread's first up to and including `through`. The messages themselves
/// stay stored (for audit and for people); only model requests use the summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadSummary {
    /// Bumped by every compaction: 1 for the first. A compaction states the version it built on.
    pub version: u64,
    /// The summary.
    pub text: String,
    /// The last message it covers.
    pub through: MessageId,
    /// How many messages it covers, from the thread's first.
    pub covered: u64,
    /// The run that wrote it.
    pub run_id: RunId,
    /// The model that wrote it, as `provider:model`.
    pub model: String,
    /// When it was written.
    pub created_at: Timestamp,
}

/// The entity a stale compaction names in [`crate::Error::VersionConflict`].
pub const THREAD_SUMMARY: &str = "thread summary";

/// The rule every store applies to a new summary: it must build on the thread's current one
/// (version 1 on none, `n + 1` on version `n`), so two compactions of one thread can never both
/// land, and one repeated after a crash lands once.
pub fn check_summary_version(
    thread: ThreadId,
    current: Option<&ThreadSummary>,
    new: &ThreadSummary,
) -> Result<(), crate::Error> {
    let actual = current.map_or(0, |s| s.version);
    if new.version == actual + 1 {
        Ok(())
    } else {
        Err(crate::Error::VersionConflict {
            entity: THREAD_SUMMARY,
            id: thread.to_string(),
            expected: new.version.saturating_sub(1),
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
    /// What its oldest messages are sent to the model as, once compacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<ThreadSummary>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it was archived: listed only when archived threads are asked for, still readable
    /// and still accepting runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived_at: Option<Timestamp>,
}

/// A change to a thread's title or archive state ([`crate::ports::store::ThreadStore::update_thread`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadChange {
    /// A new title (`Some(None)` clears it).
    pub title: Option<Option<String>>,
    /// Archive (`true`) or restore (`false`) it.
    pub archived: Option<bool>,
}

impl ThreadChange {
    /// `thread` with the change applied at `now`: an archived thread keeps its first archive
    /// time; restoring clears it.
    pub fn apply(&self, mut thread: Thread, now: Timestamp) -> Thread {
        if let Some(title) = &self.title {
            thread.title = title.clone();
        }
        match self.archived {
            Some(true) => {
                thread.archived_at.get_or_insert(now);
            }
            Some(false) => thread.archived_at = None,
            None => {}
        }
        thread
    }
}

/// Which page of a tenant's threads [`crate::ports::store::ThreadStore::page_threads`] returns:
/// newest first, by creation and then id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadWindow {
    /// Only threads older than this one (the last of the previous page). A thread that is not
    /// the tenant's is `NotFound`.
    pub before: Option<ThreadId>,
    /// At most this many.
    pub limit: usize,
    /// Archived threads too.
    pub archived: bool,
    /// Only threads this principal created.
    pub created_by: Option<PrincipalId>,
}

impl ThreadWindow {
    /// `threads` (all of a tenant's, any order) cut to this window: the rule the SQL encodes and
    /// the memory store's implementation.
    pub fn apply(&self, mut threads: Vec<Thread>) -> Result<Vec<Thread>, crate::Error> {
        threads.sort_by_key(|t| std::cmp::Reverse((t.created_at, t.id)));
        let cursor = match self.before {
            Some(id) => {
                let t = threads
                    .iter()
                    .find(|t| t.id == id)
                    .ok_or_else(|| crate::Error::not_found("thread", id))?;
                Some((t.created_at, t.id))
            }
            None => None,
        };
        Ok(threads
            .into_iter()
            .filter(|t| self.archived || t.archived_at.is_none())
            .filter(|t| self.created_by.as_ref().is_none_or(|p| &t.created_by == p))
            .filter(|t| cursor.is_none_or(|c| (t.created_at, t.id) < c))
            .take(self.limit)
            .collect())
    }
}
