//! Erasing a thread or a run on SQLite: one `BEGIN IMMEDIATE` transaction that checks every run
//! has ended, removes their rows, unlinks their model calls and appends the audit record.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::metering::ModelCall;
use forge_core::ports::erasure::{self, DataErasure, Erase, Erased};
use forge_core::scope::Scope;

use crate::SqliteStore;
use crate::rows::{self, db_error, json, to_json};

#[async_trait]
impl DataErasure for SqliteStore {
    async fn erase(&self, scope: &Scope, target: Erase, actor: &str) -> Result<Erased, Error> {
        let tenant = scope.tenant_id().as_str();
        let (_gate, mut tx) = self.write_tx().await?;
        let (column, key) = match target {
            Erase::Thread(id) => ("thread_id", id.to_string()),
            Erase::Run(id) => ("id", id.to_string()),
        };
        let runs = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {} FROM forge_runs WHERE {column} = $1 AND tenant_id = $2",
            crate::runs::RUN_COLUMNS
        )))
        .bind(&key)
        .bind(tenant)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?
        .iter()
        .map(rows::run)
        .collect::<Result<Vec<_>, _>>()?;
        let thread_id = match target {
            Erase::Thread(id) => id,
            Erase::Run(_) => runs.first().ok_or_else(|| target.not_found())?.thread_id,
        };
        let active: Option<Option<String>> = sqlx::query_scalar(
            "SELECT active_run FROM forge_threads WHERE id = $1 AND tenant_id = $2",
        )
        .bind(thread_id.to_string())
        .bind(tenant)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        let active = active
            .ok_or_else(|| target.not_found())?
            .map(|a| {
                a.parse()
                    .map_err(|e| Error::invalid(format!("stored run id: {e}")))
            })
            .transpose()?
            .filter(|a| matches!(target, Erase::Thread(_)) || runs.iter().any(|r| r.id == *a));
        let statuses: Vec<_> = runs.iter().map(|r| (r.id, r.status)).collect();
        erasure::check_ended(thread_id, active, &statuses)?;

        // The run ids travel as one JSON array, so the statements' text never grows with them.
        let ids = to_json(&runs.iter().map(|r| r.id.to_string()).collect::<Vec<_>>())?;
        let mut erased = Erased::default();
        let calls: Vec<ModelCall> = sqlx::query(
            "SELECT body FROM forge_model_calls
             WHERE tenant_id = $1 AND run_id IN (SELECT value FROM json_each($2))",
        )
        .bind(tenant)
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?
        .iter()
        .map(|r| json(r, "body"))
        .collect::<Result<_, _>>()?;
        for call in calls {
            let call = erasure::unlinked(call);
            sqlx::query(
                "UPDATE forge_model_calls SET run_id = $1, body = $2 WHERE id = $3 AND tenant_id = $4",
            )
            .bind(call.run_id.to_string())
            .bind(to_json(&call)?)
            .bind(call.id.to_string())
            .bind(tenant)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
            erased.model_calls_unlinked += 1;
        }
        for (table, count) in [
            ("forge_run_events", &mut erased.events),
            ("forge_interactions", &mut erased.interactions),
            ("forge_jobs", &mut erased.jobs),
            ("forge_messages", &mut erased.messages),
        ] {
            *count = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE tenant_id = $1 AND run_id IN (SELECT value FROM json_each($2))"
            )))
            .bind(tenant)
            .bind(&ids)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?
            .rows_affected();
        }
        erased.runs = sqlx::query(
            "DELETE FROM forge_runs WHERE tenant_id = $1 AND id IN (SELECT value FROM json_each($2))",
        )
        .bind(tenant)
        .bind(&ids)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?
        .rows_affected();
        if let Erase::Thread(id) = target {
            erased.threads =
                sqlx::query("DELETE FROM forge_threads WHERE id = $1 AND tenant_id = $2")
                    .bind(id.to_string())
                    .bind(tenant)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?
                    .rows_affected();
        }
        let record = erasure::audit_record(scope, target, actor, self.clock.now(), &erased);
        crate::interactions::audit(&mut tx, &record).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(erased)
    }
}
