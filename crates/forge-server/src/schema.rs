//! The GraphQL schema: queries, mutations and subscriptions over the engine.
//!
//! Every resolver runs as the request's [`Scope`] (from its bearer token). Another tenant's ids
//! behave exactly like ids that do not exist: the stores answer `NotFound` for both, and both
//! become the same `NOT_FOUND` error. Domain objects whose shape is the public wire contract
//! (events, parts, interaction requests) are passed through as `JSON` in that same encoding.

use std::str::FromStr;
use std::sync::Arc;

use async_graphql::{
    Context, Enum, ErrorExtensions, ID, InputObject, Json, Object, Schema, SimpleObject,
    Subscription,
};
use forge_core::ErrorKind;
use forge_core::agent::AgentRef;
use forge_core::event::RunEvent;
use forge_core::id::{InteractionId, RunId, ThreadId};
use forge_core::interaction::{Decision, Interaction, InteractionRequest, Resolve};
use forge_core::part::Part;
use forge_core::ports::policy::{PolicyAction, PolicyRequest, PolicyResource};
use forge_core::ports::store::{NewRun, NewThread, StartStrategy};
use forge_core::run::Run;
use forge_core::scope::Scope;
use forge_core::thread::Thread;
use forge_engine::{Engine, EngineError};
use futures_util::{Stream, StreamExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use forge_core::stream::StreamItem;
use forge_engine::live::{self as bus, EventBus, LiveTail, StreamSettings, Wake};

/// The schema type.
pub type ForgeSchema = Schema<Query, Mutation, Subscriptions>;

/// What resolvers share.
pub struct AppState {
    /// The engine (agents, tools, stores).
    pub engine: Arc<Engine>,
    /// Wake-ups for subscribers.
    pub bus: EventBus,
    /// The live tail of steps in flight.
    pub tail: Arc<LiveTail>,
    /// How subscriptions read the log.
    pub streams: StreamSettings,
    /// Fires on server shutdown: open subscriptions end.
    pub shutdown: CancellationToken,
    /// Recent events shared by this server's subscribers.
    pub cache: Arc<bus::LogCache>,
}

impl AppState {
    fn streams(&self, live: bool) -> bus::StreamContext {
        bus::StreamContext {
            runs: self.engine.runs().clone(),
            cache: self.cache.clone(),
            tail: live.then(|| self.tail.clone()),
            settings: self.streams,
            shutdown: self.shutdown.clone(),
        }
    }
}

/// Depth and complexity limits every request is held to.
#[derive(Debug, Clone, Copy)]
pub struct QueryLimits {
    /// Deepest selection nesting.
    pub depth: usize,
    /// Most fields a request may select (lists count once per field).
    pub complexity: usize,
}

impl Default for QueryLimits {
    fn default() -> Self {
        Self {
            depth: 8,
            complexity: 400,
        }
    }
}

/// Builds the schema over `state`.
pub fn build(state: Arc<AppState>, limits: QueryLimits) -> ForgeSchema {
    Schema::build(Query, Mutation, Subscriptions)
        .data(state)
        .limit_depth(limits.depth)
        .limit_complexity(limits.complexity)
        .disable_suggestions()
        .finish()
}

/// The schema's SDL, as committed in `schemas/forge.graphql`.
pub fn sdl() -> String {
    Schema::build(Query, Mutation, Subscriptions).finish().sdl()
}

fn error(code: &'static str, message: impl Into<String>) -> async_graphql::Error {
    async_graphql::Error::new(message).extend_with(|_, e| e.set("code", code))
}

/// An engine error as the client sees it: a class and a safe message, never internals.
pub(crate) fn client_error(e: EngineError) -> async_graphql::Error {
    match e.kind() {
        ErrorKind::NotFound => not_found("entity"),
        ErrorKind::Invalid => error("BAD_REQUEST", e.to_string()),
        ErrorKind::Conflict => error("CONFLICT", e.to_string()),
        ErrorKind::Cancelled => error("CANCELLED", "cancelled"),
        _ => {
            let reference = uuid_ref();
            // Details stay in the server's log, under a reference the client can quote.
            eprintln!("forge-server: internal error {reference}: {e}");
            error(
                "INTERNAL",
                format!("internal error (reference {reference})"),
            )
        }
    }
}

fn uuid_ref() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}", nanos & 0xffff_ffff_ffff)
}

