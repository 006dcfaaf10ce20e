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
use std::hash::Hash;
use std::time::{Duration, Instant};

use forge_core::scope::{PrincipalId, Scope, TenantId};
use parking_lot::Mutex;

/// What each tenant may spend, per second and at once, and what one principal of it may.
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
    /// The part (0 to 1) of each of its tenant's limits one principal may use: of the cost and
    /// bytes, of the requests executing, the subscriptions, the connections and the runs in
    /// flight (at least one of each). 1 lets one principal use all of its tenant's.
    pub principal_share: f64,
    /// Runs one tenant may have queued or running at once; `startRun` past it is refused with
    /// `RATE_LIMITED` (`limit: "runs"`). A run waiting for a person does not count.
    pub runs_in_flight: usize,
}

impl Default for FairUse {
    /// Fifty documents at the complexity limit (4,000) at once and five a second after that —
    /// an interface's ordinary reads cost 60–2,000 each with the 50 every document costs (a
    /// list counts its `limit`, not what it returns), so a busy tenant's hundreds of reads a
    /// second pass, and so do a few hundred subscriptions opened a second; and 64 MiB of
    /// responses at once, 16 MiB a second after that — sixteen responses at the 4 MiB cap, then
    /// four a second. A principal may use half of each: two people of a tenant, or a person
    /// and a runaway script, each keep theirs. A hundred runs in flight: a batch or a busy team
    /// queues that many; more from one tenant would sit ahead of every other tenant's runs.
    fn default() -> Self {
        Self {
            cost_per_second: 20_000.0,
            cost_burst: 200_000.0,
            cost_per_document: 50.0,
            bytes_per_second: 16.0 * 1024.0 * 1024.0,
            bytes_burst: 64.0 * 1024.0 * 1024.0,
            principal_share: 0.5,
            runs_in_flight: 100,
        }
    }
}

impl FairUse {
    /// The share of a principal, within 0 to 1 (1 when not a number).
    pub(crate) fn share(&self) -> f64 {
        if self.principal_share.is_finite() {
            self.principal_share.clamp(0.0, 1.0)
        } else {
            1.0
        }
    }

    /// These limits scaled to one principal's share.
    fn of_principal(&self) -> Self {
        let share = self.share();
        Self {
            cost_per_second: self.cost_per_second * share,
            cost_burst: self.cost_burst * share,
            bytes_per_second: self.bytes_per_second * share,
            bytes_burst: self.bytes_burst * share,
            ..*self
        }
    }
}

/// Why a tenant was refused: which bucket, and how long until the request would pass.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Refused {
    /// `cost` or `bytes` (the tenant's), `principal_cost` or `principal_bytes`.
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

impl Spending {
    fn full(l: &FairUse, now: Instant) -> Self {
        Self {
            cost: Bucket::full(l.cost_burst, now),
            bytes: Bucket::full(l.bytes_burst, now),
        }
    }

    fn refill(&mut self, l: &FairUse, now: Instant) {
        self.cost.refill(now, l.cost_per_second, l.cost_burst);
        self.bytes.refill(now, l.bytes_per_second, l.bytes_burst);
    }

    fn is_full(&self, l: &FairUse) -> bool {
        self.cost.tokens >= l.cost_burst && self.bytes.tokens >= l.bytes_burst
    }

