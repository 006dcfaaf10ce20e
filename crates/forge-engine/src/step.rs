//! One step: a streamed model call, tool-call validation, concurrent tool execution.

use std::collections::BTreeSet;

use forge_core::agent::AgentDefinition;
use forge_core::event::RunEventKind;
use forge_core::id::{MessageId, ToolCallId};
use forge_core::interaction::Interaction;
use forge_core::message::{Message, Role};
use forge_core::part::{ErrorPart, Part, ToolCallPart};
use forge_core::ports::model::ModelErrorKind;
use forge_core::ports::policy::{PolicyAction, PolicyDecision, PolicyRequest, PolicyResource};
use forge_core::run::{FailureCode, RunFailure};
use forge_core::scope::Scope;
use tokio_util::sync::CancellationToken;

use crate::assistant::AssistantMessage;
use crate::compaction::Compacted;
use crate::context::assemble;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::execution::Execution;
use crate::model_call::{ModelCaller, Streamed};
use crate::plan::{Prepared, StepEnd};

/// The tool name given a call whose failed generation names none.
const UNNAMED_CALL: &str = "unnamed_tool_call";

pub(crate) struct StepRunner<'a> {
    pub(crate) engine: &'a Engine,
    pub(crate) scope: &'a Scope,
    pub(crate) agent: &'a AgentDefinition,
    pub(crate) cancel: &'a CancellationToken,
}

