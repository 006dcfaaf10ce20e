//! Durable application jobs: work an application hands to Forge so that it finishes even if the
//! process that asked dies mid-way — a rollback over every document, a record routed to its
//! workflow, an import.
//!
//! A job is a run. Its agent, `job.NAME`, has one tool, `job.NAME`, and the built-in `job`
//! model, which calls that tool once with the job's input and answers with what it returned. So
//! a job is queued, claimed and leased like any run, taken over by any worker once its holder's
//! lease lapses, authorized by the policies (the tool's [`Job::permission`]), audited and
//! listed like any run — nothing about it is new machinery. What follows from that: a handler
//! runs again after a takeover, so it must be safe to repeat; the [`ToolContext`] it gets has an
//! idempotency key and a fencing token that are the same on every attempt of the job.
//!
//! [`ForgeBuilder::job`](crate::ForgeBuilder::job) registers one; [`Forge::jobs`] gives the
//! handle whose [`Jobs::enqueue`] queues it — under a request key, a job sent again is the job
//! already started — and whose [`Jobs::run`] also waits for its answer.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::agent::{AgentDefinition, AgentRef, RunLimits};
use forge_core::id::UuidV7Generator;
use forge_core::message::Role;
use forge_core::part::Part;
use forge_core::ports::model::{
    FinishReason, ModelChunk, ModelError, ModelProvider, ModelRequest, ModelStream,
};
use forge_core::ports::store::{NewRun, NewThread};
use forge_core::ports::tool::{
    ApprovalPolicy, Tool, ToolClassification, ToolContext, ToolError, ToolSpec,
};
use forge_core::scope::Scope;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use crate::run::Outcome;
use crate::{Error, Forge, RunHandle};

/// The model prefix of jobs' agents: the built-in provider that calls the job's tool.
pub const JOB_MODEL: &str = "job";

/// The call id the job model gives its one call.
const CALL: &str = "job";

type Handler =
    dyn Fn(ToolContext, Value) -> BoxFuture<'static, Result<Value, ToolError>> + Send + Sync;

/// A kind of durable work: a name and the async function that does it.
#[derive(Clone)]
pub struct Job {
    name: String,
    permission: Option<String>,
    timeout: std::time::Duration,
    handler: Arc<Handler>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("name", &self.name)
            .field("permission", &self.permission)
            .finish_non_exhaustive()
    }
}

impl Job {
    /// The job `name` (letters, digits, `_`, `-`, `.`) done by `handler`, which gets the call's
    /// context and the job's input (a JSON object) and answers a JSON value. It must be safe to
    /// repeat: a job taken over after its process died runs it again.
    pub fn new<F, Fut>(name: &str, handler: F) -> Self
    where
        F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        Self {
            name: name.to_owned(),
            permission: None,
            timeout: Self::DEFAULT_TIMEOUT,
            handler: Arc::new(move |ctx, input| Box::pin(handler(ctx, input))),
        }
    }

    /// How long an attempt may take by default before it is abandoned (and the job fails).
    pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15 * 60);

    /// How long an attempt may take before it is abandoned and the job fails (15 minutes by
    /// default). An attempt taken over after a crash gets the whole time again.
    pub fn timeout(mut self, timeout: std::time::Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The permission policies read on the job's tool (`resource.permission`): who may run it.
    pub fn permission(mut self, permission: &str) -> Self {
        self.permission = Some(permission.to_owned());
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The agent whose runs are this job's.
    pub(crate) fn agent(&self) -> AgentDefinition {
        AgentDefinition {
            agent: agent_ref(&self.name),
            instructions: format!("Runs the application job {}.", self.name),
            model: format!("{JOB_MODEL}:{}", self.name),
            tools: vec![tool_name(&self.name)],
            skills: vec![],
            output_schema: None,
            limits: RunLimits {
                max_steps: 2,
                tool_timeout_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
                ..RunLimits::default()
            },
            approvals: Default::default(),
            compaction: None,
        }
    }

    /// The tool that does it.
    pub(crate) fn tool(&self) -> Arc<dyn Tool> {
        Arc::new(JobTool {
            spec: ToolSpec {
                name: tool_name(&self.name),
                description: format!("Does the application job {}.", self.name),
                input_schema: json!({ "type": "object" }),
                classification: ToolClassification::Write,
                approval: ApprovalPolicy::Never,
                version: "1".into(),
                permission: self.permission.clone(),
                source: Default::default(),
            },
            handler: self.handler.clone(),
        })
    }
}

fn agent_ref(name: &str) -> AgentRef {
    AgentRef {
        name: tool_name(name),
        version: "1".into(),
    }
}

fn tool_name(name: &str) -> String {
    format!("job.{name}")
}

/// A job's tool: its handler.
struct JobTool {
    spec: ToolSpec,
    handler: Arc<Handler>,
}

#[async_trait]
impl Tool for JobTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, ctx: &ToolContext, input: Value) -> Result<Value, ToolError> {
        (self.handler)(ctx.clone(), input).await
    }
}

/// The model of every job's agent: calls the job's tool with the run's input (the user
/// message, a JSON object) once, then answers `{"ok": true, "output": …}` with what it
/// returned, or `{"ok": false, "error": {code, message}}`.
pub(crate) struct JobModel;

