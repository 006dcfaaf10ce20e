//! Human in the loop: the approval gate before tools run ([`ApprovalGate`]), the built-in
//! `ask_user` question tool, and what a settled interaction makes of a parked call ([`settle`]).
//!
//! A step whose calls need a person parks the run: the step's assistant message gains an approval
//! (or question) part per call, `approval.requested` / `question.requested` are emitted, and the
//! interactions are created by the same commit that moves the run to `waiting`. No tool of that
//! step runs before every interaction is settled. Resuming re-validates the calls, re-checks each
//! approval against the exact call (name and input hash), runs the approved ones with the same
//! idempotency keys as any execution of that call, and gives the model a refusal for the rest.

use std::sync::Arc;

use forge_core::agent::AgentDefinition;
use forge_core::event::RunEventKind;
use forge_core::id::{IdGenerator, InteractionId};
use forge_core::interaction::{
    ApprovalPreview, Decision, Interaction, InteractionRequest, InteractionStatus, input_hash,
};
use forge_core::part::{ApprovalPart, ApprovalStatus, Part, QuestionPart, ToolCallPart};
use forge_core::ports::tool::{
    ApprovalPolicy, ApprovalRule, PreviewContext, Tool, ToolClassification,
};
use forge_core::run::WaitReason;
use forge_core::scope::Scope;
use forge_core::time::Clock;
use serde_json::{Value, json};

use crate::execution::Execution;
use crate::plan::Prepared;
use crate::tools::{GateAnswered, ToolRegistry};

/// The built-in tool through which an agent asks its user a question (list it in the agent's
/// `tools` to offer it). Input: `{"prompt": string, "answer_schema": JSON Schema}`; the run parks
/// until the answer (checked against the schema) arrives, which is the call's result.
pub const ASK_USER: &str = "ask_user";

/// The `ask_user` declaration: the engine turns its calls into questions, so its `call` is
/// never reached.
pub(crate) fn ask_user_tool() -> Arc<dyn Tool> {
    GateAnswered::tool(
        ASK_USER,
        "Ask the user a question and wait for the answer. Give the question and \
                          a JSON Schema the answer must satisfy.",
        json!({
            "type": "object",
            "properties": {
                "prompt": {"type": "string", "minLength": 1},
                "answer_schema": {"type": "object"},
            },
            "required": ["prompt", "answer_schema"],
            "additionalProperties": false,
        }),
        ToolClassification::Read,
    )
}

/// Why `value` does not satisfy `schema` (empty when it does, or a schema error when the schema
/// itself is unusable).
pub(crate) fn schema_violations(schema: &Value, value: &Value) -> Vec<String> {
    match jsonschema::validator_for(schema) {
        Err(e) => vec![format!("the answer schema is not a valid JSON Schema: {e}")],
        Ok(v) => v.iter_errors(value).map(|e| e.to_string()).collect(),
    }
}

/// The refusal a model sees for a call a person did not let run.
fn refusal(call: &ToolCallPart, code: &'static str, message: String) -> Prepared {
    Prepared::Refused {
        call: call.clone(),
        code,
        message,
    }
}

/// Decides which of a step's calls need a person before they run: the agent's `approvals`
/// override or the tool's [`ApprovalPolicy`] (`policy` asks the deployment's [`ApprovalRule`];
/// without one, a person is asked), and every `ask_user` call.
pub(crate) struct ApprovalGate<'a> {
    pub(crate) scope: &'a Scope,
    pub(crate) agent: &'a AgentDefinition,
    pub(crate) tools: &'a ToolRegistry,
    pub(crate) rule: Option<&'a dyn ApprovalRule>,
    pub(crate) clock: &'a dyn Clock,
    pub(crate) ids: &'a dyn IdGenerator,
    pub(crate) redactor: &'a forge_core::redact::Redactor,
}