impl StepRunner<'_> {
    /// Executes the parked step's calls now that its interactions are settled.
    /// Resumes the parked step in its `step.execute` span.
    pub(crate) async fn resume(
        &self,
        cur: &mut Execution<'_>,
        raised: &[Interaction],
    ) -> Result<StepEnd, EngineError> {
        let span = self.begin_step(cur);
        let end = self.resume_step(cur, raised).await;
        self.end_step(cur, span, &end);
        end
    }

    async fn resume_step(
        &self,
        cur: &mut Execution<'_>,
        raised: &[Interaction],
    ) -> Result<StepEnd, EngineError> {
        let run_id = cur.run().id;
        let Some(parked) = cur
            .history()
            .iter()
            .rev()
            .find(|m| m.run_id == run_id && m.role == Role::Assistant)
        else {
            return Err(forge_core::Error::invalid(format!(
                "run {run_id} waits but its parked message is missing"
            ))
            .into());
        };
        let calls: Vec<(ToolCallPart, usize)> = parked
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::ToolCall(c) => Some((c.clone(), c.input.to_string().len())),
                _ => None,
            })
            .collect();
        // Decided again on resume: permissions may have changed while the run waited.
        let callable = self.engine.callable(self.scope, self.agent);
        let prepared = self
            .prepare(&calls, &callable)
            .into_iter()
            .map(|p| match p {
                Prepared::Run { call } => crate::hitl::settle(call, raised),
                other => other,
            })
            .collect();
        self.run_tools(cur, prepared).await
    }

    /// Runs one step in its `step.execute` span (the parent of its model and tool calls).
    pub(crate) async fn run(&self, cur: &mut Execution<'_>) -> Result<StepEnd, EngineError> {
        let span = self.begin_step(cur);
        let end = self.step(cur).await;
        self.end_step(cur, span, &end);
        end
    }

    /// Opens a step's span and counts the step.
    pub(crate) fn begin_step(&self, cur: &mut Execution<'_>) -> forge_core::telemetry::Span {
        use forge_core::telemetry::{Parent, SpanName};
        let t = self.engine.telemetry();
        let span = t.span(SpanName::StepExecute, Parent::Span(cur.trace()));
        span.set("step", (cur.checkpoint().step + 1).into());
        cur.set_step_span(span.clone());
        t.meter.record(
            forge_core::telemetry::Instrument::RunSteps,
            1.0,
            &[("agent", &self.agent.agent.name)],
        );
        span
    }

    /// Ends a step's span with how the step ended.
    pub(crate) fn end_step(
        &self,
        cur: &mut Execution<'_>,
        span: forge_core::telemetry::Span,
        end: &Result<StepEnd, EngineError>,
    ) {
        let outcome = match end {
            Ok(StepEnd::Continue) => "continue",
            Ok(StepEnd::Completed { .. }) => "completed",
            Ok(StepEnd::Cancelled) => "cancelled",
            Ok(StepEnd::Failed(f)) => {
                span.fail(f.code.name());
                "failed"
            }
            Ok(StepEnd::Parked(_)) => "parked",
            Err(e) => {
                span.fail(e.code());
                "error"
            }
        };
        span.set("outcome", outcome.into());
        cur.set_step_span(forge_core::telemetry::Span::none());
        span.end();
    }

    async fn step(&self, cur: &mut Execution<'_>) -> Result<StepEnd, EngineError> {
        let step = cur.checkpoint().step + 1;
        cur.emit(RunEventKind::StepStarted { step });
        let (provider_name, model_name) =
            self.agent
                .model_parts()
                .map_err(|e| EngineError::InvalidAgent {
                    name: self.agent.agent.name.clone(),
                    reason: e.to_string(),
                })?;
        let Some(provider) = self.engine.model(provider_name) else {
            return Ok(StepEnd::Failed(RunFailure {
                code: FailureCode::ModelUnavailable,
                message: format!("model provider {provider_name} is not configured"),
            }));
        };
        let mut request = self.request(cur, model_name).await?;
        // Over the agent's budget, the oldest history is summarised first (within this step,
        // metered with it, and written by its commit).
        if let Some(config) = &self.agent.compaction
            && crate::context::estimate_usage(&request).input_tokens > config.max_tokens
        {
            match self
                .engine
                .compactor(self.scope, self.agent, self.cancel)
                .compact(cur, step)
                .await?
            {
                Compacted::Done => request = self.request(cur, model_name).await?,
                Compacted::Nothing => {}
                Compacted::Ended(end) => return Ok(end),
            }
        }
        // What the model may call this step is exactly what it is offered.
        let callable: BTreeSet<String> = request.tools.iter().map(|t| t.name.clone()).collect();
        let msg = match self
            .call_model(cur, step, provider.as_ref(), request)
            .await?
        {
            Ok(msg) => msg,
            Err(end) => return Ok(end),
        };
        self.act(cur, step, msg, &callable).await
    }

    /// The step's model call: reserved before it is made, streamed into the assistant message,
    /// settled however it ended. The message, or how the step ends when the call did not finish
    /// (the message so far is kept for the commit).
    async fn call_model(
        &self,
        cur: &mut Execution<'_>,
        step: u32,
        provider: &dyn forge_core::ports::model::ModelProvider,
        mut request: forge_core::ports::model::ModelRequest,
    ) -> Result<Result<AssistantMessage, StepEnd>, EngineError> {
        // Reserve before spending: the run's ceilings, then the tenant's quota (atomic in the
        // store). A call that would pass either is not made.
        let reservation = match self
            .engine
            .meter(self.scope, &self.agent.limits)
            .reserve(cur, step, &mut request, &self.agent.model)
            .await?
        {
            Ok(call) => call,
            Err(failure) => return Ok(Err(StepEnd::Failed(failure))),
        };

        let mut msg = AssistantMessage::new(
            MessageId::generate(self.engine.services().ids.as_ref()),
            self.engine.services().redactor.clone(),
        );
        // A process frozen since its lease was last vouched for may have lost the run: asking the
        // model now would send this step's call a second time beside the new holder's.
        self.ensure_lease(cur).await?;
        let model = self.agent.model.as_str();
        let parent = cur.step_span().clone();
        let streamed = ModelCaller::new(provider, self.engine.telemetry(), self.cancel)
            .stream(request, model, &parent, |chunk| msg.on_chunk(cur, chunk))
            .await;
        // Whatever ended the stream, what was held back is released (scrubbed) now.
        msg.close_text(cur);
        msg.flush_inputs(cur);
        if let Streamed::Finished = streamed {
            msg.finish_tool_inputs(cur);
        }
        cur.record_step(step);
        self.engine.meter(self.scope, &self.agent.limits).settle(
            cur,
            step,
            model,
            reservation,
            msg.reported(),
        )?;
        let end = match streamed {
            Streamed::Finished => return Ok(Ok(msg)),
            Streamed::Failed(ref e)
                if let ModelErrorKind::InvalidToolCall { tool, message } = e.kind() =>
            {
                // The model erred, not the provider: its call goes back to it as refused, as a
                // call whose input is not JSON does, and the run goes on.
                let id = ToolCallId(format!(
                    "unparsed_{}",
                    self.engine.services().ids.next_uuid().simple()
                ));
                let tool = tool.as_deref().unwrap_or(UNNAMED_CALL);
                msg.add_garbled_call(cur, id, tool, message);
                return Ok(Ok(msg));
            }
            Streamed::Cancelled => StepEnd::Cancelled,
            Streamed::Failed(e) => {
                let failure = crate::plan::model_failure(&e, &self.engine.services().redactor);
                msg.add_part(
                    cur,
                    Part::Error(ErrorPart {
                        code: failure.code.name().to_owned(),
                        message: failure.message.clone(),
                    }),
                );
                StepEnd::Failed(failure)
            }
        };
        msg.keep(cur, self.engine.now());
        Ok(Err(end))
    }

    /// What the step does with the model's message: a final answer, or its tool calls checked,
    /// gated (parking the run when a person must act) and run.
    async fn act(
        &self,
        cur: &mut Execution<'_>,
        step: u32,
        mut msg: AssistantMessage,
        callable: &BTreeSet<String>,
    ) -> Result<StepEnd, EngineError> {
        let calls = msg.calls();
        let text = msg.text();
        if calls.is_empty() {
            if let Some(schema) = &self.agent.output_schema {
                return Ok(self.structured_answer(cur, msg, &text, schema, step));
            }
            msg.keep(cur, self.engine.now());
            // Built from the scrubbed parts, and scrubbed once more as a whole.
            let text = self.engine.services().redactor.redact(&text).into_owned();
            return Ok(StepEnd::Completed { text });
        }
        if step >= self.agent.limits.max_steps {
            msg.keep(cur, self.engine.now());
            return Ok(StepEnd::Failed(RunFailure {
                code: FailureCode::StepLimitExceeded,
                message: format!(
                    "the run reached its limit of {} steps with tool calls pending",
                    self.agent.limits.max_steps
                ),
            }));
        }
        let mut prepared = self.prepare(&calls, callable);
        if let Some((id, why)) = msg.garbled() {
            crate::plan::refuse_garbled(&mut prepared, id, why);
        }
        let (prepared, raised) = self
            .engine
            .approvals(self.scope, self.agent)
            .gate(cur, step, prepared)
            .await;
        if !raised.is_empty() {
            // No tool of this step runs until a person has settled every interaction.
            for i in &raised {
                msg.add_part(cur, crate::hitl::request_part(i));
                crate::hitl::request_event(cur, i);
            }
            msg.keep(cur, self.engine.now());
            let reason = crate::hitl::wait_reason(&raised);
            cur.park(raised);
            return Ok(StepEnd::Parked(reason));
        }
        msg.keep(cur, self.engine.now());
        self.run_tools(cur, prepared).await
    }

    /// The request for the step's model call: the instructions, the session state (scrubbed),
    /// the thread's summary and the history after it, and the tools offered.
    async fn request(
        &self,
        cur: &Execution<'_>,
        model_name: &str,
    ) -> Result<forge_core::ports::model::ModelRequest, EngineError> {
        // The thread's history after its summary as read when this execution began, plus what it
        // committed since (only the active run writes to its thread), plus what this step has
        // not committed yet (the run's input, on its first step).
        let history = [cur.history(), cur.messages()].concat();
        let history = crate::compaction::with_summary(cur.summary(), history);
        let history = crate::files::expand(
            self.engine.files(),
            &self.engine.services().redactor,
            self.scope,
            history,
        )
        .await?;
        // Session state is application data: a secret stored in it never reaches the model.
        let mut state = cur.state().clone();
        let mut values = serde_json::Value::Object(std::mem::take(&mut state.values));
        self.engine.services().redactor.redact_json(&mut values);
        if let serde_json::Value::Object(values) = values {
            state.values = values;
        }
        Ok(assemble(
            self.agent,
            model_name,
            &state,
            history,
            self.engine.offered(self.scope, self.agent),
        ))
    }

    /// Makes sure of the run's lease immediately before a model or tool call (`crate::lease`).
    pub(crate) async fn ensure_lease(&self, cur: &Execution<'_>) -> Result<(), forge_core::Error> {
        cur.ensure_lease(
            self.engine.runs().as_ref(),
            self.engine.services().clock.as_ref(),
            self.scope,
        )
        .await
    }

    /// Runs the step's calls, audits its external writes, and adds the tool-result message. The
    /// lease is made sure of immediately before each call (`crate::lease`): lost before a call,
    /// that call does not run and the step is abandoned with the lease's error.
    pub(crate) async fn run_tools(
        &self,
        cur: &mut Execution<'_>,
        prepared: Vec<Prepared>,
    ) -> Result<StepEnd, EngineError> {
        let audit = self
            .engine
            .executor(self.scope, &self.agent.limits, self.cancel)
            .audit(cur, &prepared);
        let draft = std::sync::Arc::new(crate::state::StepDraft::new(cur.state()));
        let lost = parking_lot::Mutex::new(None);
        let executed = self
            .engine
            .executor(self.scope, &self.agent.limits, self.cancel)
            .execute(cur, prepared, &draft, &lost)
            .await;
        if let Some(e) = lost.into_inner() {
            return Err(EngineError::Store(e));
        }
        Ok(match executed {
            Some(results) => {
                cur.add_audit(audit);
                if let Some((update, keys)) = draft.finish() {
                    cur.emit(RunEventKind::StateUpdated {
                        version: update.expected_version + 1,
                        keys,
                    });
                    cur.set_state_update(update);
                }
                let id = MessageId::generate(self.engine.services().ids.as_ref());
                for (index, part) in results.iter().enumerate() {
                    cur.emit(RunEventKind::PartAdded {
                        message_id: id,
                        role: Role::Tool,
                        index: index as u32,
                        part: part.clone(),
                    });
                }
                cur.push_message(Message {
                    id,
                    run_id: cur.run().id,
                    role: Role::Tool,
                    parts: results,
                    created_at: self.engine.now(),
                });
                StepEnd::Continue
            }
            None => {
                // Cancelled mid-tools: calls may have acted; keep their audit entries.
                cur.add_audit(audit);
                StepEnd::Cancelled
            }
        })
    }

    /// A final answer under an output schema: valid JSON matching it completes the run with a
    /// structured-output part; otherwise the model is told what is wrong and asked once to
    /// repair its answer (a user message committed with this step), and a second miss fails the
    /// run with `structured_output_invalid`.
    fn structured_answer(
        &self,
        cur: &mut Execution<'_>,
        mut msg: AssistantMessage,
        text: &str,
        schema: &serde_json::Value,
        step: u32,
    ) -> StepEnd {
        match crate::structured::check(text, schema) {
            Ok(value) => {
                msg.add_part(
                    cur,
                    Part::StructuredOutput(forge_core::part::StructuredOutputPart { value }),
                );
                msg.keep(cur, self.engine.now());
                let text = self.engine.services().redactor.redact(text).into_owned();
                StepEnd::Completed { text }
            }
            Err(why) => {
                msg.keep(cur, self.engine.now());
                if cur.checkpoint().repairs >= crate::structured::REPAIRS
                    || step >= self.agent.limits.max_steps
                {
                    return StepEnd::Failed(RunFailure {
                        code: FailureCode::StructuredOutputInvalid,
                        message: format!(
                            "the final answer does not match the agent's output schema: {why}"
                        ),
                    });
                }
                cur.count_repair();
                let id = MessageId::generate(self.engine.services().ids.as_ref());
                let part = Part::text(format!(
                    "Your answer does not match the required JSON Schema ({why}). Reply again \
                     with only a JSON value that matches it."
                ));
                cur.emit(RunEventKind::PartAdded {
                    message_id: id,
                    role: Role::User,
                    index: 0,
                    part: part.clone(),
                });
                cur.push_message(Message {
                    id,
                    run_id: cur.run().id,
                    role: Role::User,
                    parts: vec![part],
                    created_at: self.engine.now(),
                });
                StepEnd::Continue
            }
        }
    }

    /// Checks each call: a tool the agent has, input that parsed, fits and matches the schema.
    /// `calls` pairs each call with the size of its raw streamed input.
    /// `callable` names the tools the model may call this step: exactly what it was offered.
    pub(crate) fn prepare(
        &self,
        calls: &[(ToolCallPart, usize)],
        callable: &BTreeSet<String>,
    ) -> Vec<Prepared> {
        calls
            .iter()
            .enumerate()
            .map(|(i, (call, raw_len))| self.check_call(i, call, *raw_len, callable))
            .collect()
    }

    /// Checks the step's `i`th call, whose raw streamed input was `raw_len` bytes.
    fn check_call(
        &self,
        i: usize,
        call: &ToolCallPart,
        raw_len: usize,
        callable: &BTreeSet<String>,
    ) -> Prepared {
        let limits = &self.agent.limits;
        let refuse = |code, message: String| Prepared::Refused {
            call: call.clone(),
            code,
            message,
        };
        if i as u32 >= limits.max_tool_calls_per_step {
            return refuse(
                "too_many_tool_calls",
                format!(
                    "at most {} tool calls run per step",
                    limits.max_tool_calls_per_step
                ),
            );
        }
        // A tool this run may not see is refused exactly like one that does not exist.
        let registered = match self.engine.tool(&call.tool_name) {
            Some(r) if callable.contains(&call.tool_name) => r,
            found => {
                return Prepared::Denied {
                    call: call.clone(),
                    message: format!(
                        "there is no tool named {:?} available to this run",
                        call.tool_name
                    ),
                    reason: if found.is_some() {
                        "not discoverable by this scope".into()
                    } else {
                        "no such tool".into()
                    },
                };
            }
        };
        if raw_len > limits.max_tool_input_bytes {
            return refuse(
                "input_too_large",
                format!(
                    "tool input is {raw_len} bytes; the limit is {}",
                    limits.max_tool_input_bytes
                ),
            );
        }
        if call.input.is_null() {
            return refuse("invalid_json", "tool input is not valid JSON".into());
        }
        // Arguments bound to the caller are the caller's, whatever the model said: validated,
        // authorized, approved and executed as bound.
        let bound;
        let call = match registered.bind(&call.input, self.scope) {
            Some(input) => {
                bound = ToolCallPart {
                    input,
                    ..call.clone()
                };
                &bound
            }
            None => call,
        };
        let violations = registered.violations(&call.input);
        if !violations.is_empty() {
            return refuse(
                "invalid_input",
                format!(
                    "tool input does not match the schema: {}",
                    violations.join("; ")
                ),
            );
        }
        // Asked again at execution, with the actual input.
        let decision = self.engine.authorizer().decide(&PolicyRequest {
            scope: self.scope,
            action: PolicyAction::Execute,
            resource: PolicyResource::Tool(registered.tool.spec()),
            input: Some(&call.input),
        });
        match decision {
            PolicyDecision::Allow => crate::skills::gate(
                || self.engine.visible_skills(self.scope, self.agent),
                self.engine.authorizer(),
                self.scope,
                call,
            )
            .unwrap_or_else(|| Prepared::Run { call: call.clone() }),
            PolicyDecision::Deny { reason } => Prepared::Denied {
                call: call.clone(),
                message: format!("this call of {:?} is not permitted", call.tool_name),
                reason,
            },
        }
    }
}