#[async_trait]
impl ModelProvider for JobModel {
    fn name(&self) -> &str {
        JOB_MODEL
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let result = request
            .messages
            .iter()
            .flat_map(|m| &m.parts)
            .find_map(|p| match p {
                Part::ToolResult(r) if r.tool_call_id.0 == CALL => Some(r),
                _ => None,
            });
        let chunks = match result {
            Some(r) => {
                let answer = if r.is_error {
                    json!({ "ok": false, "error": r.output })
                } else {
                    json!({ "ok": true, "output": r.output })
                };
                vec![
                    ModelChunk::TextDelta(answer.to_string()),
                    ModelChunk::Finish(FinishReason::Stop),
                ]
            }
            None => {
                let input = request
                    .messages
                    .iter()
                    .find(|m| m.role == Role::User)
                    .map(|m| m.text())
                    .unwrap_or_default();
                vec![
                    ModelChunk::ToolCallStart {
                        index: 0,
                        id: CALL.into(),
                        name: tool_name(&request.model),
                    },
                    ModelChunk::ToolCallDelta {
                        index: 0,
                        json: input,
                    },
                    ModelChunk::Finish(FinishReason::ToolCalls),
                ]
            }
        };
        Ok(Box::pin(futures_util::stream::iter(
            chunks.into_iter().map(Ok),
        )))
    }
}

/// Why a job did not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// Its handler failed (or the policies refused it): the tool error's code and message.
    #[error("the job failed ({code}): {message}")]
    Failed {
        /// The error's code (`tool_failed`, `tool_unavailable`, `permission_denied`…).
        code: String,
        /// What it said.
        message: String,
    },
    /// Its run did not complete (failed, or was cancelled): how it ended.
    #[error("the job's run did not complete: {0}")]
    Ended(String),
}

/// Queues durable jobs and waits for their answers: a cheap handle ([`Forge::jobs`]) an
/// application keeps where it needs one (its request handlers, its own services).
#[derive(Clone)]
pub struct Jobs {
    engine: Arc<forge_engine::Engine>,
    streams: forge_live::StreamContext,
    bus: forge_live::EventBus,
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jobs").finish_non_exhaustive()
    }
}

impl Jobs {
    pub(crate) fn new(
        engine: Arc<forge_engine::Engine>,
        streams: forge_live::StreamContext,
        bus: forge_live::EventBus,
    ) -> Self {
        Self {
            engine,
            streams,
            bus,
        }
    }

    /// Queues the job `name` with `input` (a JSON object) for `scope`, on a thread of its own; a
    /// worker — this deployment's, or any on the store — runs it. Under a request `key`, a job
    /// sent again (a retried request, a process that died before answering) is the job the
    /// key started: nothing is queued twice.
    pub async fn enqueue(
        &self,
        scope: &Scope,
        name: &str,
        input: Value,
        key: Option<&str>,
    ) -> Result<RunHandle, Error> {
        if !input.is_object() {
            return Err(Error::Config(format!(
                "job {name}: the input is a JSON object"
            )));
        }
        let agent = agent_ref(name);
        if !self.engine.agents().iter().any(|a| a.agent == agent) {
            return Err(Error::UnknownAgent(agent.name));
        }
        let new = NewRun::on_new_thread(
            &UuidV7Generator,
            NewThread {
                title: Some(format!("Job: {name}")),
                ..NewThread::default()
            },
            agent,
            vec![Part::text(input.to_string())],
        );
        let run = match key {
            None => self.engine.submit(scope, new).await?,
            Some(key) => match self.engine.claim_run_key(scope, key, new).await? {
                forge_engine::KeyedRun::Found(run) => run,
                forge_engine::KeyedRun::Claimed(new) => self.engine.submit(scope, new).await?,
            },
        };
        Ok(RunHandle::new(
            run.id,
            run.thread_id,
            scope.clone(),
            self.streams.clone(),
            self.bus.clone(),
        ))
    }

    /// Queues the job as [`Jobs::enqueue`] does and waits for its answer: what its handler
    /// returned, or why there is none. If this process dies while it waits, the job still
    /// finishes (on another worker, or this one restarted); sent again under the same `key`, the
    /// request answers with that job's answer.
    pub async fn run(
        &self,
        scope: &Scope,
        name: &str,
        input: Value,
        key: Option<&str>,
    ) -> Result<Result<Value, JobError>, Error> {
        let run = self.enqueue(scope, name, input, key).await?;
        Ok(answer(run.wait().await?))
    }
}

impl Forge {
    /// A handle that queues this deployment's jobs, to keep where they are started.
    pub fn jobs(&self) -> Jobs {
        Jobs::new(
            self.engine().clone(),
            self.streams().clone(),
            self.tail().bus().clone(),
        )
    }
}

/// A job's answer from its run's outcome.
fn answer(outcome: Outcome) -> Result<Value, JobError> {
    match outcome {
        Outcome::Completed { text, .. } => {
            let mut envelope: Value = serde_json::from_str(&text)
                .map_err(|_| JobError::Ended("its answer is not the job's".into()))?;
            if envelope["ok"] == Value::Bool(true) {
                return Ok(envelope["output"].take());
            }
            let error = &envelope["error"];
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            Err(JobError::Failed {
                code: text(&error["code"]),
                message: text(&error["message"]),
            })
        }
        Outcome::Failed(failure) => Err(JobError::Ended(format!("failed: {}", failure.message))),
        Outcome::Cancelled { .. } => Err(JobError::Ended("cancelled".into())),
    }
}