    /// Why `cost` cannot be spent now, if it cannot; `names` are the cost's and the bytes'.
    fn check(&self, l: &FairUse, cost: f64, names: [&'static str; 2]) -> Result<(), Refused> {
        if self.bytes.tokens < 0.0 {
            return Err(Refused {
                limit: names[1],
                retry_after: wait(-self.bytes.tokens, l.bytes_per_second),
            });
        }
        // A document may cost at most the burst: one at the complexity limit always fits.
        let cost = cost.min(l.cost_burst);
        if self.cost.tokens < cost {
            return Err(Refused {
                limit: names[0],
                retry_after: wait(cost - self.cost.tokens, l.cost_per_second),
            });
        }
        Ok(())
    }

    fn spend(&mut self, l: &FairUse, cost: f64) {
        self.cost.tokens -= cost.min(l.cost_burst);
    }

    fn charge(&mut self, l: &FairUse, bytes: f64) {
        self.bytes.tokens = (self.bytes.tokens - bytes).max(-l.bytes_burst);
    }

    /// The share of the burst spent (or owed), cost and bytes alike, from 0.
    fn used(&self, l: &FairUse) -> f64 {
        let cost = 1.0 - self.cost.tokens / l.cost_burst.max(f64::MIN_POSITIVE);
        let bytes = 1.0 - self.bytes.tokens / l.bytes_burst.max(f64::MIN_POSITIVE);
        cost.max(bytes).max(0.0)
    }
}

/// The buckets of one kind of party (tenants, or principals within them).
#[derive(Debug)]
struct Parties<K> {
    limits: FairUse,
    by: HashMap<K, Spending>,
}

impl<K: Hash + Eq + Clone> Parties<K> {
    fn new(limits: FairUse) -> Self {
        Self {
            limits,
            by: HashMap::new(),
        }
    }

    /// The party's buckets, refilled to now.
    fn get(&mut self, key: &K, now: Instant) -> &mut Spending {
        let l = self.limits;
        if self.by.len() >= KEPT && !self.by.contains_key(key) {
            // Forget parties whose buckets have refilled: they are as good as new.
            self.by.retain(|_, s| {
                s.refill(&l, now);
                !s.is_full(&l)
            });
        }
        let spending = self
            .by
            .entry(key.clone())
            .or_insert_with(|| Spending::full(&l, now));
        spending.refill(&l, now);
        spending
    }

    /// The most any one party has spent of its burst, now.
    fn busiest(&mut self, now: Instant) -> f64 {
        let l = self.limits;
        self.by
            .values_mut()
            .map(|s| {
                s.refill(&l, now);
                s.used(&l)
            })
            .fold(0.0, f64::max)
    }
}

#[derive(Debug)]
struct Books {
    tenants: Parties<TenantId>,
    principals: Parties<(TenantId, PrincipalId)>,
}

/// Every tenant's and principal's buckets.
#[derive(Debug)]
pub(crate) struct Ledger {
    books: Mutex<Books>,
}

/// Parties whose buckets are kept before full ones are forgotten.
const KEPT: usize = 10_000;

const TENANT: [&str; 2] = ["cost", "bytes"];
const PRINCIPAL: [&str; 2] = ["principal_cost", "principal_bytes"];

impl Ledger {
    pub(crate) fn new(limits: FairUse) -> Self {
        Self {
            books: Mutex::new(Books {
                tenants: Parties::new(limits),
                principals: Parties::new(limits.of_principal()),
            }),
        }
    }

    fn books(&self) -> parking_lot::MutexGuard<'_, Books> {
        self.books.lock()
    }

    /// Takes `cost` (plus what every document costs) from the tenant's and the principal's
    /// buckets, or says how long until both hold that much. A party in debt for bytes is
    /// refused too, until it is out of it.
    pub(crate) fn spend_cost(&self, scope: &Scope, cost: usize) -> Result<(), Refused> {
        let now = Instant::now();
        let principal = (scope.tenant_id().clone(), scope.principal_id().clone());
        let mut books = self.books();
        let Books {
            tenants,
            principals,
        } = &mut *books;
        let cost = (cost as f64 + tenants.limits.cost_per_document).max(1.0);
        let (tl, pl) = (tenants.limits, principals.limits);
        let tenant = tenants.get(scope.tenant_id(), now);
        tenant.check(&tl, cost, TENANT)?;
        let mine = principals.get(&principal, now);
        mine.check(&pl, cost, PRINCIPAL)?;
        mine.spend(&pl, cost);
        tenants.get(scope.tenant_id(), now).spend(&tl, cost);
        Ok(())
    }

