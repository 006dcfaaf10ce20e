//! Fair shares of a pool between tenants.
//!
//! A pool is first come, first served: one tenant's request that reads hundreds of rows at once
//! (a document of aliases, a storm of subscriptions) queues hundreds of acquisitions, and every
//! other tenant's read waits behind all of them. Work done on behalf of a tenant
//! ([`on_behalf_of`]) therefore takes two places before it takes a connection:
//!
//! - one of its tenant's [`Shares::per_tenant`] places, so a tenant never holds or queues for
//!   more of the pool than that, however much it asks at once, and the rest of its asks wait on
//!   its own queue, where they delay nobody else;
//! - one of the [`Shares::tenant_work`] places all tenants share, which leave
//!   [`Shares::reserved`] connections to the work no tenant asked for (a worker's claims,
//!   commits and sweeps run outside [`on_behalf_of`]): runs keep executing under a read storm.
//!
//! Work outside [`on_behalf_of`] takes a connection directly. A task-local names the tenant, so
//! every store method called inside the scope is counted without its signature saying so; tasks
//! spawned from it are not (they are background work, and count as the system's).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

tokio::task_local! {
    static TENANT: Arc<str>;
}

/// Runs `work` on behalf of `tenant`: every connection it takes from a [`crate::Pool`] counts
/// toward that tenant's share (see the module documentation).
pub async fn on_behalf_of<F: Future>(tenant: &str, work: F) -> F::Output {
    TENANT.scope(Arc::from(tenant), work).await
}

/// The tenant the current task works for, if any.
pub(crate) fn current() -> Option<Arc<str>> {
    TENANT.try_with(Arc::clone).ok()
}

/// How a pool of a given size is shared between tenants and the system.
#[derive(Debug)]
pub struct Shares {
    per_tenant: usize,
    tenant_work: Arc<Semaphore>,
    tenant_work_size: usize,
    reserved: usize,
    tenants: Mutex<HashMap<Arc<str>, Arc<Semaphore>>>,
}

/// The places a connection taken on behalf of a tenant holds while it is out; given back when
/// dropped.
#[derive(Debug)]
pub struct Held {
    _own: OwnedSemaphorePermit,
    _shared: OwnedSemaphorePermit,
}

/// Idle tenants' queues forgotten past this many known tenants.
const TENANTS_KEPT: usize = 10_000;

impl Shares {
    /// The shares of a pool of `size` connections: a quarter (at least one, when there are two
    /// or more) reserved for the system, and each tenant at most half of the rest, rounded up.
    pub fn of(size: usize) -> Self {
        let reserved = if size >= 2 { (size / 4).max(1) } else { 0 };
        let tenant_work = size - reserved;
        Self {
            per_tenant: tenant_work.div_ceil(2).max(1),
            tenant_work: Arc::new(Semaphore::new(tenant_work.max(1))),
            tenant_work_size: tenant_work.max(1),
            reserved,
            tenants: Mutex::new(HashMap::new()),
        }
    }

    /// Connections one tenant may hold at once.
    pub fn per_tenant(&self) -> usize {
        self.per_tenant
    }

    /// Connections all tenants together may hold at once.
    pub fn tenant_work(&self) -> usize {
        self.tenant_work_size
    }

    /// Connections only work outside [`on_behalf_of`] can have.
    pub fn reserved(&self) -> usize {
        self.reserved
    }

    fn queue(&self, tenant: Arc<str>) -> Arc<Semaphore> {
        let mut tenants = self.tenants.lock();
        if tenants.len() >= TENANTS_KEPT {
            let full = self.per_tenant;
            tenants.retain(|_, s| s.available_permits() < full);
        }
        tenants
            .entry(tenant)
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_tenant)))
            .clone()
    }

    /// Waits for a place of `tenant`'s own, then for one of the places tenants share.
    pub(crate) async fn enter(&self, tenant: Arc<str>) -> Option<Held> {
        let own = self.queue(tenant).acquire_owned().await.ok()?;
        let shared = self.tenant_work.clone().acquire_owned().await.ok()?;
        Some(Held {
            _own: own,
            _shared: shared,
        })
    }

    /// When the current task works on behalf of a tenant ([`on_behalf_of`]), waits for a place
    /// of that tenant's own and one of those tenants share, to hold while it holds a connection;
    /// `None` outside [`on_behalf_of`] (the system's work takes a connection directly), and
    /// `Some(None)` once closed. For a store whose connections are not a [`crate::Pool`]'s.
    pub async fn enter_current(&self) -> Option<Option<Held>> {
        let tenant = current()?;
        Some(self.enter(tenant).await)
    }

    /// Stops handing out places (the pool is closed).
    pub fn close(&self) {
        self.tenant_work.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_is_split_between_the_system_and_the_tenants() {
        let s = Shares::of(16);
        assert_eq!((s.reserved(), s.tenant_work(), s.per_tenant()), (4, 12, 6));
        let s = Shares::of(8);
        assert_eq!((s.reserved(), s.tenant_work(), s.per_tenant()), (2, 6, 3));
        let s = Shares::of(4);
        assert_eq!((s.reserved(), s.tenant_work(), s.per_tenant()), (1, 3, 2));
        let s = Shares::of(1);
        assert_eq!((s.reserved(), s.tenant_work(), s.per_tenant()), (0, 1, 1));
    }

    #[tokio::test]
    async fn the_current_tenant_is_known_inside_the_scope_only() {
        assert!(current().is_none());
        let inside = on_behalf_of("acme", async { current() }).await;
        assert_eq!(inside.as_deref(), Some("acme"));
        assert!(current().is_none());
    }
}
