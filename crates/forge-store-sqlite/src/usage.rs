//! The usage ledger. Reservations, settlements and releases are operations of the writer lane
//! (`lane`): the write lock its transaction holds makes the quota check and the insert atomic
//! against every other reservation.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::metering::{ModelCall, Quota, Settlement, check_quota, orphaned, superseded};
use forge_core::ports::usage::{CallFilter, UsageLedger, apply_settlement};
use forge_core::scope::{Scope, SystemScope};
use forge_core::time::Timestamp;

use rusqlite::{Connection, params};

use crate::SqliteStore;
use crate::db::{self, Values};
use crate::rows::{json, text, to_json};

#[async_trait]
impl UsageLedger for SqliteStore {
    async fn reserve(
        &self,
        scope: &Scope,
        call: ModelCall,
        quota: Option<Quota>,
    ) -> Result<(), Error> {
        forge_core::ports::rules::check_reservation(scope, &call)?;
        self.write(move |conn| reserve_on(conn, call, quota)).await
    }

    async fn release_orphans(
        &self,
        _system: &SystemScope,
        before: Timestamp,
    ) -> Result<usize, Error> {
        self.write(move |conn| {
            let found: Vec<(String, ModelCall)> = db::all(
                conn,
                "SELECT tenant_id, body FROM forge_model_calls \
                     WHERE status = 'reserved' AND at < ?1",
                params![before.unix_millis()],
                |row| Ok((text(row, "tenant_id")?, json(row, "body")?)),
            )?;
            let mut released = 0;
            for (tenant, call) in found {
                if let Some(r) = orphaned(&call, before) {
                    update_call(conn, &tenant, &r)?;
                    released += 1;
                }
            }
            Ok(released)
        })
        .await
    }

    async fn settle(&self, scope: &Scope, settlement: Settlement) -> Result<ModelCall, Error> {
        let tenant = scope.tenant_id().as_str().to_owned();
        self.write(move |conn| {
            let call = bodies(
                conn,
                "SELECT body FROM forge_model_calls WHERE id = ?1 AND tenant_id = ?2",
                params![settlement.id.to_string(), tenant],
            )?
            .pop()
            .ok_or_else(|| Error::not_found("model call", settlement.id))?;
            let settled = apply_settlement(call, &settlement)?;
            update_call(conn, &tenant, &settled)?;
            Ok(settled)
        })
        .await
    }

    async fn model_calls(
        &self,
        scope: &Scope,
        filter: CallFilter,
    ) -> Result<Vec<ModelCall>, Error> {
        let tenant = scope.tenant_id().to_string();
        self.read(move |conn| match filter {
            CallFilter::Run(run) => bodies(
                conn,
                "SELECT body FROM forge_model_calls WHERE tenant_id = ?1 AND run_id = ?2 ORDER BY at, id",
                params![tenant, run.to_string()],
            ),
            CallFilter::Between(from, to) => bodies(
                conn,
                "SELECT body FROM forge_model_calls WHERE tenant_id = ?1 AND at >= ?2 AND at < ?3 ORDER BY at, id",
                params![tenant, from.unix_millis(), to.unix_millis()],
            ),
        })
        .await
    }
}

/// Reserves `call` on the lane's connection: the run must be the tenant's, the run's earlier
/// reservations it supersedes are released, and the quota (when one applies) is checked against
/// every call of the period, under the write lock the lane holds.
fn reserve_on(conn: &Connection, call: ModelCall, quota: Option<Quota>) -> Result<(), Error> {
    let (tenant, run) = (call.tenant_id.as_str(), call.run_id.to_string());
    crate::runs::exists(conn, tenant, call.run_id)?;
    let reserved = bodies(
        conn,
        "SELECT body FROM forge_model_calls WHERE tenant_id = ?1 AND run_id = ?2 AND status = 'reserved'",
        params![tenant, run],
    )?;
    for released in superseded(&reserved, &call) {
        update_call(conn, tenant, &released)?;
    }
    if let Some(quota) = quota {
        let existing = bodies(
            conn,
            "SELECT body FROM forge_model_calls WHERE tenant_id = ?1 AND period_start = ?2",
            params![tenant, call.period_start.unix_millis()],
        )?;
        check_quota(&existing, &call, &quota).map_err(Error::QuotaExceeded)?;
    }
    db::execute(
        conn,
        "INSERT INTO forge_model_calls (id, tenant_id, run_id, period_start, at, status, body) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            call.id.to_string(),
            tenant,
            run,
            call.period_start.unix_millis(),
            call.at.unix_millis(),
            call.status.name(),
            to_json(&call)?
        ],
    )?;
    Ok(())
}

/// The calls (their `body` column) a query finds.
fn bodies(conn: &Connection, sql: &str, values: Values<'_>) -> Result<Vec<ModelCall>, Error> {
    db::all(conn, sql, values, |row| json(row, "body"))
}

/// Writes a call's new state (its status column and body).
fn update_call(conn: &Connection, tenant: &str, call: &ModelCall) -> Result<(), Error> {
    db::execute(
        conn,
        "UPDATE forge_model_calls SET status = ?1, body = ?2 WHERE id = ?3 AND tenant_id = ?4",
        params![
            call.status.name(),
            to_json(call)?,
            call.id.to_string(),
            tenant
        ],
    )?;
    Ok(())
}