    /// Charges `bytes` of response to the tenant and the principal; the buckets may go into
    /// debt (at most one burst deep).
    pub(crate) fn spend_bytes(&self, scope: &Scope, bytes: usize) {
        let now = Instant::now();
        let principal = (scope.tenant_id().clone(), scope.principal_id().clone());
        let mut books = self.books();
        let (tl, pl) = (books.tenants.limits, books.principals.limits);
        books
            .tenants
            .get(scope.tenant_id(), now)
            .charge(&tl, bytes as f64);
        books
            .principals
            .get(&principal, now)
            .charge(&pl, bytes as f64);
    }

    /// The limits of a tenant's buckets and of a principal's.
    pub(crate) fn limits(&self) -> (FairUse, FairUse) {
        let books = self.books();
        (books.tenants.limits, books.principals.limits)
    }

    /// The most any one tenant, and any one principal, has spent of its burst (cost or
    /// bytes), from 0 (above 1 in debt).
    pub(crate) fn busiest(&self) -> (f64, f64) {
        let now = Instant::now();
        let mut books = self.books();
        (books.tenants.busiest(now), books.principals.busiest(now))
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
            principal_share: 1.0,
            runs_in_flight: 1,
        }
    }

    fn scope(tenant: &str, principal: &str) -> Scope {
        Scope::parse(tenant, principal, &[]).unwrap()
    }

    #[test]
    fn cost_is_spent_until_the_burst_is_gone_and_refused_with_a_wait() {
        let ledger = Ledger::new(limits());
        let acme = scope("acme", "alice");
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
        assert_eq!(
            ledger.spend_cost(&scope("globex", "alice"), 100),
            Ok(()),
            "another tenant has its own bucket"
        );
        assert!(ledger.busiest().0 >= 0.99, "{:?}", ledger.busiest());
    }

    #[test]
    fn a_principal_spends_its_share_and_leaves_the_rest_to_its_colleagues() {
        let ledger = Ledger::new(FairUse {
            principal_share: 0.3,
            ..limits()
        });
        let (alice, bob) = (scope("acme", "alice"), scope("acme", "bob"));
        for _ in 0..3 {
            assert_eq!(ledger.spend_cost(&alice, 100), Ok(()));
        }
        let refused = ledger.spend_cost(&alice, 100).unwrap_err();
        assert_eq!(refused.limit, "principal_cost");
        // Refused, alice spent nothing of the tenant's: bob finds 700 of its 1,000.
        for _ in 0..3 {
            assert_eq!(ledger.spend_cost(&bob, 100), Ok(()));
        }
        let (tenant, principal) = ledger.busiest();
        assert!((tenant - 0.6).abs() < 0.01 && (principal - 1.0).abs() < 0.01);
        // Alice's bytes put her in debt, not bob.
        ledger.spend_bytes(&alice, 3_500);
        assert_eq!(
            ledger.spend_cost(&alice, 0).unwrap_err().limit,
            "principal_bytes"
        );
        for _ in 0..3 {
            assert_eq!(ledger.spend_cost(&scope("acme", "carol"), 100), Ok(()));
        }
        assert_eq!(ledger.spend_cost(&scope("acme", "dave"), 100), Ok(()));
        assert_eq!(
            ledger
                .spend_cost(&scope("acme", "erin"), 100)
                .unwrap_err()
                .limit,
            "cost",
            "the tenant's own bucket still bounds them all"
        );
    }

    #[test]
    fn a_tenant_in_debt_for_bytes_is_refused_until_it_refills() {
        let ledger = Ledger::new(limits());
        let acme = scope("acme", "alice");
        ledger.spend_bytes(&acme, 15_000);
        let refused = ledger.spend_cost(&scope("acme", "bob"), 1).unwrap_err();
        assert_eq!(refused.limit, "bytes");
        assert!(refused.retry_after >= Duration::from_secs(4), "{refused:?}");
    }

    #[test]
    fn a_document_dearer_than_the_burst_still_passes_on_a_full_bucket() {
        let ledger = Ledger::new(limits());
        let acme = scope("acme", "alice");
        assert_eq!(ledger.spend_cost(&acme, 50_000), Ok(()));
        assert!(ledger.spend_cost(&acme, 1).is_err());
    }
}