fn store_error(e: forge_core::Error) -> async_graphql::Error {
    client_error(EngineError::Store(e))
}

/// The one answer for an absent, foreign, hidden or malformed id: the same words for all, so none
/// tells them apart. (`what` is for readers of this code.)
fn not_found(_what: &'static str) -> async_graphql::Error {
    error("NOT_FOUND", "not found")
}

fn parse_id<T: FromStr>(id: &ID, what: &'static str) -> async_graphql::Result<T> {
    // A malformed id is just an id that does not exist.
    T::from_str(id.as_str()).map_err(|_| not_found(what))
}

fn scope<'a>(ctx: &'a Context<'_>) -> async_graphql::Result<&'a Scope> {
    ctx.data::<Scope>()
        .map_err(|_| error("UNAUTHENTICATED", "missing bearer token"))
}

fn state<'a>(ctx: &'a Context<'_>) -> async_graphql::Result<&'a Arc<AppState>> {
    ctx.data::<Arc<AppState>>()
        .map_err(|_| error("INTERNAL", "server state missing"))
}

fn to_json<T: serde::Serialize>(v: &T) -> Json<Value> {
    Json(serde_json::to_value(v).unwrap_or(Value::Null))
}

/// An agent version and what this caller may see of it.
pub struct Agent(Arc<forge_core::agent::AgentDefinition>);

