//! What one tenant may spend per unit of time, over both transports: the query cost async-graphql
//! computes for each document (its complexity), and the bytes of the responses it gets.
//!
//! Each is a token bucket per tenant, refilled continuously up to a burst. A document's cost is
//! taken before it executes, and refused with `RATE_LIMITED` (and how many seconds until it
//! would pass) when the bucket holds less. A response's size is known only once it is built, so
//! it is charged afterwards and may leave the bucket in debt; a tenant in debt is refused until
//! the bucket has refilled past zero.
//!
//! Kept by hand rather than with `governor`: its GCRA cells cannot be charged after the fact
//! (the debt a response's bytes leave), and a bucket here is a dozen lines.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use forge_core::scope::TenantId;

/// What each tenant may spend, per second and at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FairUse {
    /// Query cost (async-graphql's complexity: a field counts 1, a list its `limit` times its
    /// selection) a tenant's documents may spend per second, sustained.
    pub cost_per_second: f64,
    /// The most cost a tenant may spend at once, after a quiet spell.
    pub cost_burst: f64,
    /// What every document costs beyond its complexity: its parse, validation and dispatch, and
    /// for a subscription the reads that start it. Keeps a storm of cheap documents (thousands
    /// of one-field subscriptions opened and dropped) within the same bucket.
    pub cost_per_document: f64,
    /// Bytes of response a tenant may receive per second, sustained.
    pub bytes_per_second: f64,
    /// The most bytes a tenant may receive at once, after a quiet spell.
    pub bytes_burst: f64,
}

impl Default for FairUse {
    /// Fifty documents at the complexity limit (4,000) at once and five a second after that —
    /// an interface's ordinary reads cost 60–2,000 each with the 50 every document costs (a
    /// list counts its `limit`, not what it returns), so a busy tenant's hundreds of reads a
    /// second pass, and so do a few hundred subscriptions opened a second; and 64 MiB of
    /// responses at once, 16 MiB a second after that — sixteen responses at the 4 MiB cap, then
    /// four a second.
    fn default() -> Self {
        Self {
            cost_per_second: 20_000.0,
            cost_burst: 200_000.0,
            cost_per_document: 50.0,
            bytes_per_second: 16.0 * 1024.0 * 1024.0,
            bytes_burst: 64.0 * 1024.0 * 1024.0,
        }
    }
}

/// Why a tenant was refused: which bucket, and how long until the request would pass.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Refused {
    /// `cost` or `bytes`.
    pub(crate) limit: &'static str,
    pub(crate) retry_after: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: f64, now: Instant) -> Self {
        Self {
            tokens: burst,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant, rate: f64, burst: f64) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.at = now;
    }
}

/// Seconds until `missing` tokens have refilled at `rate`.
fn wait(missing: f64, rate: f64) -> Duration {
    Duration::from_secs_f64((missing / rate.max(f64::MIN_POSITIVE)).clamp(0.0, 3_600.0))
}

#[derive(Debug)]
struct Spending {
    cost: Bucket,
    bytes: Bucket,
}

/// Every tenant's buckets.
#[derive(Debug)]
pub(crate) struct Ledger {
    limits: FairUse,
    tenants: Mutex<HashMap<TenantId, Spending>>,
}

/// Tenants whose buckets are kept before full ones are forgotten.
const TENANTS_KEPT: usize = 10_000;

impl Ledger {
    pub(crate) fn new(limits: FairUse) -> Self {
        Self {
            limits,
            tenants: Mutex::new(HashMap::new()),
        }
    }

    fn with<R>(&self, tenant: &TenantId, f: impl FnOnce(&mut Spending, &FairUse) -> R) -> R {
        let now = Instant::now();
        let l = self.limits;
        let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        if tenants.len() >= TENANTS_KEPT && !tenants.contains_key(tenant) {
            // Forget tenants whose buckets have refilled: they are as good as new.
            tenants.retain(|_, s| {
                s.cost.refill(now, l.cost_per_second, l.cost_burst);
                s.bytes.refill(now, l.bytes_per_second, l.bytes_burst);
                s.cost.tokens < l.cost_burst || s.bytes.tokens < l.bytes_burst
            });
        }
        let spending = tenants.entry(tenant.clone()).or_insert_with(|| Spending {
            cost: Bucket::full(l.cost_burst, now),
            bytes: Bucket::full(l.bytes_burst, now),
        });
        spending.cost.refill(now, l.cost_per_second, l.cost_burst);
        spending
            .bytes
            .refill(now, l.bytes_per_second, l.bytes_burst);
        f(spending, &l)
    }

    /// Takes `cost` from the tenant's bucket, or says how long until it holds that much. A
    /// tenant in debt for bytes is refused too, until it is out of it.
    pub(crate) fn spend_cost(&self, tenant: &TenantId, cost: usize) -> Result<(), Refused> {
        self.with(tenant, |s, l| {
            if s.bytes.tokens < 0.0 {
                return Err(Refused {
                    limit: "bytes",
                    retry_after: wait(-s.bytes.tokens, l.bytes_per_second),
                });
            }
            // A document may cost at most the burst: one at the complexity limit always fits.
            let cost = (cost as f64 + l.cost_per_document).clamp(1.0, l.cost_burst);
            if s.cost.tokens < cost {
                return Err(Refused {
                    limit: "cost",
                    retry_after: wait(cost - s.cost.tokens, l.cost_per_second),
                });
            }
            s.cost.tokens -= cost;
            Ok(())
        })
    }

    /// Charges `bytes` of response to the tenant; the bucket may go into debt (at most one
    /// burst deep).
    pub(crate) fn spend_bytes(&self, tenant: &TenantId, bytes: usize) {
        self.with(tenant, |s, l| {
            s.bytes.tokens = (s.bytes.tokens - bytes as f64).max(-l.bytes_burst);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> FairUse {
        FairUse {
            cost_per_second: 100.0,
            cost_burst: 1_000.0,
            cost_per_document: 0.0,
            bytes_per_second: 1_000.0,
            bytes_burst: 10_000.0,
        }
    }

    #[test]
    fn cost_is_spent_until_the_burst_is_gone_and_refused_with_a_wait() {
        let ledger = Ledger::new(limits());
        let acme = TenantId::new("acme").unwrap();
        for _ in 0..10 {
            assert_eq!(ledger.spend_cost(&acme, 100), Ok(()));
        }
        let refused = ledger.spend_cost(&acme, 100).unwrap_err();
        assert_eq!(refused.limit, "cost");
        assert!(
            refused.retry_after > Duration::from_millis(900)
                && refused.retry_after <= Duration::from_secs(1),
            "{refused:?}"
        );
        let globex = TenantId::new("globex").unwrap();
        assert_eq!(
            ledger.spend_cost(&globex, 100),
            Ok(()),
            "another tenant has its own bucket"
        );
    }

    #[test]
    fn a_tenant_in_debt_for_bytes_is_refused_until_it_refills() {
        let ledger = Ledger::new(limits());
        let acme = TenantId::new("acme").unwrap();
        ledger.spend_bytes(&acme, 15_000);
        let refused = ledger.spend_cost(&acme, 1).unwrap_err();
        assert_eq!(refused.limit, "bytes");
        assert!(refused.retry_after >= Duration::from_secs(4), "{refused:?}");
    }

    #[test]
    fn a_document_dearer_than_the_burst_still_passes_on_a_full_bucket() {
        let ledger = Ledger::new(limits());
        let acme = TenantId::new("acme").unwrap();
        assert_eq!(ledger.spend_cost(&acme, 50_000), Ok(()));
        assert!(ledger.spend_cost(&acme, 1).is_err());
    }
}
