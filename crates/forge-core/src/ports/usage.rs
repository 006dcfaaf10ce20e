//! The usage ledger: every model call reserved before it is made and settled after, with the
//! tenant's quota checked atomically at reservation.
//!
//! `reserve` applies [`crate::metering::check_quota`] to the tenant's calls of the same period
//! under the store's lock (a per-tenant advisory lock in PostgreSQL, the single writer in SQLite,
//! the mutex in memory), so concurrent runs of one tenant can never overshoot a quota together.
//! In the same transaction it releases the reservations the call replaces
//! ([`crate::metering::superseded`]: the same step's, from an earlier execution), so a re-executed
//! step holds one reservation, not two; [`UsageLedger::release_orphans`] releases those nothing
//! will replace.

use async_trait::async_trait;

use crate::Error;
use crate::id::RunId;
use crate::metering::{ModelCall, Quota, Settlement};
use crate::scope::{Scope, SystemScope};
use crate::time::Timestamp;

/// Which calls to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallFilter {
    /// One run's calls.
    Run(RunId),
    /// The tenant's calls reserved in `[from, to)`.
    Between(Timestamp, Timestamp),
}

/// Port: metered model calls.
#[async_trait]
pub trait UsageLedger: Send + Sync {
    /// Records `call` (status `reserved`) if the tenant stays within `quota` for the call's
    /// period; otherwise [`Error::QuotaExceeded`] and nothing is recorded.
    async fn reserve(
        &self,
        scope: &Scope,
        call: ModelCall,
        quota: Option<Quota>,
    ) -> Result<(), Error>;

    /// Settles a reservation with what the provider reported (or keeps its estimate, flagged).
    async fn settle(&self, scope: &Scope, settlement: Settlement) -> Result<ModelCall, Error>;

    /// The tenant's calls, oldest first.
    async fn model_calls(&self, scope: &Scope, filter: CallFilter)
    -> Result<Vec<ModelCall>, Error>;

    /// Releases, across tenants, every reservation still unsettled that was made before `before`
    /// (`metering::orphaned`): their workers died, and no re-execution replaced them. Returns how
    /// many.
    async fn release_orphans(
        &self,
        system: &SystemScope,
        before: Timestamp,
    ) -> Result<usize, Error>;
}

/// Applies a settlement to a reserved call (every adapter's rule).
pub fn apply_settlement(mut call: ModelCall, s: &Settlement) -> Result<ModelCall, Error> {
    // A released reservation may still settle (its call finished after all): it counts again.
    if !matches!(
        call.status,
        crate::metering::CallStatus::Reserved | crate::metering::CallStatus::Released
    ) {
        return Err(Error::invalid(format!(
            "model call {} is already settled",
            call.id
        )));
    }
    call.status = match s.actual {
        Some(_) => crate::metering::CallStatus::Settled,
        None => crate::metering::CallStatus::Unreconciled,
    };
    call.actual = s.actual;
    call.cost_micros = Some(s.cost_micros);
    call.request_id = s.request_id.clone();
    Ok(call)
}
