//! Usage for the console beyond the per-day rollups: the tenant's calls in a window summed per
//! agent version and per run (the most expensive runs), and its quota's use in the current
//! period. For administrators (the power `inspect_runs`: a breakdown names runs).
//!
//! The ledger records calls by run; a run's agent is read from the run, so a window whose calls
//! span more than [`MAX_RUNS`] runs is refused with the advice to narrow it rather than read
//! without bound. A run erased since counts under the agent `(erased)`.

use std::collections::{BTreeMap, HashMap};

use forge_core::metering::RunTotal;
use forge_core::run::Run;
use futures_util::{StreamExt, TryStreamExt};

use super::*;

/// The most runs a breakdown reads for their agent.
pub(crate) const MAX_RUNS: usize = 5_000;

/// The agent a run erased since counts under.
const ERASED: &str = "(erased)";

/// One agent version's usage in the window.
#[derive(SimpleObject)]
pub struct AgentUsage {
    /// The agent.
    agent_name: String,
    /// The version.
    agent_version: String,
    /// Runs that made calls in the window.
    runs: u64,
    /// Calls made.
    calls: u64,
    /// Input tokens (actuals, or estimates where unreconciled).
    input_tokens: u64,
    /// Output tokens.
    output_tokens: u64,
    /// Their cost, in micro-units of `currency`.
    cost_micros: u64,
}

/// One run's usage in the window.
#[derive(SimpleObject)]
pub struct RunCost {
    /// The run's id.
    run_id: ID,
    /// The run, unless it was erased since.
    run: Option<RunObject>,
    /// Calls made.
    calls: u64,
    /// Input tokens.
    input_tokens: u64,
    /// Output tokens.
    output_tokens: u64,
    /// Their cost, in micro-units of `currency`.
    cost_micros: u64,
}

/// The tenant's quota and its use in the current period.
#[derive(SimpleObject)]
#[graphql(name = "QuotaUse")]
pub struct QuotaUseObject {
    /// `day` or `month` (UTC).
    period: String,
    /// When the current period started (RFC 3339).
    period_start: String,
    /// The most tokens a period allows, if capped.
    max_tokens: Option<u64>,
    /// The most cost a period allows, in micro-units, if capped.
    max_cost_micros: Option<u64>,
    /// Tokens counted so far this period (what the next reservation is checked against).
    tokens: u64,
    /// Cost counted so far this period, in micro-units.
    cost_micros: u64,
}

/// Usage in a window, per agent version and per run, with the quota's use.
#[derive(SimpleObject)]
pub struct UsageBreakdown {
    /// The ISO 4217 code of every `costMicros`.
    currency: String,
    /// Per agent version, the most expensive first.
    agents: Vec<AgentUsage>,
    /// The most expensive runs, the most expensive first.
    top_runs: Vec<RunCost>,
    /// The tenant's quota, when it has one.
    quota: Option<QuotaUseObject>,
}

/// The breakdown of the caller's tenant's calls in `[from, to)`, with the `top` most expensive
/// runs.
pub(crate) async fn breakdown(
    ctx: &Context<'_>,
    from: forge_core::time::Timestamp,
    to: forge_core::time::Timestamp,
    top: usize,
) -> async_graphql::Result<UsageBreakdown> {
    require_admin(ctx, "inspect_runs", "the usage breakdown")?;
    let (scope, state) = (scope(ctx)?, state(ctx)?);
    let totals = state
        .engine
        .run_totals(scope, from, to)
        .await
        .map_err(client_error)?;
    if totals.len() > MAX_RUNS {
        return Err(error(
            "BAD_REQUEST",
            format!(
                "{} runs made calls in this window, more than the {MAX_RUNS} a breakdown reads: \
                 choose fewer days",
                totals.len()
            ),
        ));
    }
    let ids: Vec<RunId> = totals.iter().map(|t| t.run_id).collect();
    let runs: HashMap<RunId, Run> = futures_util::stream::iter(ids)
        .map(|id| read_run(state, scope, id))
        .buffer_unordered(16)
        .try_filter_map(|run| async move { Ok(run.map(|r| (r.id, r))) })
        .try_collect()
        .await?;
    let quota = state
        .engine
        .quota_use(scope)
        .await
        .map_err(client_error)?
        .map(|q| QuotaUseObject {
            period: q.quota.period.name().into(),
            period_start: q.period_start.to_string(),
            max_tokens: q.quota.max_tokens,
            max_cost_micros: q.quota.max_cost_micros,
            tokens: q.tokens,
            cost_micros: q.cost_micros,
        });
    Ok(UsageBreakdown {
        currency: super::objects::currency(state),
        agents: per_agent(&totals, &runs),
        top_runs: totals
            .iter()
            .take(top)
            .map(|t| RunCost {
                run_id: ID(t.run_id.to_string()),
                run: runs.get(&t.run_id).cloned().map(RunObject),
                calls: t.calls,
                input_tokens: t.usage.input_tokens,
                output_tokens: t.usage.output_tokens,
                cost_micros: t.cost_micros,
            })
            .collect(),
        quota,
    })
}

/// Run `id`, or `None` when it was erased.
async fn read_run(
    state: &AppState,
    scope: &Scope,
    id: RunId,
) -> async_graphql::Result<Option<Run>> {
    match state.engine.runs().get_run(scope, id).await {
        Ok(run) => Ok(Some(run)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(store_error(e)),
    }
}

/// `totals` summed per agent version (of the run, or [`ERASED`]), the most expensive first.
fn per_agent(totals: &[RunTotal], runs: &HashMap<RunId, Run>) -> Vec<AgentUsage> {
    let mut by: BTreeMap<(String, String), AgentUsage> = BTreeMap::new();
    for t in totals {
        let (name, version) = runs.get(&t.run_id).map_or((ERASED, ""), |r| {
            (r.agent.name.as_str(), r.agent.version.as_str())
        });
        let entry = by
            .entry((name.to_owned(), version.to_owned()))
            .or_insert_with(|| AgentUsage {
                agent_name: name.to_owned(),
                agent_version: version.to_owned(),
                runs: 0,
                calls: 0,
                input_tokens: 0,
                output_tokens: 0,
                cost_micros: 0,
            });
        entry.runs += 1;
        entry.calls += t.calls;
        entry.input_tokens += t.usage.input_tokens;
        entry.output_tokens += t.usage.output_tokens;
        entry.cost_micros = entry.cost_micros.saturating_add(t.cost_micros);
    }
    let mut agents: Vec<AgentUsage> = by.into_values().collect();
    agents.sort_by_key(|a| std::cmp::Reverse(a.cost_micros));
    agents
}
