//! How many of something (requests executing, subscriptions, connections) each tenant, and
//! each principal within it, holds at once: a semaphore per tenant and one per principal, both
//! taken or neither. A principal's share keeps one user (or one runaway script) of a tenant
//! from taking all of its tenant's places from its colleagues.
//!
//! Tokio's semaphores rather than a counter: a place is given back when its permit drops,
//! whichever way the work holding it ends (answered, failed, cancelled, its socket gone).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use forge_core::ports::store::InFlight;
use forge_core::scope::{PrincipalId, Scope, TenantId};
use forge_core::telemetry::{Instrument, Meter};
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::fair::{FairUse, Ledger};
use crate::http::HttpLimits;
use crate::ws::WsLimits;

/// Keys kept before idle ones (every place back) are forgotten.
const KEPT: usize = 10_000;

/// Whose limit refused a place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Whose {
    /// The tenant has every place it may have.
    Tenant,
    /// The principal has every place a principal may have.
    Principal,
}

impl Whose {
    /// The name of the limit in `forge.server.refusals_total`: `what`, or `principal_` and it.
    pub(crate) fn limit(self, what: &'static str) -> &'static str {
        match (self, what) {
            (Whose::Tenant, what) => what,
            (Whose::Principal, "requests") => "principal_requests",
            (Whose::Principal, "subscriptions") => "principal_subscriptions",
            (Whose::Principal, "runs") => "principal_runs",
            (Whose::Principal, _) => "principal_connections",
        }
    }

    /// What a refused client is told: too many of `what`, `doing`, and whose.
    pub(crate) fn too_many(self, what: &str, doing: &str) -> String {
        match self {
            Whose::Tenant => format!("too many {what} of this tenant {doing}; retry shortly"),
            Whose::Principal => format!(
                "too many of your {what} {doing} (a principal has part of its tenant's); retry shortly"
            ),
        }
    }
}

/// A place held; given back when dropped.
#[derive(Debug)]
pub(crate) struct Place {
    _tenant: OwnedSemaphorePermit,
    _principal: OwnedSemaphorePermit,
}

/// Semaphores of `size` places, one per key.
#[derive(Debug)]
struct Semaphores<K> {
    size: usize,
    by: Mutex<HashMap<K, Arc<Semaphore>>>,
}

impl<K: Hash + Eq + Clone> Semaphores<K> {
    fn new(size: usize) -> Self {
        Self {
            size: size.max(1),
            by: Mutex::new(HashMap::new()),
        }
    }

    fn try_acquire(&self, key: &K) -> Option<OwnedSemaphorePermit> {
        let semaphore = {
            let mut by = self.by.lock();
            if by.len() > KEPT {
                let full = self.size;
                by.retain(|_, s| s.available_permits() < full);
            }
            by.entry(key.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(self.size)))
                .clone()
        };
        semaphore.try_acquire_owned().ok()
    }

    /// The largest share of its places any one key holds now, from 0 to 1.
    fn busiest(&self) -> f64 {
        let by = self.by.lock();
        let held = by
            .values()
            .map(|s| self.size.saturating_sub(s.available_permits()))
            .max()
            .unwrap_or(0);
        held as f64 / self.size as f64
    }
}

/// Places per tenant and per principal.
#[derive(Debug)]
pub(crate) struct Limiter {
    tenants: Semaphores<TenantId>,
    principals: Semaphores<(TenantId, PrincipalId)>,
}

impl Limiter {
    /// `per_tenant` places for each tenant, `per_principal` of them at most for one principal.
    pub(crate) fn new(per_tenant: usize, per_principal: usize) -> Self {
        Self {
            tenants: Semaphores::new(per_tenant),
            principals: Semaphores::new(per_principal.min(per_tenant)),
        }
    }

    /// The places of a principal given `share` ([`FairUse::share`], 0 to 1) of its tenant's
    /// `per_tenant`: at least one, at most all.
    pub(crate) fn principal_part(per_tenant: usize, share: f64) -> usize {
        ((per_tenant as f64 * share).ceil() as usize).clamp(1, per_tenant.max(1))
    }

    /// A place for the scope's principal within its tenant's, or whose limit refused it.
    pub(crate) fn try_acquire(&self, scope: &Scope) -> Result<Place, Whose> {
        let principal = (scope.tenant_id().clone(), scope.principal_id().clone());
        let principal = self
            .principals
            .try_acquire(&principal)
            .ok_or(Whose::Principal)?;
        let tenant = self
            .tenants
            .try_acquire(scope.tenant_id())
            .ok_or(Whose::Tenant)?;
        Ok(Place {
            _tenant: tenant,
            _principal: principal,
        })
    }

