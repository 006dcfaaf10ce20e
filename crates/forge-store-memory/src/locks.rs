//! Named leases in memory.

use std::time::Duration;

use async_trait::async_trait;
use forge_core::Error;
use forge_core::ports::lease::{Lease, LeaseStore};
use forge_core::scope::SystemScope;

use crate::MemoryStore;

/// One key's lease and the highest token ever minted for it.
#[derive(Debug, Default, Clone)]
pub(crate) struct LockRow {
    current: Option<Lease>,
    fence: u64,
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn acquire(
        &self,
        _system: &SystemScope,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Lease, Error> {
        let now = self.clock.now();
        let mut st = self.lock();
        let row = st.locks.entry(key.to_owned()).or_default();
        if let Some(l) = &row.current
            && l.holder != holder
            && l.expires_at > now
        {
            return Err(Error::LeaseHeld {
                resource: format!("lease {key}"),
                until: l.expires_at,
            });
        }
        row.fence += 1;
        let lease = Lease {
            key: key.to_owned(),
            holder: holder.to_owned(),
            token: row.fence,
            expires_at: now.plus(ttl),
        };
        row.current = Some(lease.clone());
        Ok(lease)
    }

    async fn renew(
        &self,
        _system: &SystemScope,
        lease: &Lease,
        ttl: Duration,
    ) -> Result<Lease, Error> {
        let now = self.clock.now();
        let mut st = self.lock();
        match st
            .locks
            .get_mut(&lease.key)
            .and_then(|r| r.current.as_mut())
        {
            Some(l) if l.token == lease.token && l.expires_at > now => {
                l.expires_at = now.plus(ttl);
                Ok(l.clone())
            }
            _ => Err(Error::Fenced {
                resource: format!("lease {}", lease.key),
            }),
        }
    }

    async fn release(&self, _system: &SystemScope, lease: &Lease) -> Result<(), Error> {
        let mut st = self.lock();
        if let Some(row) = st.locks.get_mut(&lease.key)
            && row.current.as_ref().is_some_and(|l| l.token == lease.token)
        {
            row.current = None;
        }
        Ok(())
    }
}
