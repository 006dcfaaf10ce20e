//! Messages: a role and its parts, the unit of a thread's history.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::id::{MessageId, RunId};
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
