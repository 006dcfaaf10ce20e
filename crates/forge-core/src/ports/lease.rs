//! The lease port: named, fenced, expiring locks for coordinating processes (for example one
//! scheduler among many, or one compaction per thread).
//!
//! A lease on a key is held by one holder until it expires or is released; every acquisition
//! mints a higher fencing token for that key, and renewing or releasing checks the token, so a
//! holder that lost its lease cannot extend or free someone else's. Expiry follows the injected
//! [`Clock`](crate::time::Clock), the same in every adapter. Run leases are not these: they live in
//! the run store, where `commit_step` checks them in the same transaction.

use std::time::Duration;

use async_trait::async_trait;

use crate::Error;
use crate::scope::SystemScope;
use crate::time::Timestamp;

/// A held lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// What is leased.
    pub key: String,
    /// Who holds it.
    pub holder: String,
    /// The fencing token: higher than every earlier token for this key.
    pub token: u64,
    /// When it lapses unless renewed.
    pub expires_at: Timestamp,
}

/// Port: named leases.
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Takes the lease on `key` for `ttl`, with a new token. `LeaseHeld` while another holder's
    /// lease is unexpired; the same holder re-acquiring gets a new token.
    async fn acquire(
        &self,
        system: &SystemScope,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Lease, Error>;

    /// Extends a lease that is still current; `Fenced` if it expired or was taken over.
    async fn renew(
        &self,
        system: &SystemScope,
        lease: &Lease,
        ttl: Duration,
    ) -> Result<Lease, Error>;

    /// Gives a current lease up; releasing a stale lease changes nothing.
    async fn release(&self, system: &SystemScope, lease: &Lease) -> Result<(), Error>;
}
