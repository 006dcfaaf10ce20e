//! One step: a streamed model call, tool-call validation, concurrent tool execution.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use forge_core::agent::AgentDefinition;
use forge_core::event::RunEventKind;
use forge_core::id::{IdempotencyKey, MessageId, ToolCallId};
use forge_core::message::{Message, Role};
use forge_core::part::{
    ErrorPart, Part, PartUpdate, TextPart, ToolCallPart, ToolResultPart, Trust,
};
use forge_core::ports::model::ModelChunk;
use forge_core::ports::policy::{PolicyAction, PolicyDecision, PolicyRequest, PolicyResource};
use forge_core::ports::tool::ToolContext;
use forge_core::redact::StreamRedactor;
use forge_core::run::{FailureCode, RunFailure};
use forge_core::scope::Scope;
use forge_core::usage::Usage;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::compaction::Compacted;
use crate::context::assemble;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::execution::Execution;
use crate::meter::Meter;
use crate::model_call::{ModelCaller, Streamed};
use crate::plan::{Prepared, StepEnd};

pub(crate) struct StepRunner<'a> {
    pub(crate) engine: &'a Engine,
    pub(crate) scope: &'a Scope,
    pub(crate) agent: &'a AgentDefinition,
    pub(crate) cancel: &'a CancellationToken,
}

/// The assistant message as it streams in.
struct Streaming {
    id: MessageId,
    parts: Vec<Part>,
    /// Index of the text part that deltas currently extend.
    open_text: Option<usize>,
    /// Provider call index → (part index, raw JSON input so far).
    calls: BTreeMap<u32, (usize, String)>,
    usage: Usage,
    /// Whether the provider reported usage at all.
    usage_reported: bool,
    /// The provider's request id.
    request_id: Option<String>,
    /// The model the provider reports answering.
    provider_model: Option<String>,
    /// Scrubs the open text part's stream, holding back what could still become a secret.
    text_scrub: StreamRedactor,
    /// The same for each call's streamed input, by provider call index.
    input_scrub: BTreeMap<u32, StreamRedactor>,
}

