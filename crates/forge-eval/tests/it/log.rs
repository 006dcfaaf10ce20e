//! Run logs built from the real event types, as a run commits them.

use forge_core::event::{RunEvent, RunEventKind};
use forge_core::id::{InteractionId, MessageId, RunId, ToolCallId};
use forge_core::message::Role;
use forge_core::part::{
    ApprovalPart, ApprovalStatus, CitationPart, ErrorPart, Part, PartUpdate, Span,
    StructuredOutputPart, ToolCallPart, ToolResultPart, Trust,
};
use forge_core::run::{FailureCode, RunFailure, RunStatus, WaitReason};
use forge_core::time::Timestamp;
use forge_core::usage::Usage;
use forge_eval::RunRecord;
use serde_json::{Value, json};

/// Builds a run's committed log, one event at a time, `ms` apart.
pub struct Log {
    run: RunId,
    events: Vec<RunEvent>,
    at: i64,
    message: u128,
    index: u32,
    pub usage: Usage,
    pub cost_micros: u64,
    pub schema: Option<Value>,
}

impl Log {
    pub fn new() -> Self {
        let mut log = Log {
            run: RunId(uuid::Uuid::from_u128(7)),
            events: vec![],
            at: 1_800_000_000_000,
            message: 100,
            index: 0,
            usage: Usage::default(),
            cost_micros: 0,
            schema: None,
        };
        log.push(
            0,
            RunEventKind::RunStarted {
                thread_id: forge_core::id::ThreadId(uuid::Uuid::from_u128(1)),
                agent: forge_core::agent::AgentRef {
                    name: "a".into(),
                    version: "1".into(),
                },
                model: "scripted:x".into(),
            },
        );
        log
    }

    /// Appends an event `ms` after the last.
    pub fn push(&mut self, ms: i64, kind: RunEventKind) -> &mut Self {
        self.at += ms;
        let seq = self.events.len() as u64 + 1;
        self.events.push(RunEvent {
            run_id: self.run,
            seq,
            at: Timestamp::from_unix_millis(self.at).expect("valid"),
            kind,
        });
        self
    }

    /// Starts a new message of `role`.
    pub fn message(&mut self) -> &mut Self {
        self.message += 1;
        self.index = 0;
        self
    }

    fn add(&mut self, ms: i64, role: Role, part: Part) -> &mut Self {
        let index = self.index;
        self.index += 1;
        self.push(
            ms,
            RunEventKind::PartAdded {
                message_id: MessageId(uuid::Uuid::from_u128(self.message)),
                role,
                index,
                part,
            },
        )
    }

    /// Assistant text added whole.
    pub fn text(&mut self, ms: i64, text: &str) -> &mut Self {
        self.add(ms, Role::Assistant, Part::text(text))
    }

    /// Assistant text streamed: an empty part, then each delta.
    pub fn streamed(&mut self, ms: i64, deltas: &[&str]) -> &mut Self {
        let index = self.index;
        self.add(ms, Role::Assistant, Part::text(""));
        for d in deltas {
            let message_id = MessageId(uuid::Uuid::from_u128(self.message));
            self.push(
                ms,
                RunEventKind::PartUpdated {
                    message_id,
                    index,
                    update: PartUpdate::TextDelta { text: (*d).into() },
                },
            );
        }
        self
    }

    pub fn call(&mut self, id: &str, tool: &str, input: Value) -> &mut Self {
        self.add(
            1,
            Role::Assistant,
            Part::ToolCall(ToolCallPart {
                tool_call_id: ToolCallId(id.into()),
                tool_name: tool.into(),
                input,
            }),
        )
    }

    /// The tool's own result (it ran: it carries the tool's version).
    pub fn ran(&mut self, id: &str, tool: &str, output: Value) -> &mut Self {
        self.result(id, tool, output, false, Some("1"))
    }

    /// The platform's refusal of the call (no tool ran).
    pub fn refused(&mut self, id: &str, tool: &str, code: &str) -> &mut Self {
        self.result(
            id,
            tool,
            json!({"code": code, "message": "not permitted"}),
            true,
            None,
        )
    }

    pub fn result(
        &mut self,
        id: &str,
        tool: &str,
        output: Value,
        is_error: bool,
        version: Option<&str>,
    ) -> &mut Self {
        self.add(
            1,
            Role::Tool,
            Part::ToolResult(ToolResultPart {
                tool_call_id: ToolCallId(id.into()),
                tool_name: tool.into(),
                output,
                is_error,
                trust: Trust::Untrusted,
                tool_version: version.map(str::to_owned),
            }),
        )
    }

    /// An approval part and its `approval.requested` event, for the call `id`.
    pub fn approval(&mut self, id: &str, tool: &str) -> &mut Self {
        let interaction = InteractionId(uuid::Uuid::from_u128(900 + self.events.len() as u128));
        self.add(
            1,
            Role::Assistant,
            Part::Approval(ApprovalPart {
                interaction_id: interaction,
                tool_call_id: ToolCallId(id.into()),
                tool_name: tool.into(),
                input_hash: "ab".into(),
                status: ApprovalStatus::Pending,
                preview: None,
            }),
        );
        self.push(
            1,
            RunEventKind::ApprovalRequested {
                interaction_id: interaction,
                tool_call_id: ToolCallId(id.into()),
                tool_name: tool.into(),
                input_hash: "ab".into(),
                preview: None,
            },
        )
    }

    pub fn citation(
        &mut self,
        source: &str,
        version: &str,
        span: (u64, u64),
        excerpt: &str,
    ) -> &mut Self {
        self.add(
            1,
            Role::Tool,
            Part::Citation(CitationPart {
                source_id: source.into(),
                source_version: version.into(),
                span: Span {
                    start: span.0,
                    end: span.1,
                },
                excerpt: excerpt.into(),
                line: None,
                page: None,
                heading: None,
            }),
        )
    }

    pub fn structured(&mut self, value: Value) -> &mut Self {
        self.add(
            1,
            Role::Assistant,
            Part::StructuredOutput(StructuredOutputPart { value }),
        )
    }

    pub fn error(&mut self, code: &str) -> &mut Self {
        self.add(
            1,
            Role::Assistant,
            Part::Error(ErrorPart {
                code: code.into(),
                message: "something".into(),
            }),
        )
    }

    pub fn completed(&mut self, ms: i64) -> RunRecord {
        self.push(
            ms,
            RunEventKind::RunCompleted {
                text: String::new(),
                usage: self.usage,
            },
        );
        self.record(RunStatus::Completed, None)
    }

    pub fn failed(&mut self, code: FailureCode) -> RunRecord {
        let failure = RunFailure {
            code,
            message: "failed".into(),
        };
        self.push(
            1,
            RunEventKind::RunFailed {
                failure: failure.clone(),
            },
        );
        self.record(RunStatus::Failed, Some(failure))
    }

    pub fn waiting(&mut self) -> RunRecord {
        self.record(RunStatus::Waiting(WaitReason::Approval), None)
    }

    pub fn record(&self, status: RunStatus, failure: Option<RunFailure>) -> RunRecord {
        RunRecord {
            run_id: self.run.to_string(),
            status,
            failure,
            events: self.events.clone(),
            output_schema: self.schema.clone(),
            usage: self.usage,
            cost_micros: self.cost_micros,
            model_calls: 1,
            paid_calls: 0,
        }
    }
}
