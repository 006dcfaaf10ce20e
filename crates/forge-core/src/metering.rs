//! Metering: prices, the per-call record of a reservation and its settlement, tenant quotas, daily
//! rollups and the reconciliation of estimates against provider actuals.
//!
//! Money is integer: micro-units (10⁻⁶) of the price table's currency, never floating point. A
//! price is micro-units per million tokens, so `$0.15` per million input tokens is `150_000`. Costs
//! round up to the next micro-unit.
//!
//! Before each model call the engine reserves an estimate against the tenant's quota for the
//! current period ([`crate::ports::usage::UsageLedger::reserve`], atomic in the store); after the
//! call it settles the reservation with the provider's reported usage, or keeps the estimate
//! flagged unreconciled when the provider reported nothing.

use std::collections::BTreeMap;

use chrono::{Datelike, TimeZone, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::id::{ModelCallId, RunId};
use crate::scope::TenantId;
use crate::time::Timestamp;
use crate::usage::Usage;

/// One model's rates, in micro-units per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Uncached input tokens.
    pub input: u64,
    /// Output tokens (reasoning included).
    pub output: u64,
    /// Input tokens read from the provider's cache.
    #[serde(default)]
    pub cache_read: u64,
    /// Input tokens written to the provider's cache.
    #[serde(default)]
    pub cache_write: u64,
    /// One request of the provider's own tools (web search, say), in micro-units per request
    /// (not per million).
    #[serde(default)]
    pub server_tool_request: u64,
}

impl ModelPrice {
    /// What `usage` costs, rounded up to the micro-unit. Cached input tokens are charged at their
    /// cache rates and not again as input.
    pub fn cost(&self, usage: &Usage) -> u64 {
        let uncached = usage
            .input_tokens
            .saturating_sub(usage.cache_read_tokens)
            .saturating_sub(usage.cache_write_tokens);
        let part = |tokens: u64, rate: u64| u128::from(tokens) * u128::from(rate);
        let scaled = part(uncached, self.input)
            .saturating_add(part(usage.output_tokens, self.output))
            .saturating_add(part(usage.cache_read_tokens, self.cache_read))
            .saturating_add(part(usage.cache_write_tokens, self.cache_write));
        u64::try_from(scaled.div_ceil(1_000_000))
            .unwrap_or(u64::MAX)
            .saturating_add(
                usage
                    .server_tool_requests
                    .saturating_mul(self.server_tool_request),
            )
    }
}

/// The price table: a currency and each model's rates, keyed by the full model string
/// (`openai:gpt-4o-mini`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// ISO currency code of every rate, for example `USD`.
    #[serde(default = "Prices::default_currency")]
    pub currency: String,
    /// Rates by model string.
    #[serde(default)]
    pub models: BTreeMap<String, ModelPrice>,
}

impl Prices {
    fn default_currency() -> String {
        "USD".into()
    }

    /// What `usage` of `model` costs, or `None` when the table has no price for it (the call is
    /// metered in tokens and costs nothing).
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<u64> {
        self.models.get(model).map(|p| p.cost(usage))
    }
}

/// The period a quota counts over, in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum QuotaPeriod {
    /// A calendar day.
    Day,
    /// A calendar month.
    Month,
}

impl QuotaPeriod {
    /// Its name, as in configuration (`day`, `month`).
    pub fn name(&self) -> &'static str {
        match self {
            QuotaPeriod::Day => "day",
            QuotaPeriod::Month => "month",
        }
    }

    /// The start of the period containing `at`.
    pub fn start(&self, at: Timestamp) -> Timestamp {
        let t = at.0;
        let start = match self {
            QuotaPeriod::Day => Utc.with_ymd_and_hms(t.year(), t.month(), t.day(), 0, 0, 0),
            QuotaPeriod::Month => Utc.with_ymd_and_hms(t.year(), t.month(), 1, 0, 0, 0),
        };
        start.single().map(Timestamp).unwrap_or(at)
    }
}

/// A tenant's allowance for one period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Quota {
    /// What it counts over.
    pub period: QuotaPeriod,
    /// Most tokens (input + output) per period.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Most cost per period, in micro-units.
    #[serde(default)]
    pub max_cost_micros: Option<u64>,
}

/// Where a metered call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// Reserved; the call is in flight (or its worker died before settling).
    Reserved,
    /// Settled with the provider's reported usage.
    Settled,
    /// Settled without a provider report: the estimate stands, flagged.
    Unreconciled,
    /// A reservation whose call never settled, given back: replaced by a re-execution of its step,
    /// or orphaned (its worker died) and released by the sweep. It charges nothing; a settlement
    /// that still arrives for it counts as usual.
    Released,
}

