//! What a case's run left behind, and the view of it graders read.
//!
//! A [`RunRecord`] is the run's committed event log with the few facts the log does not carry
//! (the model calls' cost, the agent's output schema). [`Observed`] folds the log once into the
//! parts as they were committed — each with the sequence number of the event that added it —,
//! the approvals asked for, and the run's timings, so every grader reads the same evidence.

use forge_core::event::{RunEvent, RunEventKind};
use forge_core::message::Role;
use forge_core::part::{Part, PartUpdate};
use forge_core::run::{RunFailure, RunStatus};
use forge_core::time::Timestamp;
use forge_core::usage::Usage;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A case's run, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run's id.
    pub run_id: String,
    /// Where it ended (or stood, when the case's time ran out).
    pub status: RunStatus,
    /// Why it failed.
    #[serde(default)]
    pub failure: Option<RunFailure>,
    /// Its committed events, in sequence.
    pub events: Vec<RunEvent>,
    /// The agent's output schema, for `structured-valid`.
    #[serde(default)]
    pub output_schema: Option<Value>,
    /// Its model calls' usage, summed.
    #[serde(default)]
    pub usage: Usage,
    /// Its model calls' cost, in micro-units.
    #[serde(default)]
    pub cost_micros: u64,
    /// Its model calls, and how many went to a provider other than the scripted one (a paid
    /// call: a deterministic dataset makes none).
    #[serde(default)]
    pub model_calls: u32,
    /// Of those, calls to a provider other than `scripted`.
    #[serde(default)]
    pub paid_calls: u32,
}

/// A part as committed, with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct SeenPart {
    /// The sequence number of the event that added it.
    pub seq: u64,
    /// Who wrote its message.
    pub role: Role,
    /// The part's final value.
    pub part: Part,
}

/// An approval the run asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct SeenApproval {
    /// The sequence number of its `approval.requested` event.
    pub seq: u64,
    /// The call it is for.
    pub tool_call_id: String,
    /// The tool.
    pub tool_name: String,
}

/// The evidence graders read, folded once from a [`RunRecord`].
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    /// Every committed part, in the order added.
    pub parts: Vec<SeenPart>,
    /// Every approval requested.
    pub approvals: Vec<SeenApproval>,
    /// The assistant's text, every text part joined by newlines.
    pub text: String,
    /// From the run's start to its last event, in milliseconds.
    pub latency_ms: Option<u64>,
    /// From the run's start to its first text, in milliseconds.
    pub ttft_ms: Option<u64>,
}

impl Observed {
    /// Folds `record`'s log.
    pub fn of(record: &RunRecord) -> Observed {
        let mut parts: Vec<SeenPart> = Vec::new();
        // (message id, index) → position in `parts`.
        let mut at: std::collections::HashMap<(forge_core::id::MessageId, u32), usize> =
            std::collections::HashMap::new();
        let mut approvals = Vec::new();
        let mut started: Option<Timestamp> = None;
        let mut first_text: Option<Timestamp> = None;
        let mut last: Option<Timestamp> = None;
        for e in &record.events {
            last = Some(e.at);
            match &e.kind {
                RunEventKind::RunStarted { .. } => {
                    started.get_or_insert(e.at);
                }
                RunEventKind::PartAdded {
                    message_id,
                    role,
                    index,
                    part,
                } => {
                    if *role == Role::Assistant
                        && matches!(part, Part::Text(t) if !t.text.is_empty())
                    {
                        first_text.get_or_insert(e.at);
                    }
                    at.insert((*message_id, *index), parts.len());
                    parts.push(SeenPart {
                        seq: e.seq,
                        role: *role,
                        part: part.clone(),
                    });
                }
                RunEventKind::PartUpdated {
                    message_id,
                    index,
                    update,
                } => {
                    let Some(&i) = at.get(&(*message_id, *index)) else {
                        continue;
                    };
                    if parts[i].role == Role::Assistant
                        && matches!(update, PartUpdate::TextDelta { text } if !text.is_empty())
                    {
                        first_text.get_or_insert(e.at);
                    }
                    // A log that does not apply is evidence of nothing more; keep what was added.
                    let _ = parts[i].part.apply(update);
                }
                RunEventKind::ApprovalRequested {
                    tool_call_id,
                    tool_name,
                    ..
                } => approvals.push(SeenApproval {
                    seq: e.seq,
                    tool_call_id: tool_call_id.0.clone(),
                    tool_name: tool_name.clone(),
                }),
                _ => {}
            }
        }
        let text = parts
            .iter()
            .filter(|p| p.role == Role::Assistant)
            .filter_map(|p| match &p.part {
                Part::Text(t) => Some(t.text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let since = |from: Option<Timestamp>, to: Option<Timestamp>| match (from, to) {
            (Some(a), Some(b)) => {
                Some(u64::try_from(b.unix_millis() - a.unix_millis()).unwrap_or(0))
            }
            _ => None,
        };
        Observed {
            latency_ms: since(started, last),
            ttft_ms: since(started, first_text),
            parts,
            approvals,
            text,
        }
    }

    /// The tool calls of `tool`, in order.
    pub fn calls<'a>(
        &'a self,
        tool: &'a str,
    ) -> impl Iterator<Item = (u64, &'a forge_core::part::ToolCallPart)> + 'a {
        self.parts.iter().filter_map(move |p| match &p.part {
            Part::ToolCall(c) if c.tool_name == tool => Some((p.seq, c)),
            _ => None,
        })
    }

    /// The results of the call `id`, in order.
    pub fn results<'a>(
        &'a self,
        id: &'a str,
    ) -> impl Iterator<Item = (u64, &'a forge_core::part::ToolResultPart)> + 'a {
        self.parts.iter().filter_map(move |p| match &p.part {
            Part::ToolResult(r) if r.tool_call_id.0 == id => Some((p.seq, r)),
            _ => None,
        })
    }

    /// Whether the call `id` ran: a result the tool itself produced (it carries the tool's
    /// version; refused, denied and unknown calls have none).
    pub fn ran(&self, id: &str) -> bool {
        self.results(id)
            .any(|(_, r)| r.tool_version.is_some() && !is_refusal_code(error_code(&r.output)))
    }

    /// Every error code the run's parts carry: error parts and error tool results.
    pub fn error_codes(&self) -> impl Iterator<Item = &str> + '_ {
        self.parts.iter().filter_map(|p| match &p.part {
            Part::Error(e) => Some(e.code.as_str()),
            Part::ToolResult(r) if r.is_error => error_code(&r.output),
            _ => None,
        })
    }
}

/// The `code` of an error output.
fn error_code(output: &Value) -> Option<&str> {
    output.get("code").and_then(Value::as_str)
}

/// Codes with which the platform refuses a call: no policy allowed it, a person rejected it,
/// nobody approved it in time, or the approval was for another input.
pub const REFUSAL_CODES: [&str; 4] = [
    "forbidden",
    "rejected",
    "approval_expired",
    "approval_mismatch",
];

fn is_refusal_code(code: Option<&str>) -> bool {
    code.is_some_and(|c| REFUSAL_CODES.contains(&c))
}
