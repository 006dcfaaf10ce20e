//! Metering on the command line: the price table and tenant quotas an engine enforces, and
//! `forge usage` to read calls, daily rollups and the reconciliation report.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use forge_core::id::RunId;
use forge_core::metering::{Prices, Quota, QuotaPeriod};
use forge_core::scope::Scope;
use forge_core::time::{Clock, SystemClock};
use forge_engine::{Engine, EngineBuilder};

use crate::store::{self, StoreArgs};

/// Prices and quotas.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct MeteringArgs {
    /// Price table (TOML): `currency = "USD"` and `[models."provider:model"]` with `input`,
    /// `output`, `cache_read`, `cache_write` in micro-units per million tokens.
    #[arg(long = "prices", env = "FORGE_PRICES")]
    prices: Option<PathBuf>,
    /// Tokens every tenant may spend per quota period.
    #[arg(long, env = "FORGE_QUOTA_TOKENS")]
    quota_tokens: Option<u64>,
    /// Cost every tenant may spend per quota period, in micro-units.
    #[arg(long, env = "FORGE_QUOTA_COST_MICROS")]
    quota_cost_micros: Option<u64>,
    /// The quota period: day or month (UTC).
    #[arg(long, default_value = "day", env = "FORGE_QUOTA_PERIOD")]
    quota_period: String,
}

impl MeteringArgs {
    /// The price table, when `--prices` names one.
    pub(crate) fn prices(&self) -> anyhow::Result<Option<Prices>> {
        let Some(path) = &self.prices else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("failed to read price table {}", path.display()))?;
        let prices: Prices = toml::from_str(&text)
            .with_context(|| format!("price table {} is invalid", path.display()))?;
        Ok(Some(prices))
    }

    /// Configures `builder` with the price table and the quota.
    pub(crate) fn apply(&self, mut builder: EngineBuilder) -> anyhow::Result<EngineBuilder> {
        if let Some(prices) = self.prices()? {
            builder = builder.prices(prices);
        }
        if self.quota_tokens.is_some() || self.quota_cost_micros.is_some() {
            let period = match self.quota_period.as_str() {
                "day" => QuotaPeriod::Day,
                "month" => QuotaPeriod::Month,
                other => bail!("--quota-period must be day or month, not {other:?}"),
            };
            builder = builder.quota(Quota {
                period,
                max_tokens: self.quota_tokens,
                max_cost_micros: self.quota_cost_micros,
            });
        }
        Ok(builder)
    }
}

/// Arguments of `forge usage`.
#[derive(Debug, clap::Args)]
pub(crate) struct UsageArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The tenant.
    #[arg(long, default_value = "local", env = "FORGE_TENANT")]
    tenant: String,
    /// One run's calls (reservation, settlement, cost) instead of daily rollups.
    #[arg(long)]
    run: Option<RunId>,
    /// Days back from now, for rollups and the reconciliation report (at most 92).
    #[arg(long, default_value_t = 30)]
    days: u64,
    /// The reconciliation report (estimate against actual per call) instead of rollups.
    #[arg(long, conflicts_with = "run")]
    reconcile: bool,
    /// As a JSON array.
    #[arg(long)]
    json: bool,
}

fn print<T: serde::Serialize>(
    json: bool,
    items: &[T],
    human: impl Fn(&T) -> String,
) -> anyhow::Result<()> {
    crate::records::print_list(json, items, "no model calls", human)
}

pub(crate) async fn usage(args: UsageArgs) -> anyhow::Result<ExitCode> {
    let store = store::open(&args.store).await?.store;
    let engine = Engine::builder()
        .dyn_store(store)
        .build()
        .context("failed to build the engine")?;
    let scope = Scope::parse(&args.tenant, "operator", &[]).context("invalid tenant")?;
    let now = SystemClock.now();
    let from = forge_core::time::Timestamp(
        now.0 - chrono::TimeDelta::days(i64::try_from(args.days).unwrap_or(i64::MAX / 86_400_000)),
    );
    let to = now.plus(Duration::from_secs(1));
    if let Some(run) = args.run {
        let calls = engine.run_usage(&scope, run).await?;
        print(args.json, &calls, |c| {
            format!(
                "step {}  {}  {}  estimate {} tokens / {}µ  actual {}  cost {}µ  {}",
                c.step,
                c.model,
                c.status.name(),
                c.estimate.total_tokens(),
                c.estimated_cost_micros,
                c.actual.map_or_else(
                    || "-".to_owned(),
                    |a| format!("{} tokens", a.total_tokens())
                ),
                c.cost_micros.unwrap_or(0),
                c.request_id.as_deref().unwrap_or("-")
            )
        })?;
    } else if args.reconcile {
        let report = engine.reconciliation(&scope, from, to).await?;
        print(args.json, &report, |d| {
            format!(
                "{}  {}  estimated {} tokens  actual {}  drift {}  {}",
                d.id,
                d.model,
                d.estimated_tokens,
                d.actual_tokens
                    .map_or_else(|| "-".into(), |a| a.to_string()),
                d.token_drift
                    .map_or_else(|| "-".into(), |a| format!("{a:+}")),
                d.status.name()
            )
        })?;
    } else {
        let rollups = engine.rollups(&scope, from, to).await?;
        print(args.json, &rollups, |r| {
            format!(
                "{}  {}  calls {}  input {} (cache read {}, written {})  output {}  cost {}µ  unreconciled {}",
                &r.day.to_string()[..10],
                r.model,
                r.calls,
                r.usage.input_tokens,
                r.usage.cache_read_tokens,
                r.usage.cache_write_tokens,
                r.usage.output_tokens,
                r.cost_micros,
                r.unreconciled
            )
        })?;
    }
    Ok(ExitCode::SUCCESS)
}