impl CallStatus {
    /// The status's name, as stored.
    pub fn name(&self) -> &'static str {
        match self {
            CallStatus::Reserved => "reserved",
            CallStatus::Settled => "settled",
            CallStatus::Unreconciled => "unreconciled",
            CallStatus::Released => "released",
        }
    }
}

/// One metered model call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelCall {
    /// Its id.
    pub id: ModelCallId,
    /// The tenant billed.
    pub tenant_id: TenantId,
    /// The run that made it.
    pub run_id: RunId,
    /// The run's step.
    pub step: u32,
    /// The execution that reserved it (its run lease's fencing token; 0 when unknown): a
    /// re-execution of the step reserves with a greater one and replaces this reservation.
    #[serde(default)]
    pub attempt: u64,
    /// The full model string.
    pub model: String,
    /// When it was reserved.
    pub at: Timestamp,
    /// The start of the quota period it counts in.
    pub period_start: Timestamp,
    /// The estimate reserved before the call.
    pub estimate: Usage,
    /// The estimate's cost.
    pub estimated_cost_micros: u64,
    /// What the provider reported, once settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual: Option<Usage>,
    /// The settled cost (of `actual`, or of the estimate when unreconciled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_micros: Option<u64>,
    /// The provider's request id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The model the provider reports answering (often a dated snapshot of `model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_model: Option<String>,
    /// The worker whose execution made it (the run lease's holder): a change between attempts
    /// is a takeover. `None` for calls recorded before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// The trace its execution ran in (32 hex digits), to open in a tracing tool. `None`
    /// without tracing, and for calls recorded before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Where it stands.
    pub status: CallStatus,
}

impl ModelCall {
    /// Tokens and cost this call counts against a quota: its actuals once settled, its estimate
    /// until then.
    pub fn charged(&self) -> (u64, u64) {
        match (self.status, self.actual) {
            (CallStatus::Released, _) => (0, 0),
            (CallStatus::Settled, Some(actual)) => {
                (actual.total_tokens(), self.cost_micros.unwrap_or(0))
            }
            _ => (
                self.estimate.total_tokens(),
                self.cost_micros.unwrap_or(self.estimated_cost_micros),
            ),
        }
    }
}

/// How a reservation is settled.
#[derive(Debug, Clone, PartialEq)]
pub struct Settlement {
    /// The reserved call.
    pub id: ModelCallId,
    /// What the provider reported; `None` keeps the estimate, flagged unreconciled.
    pub actual: Option<Usage>,
    /// The cost to record.
    pub cost_micros: u64,
    /// The provider's request id.
    pub request_id: Option<String>,
}

/// How long a reservation may stay unsettled before the sweep releases it as orphaned: far past
/// any model call's own timeout, so only a call whose worker died is released.
pub const ORPHANED_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// The reservations `call` replaces (every adapter's rule): the still-reserved calls of the same
/// run and step made by an earlier execution, returned released. A re-executed step's reservation
/// replaces its predecessor's instead of adding to it.
pub fn superseded(existing: &[ModelCall], call: &ModelCall) -> Vec<ModelCall> {
    existing
        .iter()
        .filter(|c| {
            c.id != call.id
                && c.run_id == call.run_id
                && c.step == call.step
                && c.status == CallStatus::Reserved
                && c.attempt < call.attempt
        })
        .map(|c| ModelCall {
            status: CallStatus::Released,
            ..c.clone()
        })
        .collect()
}

/// `call` released by the orphan sweep when it is still reserved and was reserved before
/// `before`.
pub fn orphaned(call: &ModelCall, before: Timestamp) -> Option<ModelCall> {
    (call.status == CallStatus::Reserved && call.at < before).then(|| ModelCall {
        status: CallStatus::Released,
        ..call.clone()
    })
}

/// Whether reserving `call` keeps the tenant within `quota`, given the period's `existing` calls.
/// Returns why not.
pub fn check_quota(existing: &[ModelCall], call: &ModelCall, quota: &Quota) -> Result<(), String> {
    let (tokens, cost) = charged_in_period(existing, &call.tenant_id, call.period_start);
    let (want_tokens, want_cost) = call.charged();
    let period = quota.period.name();
    if let Some(max) = quota.max_tokens
        && tokens.saturating_add(want_tokens) > max
    {
        return Err(format!(
            "tenant {} has used {tokens} of its {max} tokens this {period}; this call needs about {want_tokens}",
            call.tenant_id
        ));
    }
    if let Some(max) = quota.max_cost_micros
        && cost.saturating_add(want_cost) > max
    {
        return Err(format!(
            "tenant {} has spent {cost} of its {max} micro-units this {period}; this call needs about {want_cost}",
            call.tenant_id
        ));
    }
    Ok(())
}

