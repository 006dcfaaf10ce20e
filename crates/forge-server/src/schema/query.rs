//! Queries.

use super::*;
use forge_core::ports::store::RunQuery;

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
    #[graphql(complexity = "limit as usize * child_complexity")]
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

    /// The caller's threads, newest first, a page at a time: `first` (≤ 500, default 50) after
    /// the cursor `after`. Archived threads only with `archived: true`; with `mine: false`, every
    /// thread of the tenant the policies let the caller read. Counts its page size times its
    /// selection toward the query's complexity.
    #[graphql(complexity = "super::paging::weight(first, child_complexity)")]
    async fn threads(
        &self,
        ctx: &Context<'_>,
        after: Option<String>,
        first: Option<i32>,
        #[graphql(default = false)] archived: bool,
        #[graphql(default = true)] mine: bool,
    ) -> async_graphql::Result<async_graphql::connection::Connection<String, ThreadObject>> {
        super::paging::threads(ctx, after, first, archived, mine).await
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

    /// The stored files of the caller's tenant they may see, newest first (at most `limit`,
    /// ≤ 200, among the tenant's 1,000 newest), as JSON records (id, name, media type as
    /// inspected, size, version, findings, scan, uploader, access label): their own, and those
    /// of others whose access label the policy lets them discover.
    async fn files(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 50)] limit: u32,
    ) -> async_graphql::Result<Vec<Json<Value>>> {
        let (scope, state) = (scope(ctx)?, state(ctx)?);
        let Some(files) = &state.files else {
            return Ok(vec![]);
        };
        let records = files
            .list_visible(scope, limit.min(200) as usize)
            .await
            .map_err(store_error)?;
        Ok(records.iter().map(to_json).collect())
    }

    /// A run.
    async fn run(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<RunObject> {
        Ok(RunObject(get_run(ctx, &id).await?))
    }

    /// A run's committed events after `afterSeq`, at most `limit` (≤ 1000). Counts `limit` times
    /// its selection toward the query's complexity.
    #[graphql(complexity = "limit as usize * child_complexity")]
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

    /// The pending approvals and questions the caller may act on (approvals they may approve,
    /// on threads they may read), oldest first, a page at a time: `first` (≤ 500, default 50)
    /// after the cursor `after`. Counts its page size times its selection toward the query's
    /// complexity.
    #[graphql(complexity = "super::paging::weight(first, child_complexity)")]
    async fn pending_interactions(
        &self,
        ctx: &Context<'_>,
        after: Option<String>,
        first: Option<i32>,
    ) -> async_graphql::Result<async_graphql::connection::Connection<String, InteractionObject>>
    {
        super::paging::pending(ctx, after, first).await
    }

    /// The tenant's runs, newest first, whoever started them — for the operator console and
    /// for administrators (the power `inspect_runs`): in one state with `status` (`queued`,
    /// `running`, `waiting`, `completed`, `failed`, `cancelled`), of one thread with
    /// `threadId`, of one agent with `agentName` and `agentVersion`, created in `[since,
    /// until)` (RFC 3339), failed with `failureCode` (`budget_exceeded`, `provider_error`, …),
    /// a page at a time: `first` (≤ 500, default 50) after the cursor `after` (each page older
    /// than the last). Counts its page size times its selection toward the query's complexity.
    #[graphql(complexity = "super::paging::weight(first, child_complexity)")]
    // Each argument is a GraphQL argument: a flat list is what callers write.
    #[allow(clippy::too_many_arguments)]
    async fn runs(
        &self,
        ctx: &Context<'_>,
        status: Option<String>,
        thread_id: Option<ID>,
        agent_name: Option<String>,
        agent_version: Option<String>,
        since: Option<String>,
        until: Option<String>,
        failure_code: Option<String>,
        after: Option<String>,
        first: Option<i32>,
    ) -> async_graphql::Result<async_graphql::connection::Connection<String, RunObject>> {
        require_admin(ctx, "inspect_runs", "the tenant's runs")?;
        let bad = |e: forge_core::Error| error("BAD_REQUEST", e.to_string());
        let mut filter = RunQuery {
            thread_id: thread_id
                .map(|id| parse_id::<ThreadId>(&id, "thread"))
                .transpose()?,
            agent_name,
            agent_version,
            since: since.as_deref().map(|t| time(t, "since")).transpose()?,
            until: until.as_deref().map(|t| time(t, "until")).transpose()?,
            ..RunQuery::newest(0)
        };
        if let Some(status) = &status {
            filter = filter.status(status).map_err(bad)?;
        }
        if let Some(code) = &failure_code {
            filter = filter.failure_code(code).map_err(bad)?;
        }
        super::paging::runs(ctx, filter, after, first).await
    }

    /// The tenant's dead-lettered jobs (runs no worker could finish within their attempts),
    /// oldest first, at most `limit` (≤ 500). For administrators (the power `dead_letters`).
    async fn dead_letters(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 100)] limit: u32,
    ) -> async_graphql::Result<Vec<super::DeadLetterObject>> {
        super::dead_letters::list(ctx, limit.min(500) as usize).await
    }

    /// The caller's tenant's audit trail, newest first: decisions on approvals, external writes,
    /// dead-letter handling and configuration changes (`config.changed`; deployment-wide ones are
    /// in the trail of the tenant `_deployment`). For administrators (the power
    /// `audit_trail`). `action` filters by prefix, `subject` and `actor` exactly; `[since,
    /// until)` are RFC 3339.
    // Each argument is a GraphQL argument: a flat list is what callers write.
    #[allow(clippy::too_many_arguments)]
    async fn audit_records(
        &self,
        ctx: &Context<'_>,
        action: Option<String>,
        subject: Option<String>,
        actor: Option<String>,
        since: Option<String>,
        until: Option<String>,
        #[graphql(default = 100)] limit: u32,
    ) -> async_graphql::Result<Vec<Json<Value>>> {
        let (scope, state) = (scope(ctx)?, state(ctx)?);
        require_admin(ctx, "audit_trail", "the audit trail")?;
        let since = since.as_deref().map(|t| time(t, "since")).transpose()?;
        let until = until.as_deref().map(|t| time(t, "until")).transpose()?;
        let found = state
            .engine
            .audit_trail(
                scope,
                &forge_core::ports::audit::AuditQuery {
                    action,
                    subject,
                    actor,
                    since,
                    until,
                    ..forge_core::ports::audit::AuditQuery::latest(limit.min(1000) as usize)
                },
            )
            .await
            .map_err(client_error)?;
        Ok(found
            .iter()
            .map(|r| {
                Json(
                    serde_json::json!({"tenant": r.tenant_id, "at": r.at, "actor": r.actor,
                    "action": r.action, "subject": r.subject, "detail": r.detail}),
                )
            })
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
        let rollups = state
            .engine
            .rollups(scope, time(&from, "from")?, time(&to, "to")?)
            .await
            .map_err(client_error)?;
        Ok(rollups
            .iter()
            .map(|r| {
                let mut totals = to_json(r).0;
                // The day's start as `YYYY-MM-DD`, as documented (the record holds the instant).
                let day = totals
                    .get("day")
                    .and_then(Value::as_str)
                    .map(|d| d.chars().take(10).collect())
                    .unwrap_or_default();
                if let Value::Object(m) = &mut totals {
                    m.remove("day");
                }
                Rollup {
                    day,
                    totals: Json(totals),
                    currency: super::objects::currency(state),
                }
            })
            .collect())
    }

    /// The tenant's model usage in `[from, to)` (RFC 3339) per agent version and per run (the
    /// `top` most expensive, ≤ 100, default 10), with its quota's use in the current period. For
    /// administrators (the power `inspect_runs`). A window whose calls span more than 5,000
    /// runs is refused: choose fewer days.
    async fn usage_breakdown(
        &self,
        ctx: &Context<'_>,
        from: String,
        to: String,
        #[graphql(default = 10)] top: u32,
    ) -> async_graphql::Result<super::UsageBreakdown> {
        let (from, to) = (time(&from, "from")?, time(&to, "to")?);
        super::breakdown::breakdown(ctx, from, to, top.min(100) as usize).await
    }

    /// The deployment's MCP servers: connection, pinned tools against the live catalog, drift,
    /// when each was last listed. For administrators (the power `mcp_servers`).
    async fn mcp_servers(
        &self,
        ctx: &Context<'_>,
    ) -> async_graphql::Result<Vec<super::McpServerState>> {
        super::mcp::servers(ctx)
    }

    /// The exact text a citation points at: `sourceId` at `version`, bytes `[start, end)` of its
    /// normalized text. `NOT_FOUND` when the source does not exist, was deleted, is one the caller
    /// may not read, has another version now, or the span is not within it — the same answer for
    /// each, so a citation never reveals a source the caller cannot read.
    async fn resolve_citation(
        &self,
        ctx: &Context<'_>,
        source_id: String,
        version: String,
        start: u64,
        end: u64,
    ) -> async_graphql::Result<ResolvedCitation> {
        let (scope, state) = (scope(ctx)?, state(ctx)?);
        let not_found = || error("NOT_FOUND", "no such citation");
        let retriever = state.retriever.as_ref().ok_or_else(not_found)?;
        let span = forge_core::part::Span { start, end };
        let resolved = retriever
            .resolve(scope, &source_id, &version, span)
            .await
            .map_err(store_error)?
            .ok_or_else(not_found)?;
        Ok(ResolvedCitation {
            source_id,
            version,
            start,
            end,
            title: resolved.title,
            text: resolved.text,
        })
    }
}

/// `text` as an RFC 3339 time, or a `BAD_REQUEST` naming the argument `what`.
fn time(text: &str, what: &str) -> async_graphql::Result<forge_core::time::Timestamp> {
    serde_json::from_value(Value::String(text.to_owned())).map_err(|_| {
        error(
            "BAD_REQUEST",
            format!("{what} must be an RFC 3339 time, not {text:?}"),
        )
    })
}