impl StepRunner<'_> {
    /// The run's compactor, metering its calls with the run's meter.
    pub(crate) fn compactor(&self) -> crate::compaction::Compactor<'_> {
        let e = self.engine;
        crate::compaction::Compactor {
            scope: self.scope,
            agent: self.agent,
            models: &e.models,
            meter: self.meter(),
            runs: e.runs.as_ref(),
            redactor: &e.redactor,
            clock: e.clock.as_ref(),
            ids: e.ids.as_ref(),
            telemetry: &e.telemetry,
            cancel: self.cancel,
        }
    }

    /// The run's meter: its limits, and the engine's prices, quotas and ledger.
    pub(crate) fn meter(&self) -> Meter<'_> {
        let e = self.engine;
        Meter {
            scope: self.scope,
            limits: &self.agent.limits,
            prices: &e.prices,
            quotas: &e.quotas,
            ledger: e.ledger.as_ref(),
            clock: e.clock.as_ref(),
            ids: e.ids.as_ref(),
            telemetry: &e.telemetry,
        }
    }

    /// Runs one step in its `step.execute` span (the parent of its model and tool calls).
    pub(crate) async fn run(&self, cur: &mut Execution<'_>) -> Result<StepEnd, EngineError> {
        let span = self.begin_step(cur);
        let end = self.step(cur).await;
        self.end_step(cur, span, &end);
        end
    }

    /// Opens a step's span and counts the step.
    pub(crate) fn begin_step(
        &self,
        cur: &mut Execution<'_>,
    ) -> Box<dyn forge_core::telemetry::Span> {
        let t = &self.engine.telemetry;
        let span = t.tracer.start(
            forge_core::telemetry::SpanName::StepExecute,
            cur.trace.as_ref(),
            vec![("step", (cur.checkpoint.step + 1).into())],
        );
        cur.step_trace = span.context();
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
        span: Box<dyn forge_core::telemetry::Span>,
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
        span.end();
        cur.step_trace = None;
    }

    async fn step(&self, cur: &mut Execution<'_>) -> Result<StepEnd, EngineError> {
        let step = cur.checkpoint.step + 1;
        cur.emit(RunEventKind::StepStarted { step });
        let (provider_name, model_name) =
            self.agent
                .model_parts()
                .map_err(|e| EngineError::InvalidAgent {
                    name: self.agent.agent.name.clone(),
                    reason: e.to_string(),
                })?;
        let Some(provider) = self.engine.models.get(provider_name) else {
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
            match self.compactor().compact(cur, step).await? {
                Compacted::Done => request = self.request(cur, model_name).await?,
                Compacted::Nothing => {}
                Compacted::Ended(end) => return Ok(end),
            }
        }
        // What the model may call this step is exactly what it is offered.
        let callable: BTreeSet<String> = request.tools.iter().map(|t| t.name.clone()).collect();

        // Reserve before spending: the run's ceilings, then the tenant's quota (atomic in the
        // store). A call that would pass either is not made.
        let reservation = match self
            .meter()
            .reserve(cur, step, &mut request, &self.agent.model)
            .await?
        {
            Ok(call) => call,
            Err(failure) => return Ok(StepEnd::Failed(failure)),
        };

        let mut msg = Streaming {
            id: MessageId::generate(self.engine.ids.as_ref()),
            parts: Vec::new(),
            open_text: None,
            calls: BTreeMap::new(),
            usage: Usage::default(),
            usage_reported: false,
            request_id: None,
            provider_model: None,
            text_scrub: StreamRedactor::new(self.engine.redactor.clone()),
            input_scrub: BTreeMap::new(),
        };
        // A process frozen since its lease was last vouched for may have lost the run: asking the
        // model now would send this step's call a second time beside the new holder's.
        self.ensure_lease(cur).await?;
        let model = self.agent.model.as_str();
        let parent = cur.step_trace;
        let streamed = ModelCaller::new(provider.as_ref(), &self.engine.telemetry, self.cancel)
            .stream(request, model, parent.as_ref(), |chunk| {
                self.on_chunk(cur, &mut msg, chunk)
            })
            .await;
        let outcome = match streamed {
            Streamed::Finished => Ok(()),
            Streamed::Cancelled => Err(None),
            Streamed::Failed(e) => Err(Some(e)),
        };
        // Whatever ended the stream, what was held back is released (scrubbed) now.
        self.close_text(cur, &mut msg);
        self.flush_inputs(cur, &mut msg);
        if outcome.is_ok() {
            self.finish_tool_inputs(cur, &mut msg);
        }
        cur.checkpoint.step = step;
        self.meter().settle(
            cur,
            step,
            model,
            reservation,
            crate::meter::Reported {
                usage: msg.usage_reported.then_some(msg.usage),
                request_id: msg.request_id.clone(),
                provider_model: msg.provider_model.clone(),
            },
        )?;

        let failure = match outcome {
            Ok(()) => None,
            Err(None) => {
                self.keep_message(cur, msg);
                return Ok(StepEnd::Cancelled);
            }
            Err(Some(e)) => Some(crate::plan::model_failure(&e)),
        };
        if let Some(failure) = failure {
            self.add_part(
                cur,
                &mut msg,
                Part::Error(ErrorPart {
                    code: failure.code.name().to_owned(),
                    message: failure.message.clone(),
                }),
            );
            self.keep_message(cur, msg);
            return Ok(StepEnd::Failed(failure));
        }

        let raw_inputs: BTreeMap<usize, String> = msg.calls.values().cloned().collect();
        let calls: Vec<(ToolCallPart, usize)> = msg
            .parts
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p {
                Part::ToolCall(c) => Some((c.clone(), raw_inputs.get(&i).map_or(0, String::len))),
                _ => None,
            })
            .collect();
        let text: String = msg
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::Text(t) => Some(t.text.as_str()),
                _ => None,
            })
            .collect();
        if calls.is_empty() {
            if let Some(schema) = &self.agent.output_schema {
                return Ok(self.structured_answer(cur, msg, &text, schema, step));
            }
            self.keep_message(cur, msg);
            // Built from the scrubbed parts, and scrubbed once more as a whole.
            let text = self.engine.redactor.redact(&text).into_owned();
            return Ok(StepEnd::Completed { text });
        }
        if step >= self.agent.limits.max_steps {
            self.keep_message(cur, msg);
            return Ok(StepEnd::Failed(RunFailure {
                code: FailureCode::StepLimitExceeded,
                message: format!(
                    "the run reached its limit of {} steps with tool calls pending",
                    self.agent.limits.max_steps
                ),
            }));
        }
        let prepared = self.prepare(&calls, &callable);
        let (prepared, raised) = self.gate(cur, step, prepared).await;
        if !raised.is_empty() {
            // No tool of this step runs until a person has settled every interaction.
            for i in &raised {
                self.add_part(cur, &mut msg, Self::request_part(i));
                Self::request_event(cur, i);
            }
            self.keep_message(cur, msg);
            let reason = Self::wait_reason(&raised);
            cur.interactions = raised;
            return Ok(StepEnd::Parked(reason));
        }
        self.keep_message(cur, msg);
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
        let history = [cur.history.clone(), cur.messages.clone()].concat();
        let history = crate::compaction::with_summary(cur.summary.as_ref(), history);
        let history = crate::files::expand(
            self.engine.files.as_deref(),
            &self.engine.redactor,
            self.scope,
            history,
        )
        .await?;
        // Session state is application data: a secret stored in it never reaches the model.
        let mut state = cur.state.clone();
        let mut values = serde_json::Value::Object(std::mem::take(&mut state.values));
        self.engine.redactor.redact_json(&mut values);
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
        cur.held
            .ensure(
                self.engine.runs.as_ref(),
                self.engine.clock.as_ref(),
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
        let mut audit = self.denials(cur, &prepared);
        audit.extend(self.external_writes(cur, &prepared));
        let draft = std::sync::Mutex::new(crate::state::Draft::new(&cur.state));
        let lost = std::sync::Mutex::new(None);
        let executed = self.execute_tools(cur, prepared, &draft, &lost).await;
        if let Some(e) = lost.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(EngineError::Store(e));
        }
        Ok(match executed {
            Some(results) => {
                cur.audit.extend(audit);
                let draft = draft.into_inner().unwrap_or_else(|p| p.into_inner());
                if let Some((update, keys)) = draft.finish() {
                    cur.emit(RunEventKind::StateUpdated {
                        version: update.expected_version + 1,
                        keys,
                    });
                    cur.state_update = Some(update);
                }
                let id = MessageId::generate(self.engine.ids.as_ref());
                for (index, part) in results.iter().enumerate() {
                    cur.emit(RunEventKind::PartAdded {
                        message_id: id,
                        role: Role::Tool,
                        index: index as u32,
                        part: part.clone(),
                    });
                }
                cur.messages.push(Message {
                    id,
                    run_id: cur.run.id,
                    role: Role::Tool,
                    parts: results,
                    created_at: self.engine.clock.now(),
                });
                StepEnd::Continue
            }
            None => {
                // Cancelled mid-tools: calls may have acted; keep their audit entries.
                cur.audit.extend(audit);
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
        mut msg: Streaming,
        text: &str,
        schema: &serde_json::Value,
        step: u32,
    ) -> StepEnd {
        match crate::structured::check(text, schema) {
            Ok(value) => {
                self.add_part(
                    cur,
                    &mut msg,
                    Part::StructuredOutput(forge_core::part::StructuredOutputPart { value }),
                );
                self.keep_message(cur, msg);
                let text = self.engine.redactor.redact(text).into_owned();
                StepEnd::Completed { text }
            }
            Err(why) => {
                self.keep_message(cur, msg);
                if cur.checkpoint.repairs >= crate::structured::REPAIRS
                    || step >= self.agent.limits.max_steps
                {
                    return StepEnd::Failed(RunFailure {
                        code: FailureCode::StructuredOutputInvalid,
                        message: format!(
                            "the final answer does not match the agent's output schema: {why}"
                        ),
                    });
                }
                cur.checkpoint.repairs += 1;
                let id = MessageId::generate(self.engine.ids.as_ref());
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
                cur.messages.push(Message {
                    id,
                    run_id: cur.run.id,
                    role: Role::User,
                    parts: vec![part],
                    created_at: self.engine.clock.now(),
                });
                StepEnd::Continue
            }
        }
    }

    fn add_part(&self, cur: &mut Execution<'_>, msg: &mut Streaming, part: Part) -> usize {
        let index = msg.parts.len();
        cur.emit(RunEventKind::PartAdded {
            message_id: msg.id,
            role: Role::Assistant,
            index: index as u32,
            part: part.clone(),
        });
        msg.parts.push(part);
        index
    }

    fn on_text(&self, cur: &mut Execution<'_>, msg: &mut Streaming, text: String) {
        match msg.open_text {
            Some(index) => {
                if let Some(Part::Text(t)) = msg.parts.get_mut(index) {
                    t.text.push_str(&text);
                }
                cur.emit(RunEventKind::PartUpdated {
                    message_id: msg.id,
                    index: index as u32,
                    update: PartUpdate::TextDelta { text },
                });
            }
            None => {
                let index = self.add_part(cur, msg, Part::Text(TextPart { text }));
                msg.open_text = Some(index);
            }
        }
    }

    fn on_chunk(&self, cur: &mut Execution<'_>, msg: &mut Streaming, chunk: ModelChunk) {
        match chunk {
            ModelChunk::TextDelta(text) if text.is_empty() => {}
            ModelChunk::TextDelta(text) => {
                // Secrets are scrubbed from what the model says too, over the whole stream: a
                // secret split across deltas is held back until it can be recognised.
                let ready = msg.text_scrub.push(&text);
                if !ready.is_empty() {
                    self.on_text(cur, msg, ready);
                }
            }
            ModelChunk::ToolCallStart {
                index: call,
                id,
                name,
            } => {
                self.close_text(cur, msg);
                let part = Part::ToolCall(ToolCallPart {
                    tool_call_id: ToolCallId(id),
                    tool_name: name,
                    input: serde_json::Value::Null,
                });
                let index = self.add_part(cur, msg, part);
                msg.calls.insert(call, (index, String::new()));
            }
            ModelChunk::ToolCallDelta { index: call, json } => {
                if let Some((index, raw)) = msg.calls.get_mut(&call) {
                    raw.push_str(&json);
                    let index = *index as u32;
                    let json = msg
                        .input_scrub
                        .entry(call)
                        .or_insert_with(|| StreamRedactor::new(self.engine.redactor.clone()))
                        .push(&json);
                    if !json.is_empty() {
                        cur.emit(RunEventKind::PartUpdated {
                            message_id: msg.id,
                            index,
                            update: PartUpdate::InputDelta { json },
                        });
                    }
                }
            }
            ModelChunk::Usage(u) => {
                msg.usage = u;
                msg.usage_reported = true;
            }
            ModelChunk::RequestId(id) => msg.request_id = Some(id),
            ModelChunk::Model(model) => msg.provider_model = Some(model),
            ModelChunk::Finish(_) => {}
        }
    }

    /// Ends the open text part: what its stream held back is released, scrubbed.
    fn close_text(&self, cur: &mut Execution<'_>, msg: &mut Streaming) {
        let rest = msg.text_scrub.finish();
        if !rest.is_empty() {
            self.on_text(cur, msg, rest);
        }
        msg.open_text = None;
    }

    /// Releases what each call's input stream held back, scrubbed.
    fn flush_inputs(&self, cur: &mut Execution<'_>, msg: &mut Streaming) {
        for (call, mut scrub) in std::mem::take(&mut msg.input_scrub) {
            let json = scrub.finish();
            if let (false, Some((index, _))) = (json.is_empty(), msg.calls.get(&call)) {
                cur.emit(RunEventKind::PartUpdated {
                    message_id: msg.id,
                    index: *index as u32,
                    update: PartUpdate::InputDelta { json },
                });
            }
        }
    }

    /// Parses each streamed tool input; a parsed input replaces the part's `null`. Input that is not
    /// JSON stays `null` and is refused before execution.
    fn finish_tool_inputs(&self, cur: &mut Execution<'_>, msg: &mut Streaming) {
        let calls: Vec<(usize, String)> = msg.calls.values().cloned().collect();
        for (index, raw) in calls {
            let raw = if raw.trim().is_empty() {
                "{}"
            } else {
                raw.as_str()
            };
            if let Ok(mut input) = serde_json::from_str::<serde_json::Value>(raw)
                && let Some(Part::ToolCall(call)) = msg.parts.get_mut(index)
            {
                // A secret the model writes into a call is scrubbed before anything sees the
                // call, the tool included: tools take credentials from the deployment, never
                // from the model.
                self.engine.redactor.redact_json(&mut input);
                call.input = input;
                let part = Part::ToolCall(call.clone());
                cur.emit(RunEventKind::PartUpdated {
                    message_id: msg.id,
                    index: index as u32,
                    update: PartUpdate::Replaced { part },
                });
            }
        }
    }

    fn keep_message(&self, cur: &mut Execution<'_>, mut msg: Streaming) {
        for part in &mut msg.parts {
            if let Part::Text(t) = part
                && let std::borrow::Cow::Owned(scrubbed) = self.engine.redactor.redact(&t.text)
            {
                t.text = scrubbed;
            }
        }
        if !msg.parts.is_empty() {
            cur.messages.push(Message {
                id: msg.id,
                run_id: cur.run.id,
                role: Role::Assistant,
                parts: msg.parts,
                created_at: self.engine.clock.now(),
            });
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
        let limits = &self.agent.limits;
        calls
            .iter()
            .enumerate()
            .map(|(i, (call, raw_len))| {
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
                let registered = match self.engine.tools.get(&call.tool_name) {
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
                if *raw_len > limits.max_tool_input_bytes {
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
                let decision = self.engine.authorizer.decide(&PolicyRequest {
                    scope: self.scope,
                    action: PolicyAction::Execute,
                    resource: PolicyResource::Tool(registered.tool.spec()),
                    input: Some(&call.input),
                });
                match decision {
                    PolicyDecision::Allow => crate::skills::gate(
                        &self.engine.visible_skills(self.scope, self.agent),
                        self.engine.authorizer.as_ref(),
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
            })
            .collect()
    }

    /// The version of the tool `call` names, recorded with its result.
    fn tool_version(&self, call: &ToolCallPart) -> Option<String> {
        self.engine
            .tools
            .get(&call.tool_name)
            .map(|r| r.tool.spec().version.clone())
    }

    /// Runs the valid calls concurrently; `None` when cancelled first. A call whose lease check
    /// fails does not run; the first such error is put in `lost`.
    async fn execute_tools(
        &self,
        cur: &Execution<'_>,
        prepared: Vec<Prepared>,
        draft: &std::sync::Mutex<crate::state::Draft>,
        lost: &std::sync::Mutex<Option<forge_core::Error>>,
    ) -> Option<Vec<Part>> {
        let timeout = Duration::from_millis(self.agent.limits.tool_timeout_ms);
        let max_out = self.agent.limits.max_tool_output_bytes;
        let t = &self.engine.telemetry;
        let futures = prepared.into_iter().map(|p| async move {
            let mut citation = None;
            let (tool, denied) = match &p {
                Prepared::Refused { call, .. }
                | Prepared::Answered { call, .. }
                | Prepared::Run { call } => (call.tool_name.clone(), false),
                Prepared::Denied { call, .. } => (call.tool_name.clone(), true),
            };
            let span = t.tracer.start(
                forge_core::telemetry::SpanName::ToolCall,
                cur.step_trace.as_ref(),
                vec![("tool", tool.clone().into())],
            );
            let (call, result, tool_version) = match p {
                Prepared::Refused {
                    call,
                    code,
                    message,
                } => (call, Err((code, message)), None),
                Prepared::Denied { call, message, .. } => (call, Err(("forbidden", message)), None),
                Prepared::Answered { call, output } => (call, Ok(output), None),
                Prepared::Run { call } if call.tool_name == crate::state::UPDATE_STATE => {
                    let result = draft
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .apply(&call.input);
                    let version = self.tool_version(&call);
                    (call, result, version)
                }
                Prepared::Run { call } if call.tool_name == crate::cite::CITE => {
                    let (result, cited) =
                        crate::cite::answer(self.engine.citations.as_deref(), self.scope, &call)
                            .await;
                    citation = cited;
                    let version = self.tool_version(&call);
                    (call, result, version)
                }
                Prepared::Run { call } => {
                    let ctx = ToolContext {
                        scope: self.scope.clone(),
                        run_id: cur.run.id,
                        thread_id: cur.run.thread_id,
                        tool_call_id: call.tool_call_id.clone(),
                        idempotency_key: IdempotencyKey::for_tool_call(
                            cur.run.id,
                            &call.tool_call_id,
                        ),
                        lease_token: cur.lease.token,
                    };
                    let skill =
                        crate::skills::answer(&self.engine.skills, &self.agent.limits, &call).await;
                    let result = match (skill, self.engine.tools.get(&call.tool_name)) {
                        (Some(answered), _) => answered,
                        (None, None) => Err((
                            "unknown_tool",
                            format!("there is no tool named {:?}", call.tool_name),
                        )),
                        // Immediately before the tool acts: a frozen process that lost the run
                        // must not act a second time beside the new holder.
                        (None, Some(_)) if let Err(e) = self.ensure_lease(cur).await => {
                            let mut first = lost.lock().unwrap_or_else(|p| p.into_inner());
                            first.get_or_insert(e);
                            Err(("lease_lost", "the run's lease was lost".to_owned()))
                        }
                        (None, Some(r)) => match tokio::time::timeout(
                            timeout,
                            r.tool.call(&ctx, call.input.clone()),
                        )
                        .await
                        {
                            Err(_) => Err((
                                "tool_timeout",
                                format!(
                                    "the tool did not finish within {} ms",
                                    timeout.as_millis()
                                ),
                            )),
                            Ok(Err(e)) => Err((e.code(), e.to_string())),
                            Ok(Ok(out)) => Ok(out),
                        },
                    };
                    let result = result.and_then(|out| {
                        let size = serde_json::to_vec(&out)
                            .map(|v| v.len())
                            .unwrap_or(usize::MAX);
                        if size > max_out {
                            Err((
                                "output_too_large",
                                format!("tool output is {size} bytes; the limit is {max_out}"),
                            ))
                        } else {
                            Ok(out)
                        }
                    });
                    let version = self.tool_version(&call);
                    (call, result, version)
                }
            };
            let outcome = match (&result, denied) {
                (_, true) => "denied",
                (Ok(_), _) => "ok",
                (Err(_), _) => "error",
            };
            if let Err((code, _)) = &result {
                span.fail(code);
                t.meter.record(
                    forge_core::telemetry::Instrument::ToolErrors,
                    1.0,
                    &[("tool", &tool), ("code", code)],
                );
            }
            t.meter.record(
                forge_core::telemetry::Instrument::ToolCalls,
                1.0,
                &[("tool", &tool), ("outcome", outcome)],
            );
            span.set("outcome", outcome.into());
            span.end();
            let (mut output, is_error) = match result {
                Ok(out) => (out, false),
                Err((code, message)) => (json!({ "code": code, "message": message }), true),
            };
            // Secrets never enter the prompt, the store or an observer through a tool result.
            self.engine.redactor.redact_json(&mut output);
            let result = Part::ToolResult(ToolResultPart {
                tool_call_id: call.tool_call_id,
                tool_name: call.tool_name,
                output,
                is_error,
                trust: Trust::Untrusted,
                tool_version,
            });
            crate::cite::with_citation(result, citation)
        });
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => None,
            results = futures_util::future::join_all(futures) => Some(results.into_iter().flatten().collect()),
        }
    }
}