    /// The largest share of its places any one tenant, and any one principal, holds now.
    pub(crate) fn busiest(&self) -> (f64, f64) {
        (self.tenants.busiest(), self.principals.busiest())
    }

    /// The places of a tenant and of a principal.
    fn sizes(&self) -> (usize, usize) {
        (self.tenants.size, self.principals.size)
    }
}

/// Every limit a server holds tenants and principals to, shared by both transports, and the
/// gauges that say how close the busiest tenant is to each.
pub(crate) struct Limiters {
    /// GraphQL requests executing (HTTP, and queries and mutations over graphql-ws).
    pub(crate) requests: Arc<Limiter>,
    /// Subscriptions running, across a server's connections.
    pub(crate) subscriptions: Arc<Limiter>,
    /// WebSocket connections open.
    pub(crate) connections: Arc<Limiter>,
    /// Query cost and response bytes per second.
    pub(crate) ledger: Arc<Ledger>,
    /// Runs queued or running.
    pub(crate) runs: Arc<RunsInFlight>,
}

impl Limiters {
    /// The limits of a server's configuration.
    pub(crate) fn new(
        http: &HttpLimits,
        ws: &WsLimits,
        fair: &FairUse,
        meter: Arc<dyn Meter>,
    ) -> Self {
        let places = |n: usize| Arc::new(Limiter::new(n, Limiter::principal_part(n, fair.share())));
        Self {
            requests: places(http.per_tenant),
            subscriptions: places(ws.per_tenant),
            connections: places(ws.connections_per_tenant),
            ledger: Arc::new(Ledger::new(*fair)),
            runs: Arc::new(RunsInFlight::new(
                fair.runs_in_flight,
                Limiter::principal_part(fair.runs_in_flight, fair.share()),
                meter,
            )),
        }
    }

    /// Sets the gauges: each limit (read from what enforces it), and how much of it the busiest
    /// tenant (or principal) uses.
    pub(crate) fn record(&self, meter: &dyn Meter) {
        let set = |limit: &'static str, value: f64, used: Option<f64>| {
            meter.record(Instrument::Limit, value, &[("limit", limit)]);
            if let Some(used) = used {
                meter.record(Instrument::LimitUse, used, &[("limit", limit)]);
            }
        };
        let places = [
            ("requests", &self.requests),
            ("subscriptions", &self.subscriptions),
            ("connections", &self.connections),
        ];
        for (what, limiter) in places {
            let (tenant, principal) = limiter.sizes();
            let (tenant_used, principal_used) = limiter.busiest();
            set(Whose::Tenant.limit(what), tenant as f64, Some(tenant_used));
            set(
                Whose::Principal.limit(what),
                principal as f64,
                Some(principal_used),
            );
        }
        // A bucket's use is the larger of its cost and its bytes spent.
        let (tenant, principal) = self.ledger.limits();
        let (tenant_used, principal_used) = self.ledger.busiest();
        set("cost", tenant.cost_burst, Some(tenant_used));
        set("cost_per_second", tenant.cost_per_second, None);
        set("principal_cost", principal.cost_burst, Some(principal_used));
        set("bytes", tenant.bytes_burst, Some(tenant_used));
        set("bytes_per_second", tenant.bytes_per_second, None);
        set(
            "principal_bytes",
            principal.bytes_burst,
            Some(principal_used),
        );
        let (tenant_used, principal_used) = self.runs.busiest();
        set("runs", self.runs.limit as f64, Some(tenant_used));
        set(
            "principal_runs",
            self.runs.per_principal as f64,
            Some(principal_used),
        );
    }
}

/// A tenant's admission lock, and its runs in flight (and the asking principal's) when last
/// counted.
type Turns = (Arc<tokio::sync::Mutex<()>>, InFlight);

/// How many runs each tenant may have queued or running, counted in the store before each
/// start: exact within one server (a tenant's starts are admitted one at a time), and across
/// servers at most one over per server starting at once.
pub(crate) struct RunsInFlight {
    limit: usize,
    /// A principal's part of `limit`.
    per_principal: usize,
    /// Where refusals are counted.
    meter: Arc<dyn Meter>,
    /// Each tenant's admission lock, and its count when last asked.
    tenants: Mutex<HashMap<TenantId, Turns>>,
}

