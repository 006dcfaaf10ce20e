//! The usage ledger: reservations checked against the tenant's quota under the store's mutex.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::metering::{ModelCall, Quota, Settlement, check_quota, orphaned, superseded};
use forge_core::ports::usage::{CallFilter, UsageLedger, apply_settlement};
use forge_core::scope::{Scope, SystemScope};
use forge_core::time::Timestamp;

use crate::MemoryStore;

#[async_trait]
impl UsageLedger for MemoryStore {
    async fn reserve(
        &self,
        scope: &Scope,
        call: ModelCall,
        quota: Option<Quota>,
    ) -> Result<(), Error> {
        forge_core::ports::rules::check_reservation(scope, &call)?;
        let mut st = self.lock();
        st.run(scope, call.run_id)?;
        let earlier: Vec<ModelCall> = st
            .calls
            .values()
            .filter(|c| c.run_id == call.run_id)
            .cloned()
            .collect();
        let replaced = superseded(&earlier, &call);
        if let Some(quota) = quota {
            let period: Vec<ModelCall> = st
                .calls
                .values()
                .filter(|c| c.tenant_id == call.tenant_id && c.period_start == call.period_start)
                .cloned()
                .collect();
            let period: Vec<ModelCall> = period
                .into_iter()
                .map(|c| replaced.iter().find(|r| r.id == c.id).cloned().unwrap_or(c))
                .collect();
            check_quota(&period, &call, &quota).map_err(Error::QuotaExceeded)?;
        }
        for released in replaced {
            st.calls.insert(released.id, released);
        }
        st.calls.insert(call.id, call);
        Ok(())
    }

    async fn release_orphans(
        &self,
        _system: &SystemScope,
        before: Timestamp,
    ) -> Result<usize, Error> {
        let mut st = self.lock();
        let mut released = 0;
        for call in st.calls.values_mut() {
            if let Some(r) = orphaned(call, before) {
                *call = r;
                released += 1;
            }
        }
        Ok(released)
    }

    async fn settle(&self, scope: &Scope, settlement: Settlement) -> Result<ModelCall, Error> {
        let mut st = self.lock();
        let slot = st
            .calls
            .get_mut(&settlement.id)
            .filter(|c| &c.tenant_id == scope.tenant_id())
            .ok_or_else(|| Error::not_found("model call", settlement.id))?;
        let settled = apply_settlement(slot.clone(), &settlement)?;
        *slot = settled.clone();
        Ok(settled)
    }

    async fn model_calls(
        &self,
        scope: &Scope,
        filter: CallFilter,
    ) -> Result<Vec<ModelCall>, Error> {
        let st = self.lock();
        Ok(st
            .calls
            .values()
            .filter(|c| &c.tenant_id == scope.tenant_id())
            .filter(|c| match filter {
                CallFilter::Run(run) => c.run_id == run,
                CallFilter::Between(from, to) => c.at >= from && c.at < to,
            })
            .cloned()
            .collect())
    }
}