#[Object]
impl Agent {
    /// Its name.
    async fn name(&self) -> &str {
        &self.0.agent.name
    }
    /// Its version.
    async fn version(&self) -> &str {
        &self.0.agent.version
    }
    /// `provider:model`.
    async fn model(&self) -> &str {
        &self.0.model
    }
    /// The tools the caller may discover for this agent.
    async fn tools(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<Tool>> {
        let (scope, state) = (scope(ctx)?, state(ctx)?);
        Ok(state
            .engine
            .list_tools(scope, Some(&self.0.agent))
            .map_err(client_error)?
            .into_iter()
            .map(Tool)
            .collect())
    }
}

/// A tool as listings show it.
pub struct Tool(forge_engine::ToolEntry);

#[Object]
impl Tool {
    /// Its name.
    async fn name(&self) -> &str {
        &self.0.name
    }
    /// What it does.
    async fn description(&self) -> &str {
        &self.0.description
    }
    /// `read`, `write` or `external_write`.
    async fn classification(&self) -> String {
        to_json(&self.0.classification)
            .0
            .as_str()
            .unwrap_or("")
            .to_owned()
    }
    /// Its version.
    async fn version(&self) -> &str {
        &self.0.version
    }
}

/// A tool search result.
#[derive(SimpleObject)]
pub struct ToolHit {
    /// The tool's name.
    name: String,
    /// What it does.
    description: String,
    /// Relevance, comparable within one search.
    score: f64,
    /// What matched, as `{kind, term, count}` objects.
    signals: Json<Value>,
}

/// A conversation.
pub struct ThreadObject(Thread);

#[Object(name = "Thread")]
impl ThreadObject {
    /// Its id.
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }
    /// Its title.
    async fn title(&self) -> Option<&str> {
        self.0.title.as_deref()
    }
    /// Its session state values.
    async fn state(&self) -> Json<Value> {
        Json(Value::Object(self.0.state.values.clone()))
    }
    /// The version of its session state.
    async fn state_version(&self) -> u64 {
        self.0.state.version
    }
    /// The run executing or waiting on it.
    async fn active_run_id(&self) -> Option<ID> {
        self.0.active_run.map(|r| ID(r.to_string()))
    }
    /// When it was created (RFC 3339).
    async fn created_at(&self) -> String {
        self.0.created_at.to_string()
    }
    /// Its messages, oldest first, each in the wire encoding (`id`, `run_id`, `role`, `parts`).
    async fn messages(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<Json<Value>>> {
        let (scope, state) = (scope(ctx)?, state(ctx)?);
        let messages = state
            .engine
            .threads()
            .list_messages(scope, self.0.id)
            .await
            .map_err(store_error)?;
        Ok(messages.iter().map(to_json).collect())
    }
    /// Its runs, oldest first.
    async fn runs(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<RunObject>> {
        let (scope, state) = (scope(ctx)?, state(ctx)?);
        let runs = state
            .engine
            .runs()
            .list_runs(scope, self.0.id)
            .await
            .map_err(store_error)?;
        Ok(runs.into_iter().map(RunObject).collect())
    }
}

/// One execution of an agent on a thread.
pub struct RunObject(Run);

#[Object(name = "Run")]
impl RunObject {
    /// Its id.
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }
    /// Its thread.
    async fn thread_id(&self) -> ID {
        ID(self.0.thread_id.to_string())
    }
    /// `queued`, `running`, `waiting`, `completed`, `failed` or `cancelled`.
    async fn status(&self) -> String {
        self.0.status.name().to_owned()
    }
    /// The agent's name.
    async fn agent_name(&self) -> &str {
        &self.0.agent.name
    }
    /// The agent version it executes.
    async fn agent_version(&self) -> &str {
        &self.0.agent.version
    }
    /// Sequence number of its last committed event.
    async fn last_seq(&self) -> u64 {
        self.0.last_seq
    }
    /// Steps completed.
    async fn steps(&self) -> u32 {
        self.0.checkpoint.step
    }
    /// Token usage so far (`input_tokens`, `output_tokens`, cache and reasoning tokens).
    async fn usage(&self) -> Json<Value> {
        to_json(&self.0.checkpoint.usage)
    }
    /// Cost so far, in micro-units of the price table's currency.
    async fn cost_micros(&self) -> u64 {
        self.0.checkpoint.cost_micros
    }
    /// Why it failed, when it did (`code`, `message`).
    async fn failure(&self) -> Option<Json<Value>> {
        self.0.failure.as_ref().map(to_json)
    }
    /// Whether a cancel was requested.
    async fn cancel_requested(&self) -> bool {
        self.0.cancel_requested
    }
    /// When it was created (RFC 3339).
    async fn created_at(&self) -> String {
        self.0.created_at.to_string()
    }
    /// Its committed events after `afterSeq`, at most `limit` (≤ 1000).
    async fn events(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 0)] after_seq: u64,
        #[graphql(default = 100)] limit: u32,
    ) -> async_graphql::Result<Vec<RunEventObject>> {
        read_events(ctx, self.0.id, after_seq, limit).await
    }
    /// Its approvals and questions.
    async fn interactions(
        &self,
        ctx: &Context<'_>,
    ) -> async_graphql::Result<Vec<InteractionObject>> {
        let (scope, state) = (scope(ctx)?, state(ctx)?);
        Ok(state
            .engine
            .run_interactions(scope, self.0.id)
            .await
            .map_err(client_error)?
            .into_iter()
            .map(InteractionObject)
            .collect())
    }
    /// Its metered model calls (reservation, settlement, cost), oldest first.
    async fn model_calls(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<Json<Value>>> {
        let (scope, state) = (scope(ctx)?, state(ctx)?);
        let calls = state
            .engine
            .run_usage(scope, self.0.id)
            .await
            .map_err(client_error)?;
        Ok(calls.iter().map(to_json).collect())
    }
}

/// One event of a run's log.
pub struct RunEventObject(RunEvent);

#[Object(name = "RunEvent")]
impl RunEventObject {
    /// The run.
    async fn run_id(&self) -> ID {
        ID(self.0.run_id.to_string())
    }
    /// Its position in the run's log, from 1 without gaps.
    async fn seq(&self) -> u64 {
        self.0.seq
    }
    /// When it happened (RFC 3339).
    async fn at(&self) -> String {
        self.0.at.to_string()
    }
    /// Its type, for example `part.added` or `run.completed`.
    async fn r#type(&self) -> String {
        to_json(&self.0)
            .0
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    }
    /// The whole event in its wire encoding (`schemas/run-event.schema.json`).
    async fn event(&self) -> Json<Value> {
        to_json(&self.0)
    }
}

/// An approval or a question.
pub struct InteractionObject(Interaction);

