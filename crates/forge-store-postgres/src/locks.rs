//! Named leases on PostgreSQL: one row a key, decided in one statement each.

use std::time::Duration;

use async_trait::async_trait;
use forge_core::Error;
use forge_core::ports::lease::{Lease, LeaseStore};
use forge_core::scope::SystemScope;

use crate::PostgresStore;
use crate::rows::{self, db_error, i64_of};

#[async_trait]
impl LeaseStore for PostgresStore {
    async fn acquire(
        &self,
        _system: &SystemScope,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Lease, Error> {
        let now = self.clock.now();
        let expires_at = now.plus(ttl);
        // Insert, or take over a free, expired or own lease; the row lock serializes racers.
        let token: Option<i64> = sqlx::query_scalar(
            "INSERT INTO forge_locks AS l (key, holder, token, expires_at, fence) VALUES ($1, $2, 1, $3, 1) \
             ON CONFLICT (key) DO UPDATE SET holder = $2, token = l.fence + 1, expires_at = $3, fence = l.fence + 1 \
             WHERE l.holder IS NULL OR l.holder = $2 OR l.expires_at <= $4 \
             RETURNING token",
        )
        .bind(key)
        .bind(holder)
        .bind(expires_at.0)
        .bind(now.0)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?;
        match token {
            Some(token) => Ok(Lease {
                key: key.to_owned(),
                holder: holder.to_owned(),
                token: rows::u64_of(token, "token")?,
                expires_at,
            }),
            None => {
                let until: chrono::DateTime<chrono::Utc> =
                    sqlx::query_scalar("SELECT expires_at FROM forge_locks WHERE key = $1")
                        .bind(key)
                        .fetch_one(&self.pool)
                        .await
                        .map_err(db_error)?;
                Err(Error::LeaseHeld {
                    resource: format!("lease {key}"),
                    until: forge_core::time::Timestamp(until),
                })
            }
        }
    }

    async fn renew(
        &self,
        _system: &SystemScope,
        lease: &Lease,
        ttl: Duration,
    ) -> Result<Lease, Error> {
        let now = self.clock.now();
        let expires_at = now.plus(ttl);
        let done = sqlx::query("UPDATE forge_locks SET expires_at = $1 WHERE key = $2 AND token = $3 AND holder IS NOT NULL AND expires_at > $4")
            .bind(expires_at.0)
            .bind(&lease.key)
            .bind(i64_of(lease.token)?)
            .bind(now.0)
            .execute(&self.pool)
            .await
            .map_err(db_error)?;
        if done.rows_affected() == 1 {
            Ok(Lease {
                expires_at,
                ..lease.clone()
            })
        } else {
            Err(Error::Fenced {
                resource: format!("lease {}", lease.key),
            })
        }
    }

    async fn release(&self, _system: &SystemScope, lease: &Lease) -> Result<(), Error> {
        sqlx::query("UPDATE forge_locks SET holder = NULL, token = NULL, expires_at = NULL WHERE key = $1 AND token = $2")
            .bind(&lease.key)
            .bind(i64_of(lease.token)?)
            .execute(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(())
    }
}
