//! The usage ledger. A reservation is one `BEGIN IMMEDIATE` transaction: SQLite's single writer
//! makes the quota check and the insert atomic against every other reservation.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::metering::{ModelCall, Quota, Settlement, check_quota, orphaned, superseded};
use forge_core::ports::usage::{CallFilter, UsageLedger, apply_settlement};
use forge_core::scope::{Scope, SystemScope};
use forge_core::time::Timestamp;

use crate::SqliteStore;
use crate::rows::{db_error, json, to_json};

#[async_trait]
impl UsageLedger for SqliteStore {
    async fn reserve(
        &self,
        scope: &Scope,
        call: ModelCall,
        quota: Option<Quota>,
    ) -> Result<(), Error> {
        if &call.tenant_id != scope.tenant_id() {
            return Err(Error::invalid("a call is reserved in its own tenant"));
        }
        let tenant = scope.tenant_id().as_str();
        let (_gate, mut tx) = self.write_tx().await?;
        let run: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM forge_runs WHERE id = $1 AND tenant_id = $2")
                .bind(call.run_id.to_string())
                .bind(tenant)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?;
        run.ok_or_else(|| Error::not_found("run", call.run_id))?;
        let reserved = sqlx::query(
            "SELECT body FROM forge_model_calls WHERE tenant_id = $1 AND run_id = $2 AND status = 'reserved'",
        )
        .bind(tenant)
        .bind(call.run_id.to_string())
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
            let rows = sqlx::query(
                "SELECT body FROM forge_model_calls WHERE tenant_id = $1 AND period_start = $2",
            )
            .bind(tenant)
            .bind(call.period_start.unix_millis())
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
        .bind(call.id.to_string())
        .bind(tenant)
        .bind(call.run_id.to_string())
        .bind(call.period_start.unix_millis())
        .bind(call.at.unix_millis())
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
        let (_gate, mut tx) = self.write_tx().await?;
        let rows = sqlx::query(
            "SELECT tenant_id, body FROM forge_model_calls WHERE status = 'reserved' AND at < $1",
        )
        .bind(before.unix_millis())
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        let mut released = 0;
        for row in &rows {
            let tenant: String = crate::rows::get(row, "tenant_id")?;
            if let Some(r) = orphaned(&json(row, "body")?, before) {
                update_call(&mut tx, &tenant, &r).await?;
                released += 1;
            }
        }
        tx.commit().await.map_err(db_error)?;
        Ok(released)
    }

    async fn settle(&self, scope: &Scope, settlement: Settlement) -> Result<ModelCall, Error> {
        let (_gate, mut tx) = self.write_tx().await?;
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
        let rows = match filter {
            CallFilter::Run(run) => sqlx::query(
                "SELECT body FROM forge_model_calls WHERE tenant_id = $1 AND run_id = $2 ORDER BY at, id",
            )
            .bind(tenant)
            .bind(run.to_string())
            .fetch_all(&mut *self.conn().await?)
            .await,
            CallFilter::Between(from, to) => sqlx::query(
                "SELECT body FROM forge_model_calls WHERE tenant_id = $1 AND at >= $2 AND at < $3 ORDER BY at, id",
            )
            .bind(tenant)
            .bind(from.unix_millis())
            .bind(to.unix_millis())
            .fetch_all(&mut *self.conn().await?)
            .await,
        }
        .map_err(db_error)?;
        rows.iter().map(|r| json(r, "body")).collect()
    }
}

/// Settles a reserved call inside `tx` (the trait's `settle`, and a step's commit).
pub(crate) async fn settle_tx(
    tx: &mut crate::Tx,
    tenant: &str,
    settlement: &Settlement,
) -> Result<ModelCall, Error> {
    let row = sqlx::query("SELECT body FROM forge_model_calls WHERE id = $1 AND tenant_id = $2")
        .bind(settlement.id.to_string())
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
    .bind(call.id.to_string())
    .bind(tenant)
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(())
}