#[Object(name = "Interaction")]
impl InteractionObject {
    /// Its id.
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }
    /// `approval` or `question`.
    async fn kind(&self) -> &'static str {
        match self.0.request {
            InteractionRequest::Approval { .. } => "approval",
            InteractionRequest::Question { .. } => "question",
        }
    }
    /// The parked run.
    async fn run_id(&self) -> ID {
        ID(self.0.run_id.to_string())
    }
    /// The run's thread.
    async fn thread_id(&self) -> ID {
        ID(self.0.thread_id.to_string())
    }
    /// `pending`, `resolved` or `expired`.
    async fn status(&self) -> String {
        to_json(&self.0.status).0.as_str().unwrap_or("").to_owned()
    }
    /// What is asked, in the wire encoding (for an approval: the tool, its input and the
    /// `input_hash` to send back).
    async fn request(&self) -> Json<Value> {
        to_json(&self.0.request)
    }
    /// The decision, once made.
    async fn resolution(&self) -> Option<Json<Value>> {
        self.0.resolution.as_ref().map(to_json)
    }
    /// When it expires if still pending (RFC 3339).
    async fn expires_at(&self) -> String {
        self.0.expires_at.to_string()
    }
}

/// A day's usage of one model.
#[derive(SimpleObject)]
pub struct Rollup {
    /// The UTC day, `YYYY-MM-DD`.
    day: String,
    /// Everything else (`model`, `calls`, token counts, `cost_micros`), as in `forge usage --json`.
    totals: Json<Value>,
}

async fn read_events(
    ctx: &Context<'_>,
    run: RunId,
    after_seq: u64,
    limit: u32,
) -> async_graphql::Result<Vec<RunEventObject>> {
    let (scope, state) = (scope(ctx)?, state(ctx)?);
    let events = state
        .engine
        .runs()
        .read_events(scope, run, after_seq, limit.clamp(1, 1000) as usize)
        .await
        .map_err(store_error)?;
    Ok(events.into_iter().map(RunEventObject).collect())
}

/// Whether the caller may `action` the thread under the policies: reading is required to know
/// it exists (`NOT_FOUND` as for an absent `what`), executing (running, cancelling, resolving)
/// additionally needs `execute` (`FORBIDDEN`).
fn thread_access(
    ctx: &Context<'_>,
    thread: ThreadId,
    action: PolicyAction,
    what: &'static str,
) -> async_graphql::Result<()> {
    let (scope, state) = (scope(ctx)?, state(ctx)?);
    let id = thread.to_string();
    let ask = |action| {
        state.engine.authorize(&PolicyRequest {
            scope,
            action,
            resource: PolicyResource::Thread(&id),
            input: None,
        })
    };
    if !ask(PolicyAction::Read).is_allowed() {
        return Err(not_found(what));
    }
    if action == PolicyAction::Execute && !ask(PolicyAction::Execute).is_allowed() {
        return Err(error("FORBIDDEN", "not permitted"));
    }
    Ok(())
}

async fn get_run(ctx: &Context<'_>, id: &ID) -> async_graphql::Result<Run> {
    let (scope, state) = (scope(ctx)?, state(ctx)?);
    let id: RunId = parse_id(id, "run")?;
    let run = state
        .engine
        .runs()
        .get_run(scope, id)
        .await
        .map_err(store_error)?;
    thread_access(ctx, run.thread_id, PolicyAction::Read, "run")?;
    Ok(run)
}

/// Queries.
pub struct Query;