impl ApprovalGate<'_> {
    /// Decides which prepared calls need a person. Returns the calls as they go on (an `ask_user`
    /// call with an unusable schema becomes a refusal) and the interactions to raise.
    pub(crate) async fn gate(
        &self,
        cur: &Execution<'_>,
        step: u32,
        prepared: Vec<Prepared>,
    ) -> (Vec<Prepared>, Vec<Interaction>) {
        let now = self.clock.now();
        let ttl = std::time::Duration::from_secs(self.agent.limits.interaction_ttl_secs);
        let mut raised = Vec::new();
        let mut out = Vec::with_capacity(prepared.len());
        for p in prepared {
            let Prepared::Run { call } = &p else {
                out.push(p);
                continue;
            };
            let request = if call.tool_name == ASK_USER {
                let prompt = call.input["prompt"].as_str().unwrap_or_default().to_owned();
                let schema = call.input["answer_schema"].clone();
                if let Err(e) = jsonschema::validator_for(&schema) {
                    out.push(refusal(
                        call,
                        "invalid_input",
                        format!("answer_schema is not a valid JSON Schema: {e}"),
                    ));
                    continue;
                }
                Some(InteractionRequest::Question {
                    tool_call_id: call.tool_call_id.clone(),
                    prompt,
                    answer_schema: schema,
                })
            } else if self.needs_approval(call).await {
                Some(InteractionRequest::Approval {
                    tool_call_id: call.tool_call_id.clone(),
                    tool_name: call.tool_name.clone(),
                    input_hash: input_hash(&call.input),
                    input: call.input.clone(),
                    preview: self.preview(cur, call).await,
                })
            } else {
                None
            };
            if let Some(request) = request {
                raised.push(Interaction {
                    id: InteractionId::generate(self.ids),
                    tenant_id: cur.run().tenant_id.clone(),
                    run_id: cur.run().id,
                    thread_id: cur.run().thread_id,
                    step,
                    agent: cur.run().agent.clone(),
                    request,
                    status: InteractionStatus::Pending,
                    resolution: None,
                    created_at: now,
                    expires_at: now.plus(ttl),
                });
            }
            out.push(p);
        }
        (out, raised)
    }

    /// The preview of `call` by its tool's previewer, if it has one.
    async fn preview(&self, cur: &Execution<'_>, call: &ToolCallPart) -> Option<ApprovalPreview> {
        let previewer = self.tools.get(&call.tool_name)?.previewer.as_deref()?;
        let ctx = PreviewContext {
            scope: self.scope.clone(),
            run_id: cur.run().id,
            thread_id: cur.run().thread_id,
            tool_call_id: call.tool_call_id.clone(),
        };
        Some(crate::preview::preview_of(previewer, &ctx, &call.input, self.redactor).await)
    }

    async fn needs_approval(&self, call: &ToolCallPart) -> bool {
        let Some(registered) = self.tools.get(&call.tool_name) else {
            return false;
        };
        let spec = registered.tool.spec();
        let policy = self
            .agent
            .approvals
            .get(&call.tool_name)
            .copied()
            .unwrap_or(spec.approval);
        match policy {
            ApprovalPolicy::Never => false,
            ApprovalPolicy::Always => true,
            ApprovalPolicy::ExternalWrites => {
                spec.classification == ToolClassification::ExternalWrite
            }
            ApprovalPolicy::Policy => match self.rule {
                None => true,
                Some(rule) => rule
                    .requires_approval(self.scope, spec, &call.input)
                    .await
                    .unwrap_or(true),
            },
        }
    }
}

/// The approval or question part shown for an interaction.
pub(crate) fn request_part(i: &Interaction) -> Part {
    match &i.request {
        InteractionRequest::Approval {
            tool_call_id,
            tool_name,
            input_hash,
            preview,
            ..
        } => Part::Approval(ApprovalPart {
            interaction_id: i.id,
            tool_call_id: tool_call_id.clone(),
            tool_name: tool_name.clone(),
            input_hash: input_hash.clone(),
            status: ApprovalStatus::Pending,
            preview: preview.clone(),
        }),
        InteractionRequest::Question {
            prompt,
            answer_schema,
            ..
        } => Part::Question(QuestionPart {
            interaction_id: i.id,
            prompt: prompt.clone(),
            answer_schema: answer_schema.clone(),
            answer: None,
        }),
    }
}

/// Emits `approval.requested` or `question.requested` for an interaction.
pub(crate) fn request_event(cur: &mut Execution<'_>, i: &Interaction) {
    match &i.request {
        InteractionRequest::Approval {
            tool_call_id,
            tool_name,
            input_hash,
            preview,
            ..
        } => cur.emit(RunEventKind::ApprovalRequested {
            interaction_id: i.id,
            tool_call_id: tool_call_id.clone(),
            tool_name: tool_name.clone(),
            input_hash: input_hash.clone(),
            preview: preview.clone(),
        }),
        InteractionRequest::Question {
            prompt,
            answer_schema,
            ..
        } => cur.emit(RunEventKind::QuestionRequested {
            interaction_id: i.id,
            prompt: prompt.clone(),
            answer_schema: answer_schema.clone(),
        }),
    }
}

