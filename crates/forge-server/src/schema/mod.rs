//! The GraphQL schema: queries, mutations and subscriptions over the engine.
//!
//! Every resolver runs as the request's [`Scope`] (from its bearer token). Another tenant's ids
//! behave exactly like ids that do not exist: the stores answer `NotFound` for both, and both
//! become the same `NOT_FOUND` error. Domain objects whose shape is the public wire contract
//! (events, parts, interaction requests) are passed through as `JSON` in that same encoding.

mod breakdown;
mod dead_letters;
mod mcp;
mod mutation;
mod objects;
mod paging;
mod query;
mod subscription;
mod typed;

pub use breakdown::{AgentUsage, QuotaUseObject, RunCost, UsageBreakdown};
pub use dead_letters::DeadLetterObject;
pub use mcp::{McpPinnedTool, McpServerState, McpStatus};
pub use mutation::{Mutation, StartRunInput, Strategy};
pub use objects::{
    Agent, Erasure, InteractionObject, ResolvedCitation, Rollup, RunEventObject, RunObject,
    RunStreamItemObject, StreamItemKind, ThreadObject, Tool, ToolHit,
};
pub use paging::{MessageObject, ThreadSummaryObject};
pub use query::Query;
pub use subscription::{RunCursor, Subscriptions};
pub use typed::{EventType, PartObject, UsageObject};

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
use forge_core::ports::erasure::Erase;
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
use forge_live::{self as bus, EventBus, LiveTail, StreamSettings, Wake};

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
    /// Retrieval sources, for citations.
    pub retriever: Option<forge_rag::Retriever>,
    /// Stored files, for the file fields.
    pub files: Option<forge_files::Files>,
    /// The job queue, for the dead letters (absent: `deadLetters` and its operations answer
    /// `NOT_AVAILABLE`).
    pub dead_letters: Option<Arc<dyn forge_core::ports::queue::JobQueue>>,
    /// The deployment's MCP servers, for `mcpServers` (absent: none).
    pub mcp: Option<Arc<dyn McpStatus>>,
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

/// The depth a document that only introspects the schema may reach (GraphiQL's and other tools'
/// introspection queries nest `ofType` nine levels under `__schema { types { fields { type`).
pub const INTROSPECTION_DEPTH: usize = 16;

/// Depth and complexity limits every request is held to.
#[derive(Debug, Clone, Copy)]
pub struct QueryLimits {
    /// Deepest selection nesting.
    pub depth: usize,
    /// The most a request may select: each field counts 1, and a list with a `limit` counts
    /// `limit` times its selection.
    pub complexity: usize,
}

impl Default for QueryLimits {
    fn default() -> Self {
        Self {
            depth: 8,
            complexity: 4_000,
        }
    }
}

/// Builds the schema over `state`, with the default response budget, deadline, fair use and
/// runs in flight ([`crate::HttpLimits`], [`crate::FairUse`]) and refusals counted nowhere.
pub fn build(state: Arc<AppState>, limits: QueryLimits) -> ForgeSchema {
    let http = crate::HttpLimits::default();
    let limiters = crate::limiter::Limiters::new(
        &http,
        &crate::WsLimits::default(),
        &crate::FairUse::default(),
        Arc::new(forge_core::telemetry::Noop),
    );
    let guard = crate::guard::Guard(Arc::new(crate::guard::GuardSettings {
        response_bytes: http.response_bytes,
        execute_timeout: http.execute_timeout,
        ledger: limiters.ledger,
        meter: Arc::new(forge_core::telemetry::Noop),
    }));
    build_with(state, limits, guard, limiters.runs)
}

/// Builds the schema over `state`, held to `guard` (every limit of both transports).
pub(crate) fn build_with(
    state: Arc<AppState>,
    limits: QueryLimits,
    guard: crate::guard::Guard,
    runs: Arc<crate::limiter::RunsInFlight>,
) -> ForgeSchema {
    Schema::build(Query, Mutation, Subscriptions)
        .data(state)
        .data(runs)
        .limit_depth(limits.depth)
        .limit_complexity(limits.complexity)
        .disable_suggestions()
        .extension(guard)
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
        ErrorKind::Forbidden => error("FORBIDDEN", e.to_string()),
        ErrorKind::Retryable => {
            // Busy (the store's pool, a lock) or briefly unreachable: the same request may
            // pass later. Logged like an internal error, answered as what it is.
            let reference = internal(e.code());
            error(
                "UNAVAILABLE",
                format!("temporarily unavailable (reference {reference}): retry shortly"),
            )
            .extend_with(|_, x| x.set("retryAfter", 1))
        }
        _ => {
            // The log gets a reference and a classified code, never the error's text (which may
            // carry a URL with a token, or the input that failed); the client, the reference.
            let reference = internal(e.code());
            error(
                "INTERNAL",
                format!("internal error (reference {reference})"),
            )
        }
    }
}

/// A fresh reference for an internal error of classified `code`, logged as
/// `server.internal_error` with both — into the telemetry of the request being answered, which
/// every request and WebSocket session runs within (`count_request`, `graphql_ws`).
pub(crate) fn internal(code: &'static str) -> String {
    let reference = uuid::Uuid::new_v4().simple().to_string();
    tracing::info!(
        target: forge_core::telemetry::TARGET,
        event = forge_core::telemetry::LogEvent::InternalError.as_str(),
        reference = reference.as_str(),
        code,
    );
    reference
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

/// Refuses (`FORBIDDEN`) a caller the policy does not let use the administrative `power`
/// ([`PolicyAction::Administer`] on [`PolicyResource::Administration`]; without a policy
/// engine, the role `admin`). `what` names the power in the refusal.
pub(crate) fn require_admin(
    ctx: &Context<'_>,
    power: &str,
    what: &str,
) -> async_graphql::Result<()> {
    let (scope, state) = (scope(ctx)?, state(ctx)?);
    let decision = state.engine.authorize(&PolicyRequest {
        scope,
        action: PolicyAction::Administer,
        resource: PolicyResource::Administration(power),
        input: None,
    });
    if decision.is_allowed() {
        Ok(())
    } else {
        Err(error("FORBIDDEN", format!("{what} is for administrators")))
    }
}

/// The files service and a stored file of the caller's tenant that they may read;
/// `NOT_FOUND` alike for no files service, a malformed id, another tenant's file, a file the
/// caller may not read and none.
async fn stored_file(
    ctx: &Context<'_>,
    id: &ID,
) -> async_graphql::Result<(forge_files::Files, forge_files::FileRecord)> {
    let (scope, state) = (scope(ctx)?, state(ctx)?);
    let not_found = || error("NOT_FOUND", "no such file");
    let files = state.files.clone().ok_or_else(not_found)?;
    let id = forge_files::FileId::new(id.0.clone()).map_err(|_| not_found())?;
    let record = files
        .readable(scope, &id)
        .await
        .map_err(store_error)?
        .ok_or_else(not_found)?;
    Ok((files, record))
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

#[cfg(test)]
mod tests {
    #[test]
    fn every_internal_error_gets_a_reference_of_its_own() {
        let (a, b) = (super::internal("fatal"), super::internal("fatal"));
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
    }
}
