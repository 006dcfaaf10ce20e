//! Messages: a role and its parts, the unit of a thread's history.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::id::{MessageId, RunId, ThreadId};
use crate::part::Part;
use crate::time::Timestamp;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The end user (or the application on their behalf).
    User,
    /// The model.
    Assistant,
    /// Tool results returned to the model.
    Tool,
}

impl Role {
    /// The role's name, as on the wire and in storage.
    pub fn name(&self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    /// The role named `name`.
    pub fn from_name(name: &str) -> Result<Self, crate::Error> {
        match name {
            "user" => Ok(Role::User),
            "assistant" => Ok(Role::Assistant),
            "tool" => Ok(Role::Tool),
            other => Err(crate::Error::invalid(format!("unknown role {other:?}"))),
        }
    }
}

/// One message of a thread's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Message {
    /// The message's id.
    pub id: MessageId,
    /// The run that produced it.
    pub run_id: RunId,
    /// Who wrote it.
    pub role: Role,
    /// Its parts, in order.
    pub parts: Vec<Part>,
    /// When it was written.
    pub created_at: Timestamp,
}

impl Message {
    /// All text parts joined, for display and for matching.
    pub fn text(&self) -> String {
        crate::part::joined_text(&self.parts)
    }
}

/// Which page of a thread's history [`crate::ports::store::ThreadStore::page_messages`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageWindow {
    /// Only messages written after this one.
    pub after: Option<MessageId>,
    /// Only messages written before this one.
    pub before: Option<MessageId>,
    /// At most this many.
    pub limit: usize,
    /// The last `limit` of the range rather than the first (still returned oldest first).
    pub from_end: bool,
}

impl MessageWindow {
    /// The first `limit` messages after `after` (from the start when `None`).
    pub fn after(after: Option<MessageId>, limit: usize) -> Self {
        Self {
            after,
            before: None,
            limit,
            from_end: false,
        }
    }

    /// The last `limit` messages before `before` (up to the newest when `None`).
    pub fn before(before: Option<MessageId>, limit: usize) -> Self {
        Self {
            after: None,
            before,
            limit,
            from_end: true,
        }
    }

    /// The error for a cursor that is not a message of `thread`.
    pub fn unknown_cursor(thread: ThreadId, cursor: MessageId) -> Error {
        Error::not_found("message", format!("{cursor} in thread {thread}"))
    }

    /// `messages` (the whole history, oldest first) cut to this window: the rule every adapter's
    /// query encodes, and the memory store's implementation.
    pub fn apply<'m>(
        &self,
        thread: ThreadId,
        messages: &'m [Message],
    ) -> Result<&'m [Message], Error> {
        let position = |cursor: MessageId| {
            messages
                .iter()
                .position(|m| m.id == cursor)
                .ok_or_else(|| Self::unknown_cursor(thread, cursor))
        };
        let start = match self.after {
            Some(c) => position(c)? + 1,
            None => 0,
        };
        let end = match self.before {
            Some(c) => position(c)?,
            None => messages.len(),
        };
        if start >= end {
            return Ok(&[]);
        }
        let range = &messages[start..end];
        Ok(if self.from_end {
            &range[range.len().saturating_sub(self.limit)..]
        } else {
            &range[..self.limit.min(range.len())]
        })
    }
}