impl RunsInFlight {
    /// `per_principal` is [`Limiter::principal_part`] of `limit`.
    fn new(limit: usize, per_principal: usize, meter: Arc<dyn Meter>) -> Self {
        Self {
            limit: limit.max(1),
            per_principal,
            meter,
            tenants: Mutex::new(HashMap::new()),
        }
    }

    /// Counts the tenant's runs in flight, and its principal's, with `count` (the store's, up
    /// to the limit) and admits one more if there is room: the tenant's turn, to hold until the
    /// run is created (its other starts wait for it), or whose limit refused it and that
    /// limit.
    pub(crate) async fn admit<F, E>(
        &self,
        tenant: &TenantId,
        count: F,
    ) -> Result<Result<tokio::sync::OwnedMutexGuard<()>, (Whose, usize)>, E>
    where
        F: AsyncFnOnce(usize) -> Result<InFlight, E>,
    {
        let lock = {
            let mut tenants = self.tenants.lock();
            if tenants.len() > KEPT {
                tenants.retain(|_, (lock, _)| Arc::strong_count(lock) > 1);
            }
            tenants
                .entry(tenant.clone())
                .or_insert_with(|| (Arc::new(tokio::sync::Mutex::new(())), InFlight::default()))
                .0
                .clone()
        };
        let turn = lock.lock_owned().await;
        let n = count(self.limit).await?;
        if let Some(entry) = self.tenants.lock().get_mut(tenant) {
            entry.1 = n;
        }
        let refused = if n.tenant >= self.limit {
            Some((Whose::Tenant, self.limit))
        } else if n.principal >= self.per_principal {
            Some((Whose::Principal, self.per_principal))
        } else {
            None
        };
        match refused {
            Some((whose, limit)) => {
                crate::guard::count_refusal(self.meter.as_ref(), whose.limit("runs"));
                Ok(Err((whose, limit)))
            }
            None => Ok(Ok(turn)),
        }
    }

    /// The largest share of the limit any one tenant, and of its part any one principal
    /// asking, had in flight when last counted.
    fn busiest(&self) -> (f64, f64) {
        let tenants = self.tenants.lock();
        let tenant = tenants.values().map(|(_, n)| n.tenant).max().unwrap_or(0);
        let principal = tenants
            .values()
            .map(|(_, n)| n.principal)
            .max()
            .unwrap_or(0);
        (
            tenant as f64 / self.limit as f64,
            principal as f64 / self.per_principal as f64,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(tenant: &str, principal: &str) -> Scope {
        Scope::parse(tenant, principal, &[]).unwrap()
    }

    #[test]
    fn a_principal_holds_its_part_and_the_tenant_its_whole() {
        let limiter = Limiter::new(3, 2);
        let alice = scope("acme", "alice");
        let a = limiter.try_acquire(&alice).unwrap();
        let _b = limiter.try_acquire(&alice).unwrap();
        assert_eq!(limiter.try_acquire(&alice).unwrap_err(), Whose::Principal);
        assert_eq!(limiter.busiest(), (2.0 / 3.0, 1.0));
        let _c = limiter.try_acquire(&scope("acme", "bob")).unwrap();
        assert_eq!(
            limiter.try_acquire(&scope("acme", "carol")).unwrap_err(),
            Whose::Tenant
        );
        assert!(
            limiter.try_acquire(&scope("globex", "alice")).is_ok(),
            "another tenant's alice is another principal"
        );
        drop(a);
        assert!(limiter.try_acquire(&alice).is_ok(), "given back on drop");
    }

    #[test]
    fn a_refused_tenant_place_gives_the_principals_back() {
        let limiter = Limiter::new(1, 1);
        let _held = limiter.try_acquire(&scope("acme", "alice")).unwrap();
        let bob = scope("acme", "bob");
        assert_eq!(limiter.try_acquire(&bob).unwrap_err(), Whose::Tenant);
        assert_eq!(limiter.busiest(), (1.0, 1.0));
        drop(_held);
        assert!(limiter.try_acquire(&bob).is_ok());
    }

    #[test]
    fn a_principals_part_is_at_least_one_and_at_most_the_whole() {
        assert_eq!(Limiter::principal_part(16, 0.5), 8);
        assert_eq!(Limiter::principal_part(5, 0.5), 3);
        assert_eq!(Limiter::principal_part(4, 0.0), 1);
        assert_eq!(Limiter::principal_part(4, 7.0), 4);
        let nan = FairUse {
            principal_share: f64::NAN,
            ..FairUse::default()
        };
        assert_eq!(Limiter::principal_part(4, nan.share()), 4);
    }
}
