//! Request keys on SQLite: the claim and the read of the claim that holds, in one operation of
//! the writer lane.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::id::ThreadId;
use forge_core::ports::keys::{KeyClaim, KeyKind, RequestKeys};
use forge_core::scope::Scope;
use forge_sql::statements::{KEY_CLAIM, KEY_CLAIMED};
use rusqlite::params;

use crate::SqliteStore;
use crate::db;
use crate::rows;

#[async_trait]
impl RequestKeys for SqliteStore {
    async fn hold_key(
        &self,
        scope: &Scope,
        kind: KeyKind,
        key: &str,
        claim: KeyClaim,
    ) -> Result<KeyClaim, Error> {
        let (tenant, key, now) = (
            scope.tenant_id().as_str().to_owned(),
            key.to_owned(),
            self.clock.now().unix_millis(),
        );
        self.write(move |conn| {
            db::execute(
                conn,
                KEY_CLAIM,
                params![
                    tenant,
                    kind.as_str(),
                    key,
                    claim.id.to_string(),
                    claim.thread_id.to_string(),
                    claim.digest,
                    now
                ],
            )?;
            db::first(
                conn,
                KEY_CLAIMED,
                params![tenant, kind.as_str(), key],
                |row| {
                    Ok(KeyClaim {
                        id: rows::uuid(row, "id")?,
                        thread_id: ThreadId(rows::uuid(row, "thread_id")?),
                        digest: rows::text(row, "digest")?,
                    })
                },
            )?
            .ok_or_else(|| Error::not_found("request key", &key))
        })
        .await
    }
}
