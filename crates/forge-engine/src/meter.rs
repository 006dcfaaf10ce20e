//! Metering a model call ([`Meter`]): before it is made, the output cap the run's ceilings
//! leave, the ceilings themselves and the durable reservation against the tenant's quota; after
//! it, the settlement every call of a step gets alike (the agent's own and each summarising
//! call). It knows the run's limits, the prices, the quotas and the ledger, and nothing of the
//! step that calls it.

use std::collections::HashMap;

use forge_core::agent::RunLimits;
use forge_core::event::RunEventKind;
use forge_core::id::{IdGenerator, ModelCallId};
use forge_core::metering::{CallStatus, ModelCall, Prices, Quota, QuotaPeriod, Settlement};
use forge_core::ports::usage::UsageLedger;
use forge_core::run::{FailureCode, RunFailure};
use forge_core::scope::{Scope, TenantId};
use forge_core::telemetry::Telemetry;
use forge_core::time::Clock;
use forge_core::usage::Usage;

use crate::error::EngineError;
use crate::execution::Execution;

/// Tenant quotas: a default and per-tenant overrides.
#[derive(Debug, Clone, Default)]
pub(crate) struct Quotas {
    pub(crate) default: Option<Quota>,
    pub(crate) tenants: HashMap<TenantId, Quota>,
}

impl Quotas {
    pub(crate) fn of(&self, tenant: &TenantId) -> Option<Quota> {
        self.tenants.get(tenant).copied().or(self.default)
    }
}

/// Meters one run's model calls in `scope`, within the run's `limits`.
pub(crate) struct Meter<'a> {
    pub(crate) scope: &'a Scope,
    pub(crate) limits: &'a RunLimits,
    pub(crate) prices: &'a Prices,
    pub(crate) quotas: &'a Quotas,
    pub(crate) ledger: &'a dyn UsageLedger,
    pub(crate) clock: &'a dyn Clock,
    pub(crate) ids: &'a dyn IdGenerator,
    pub(crate) telemetry: &'a Telemetry,
}

