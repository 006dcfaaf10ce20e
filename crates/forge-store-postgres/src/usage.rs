//! The usage ledger. A reservation takes a transaction-scoped advisory lock on its tenant and
//! period first, so reservations of one tenant are serialised and a quota cannot be overshot by
//! concurrent runs; other tenants are not held up.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::metering::{ModelCall, Quota, Settlement, check_quota, superseded};
use forge_core::ports::usage::{CallFilter, UsageLedger, apply_settlement};
use forge_core::scope::{Scope, SystemScope};
use forge_core::time::Timestamp;

use crate::PostgresStore;
use crate::rows::{db_error, json, to_json};

#[async_trait]
impl UsageLedger for PostgresStore {
    async fn reserve(
        &self,
        scope: &Scope,
        call: ModelCall,
        quota: Option<Quota>,
    ) -> Result<(), Error> {
        forge_core::ports::rules::check_reservation(scope, &call)?;
        let tenant = scope.tenant_id().as_str();
        let mut tx = self.tenant_tx(scope).await?;
        let run: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM forge_runs WHERE id = $1 AND tenant_id = $2")
                .bind(call.run_id.0)
                .bind(tenant)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?;
        run.ok_or_else(|| Error::not_found("run", call.run_id))?;
        let reserved = sqlx::query(
            "SELECT body FROM forge_model_calls WHERE tenant_id = $1 AND run_id = $2 AND status = 'reserved' FOR UPDATE",
        )
        .bind(tenant)
        .bind(call.run_id.0)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?
        .iter()
        .map(|r| json(r, "body"))
        .collect::<Result<Vec<ModelCall>, Error>>()?;
        for released in superseded(&reserved, &call) {
            update_call(&mut tx, tenant, &released).await?;
        }
        if let Some(quota) = quota {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 7277267))")
                .bind(format!("forge-quota/{tenant}/{}", call.period_start))
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            let rows = sqlx::query(
                "SELECT body FROM forge_model_calls WHERE tenant_id = $1 AND period_start = $2",
            )
            .bind(tenant)
            .bind(call.period_start.0)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
            let existing = rows
                .iter()
                .map(|r| json(r, "body"))
                .collect::<Result<Vec<ModelCall>, Error>>()?;
            check_quota(&existing, &call, &quota).map_err(Error::QuotaExceeded)?;
        }
        sqlx::query(
            "INSERT INTO forge_model_calls (id, tenant_id, run_id, period_start, at, status, body) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(call.id.0)
        .bind(tenant)
        .bind(call.run_id.0)
        .bind(call.period_start.0)
        .bind(call.at.0)
        .bind(call.status.name())
        .bind(to_json(&call)?)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(())
    }

    async fn release_orphans(
        &self,
        _system: &SystemScope,
        before: Timestamp,
    ) -> Result<usize, Error> {
        // Across tenants: only through forge_system's function (sql/system_functions.sql).
        let released: i32 = sqlx::query_scalar("SELECT forge_sys_release_orphans($1)")
            .bind(before.0)
            .fetch_one(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(usize::try_from(released).unwrap_or(0))
    }

    async fn settle(&self, scope: &Scope, settlement: Settlement) -> Result<ModelCall, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        let settled = settle_tx(&mut tx, scope.tenant_id().as_str(), &settlement).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(settled)
    }

    async fn model_calls(
        &self,
        scope: &Scope,
        filter: CallFilter,
    ) -> Result<Vec<ModelCall>, Error> {
        let tenant = scope.tenant_id().as_str();
        let mut tx = self.tenant_tx(scope).await?;
        let rows = match filter {
            CallFilter::Run(run) => sqlx::query(
                "SELECT body FROM forge_model_calls WHERE tenant_id = $1 AND run_id = $2 ORDER BY at, id",
            )
            .bind(tenant)
            .bind(run.0)
            .fetch_all(&mut *tx)
            .await,
            CallFilter::Between(from, to) => sqlx::query(
                "SELECT body FROM forge_model_calls WHERE tenant_id = $1 AND at >= $2 AND at < $3 ORDER BY at, id",
            )
            .bind(tenant)
            .bind(from.0)
            .bind(to.0)
            .fetch_all(&mut *tx)
            .await,
        }
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        rows.iter().map(|r| json(r, "body")).collect()
    }
}

/// Settles a reserved call inside `tx` (the trait's `settle`, and a step's commit).
pub(crate) async fn settle_tx(
    tx: &mut crate::Tx,
    tenant: &str,
    settlement: &Settlement,
) -> Result<ModelCall, Error> {
    let row = sqlx::query(
        "SELECT body FROM forge_model_calls WHERE id = $1 AND tenant_id = $2 FOR UPDATE",
    )
    .bind(settlement.id.0)
    .bind(tenant)
    .fetch_optional(&mut **tx)
    .await
    .map_err(db_error)?
    .ok_or_else(|| Error::not_found("model call", settlement.id))?;
    let settled = apply_settlement(json(&row, "body")?, settlement)?;
    update_call(tx, tenant, &settled).await?;
    Ok(settled)
}

/// Writes a call's new state (its status column and body).
async fn update_call(tx: &mut crate::Tx, tenant: &str, call: &ModelCall) -> Result<(), Error> {
    sqlx::query(
        "UPDATE forge_model_calls SET status = $1, body = $2 WHERE id = $3 AND tenant_id = $4",
    )
    .bind(call.status.name())
    .bind(to_json(call)?)
    .bind(call.id.0)
    .bind(tenant)
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

/// A step's settled calls as the columns `UNNEST` takes (`commit_step` writes them with the
/// step: each replaces the call's reservation, or is inserted when none was made; a call already
/// settled is refused).
pub(crate) struct CallColumns {
    pub(crate) ids: Vec<uuid::Uuid>,
    pub(crate) period_starts: Vec<chrono::DateTime<chrono::Utc>>,
    pub(crate) ats: Vec<chrono::DateTime<chrono::Utc>>,
    pub(crate) statuses: Vec<&'static str>,
    pub(crate) bodies: Vec<crate::rows::Encoded>,
}

impl CallColumns {
    /// The columns of `calls`, in order.
    pub(crate) fn of(calls: &[ModelCall]) -> Result<Self, Error> {
        Ok(Self {
            ids: calls.iter().map(|c| c.id.0).collect(),
            period_starts: calls.iter().map(|c| c.period_start.0).collect(),
            ats: calls.iter().map(|c| c.at.0).collect(),
            statuses: calls.iter().map(|c| c.status.name()).collect(),
            bodies: calls.iter().map(to_json).collect::<Result<_, _>>()?,
        })
    }
}