/// The tokens and cost `tenant`'s calls among `calls` count against its quota for the period
/// starting at `period_start` (what [`check_quota`] adds a call to).
pub fn charged_in_period(
    calls: &[ModelCall],
    tenant: &TenantId,
    period_start: Timestamp,
) -> (u64, u64) {
    calls
        .iter()
        .filter(|c| &c.tenant_id == tenant && c.period_start == period_start)
        .map(ModelCall::charged)
        .fold((0u64, 0u64), |(tokens, cost), (t, m)| {
            (tokens.saturating_add(t), cost.saturating_add(m))
        })
}

/// How much of its quota a tenant has used in the current period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct QuotaUse {
    /// The quota.
    pub quota: Quota,
    /// The start of the current period.
    pub period_start: Timestamp,
    /// Tokens counted so far this period ([`ModelCall::charged`]).
    pub tokens: u64,
    /// Cost counted so far this period, in micro-units.
    pub cost_micros: u64,
}

/// One run's calls summed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunTotal {
    /// The run.
    pub run_id: RunId,
    /// Calls made.
    pub calls: u64,
    /// Their usage (actuals, or estimates where unreconciled or in flight).
    pub usage: Usage,
    /// Their cost, in micro-units.
    pub cost_micros: u64,
}

/// Sums calls per run, the most expensive run first (then by run id, so equal costs keep one
/// order).
pub fn per_run(calls: &[ModelCall]) -> Vec<RunTotal> {
    let mut by: BTreeMap<RunId, RunTotal> = BTreeMap::new();
    for c in calls {
        let total = by.entry(c.run_id).or_insert_with(|| RunTotal {
            run_id: c.run_id,
            calls: 0,
            usage: Usage::default(),
            cost_micros: 0,
        });
        total.calls += 1;
        total.usage += counted(c);
        total.cost_micros = total.cost_micros.saturating_add(c.charged().1);
    }
    let mut totals: Vec<RunTotal> = by.into_values().collect();
    totals.sort_by(|a, b| {
        b.cost_micros
            .cmp(&a.cost_micros)
            .then(a.run_id.cmp(&b.run_id))
    });
    totals
}

/// The usage a call counts with in reports: its actuals once settled, its estimate otherwise.
fn counted(call: &ModelCall) -> Usage {
    match (call.status, call.actual) {
        (CallStatus::Settled, Some(actual)) => actual,
        _ => call.estimate,
    }
}

/// Usage of one model on one UTC day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Rollup {
    /// The day's start.
    pub day: Timestamp,
    /// The model string.
    pub model: String,
    /// Calls made.
    pub calls: u64,
    /// Their usage (actuals, or estimates where unreconciled or in flight).
    pub usage: Usage,
    /// Their cost, in micro-units.
    pub cost_micros: u64,
    /// Calls whose usage is an estimate.
    pub unreconciled: u64,
}

/// Rolls calls up per UTC day and model, in day then model order.
pub fn rollup(calls: &[ModelCall]) -> Vec<Rollup> {
    let mut by: BTreeMap<(Timestamp, String), Rollup> = BTreeMap::new();
    for c in calls {
        let day = QuotaPeriod::Day.start(c.at);
        let r = by.entry((day, c.model.clone())).or_insert_with(|| Rollup {
            day,
            model: c.model.clone(),
            calls: 0,
            usage: Usage::default(),
            cost_micros: 0,
            unreconciled: 0,
        });
        r.calls += 1;
        r.usage += counted(c);
        if !matches!((c.status, c.actual), (CallStatus::Settled, Some(_))) {
            r.unreconciled += 1;
        }
        r.cost_micros = r.cost_micros.saturating_add(c.charged().1);
    }
    by.into_values().collect()
}

/// One line of a reconciliation report: a call's estimate against its actual.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Drift {
    /// The call.
    pub id: ModelCallId,
    /// The model string.
    pub model: String,
    /// The provider's request id.
    pub request_id: Option<String>,
    /// Tokens estimated.
    pub estimated_tokens: u64,
    /// Tokens reported (`None` when unreconciled).
    pub actual_tokens: Option<u64>,
    /// Actual minus estimated tokens.
    pub token_drift: Option<i64>,
    /// Cost estimated.
    pub estimated_cost_micros: u64,
    /// Cost settled.
    pub cost_micros: Option<u64>,
    /// Where it stands.
    pub status: CallStatus,
}