impl Meter<'_> {
    /// The output cap a call carries: the agent's own, or [`crate::context::OUTPUT_ESTIMATE`] when a
    /// ceiling or quota applies, lowered to the tokens and the cost the run has left after the
    /// call's input. `None` when nothing bounds the call. A cap is never under
    /// [`crate::context::MIN_OUTPUT`]: where the budget leaves less, the ceiling check refuses the
    /// call rather than make one that can say nothing.
    fn output_cap(
        &self,
        cur: &Execution<'_>,
        request: &forge_core::ports::model::ModelRequest,
        model: &str,
    ) -> Option<u64> {
        let limits = &self.limits;
        let bounded = limits.max_tokens.is_some()
            || limits.max_cost_micros.is_some()
            || self.quotas.of(&cur.run().tenant_id).is_some();
        let mut cap = limits
            .max_output_tokens
            .map(u64::from)
            .or(bounded.then_some(crate::context::OUTPUT_ESTIMATE))?;
        // The input part of the estimate does not depend on the cap.
        let input = Usage {
            input_tokens: crate::context::estimate_usage(request).input_tokens,
            ..Usage::default()
        };
        if let Some(max) = limits.max_tokens {
            let left = max
                .saturating_sub(cur.checkpoint().usage.total_tokens())
                .saturating_sub(input.input_tokens);
            cap = cap.min(left);
        }
        if let (Some(max), Some(price)) = (limits.max_cost_micros, self.prices.models.get(model))
            && price.output > 0
        {
            let left = max
                .saturating_sub(cur.checkpoint().cost_micros)
                .saturating_sub(price.cost(&input));
            let affordable = u128::from(left).saturating_mul(1_000_000) / u128::from(price.output);
            cap = cap.min(u64::try_from(affordable).unwrap_or(u64::MAX));
        }
        Some(cap.max(crate::context::MIN_OUTPUT))
    }

    /// Caps the call's output at what the run's ceilings leave (so the provider cannot spend past
    /// them), checks the ceilings, and reserves the call's estimate against the tenant's quota.
    /// The outer error is the store's; the inner one ends the run.
    pub(crate) async fn reserve(
        &self,
        cur: &Execution<'_>,
        step: u32,
        request: &mut forge_core::ports::model::ModelRequest,
        model: &str,
    ) -> Result<Result<ModelCall, RunFailure>, EngineError> {
        if let Some(cap) = self.output_cap(cur, request, model) {
            request.max_output_tokens = Some(u32::try_from(cap).unwrap_or(u32::MAX));
        }
        let estimate = crate::context::estimate_usage(request);
        let estimated_cost = self.prices.cost(model, &estimate).unwrap_or(0);
        let limits = &self.limits;
        let over = |message: String| {
            Ok(Err(RunFailure {
                code: FailureCode::BudgetExceeded,
                message,
            }))
        };
        let spent = cur.checkpoint().usage.total_tokens();
        if let Some(max) = limits.max_tokens
            && spent.saturating_add(estimate.total_tokens()) > max
        {
            return over(format!(
                "the run has used {spent} of its {max} tokens; the next model call needs about {}",
                estimate.total_tokens()
            ));
        }
        let cost = cur.checkpoint().cost_micros;
        if let Some(max) = limits.max_cost_micros
            && cost.saturating_add(estimated_cost) > max
        {
            return over(format!(
                "the run has cost {cost} of its {max} micro-units; the next model call would cost about {estimated_cost}"
            ));
        }
        let now = self.clock.now();
        let quota = self.quotas.of(&cur.run().tenant_id);
        let period = quota.map_or(QuotaPeriod::Day, |q| q.period);
        let call = ModelCall {
            id: ModelCallId::generate(self.ids),
            tenant_id: cur.run().tenant_id.clone(),
            run_id: cur.run().id,
            step,
            attempt: cur.lease().token,
            model: model.to_owned(),
            at: now,
            period_start: period.start(now),
            estimate,
            estimated_cost_micros: estimated_cost,
            actual: None,
            cost_micros: None,
            request_id: None,
            provider_model: None,
            holder: Some(cur.lease().holder.clone()),
            trace_id: cur.trace().context().map(|c| c.trace_hex()),
            status: CallStatus::Reserved,
        };
        // Without a quota there is nothing to hold against: the call is recorded, settled, by
        // the step's commit. With one, the reservation is durable before the call is made.
        let Some(quota) = quota else {
            return Ok(Ok(call));
        };
        match self
            .ledger
            .reserve(self.scope, call.clone(), Some(quota))
            .await
        {
            Ok(()) => Ok(Ok(call)),
            Err(forge_core::Error::QuotaExceeded(message)) => Ok(Err(RunFailure {
                code: FailureCode::QuotaExceeded,
                message,
            })),
            Err(e) => Err(e.into()),
        }
    }

    /// Settles a call however its stream ended: what the provider reported, or the estimate
    /// flagged unreconciled when it reported nothing. Records its tokens and cost as metrics,
    /// hands the settled call to the step's commit, adds it to the run's usage and cost, and
    /// emits `usage.updated`.
    pub(crate) fn settle(
        &self,
        cur: &mut Execution<'_>,
        step: u32,
        model: &str,
        reservation: ModelCall,
        reported: Reported,
    ) -> Result<(), EngineError> {
        let t = &self.telemetry;
        let charged = reported.usage.unwrap_or(reservation.estimate);
        let cost = self.prices.cost(model, &charged).unwrap_or(0);
        for (token_type, n) in [
            ("input", charged.input_tokens),
            ("output", charged.output_tokens),
            ("cache_read", charged.cache_read_tokens),
            ("cache_write", charged.cache_write_tokens),
            ("reasoning", charged.reasoning_tokens),
        ] {
            if n > 0 {
                t.meter.record(
                    forge_core::telemetry::Instrument::ModelTokens,
                    n as f64,
                    &[("model", model), ("token_type", token_type)],
                );
            }
        }
        t.meter.record(
            forge_core::telemetry::Instrument::ModelCost,
            cost as f64,
            &[("model", model)],
        );
        let settlement = Settlement {
            id: reservation.id,
            actual: reported.usage,
            cost_micros: cost,
            request_id: reported.request_id,
        };
        let mut settled = forge_core::ports::usage::apply_settlement(reservation, &settlement)?;
        settled.provider_model = reported.provider_model;
        cur.add_settlement(settled);
        let call = reported.usage.unwrap_or_default();
        cur.charge(cost, call);
        cur.emit(RunEventKind::UsageUpdated {
            step,
            call,
            total: cur.checkpoint().usage,
        });
        Ok(())
    }
}

/// What a model call's stream reported by its end.
pub(crate) struct Reported {
    /// The provider's usage, if it reported any.
    pub(crate) usage: Option<Usage>,
    /// The provider's request id.
    pub(crate) request_id: Option<String>,
    /// The model the provider says answered.
    pub(crate) provider_model: Option<String>,
}
