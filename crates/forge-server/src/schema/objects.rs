//! The object types queries and subscriptions return.

use super::*;

/// An agent version and what this caller may see of it.
pub struct Agent(pub(crate) Arc<forge_core::agent::AgentDefinition>);

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
pub struct Tool(pub(crate) forge_engine::ToolEntry);

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
    pub(crate) name: String,
    /// What it does.
    pub(crate) description: String,
    /// Relevance, comparable within one search.
    pub(crate) score: f64,
    /// What matched, as `{kind, term, count}` objects.
    pub(crate) signals: Json<Value>,
}

/// A conversation.
pub struct ThreadObject(pub(crate) Thread);

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
    /// Who created it.
    async fn created_by(&self) -> &str {
        self.0.created_by.as_str()
    }
    /// When it was archived (RFC 3339), if it is.
    async fn archived_at(&self) -> Option<String> {
        self.0.archived_at.map(|t| t.to_string())
    }
    /// What its oldest messages are sent to models as, once compacted (`compactThread`, or an
    /// agent's `compaction` budget); the messages themselves stay listed under `messages`.
    async fn summary(&self) -> Option<super::paging::ThreadSummaryObject> {
        self.0
            .summary
            .clone()
            .map(super::paging::ThreadSummaryObject)
    }
    /// Its messages, oldest first, a page at a time: `first` (≤ 500, default 50) after the
    /// cursor `after`, or the `last` before `before` (the newest, without `before`). Counts its
    /// page size times its selection toward the query's complexity.
    #[graphql(complexity = "super::paging::weight(first.or(last), child_complexity)")]
    async fn messages(
        &self,
        ctx: &Context<'_>,
        after: Option<String>,
        before: Option<String>,
        first: Option<i32>,
        last: Option<i32>,
    ) -> async_graphql::Result<
        async_graphql::connection::Connection<String, super::paging::MessageObject>,
    > {
        super::paging::messages(ctx, self.0.id, after, before, first, last).await
    }
    /// Its runs, newest first, a page at a time: `first` (≤ 500, default 50) after the cursor
    /// `after` (each page older than the last). Counts its page size times its selection toward
    /// the query's complexity.
    #[graphql(complexity = "super::paging::weight(first, child_complexity)")]
    async fn runs(
        &self,
        ctx: &Context<'_>,
        after: Option<String>,
        first: Option<i32>,
    ) -> async_graphql::Result<async_graphql::connection::Connection<String, RunObject>> {
        let filter = forge_core::ports::store::RunQuery {
            thread_id: Some(self.0.id),
            ..forge_core::ports::store::RunQuery::newest(0)
        };
        super::paging::runs(ctx, filter, after, first).await
    }
}

/// One execution of an agent on a thread.
pub struct RunObject(pub(crate) Run);

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
    /// `queued`, `running`, `waiting`, `completed`, `failed` or `cancelled`. A run whose first
    /// step a worker is executing reads `running`, though nothing is committed yet.
    async fn status(&self, ctx: &Context<'_>) -> async_graphql::Result<String> {
        let now = state(ctx)?.engine.now();
        Ok(self.0.shown_status(now).name().to_owned())
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
    /// The message that starts it (the user's, for a turn), typed: shown before the first step
    /// commits it to the thread.
    async fn input(&self) -> Vec<super::typed::PartObject> {
        self.0.input.iter().map(Into::into).collect()
    }
    /// Token usage so far, typed.
    async fn tokens(&self) -> super::typed::UsageObject {
        self.0.checkpoint.usage.into()
    }
    /// Token usage so far (`input_tokens`, `output_tokens`, cache and reasoning tokens).
    async fn usage(&self) -> Json<Value> {
        to_json(&self.0.checkpoint.usage)
    }
    /// Cost so far, in micro-units of the price table's currency.
    async fn cost_micros(&self) -> u64 {
        self.0.checkpoint.cost_micros
    }
    /// The ISO 4217 code of `costMicros`'s unit: the price table's currency (`USD` when the
    /// server has no price table, and nothing costs anything).
    async fn currency(&self, ctx: &Context<'_>) -> async_graphql::Result<String> {
        let currency = &state(ctx)?.engine.prices().currency;
        Ok(if currency.is_empty() {
            "USD".into()
        } else {
            currency.clone()
        })
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
    /// Its committed events after `afterSeq`, at most `limit` (≤ 1000). Counts `limit` times its
    /// selection toward the query's complexity.
    #[graphql(complexity = "limit as usize * child_complexity")]
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
pub struct RunEventObject(pub(crate) RunEvent);

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
    /// Its type, as an enum to branch on.
    async fn event_type(&self) -> super::typed::EventType {
        (&self.0.kind).into()
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
pub struct InteractionObject(pub(crate) Interaction);

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

/// The price table's currency: `USD` when the server has no price table (nothing costs anything).
pub(crate) fn currency(state: &AppState) -> String {
    let currency = &state.engine.prices().currency;
    if currency.is_empty() {
        "USD".into()
    } else {
        currency.clone()
    }
}

/// A day's usage of one model.
#[derive(SimpleObject)]
pub struct Rollup {
    /// The UTC day, `YYYY-MM-DD`.
    pub(crate) day: String,
    /// Everything else (`model`, `calls`, token counts, `cost_micros`), as in `forge usage --json`.
    pub(crate) totals: Json<Value>,
    /// The ISO 4217 code of `cost_micros`'s unit (as `Run.currency`).
    pub(crate) currency: String,
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
pub struct RunStreamItemObject(pub(crate) StreamItem);

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
    /// The event's type, as an enum to branch on; null for markers.
    async fn event_type(&self) -> Option<super::typed::EventType> {
        self.0.event().map(|e| (&e.kind).into())
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

/// The exact text a citation points at.
#[derive(SimpleObject)]
pub struct ResolvedCitation {
    /// The source.
    pub source_id: String,
    /// Its version.
    pub version: String,
    /// First byte of the span in the source's normalized text.
    pub start: u64,
    /// Last byte, exclusive.
    pub end: u64,
    /// The source's title.
    pub title: String,
    /// The text at the span, verbatim.
    pub text: String,
}

/// What an erasure removed (`eraseThread`, `eraseRun`).
#[derive(SimpleObject)]
pub struct Erasure {
    /// Threads removed (0 or 1).
    pub threads: u64,
    /// Runs removed.
    pub runs: u64,
    /// Messages removed.
    pub messages: u64,
    /// Committed run events removed.
    pub events: u64,
    /// Approvals and questions removed.
    pub interactions: u64,
    /// Queue jobs removed.
    pub jobs: u64,
    /// Model calls kept in the tenant's usage totals with their link to the run removed.
    pub model_calls_unlinked: u64,
}

impl From<forge_core::ports::erasure::Erased> for Erasure {
    fn from(e: forge_core::ports::erasure::Erased) -> Self {
        Self {
            threads: e.threads,
            runs: e.runs,
            messages: e.messages,
            events: e.events,
            interactions: e.interactions,
            jobs: e.jobs,
            model_calls_unlinked: e.model_calls_unlinked,
        }
    }
}