#[Object]
impl Query {
    /// The agent versions this server runs.
    async fn agents(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<Agent>> {
        scope(ctx)?;
        Ok(state(ctx)?.engine.agents().into_iter().map(Agent).collect())
    }

    /// Searches the names and descriptions of the tools the caller may discover.
    async fn search_tools(
        &self,
        ctx: &Context<'_>,
        query: String,
        #[graphql(default = 10)] limit: u32,
    ) -> async_graphql::Result<Vec<ToolHit>> {
        let (scope, state) = (scope(ctx)?, state(ctx)?);
        let hits = state
            .engine
            .search_tools(scope, None, &query, limit.min(100) as usize)
            .map_err(client_error)?;
        Ok(hits
            .into_iter()
            .map(|h| ToolHit {
                name: h.entry.name,
                description: h.entry.description,
                score: f64::from(h.score),
                signals: to_json(&h.signals),
            })
            .collect())
    }

    /// A thread.
    async fn thread(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<ThreadObject> {
        let (scope, state) = (scope(ctx)?, state(ctx)?);
        let id: ThreadId = parse_id(&id, "thread")?;
        let thread = state
            .engine
            .threads()
            .get_thread(scope, id)
            .await
            .map_err(store_error)?;
        thread_access(ctx, thread.id, PolicyAction::Read, "thread")?;
        Ok(ThreadObject(thread))
    }

    /// A run.
    async fn run(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<RunObject> {
        Ok(RunObject(get_run(ctx, &id).await?))
    }

    /// A run's committed events after `afterSeq`, at most `limit` (≤ 1000).
    async fn run_events(
        &self,
        ctx: &Context<'_>,
        run_id: ID,
        #[graphql(default = 0)] after_seq: u64,
        #[graphql(default = 100)] limit: u32,
    ) -> async_graphql::Result<Vec<RunEventObject>> {
        let run = get_run(ctx, &run_id).await?;
        read_events(ctx, run.id, after_seq, limit).await
    }

    /// The caller's tenant's pending approvals and questions, oldest first.
    async fn pending_interactions(
        &self,
        ctx: &Context<'_>,
    ) -> async_graphql::Result<Vec<InteractionObject>> {
        let (scope, state) = (scope(ctx)?, state(ctx)?);
        Ok(state
            .engine
            .pending_interactions(scope)
            .await
            .map_err(client_error)?
            .into_iter()
            .filter(|i| thread_access(ctx, i.thread_id, PolicyAction::Read, "thread").is_ok())
            .map(InteractionObject)
            .collect())
    }

    /// The tenant's model usage per UTC day and model, for `[from, to)` (RFC 3339).
    async fn usage(
        &self,
        ctx: &Context<'_>,
        from: String,
        to: String,
    ) -> async_graphql::Result<Vec<Rollup>> {
        let (scope, state) = (scope(ctx)?, state(ctx)?);
        let parse = |s: &str| {
            serde_json::from_value::<forge_core::time::Timestamp>(Value::String(s.to_owned()))
                .map_err(|_| error("BAD_REQUEST", format!("{s:?} is not an RFC 3339 time")))
        };
        let rollups = state
            .engine
            .rollups(scope, parse(&from)?, parse(&to)?)
            .await
            .map_err(client_error)?;
        Ok(rollups
            .iter()
            .map(|r| {
                let mut totals = to_json(r).0;
                let day = totals
                    .get("day")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                if let Value::Object(m) = &mut totals {
                    m.remove("day");
                }
                Rollup {
                    day,
                    totals: Json(totals),
                }
            })
            .collect())
    }
}

/// What to do when the thread already has an active run.
#[derive(Enum, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Wait behind it.
    #[default]
    Enqueue,
    /// Refuse (`CONFLICT`).
    Reject,
    /// Cancel it, then start.
    Interrupt,
}

/// Starts a run.
#[derive(InputObject)]
pub struct StartRunInput {
    /// The thread.
    thread_id: ID,
    /// The agent's name.
    agent: String,
    /// Its version; the newest registered when omitted.
    version: Option<String>,
    /// The user's message.
    message: String,
    /// When the thread is busy.
    #[graphql(default)]
    strategy: Strategy,
}

/// The last event a client saw of one run.
#[derive(InputObject)]
pub struct RunCursor {
    /// The run.
    run_id: ID,
    /// The last sequence number seen.
    seq: u64,
}

/// Mutations.
pub struct Mutation;

#[Object]
impl Mutation {
    /// Creates a thread, optionally with a title and initial session state (a JSON object).
    async fn create_thread(
        &self,
        ctx: &Context<'_>,
        title: Option<String>,
        state: Option<Json<Value>>,
    ) -> async_graphql::Result<ThreadObject> {
        let (scope, app) = (scope(ctx)?, self::state(ctx)?);
        let values = match state.map(|j| j.0) {
            None | Some(Value::Null) => serde_json::Map::new(),
            Some(Value::Object(m)) => m,
            Some(_) => return Err(error("BAD_REQUEST", "state must be a JSON object")),
        };
        let thread = app
            .engine
            .threads()
            .create_thread(
                scope,
                NewThread {
                    title,
                    state: values,
                },
            )
            .await
            .map_err(store_error)?;
        Ok(ThreadObject(thread))
    }

    /// Starts a run of an agent on a thread; workers execute it.
    async fn start_run(
        &self,
        ctx: &Context<'_>,
        input: StartRunInput,
    ) -> async_graphql::Result<RunObject> {
        let (scope, app) = (scope(ctx)?, state(ctx)?);
        let thread: ThreadId = parse_id(&input.thread_id, "thread")?;
        thread_access(ctx, thread, PolicyAction::Execute, "thread")?;
        let version = match input.version {
            Some(v) => v,
            None => app
                .engine
                .agents()
                .iter()
                .rev()
                .find(|a| a.agent.name == input.agent)
                .map(|a| a.agent.version.clone())
                .ok_or_else(|| error("NOT_FOUND", format!("agent {} not found", input.agent)))?,
        };
        let agent = AgentRef {
            name: input.agent,
            version,
        };
        let strategy = match input.strategy {
            Strategy::Enqueue => StartStrategy::Enqueue,
            Strategy::Reject => StartStrategy::Reject,
            Strategy::Interrupt => StartStrategy::Interrupt,
        };
        let new = NewRun::new(thread, agent, vec![Part::text(input.message)]).strategy(strategy);
        let run = app.engine.submit(scope, new).await.map_err(client_error)?;
        app.bus.publish(Wake::Run {
            run_id: run.id,
            thread_id: run.thread_id,
        });
        Ok(RunObject(run))
    }

    /// Asks a run to cancel; `true` when this call asked first. It stops after the step in
    /// progress (a waiting run at once).
    async fn cancel_run(&self, ctx: &Context<'_>, run_id: ID) -> async_graphql::Result<bool> {
        let (scope, app) = (scope(ctx)?, state(ctx)?);
        let run = get_run(ctx, &run_id).await?;
        thread_access(ctx, run.thread_id, PolicyAction::Execute, "run")?;
        let asked = app
            .engine
            .runs()
            .request_cancel(scope, run.id)
            .await
            .map_err(store_error)?;
        app.bus.publish(Wake::Run {
            run_id: run.id,
            thread_id: run.thread_id,
        });
        Ok(asked)
    }

    /// Approves or rejects a tool call. `key` makes it idempotent; `inputHash`, when given, must
    /// match the call the approval was raised for.
    async fn resolve_approval(
        &self,
        ctx: &Context<'_>,
        interaction_id: ID,
        approve: bool,
        key: String,
        reason: Option<String>,
        input_hash: Option<String>,
    ) -> async_graphql::Result<InteractionObject> {
        let decision = if approve {
            Decision::Approve
        } else {
            Decision::Reject { reason }
        };
        resolve(ctx, &interaction_id, decision, key, input_hash, "approval").await
    }

    /// Answers a question; the answer must match the question's schema.
    async fn answer_question(
        &self,
        ctx: &Context<'_>,
        interaction_id: ID,
        answer: Json<Value>,
        key: String,
    ) -> async_graphql::Result<InteractionObject> {
        let decision = Decision::Answer { answer: answer.0 };
        resolve(ctx, &interaction_id, decision, key, None, "question").await
    }
}

async fn resolve(
    ctx: &Context<'_>,
    id: &ID,
    decision: Decision,
    key: String,
    input_hash: Option<String>,
    kind: &'static str,
) -> async_graphql::Result<InteractionObject> {
    let (scope, app) = (scope(ctx)?, state(ctx)?);
    let id: InteractionId = parse_id(id, "interaction")?;
    let current = app
        .engine
        .interaction(scope, id)
        .await
        .map_err(client_error)?;
    thread_access(ctx, current.thread_id, PolicyAction::Execute, "interaction")?;
    let resolved = app
        .engine
        .resolve_interaction(
            scope,
            Resolve {
                id,
                decision,
                actor: scope.principal_id().as_str().to_owned(),
                key,
                input_hash,
            },
        )
        .await
        .map_err(|e| match e.kind() {
            ErrorKind::Invalid => error("BAD_REQUEST", format!("cannot resolve this {kind}: {e}")),
            _ => client_error(e),
        })?;
    let i = resolved.interaction;
    app.bus.publish(Wake::Run {
        run_id: i.run_id,
        thread_id: i.thread_id,
    });
    Ok(InteractionObject(i))
}

/// The kind of a [`RunStreamItemObject`].
#[derive(Enum, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "RunStreamItemKind")]
pub enum StreamItemKind {
    /// An event from the committed log: history.
    Committed,
    /// An event of the step in flight, not committed yet: show it, expect it confirmed or
    /// discarded.
    Provisional,
    /// The provisional events up to `seq` were committed exactly as delivered.
    Confirmed,
    /// Drop the provisional events after `seq`: their step is being executed again.
    Discarded,
}

/// One item of a live run stream (`schemas/run-stream.schema.json`): a committed or provisional
/// event, or a marker that confirms or discards provisional events. Apply them in order; resume
/// with the last committed (or confirmed) `seq` of each run, after dropping provisional events.
pub struct RunStreamItemObject(StreamItem);

#[Object(name = "RunStreamItem")]
impl RunStreamItemObject {
    /// What the item is.
    async fn kind(&self) -> StreamItemKind {
        match self.0 {
            StreamItem::Committed { .. } => StreamItemKind::Committed,
            StreamItem::Provisional { .. } => StreamItemKind::Provisional,
            StreamItem::Confirmed { .. } => StreamItemKind::Confirmed,
            StreamItem::Discarded { .. } => StreamItemKind::Discarded,
        }
    }
    /// Whether the event is provisional (not committed yet).
    async fn provisional(&self) -> bool {
        matches!(self.0, StreamItem::Provisional { .. })
    }
    /// The run.
    async fn run_id(&self) -> ID {
        ID(self.0.run_id().to_string())
    }
    /// The event's sequence number; for `CONFIRMED` the last one confirmed, for `DISCARDED` the
    /// last one kept.
    async fn seq(&self) -> u64 {
        self.0.seq()
    }
    /// The event's type (`part.added`, `run.completed`…); null for markers.
    async fn r#type(&self) -> Option<&'static str> {
        self.0.event().map(|e| e.kind.type_name())
    }
    /// The event in its wire encoding (`schemas/run-event.schema.json`); null for markers.
    async fn event(&self) -> Option<Json<Value>> {
        self.0.event().map(to_json)
    }
    /// The whole item in its wire encoding (`schemas/run-stream.schema.json`).
    async fn item(&self) -> Json<Value> {
        to_json(&self.0)
    }
}

/// Subscriptions, over `graphql-transport-ws`.
pub struct Subscriptions;

type EventStream =
    std::pin::Pin<Box<dyn Stream<Item = async_graphql::Result<RunStreamItemObject>> + Send>>;

#[Subscription]
impl Subscriptions {
    /// A run's committed events after `afterSeq`, then the step in flight as it is produced
    /// (`PROVISIONAL` events, then `CONFIRMED` by its commit or `DISCARDED` if the step is
    /// executed again); completes after the run's committed terminal event. With `live: false`,
    /// committed events only. To resume, drop provisional events and pass the last committed
    /// `seq`: no gap, no duplicate.
    async fn run_events(
        &self,
        ctx: &Context<'_>,
        run_id: ID,
        #[graphql(default = 0)] after_seq: u64,
        #[graphql(default = true)] live: bool,
    ) -> async_graphql::Result<EventStream> {
        let (scope, app) = (scope(ctx)?.clone(), state(ctx)?.clone());
        let run = get_run(ctx, &run_id).await?;
        let stream = bus::run_events(app.streams(live), &app.bus, scope, run.id, after_seq);
        Ok(Box::pin(
            stream.map(|r| r.map(RunStreamItemObject).map_err(store_error)),
        ))
    }

    /// Every run's items on a thread, as `runEvents` gives them. Each run's items come in order
    /// without gaps or duplicates; overlapping runs interleave. To resume, pass the last committed
    /// `seq` of each run in `after`; runs not named start from their first event.
    async fn thread_events(
        &self,
        ctx: &Context<'_>,
        thread_id: ID,
        #[graphql(default)] after: Vec<RunCursor>,
        #[graphql(default = true)] live: bool,
    ) -> async_graphql::Result<EventStream> {
        let (scope, app) = (scope(ctx)?.clone(), state(ctx)?.clone());
        let thread: ThreadId = parse_id(&thread_id, "thread")?;
        app.engine
            .threads()
            .get_thread(&scope, thread)
            .await
            .map_err(store_error)?;
        thread_access(ctx, thread, PolicyAction::Read, "thread")?;
        let after = after
            .iter()
            .map(|c| Ok((parse_id::<RunId>(&c.run_id, "run")?, c.seq)))
            .collect::<async_graphql::Result<Vec<_>>>()?;
        let stream = bus::thread_events(app.streams(live), &app.bus, scope, thread, after);
        Ok(Box::pin(
            stream.map(|r| r.map(RunStreamItemObject).map_err(store_error)),
        ))
    }
}
