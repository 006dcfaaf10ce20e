//! Erasing a thread or a run on PostgreSQL: one tenant transaction (under RLS) that locks the
//! thread and its runs, checks every run has ended, removes their rows, unlinks their model
//! calls and appends the audit record.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::metering::ModelCall;
use forge_core::ports::erasure::{self, DataErasure, Erase, Erased};
use forge_core::scope::Scope;
use uuid::Uuid;

use crate::PostgresStore;
use crate::rows::{self, db_error};

#[async_trait]
impl DataErasure for PostgresStore {
    async fn erase(&self, scope: &Scope, target: Erase, actor: &str) -> Result<Erased, Error> {
        let tenant = scope.tenant_id().as_str();
        let mut tx = self.tenant_tx(scope).await?;
        let thread_id = match target {
            Erase::Thread(id) => id,
            Erase::Run(id) => forge_core::id::ThreadId(
                sqlx::query_scalar::<_, Uuid>(
                    "SELECT thread_id FROM forge_runs WHERE id = $1 AND tenant_id = $2",
                )
                .bind(id.0)
                .bind(tenant)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?
                .ok_or_else(|| target.not_found())?,
            ),
        };
        // The thread row first, as every writer of its runs locks it: nothing starts meanwhile.
        let active: Option<Option<Uuid>> = sqlx::query_scalar(
            "SELECT active_run FROM forge_threads WHERE id = $1 AND tenant_id = $2 FOR UPDATE",
        )
        .bind(thread_id.0)
        .bind(tenant)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        let active = active.ok_or_else(|| target.not_found())?;
        let runs = match target {
            Erase::Thread(id) => sqlx::query(
                "SELECT * FROM forge_runs WHERE thread_id = $1 AND tenant_id = $2 FOR UPDATE",
            )
            .bind(id.0),
            Erase::Run(id) => {
                sqlx::query("SELECT * FROM forge_runs WHERE id = $1 AND tenant_id = $2 FOR UPDATE")
                    .bind(id.0)
            }
        }
        .bind(tenant)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?
        .iter()
        .map(rows::run)
        .collect::<Result<Vec<_>, _>>()?;
        let active = active
            .map(forge_core::id::RunId)
            .filter(|a| matches!(target, Erase::Thread(_)) || runs.iter().any(|r| r.id == *a));
        let statuses: Vec<_> = runs.iter().map(|r| (r.id, r.status)).collect();
        erasure::check_ended(thread_id, active, &statuses)?;

        let ids: Vec<Uuid> = runs.iter().map(|r| r.id.0).collect();
        let mut erased = Erased::default();
        let calls: Vec<ModelCall> = sqlx::query_scalar::<_, serde_json::Value>(
            "SELECT body FROM forge_model_calls WHERE tenant_id = $1 AND run_id = ANY($2) FOR UPDATE",
        )
        .bind(tenant)
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?
        .into_iter()
        .map(|b| serde_json::from_value(b).map_err(|e| Error::invalid(format!("stored call: {e}"))))
        .collect::<Result<_, _>>()?;
        if !calls.is_empty() {
            let unlinked: Vec<ModelCall> = calls.into_iter().map(erasure::unlinked).collect();
            let call_ids: Vec<Uuid> = unlinked.iter().map(|c| c.id.0).collect();
            let bodies = unlinked
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| Error::invalid(e.to_string()))?;
            erased.model_calls_unlinked = sqlx::query(
                "UPDATE forge_model_calls c SET run_id = $3, body = u.body
                 FROM UNNEST($1::uuid[], $2::jsonb[]) AS u(id, body)
                 WHERE c.id = u.id AND c.tenant_id = $4",
            )
            .bind(&call_ids)
            .bind(&bodies)
            .bind(erasure::ERASED_RUN.0)
            .bind(tenant)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?
            .rows_affected();
        }
        for (table, count) in [
            ("forge_run_events", &mut erased.events),
            ("forge_interactions", &mut erased.interactions),
            ("forge_jobs", &mut erased.jobs),
            ("forge_messages", &mut erased.messages),
        ] {
            *count = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE tenant_id = $1 AND run_id = ANY($2)"
            )))
            .bind(tenant)
            .bind(&ids)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?
            .rows_affected();
        }
        let (run, named) = match target {
            Erase::Thread(id) => (false, id.0),
            Erase::Run(id) => (true, id.0),
        };
        sqlx::query(forge_sql::statements::keys_erased(run))
            .bind(tenant)
            .bind(named)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        erased.runs = sqlx::query("DELETE FROM forge_runs WHERE tenant_id = $1 AND id = ANY($2)")
            .bind(tenant)
            .bind(&ids)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?
            .rows_affected();
        if let Erase::Thread(id) = target {
            erased.threads =
                sqlx::query("DELETE FROM forge_threads WHERE id = $1 AND tenant_id = $2")
                    .bind(id.0)
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
