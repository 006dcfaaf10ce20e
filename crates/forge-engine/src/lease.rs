//! The run's lease as this process can vouch for it, on its own monotonic clock.
//!
//! A lease's expiry is a wall-clock time other workers compare with theirs; a process that was
//! frozen (SIGSTOP, a paused VM, a long stall) cannot tell from that time alone how long it
//! slept, and may act after another worker took the run over. So each lease is also held until
//! a local deadline: the [`Instant`] the lease (or its renewal) was *asked for*, before the
//! round trip, plus its time to live, less a fifth of it for clock skew between hosts. Whatever
//! happened after the asking — a freeze while the request was in flight included — only makes
//! the deadline earlier than the store's expiry, never later.
//!
//! [`HeldLease::ensure`] is called immediately before every model call and every tool call:
//! within the deadline — and, by the engine's clock, that margin short of the stored expiry —
//! it costs nothing; past either, the lease is renewed in the store first, and a lease another
//! worker took makes the step stop before it acts.

use std::time::{Duration, Instant};

use forge_core::ports::store::RunStore;
use forge_core::run::RunLease;
use forge_core::scope::Scope;
use forge_core::time::Clock;
use parking_lot::Mutex;

/// The lease an execution holds and the deadline this process vouches for it until.
#[derive(Debug)]
pub(crate) struct HeldLease {
    held: Mutex<Held>,
    ttl: Duration,
}

#[derive(Debug, Clone)]
struct Held {
    lease: RunLease,
    until: Instant,
}

/// What of a lease's time to live the local deadline keeps back (clock skew between hosts).
fn margin(ttl: Duration) -> Duration {
    ttl / 5
}

impl HeldLease {
    /// `lease`, asked for at `asked` with time to live `ttl`; when it is not known when it was
    /// asked for, vouched for by no deadline (renewed before the first act).
    pub(crate) fn new(lease: RunLease, asked: Option<Instant>, ttl: Duration) -> Self {
        Self {
            held: Mutex::new(Held {
                lease,
                until: asked.map_or_else(Instant::now, |at| at + ttl - margin(ttl)),
            }),
            ttl,
        }
    }

    /// The lease as last renewed.
    pub(crate) fn lease(&self) -> RunLease {
        self.lock().lease.clone()
    }

    /// Records a renewal asked for at `asked`.
    pub(crate) fn renewed(&self, lease: RunLease, asked: Instant) {
        let mut held = self.lock();
        held.until = held.until.max(asked + self.ttl - margin(self.ttl));
        held.lease = lease;
    }

    /// Whether this process can vouch for the lease now, without asking the store: within its
    /// local deadline, and a margin short of its stored expiry by `clock`.
    pub(crate) fn vouched(&self, clock: &dyn Clock) -> bool {
        let held = self.lock();
        Instant::now() < held.until && clock.now().plus(margin(self.ttl)) < held.lease.expires_at
    }

    /// Makes sure the lease is still this execution's before it acts: at once within the local
    /// deadline, else by renewing it in the store (an error — the lease was lost — means the
    /// step must not act).
    pub(crate) async fn ensure(
        &self,
        runs: &dyn RunStore,
        clock: &dyn Clock,
        scope: &Scope,
    ) -> Result<(), forge_core::Error> {
        if self.vouched(clock) {
            return Ok(());
        }
        let asked = Instant::now();
        let renewed = runs.renew_lease(scope, &self.lease(), self.ttl).await?;
        self.renewed(renewed, asked);
        Ok(())
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Held> {
        self.held.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forge_core::id::RunId;
    use forge_core::time::ManualClock;

    fn lease(token: u64, clock: &ManualClock, ttl: Duration) -> RunLease {
        RunLease {
            run_id: RunId(uuid::Uuid::nil()),
            holder: "w".into(),
            token,
            expires_at: clock.now().plus(ttl),
        }
    }

    #[test]
    fn the_deadline_runs_from_the_asking_less_the_margin() {
        let clock = ManualClock::at_2026();
        let ttl = Duration::from_secs(10);
        let long_ago = Instant::now() - Duration::from_secs(9);
        let held = HeldLease::new(lease(1, &clock, ttl), Some(long_ago), ttl);
        assert!(
            !held.vouched(&clock),
            "asked 9 s ago: 8 s of 10 are vouched for"
        );
        held.renewed(lease(1, &clock, ttl), Instant::now());
        assert!(held.vouched(&clock));
        // A renewal asked for before a later one never moves the deadline back.
        held.renewed(lease(1, &clock, ttl), long_ago);
        assert!(held.vouched(&clock));
        let fresh = HeldLease::new(lease(2, &clock, ttl), Some(Instant::now()), ttl);
        assert!(fresh.vouched(&clock));
        assert_eq!(fresh.lease().token, 2);
        let unknown = HeldLease::new(lease(3, &clock, ttl), None, ttl);
        assert!(!unknown.vouched(&clock), "unknown: not vouched for");
    }

    #[test]
    fn the_stored_expiry_by_the_engines_clock_counts_too() {
        let clock = ManualClock::at_2026();
        let ttl = Duration::from_secs(10);
        let held = HeldLease::new(lease(1, &clock, ttl), Some(Instant::now()), ttl);
        assert!(held.vouched(&clock));
        clock.advance(Duration::from_secs(8));
        assert!(
            !held.vouched(&clock),
            "within the margin of the stored expiry"
        );
    }
}