/// Why the run waits: approval if any approval is pending, else a question.
pub(crate) fn wait_reason(raised: &[Interaction]) -> WaitReason {
    if raised
        .iter()
        .any(|i| matches!(i.request, InteractionRequest::Approval { .. }))
    {
        WaitReason::Approval
    } else {
        WaitReason::Question
    }
}

/// What a settled interaction makes of a valid call.
pub(crate) fn settle(call: ToolCallPart, raised: &[Interaction]) -> Prepared {
    let Some(i) = raised
        .iter()
        .find(|i| i.request.tool_call_id() == &call.tool_call_id)
    else {
        return Prepared::Run { call };
    };
    let decision = i.resolution.as_ref().map(|r| &r.decision);
    match &i.request {
        InteractionRequest::Approval {
            tool_name,
            input_hash: approved,
            ..
        } => {
            if tool_name != &call.tool_name || approved != &input_hash(&call.input) {
                return refusal(
                    &call,
                    "approval_mismatch",
                    "the approval was given for a different call; it was not run".into(),
                );
            }
            match (i.status, decision) {
                (InteractionStatus::Resolved, Some(Decision::Approve)) => Prepared::Run { call },
                (InteractionStatus::Resolved, Some(Decision::Reject { reason })) => refusal(
                    &call,
                    "rejected",
                    match reason {
                        Some(r) => format!("a person refused this call: {r}"),
                        None => "a person refused this call".into(),
                    },
                ),
                _ => refusal(
                    &call,
                    "approval_expired",
                    "nobody approved this call in time; it was not run".into(),
                ),
            }
        }
        InteractionRequest::Question { .. } => match (i.status, decision) {
            (InteractionStatus::Resolved, Some(Decision::Answer { answer })) => {
                Prepared::Answered {
                    call,
                    output: json!({ "answer": answer }),
                }
            }
            (InteractionStatus::Resolved, Some(_)) => {
                refusal(&call, "declined", "the user declined to answer".into())
            }
            _ => refusal(
                &call,
                "question_expired",
                "the user did not answer in time".into(),
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use forge_core::agent::AgentRef;
    use forge_core::id::{RunId, ThreadId, ToolCallId};
    use forge_core::interaction::Resolution;
    use forge_core::scope::TenantId;
    use forge_core::time::Timestamp;

    use super::*;

    fn approved_for(input: Value) -> Interaction {
        let at = Timestamp::from_unix_millis(0).expect("epoch");
        Interaction {
            id: InteractionId(uuid::Uuid::nil()),
            tenant_id: TenantId::new("t").expect("tenant"),
            run_id: RunId(uuid::Uuid::nil()),
            thread_id: ThreadId(uuid::Uuid::nil()),
            step: 1,
            agent: AgentRef {
                name: "a".into(),
                version: "1".into(),
            },
            request: InteractionRequest::Approval {
                tool_call_id: ToolCallId("c".into()),
                tool_name: "pay".into(),
                input_hash: input_hash(&input),
                input,
                preview: None,
            },
            status: InteractionStatus::Resolved,
            resolution: Some(Resolution {
                decision: Decision::Approve,
                actor: "bob".into(),
                at,
                key: "k".into(),
            }),
            created_at: at,
            expires_at: at,
        }
    }

    fn call(name: &str, input: Value) -> ToolCallPart {
        ToolCallPart {
            tool_call_id: ToolCallId("c".into()),
            tool_name: name.into(),
            input,
        }
    }

    #[test]
    fn an_approval_runs_only_the_exact_call_it_approved() {
        let approval = [approved_for(json!({"amount": 5}))];
        assert!(matches!(
            settle(call("pay", json!({"amount": 5})), &approval),
            Prepared::Run { .. }
        ));
        for other in [
            call("pay", json!({"amount": 5000})),
            call("refund", json!({"amount": 5})),
        ] {
            match settle(other, &approval) {
                Prepared::Refused { code, .. } => assert_eq!(code, "approval_mismatch"),
                _ => panic!("an approval must not carry over to another call"),
            }
        }
    }
}
