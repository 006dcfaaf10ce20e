//! Request keys on PostgreSQL: the claim, then the claim that holds, in one tenant transaction.
//! The insert waits for a racing claim of the same key to commit or roll back, and the read (a
//! statement of its own, so a snapshot taken after) sees the one that holds.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::id::ThreadId;
use forge_core::ports::keys::{KeyClaim, KeyKind, RequestKeys};
use forge_core::scope::Scope;
use forge_sql::statements::{KEY_CLAIM, KEY_CLAIMED};

use crate::PostgresStore;
use crate::rows::{self, db_error};

#[async_trait]
impl RequestKeys for PostgresStore {
    async fn hold_key(
        &self,
        scope: &Scope,
        kind: KeyKind,
        key: &str,
        claim: KeyClaim,
    ) -> Result<KeyClaim, Error> {
        let tenant = scope.tenant_id().as_str();
        let mut tx = self.tenant_tx(scope).await?;
        sqlx::query(KEY_CLAIM)
            .bind(tenant)
            .bind(kind.as_str())
            .bind(key)
            .bind(claim.id)
            .bind(claim.thread_id.0)
            .bind(&claim.digest)
            .bind(self.clock.now().0)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let row = sqlx::query(KEY_CLAIMED)
            .bind(tenant)
            .bind(kind.as_str())
            .bind(key)
            .fetch_one(&mut *tx)
            .await
            .map_err(db_error)?;
        let held = KeyClaim {
            id: rows::get(&row, "id")?,
            thread_id: ThreadId(rows::get(&row, "thread_id")?),
            digest: rows::get(&row, "digest")?,
        };
        tx.commit().await.map_err(db_error)?;
        Ok(held)
    }
}