/// The reconciliation report: every call's estimate against the provider's actual.
pub fn reconcile(calls: &[ModelCall]) -> Vec<Drift> {
    calls
        .iter()
        .map(|c| {
            let actual = c.actual.filter(|_| c.status == CallStatus::Settled);
            let actual_tokens = actual.map(|a| a.total_tokens());
            Drift {
                id: c.id,
                model: c.model.clone(),
                request_id: c.request_id.clone(),
                estimated_tokens: c.estimate.total_tokens(),
                actual_tokens,
                token_drift: actual_tokens.map(|a| {
                    i64::try_from(a).unwrap_or(i64::MAX)
                        - i64::try_from(c.estimate.total_tokens()).unwrap_or(i64::MAX)
                }),
                estimated_cost_micros: c.estimated_cost_micros,
                cost_micros: c.cost_micros,
                status: c.status,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: cache_read,
            cache_write_tokens: cache_write,
            reasoning_tokens: 0,
            server_tool_requests: 0,
        }
    }

    #[test]
    fn costs_are_integer_rounded_up_and_charge_cache_at_its_rates() {
        // Anthropic-like: $3/M input, $15/M output, $0.30/M cache read, $3.75/M cache write.
        let p = ModelPrice {
            input: 3_000_000,
            output: 15_000_000,
            cache_read: 300_000,
            cache_write: 3_750_000,
            server_tool_request: 0,
        };
        // 25 uncached + 1200 written + 3000 read, 88 out.
        let u = usage(4225, 88, 3000, 1200);
        assert_eq!(p.cost(&u), 75 + 1_320 + 900 + 4_500);
        assert_eq!(
            p.cost(&usage(1, 0, 0, 0)),
            3,
            "1 token at $3/M is 3 micro-units"
        );
        let tiny = ModelPrice {
            input: 150_000,
            ..ModelPrice::default()
        };
        assert_eq!(tiny.cost(&usage(1, 0, 0, 0)), 1, "a fraction rounds up");
        assert_eq!(tiny.cost(&usage(0, 0, 0, 0)), 0);
        assert_eq!(
            ModelPrice {
                input: u64::MAX,
                output: u64::MAX,
                cache_read: 0,
                cache_write: 0,
                server_tool_request: 0,
            }
            .cost(&usage(u64::MAX, u64::MAX, 0, 0)),
            u64::MAX,
            "saturates"
        );
    }

    #[test]
    fn periods_start_at_utc_midnight_and_the_first_of_the_month() {
        let at =
            Timestamp::from_unix_millis(1_767_225_600_000 + 40 * 86_400_000 + 3_600_000).unwrap(); // 2026-02-10T01:00Z
        assert_eq!(
            QuotaPeriod::Day.start(at).to_string(),
            "2026-02-10T00:00:00.000Z"
        );
        assert_eq!(
            QuotaPeriod::Month.start(at).to_string(),
            "2026-02-01T00:00:00.000Z"
        );
    }

    fn call(run: u128, tenant: &str, cost: u64, status: CallStatus) -> ModelCall {
        let at = Timestamp::from_unix_millis(1_780_000_000_000).expect("a time");
        ModelCall {
            id: ModelCallId(uuid::Uuid::from_u128(run * 100 + cost as u128)),
            tenant_id: TenantId::new(tenant).expect("a tenant"),
            run_id: RunId(uuid::Uuid::from_u128(run)),
            step: 1,
            attempt: 1,
            model: "m".into(),
            at,
            period_start: QuotaPeriod::Day.start(at),
            estimate: usage(10, 5, 0, 0),
            estimated_cost_micros: cost,
            actual: (status == CallStatus::Settled).then(|| usage(20, 10, 0, 0)),
            cost_micros: Some(cost),
            request_id: None,
            provider_model: None,
            holder: None,
            trace_id: None,
            status,
        }
    }

    #[test]
    fn runs_are_totalled_most_expensive_first_and_quota_use_counts_what_reserve_counts() {
        let calls = [
            call(1, "a", 5, CallStatus::Settled),
            call(2, "a", 40, CallStatus::Reserved),
            call(1, "a", 7, CallStatus::Settled),
            call(3, "a", 99, CallStatus::Released),
            call(4, "b", 1_000, CallStatus::Settled),
        ];
        let totals = per_run(&calls);
        let summary: Vec<(u128, u64, u64, u64)> = totals
            .iter()
            .map(|t| {
                (
                    t.run_id.0.as_u128(),
                    t.calls,
                    t.cost_micros,
                    t.usage.input_tokens,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (4, 1, 1_000, 20),
                (2, 1, 40, 10),
                (1, 2, 12, 40),
                (3, 1, 0, 10)
            ],
            "cost descending; settled calls count their actuals, others their estimates"
        );
        let tenant = TenantId::new("a").expect("a tenant");
        let start = calls[0].period_start;
        assert_eq!(
            charged_in_period(&calls, &tenant, start),
            (30 + 15 + 30, 5 + 40 + 7),
            "a released call counts nothing, another tenant's nothing"
        );
        assert_eq!(
            charged_in_period(
                &calls,
                &tenant,
                start.plus(std::time::Duration::from_secs(86_400))
            ),
            (0, 0),
            "another period's"
        );
    }
}
