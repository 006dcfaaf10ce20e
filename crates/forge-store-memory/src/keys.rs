//! Request keys in memory: the first claim of a tenant's key holds, under the one lock.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::ports::keys::{KeyClaim, KeyKind, RequestKeys};
use forge_core::scope::Scope;

use crate::MemoryStore;

#[async_trait]
impl RequestKeys for MemoryStore {
    async fn hold_key(
        &self,
        scope: &Scope,
        kind: KeyKind,
        key: &str,
        claim: KeyClaim,
    ) -> Result<KeyClaim, Error> {
        let mut st = self.lock();
        Ok(st
            .keys
            .entry((scope.tenant_id().clone(), kind, key.to_owned()))
            .or_insert(claim)
            .clone())
    }
}
