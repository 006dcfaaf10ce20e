//! Interactions: approvals and questions of parked runs. Each resolution is one `BEGIN IMMEDIATE`
//! transaction (SQLite serialises writers), so exactly one of two racing resolvers wins.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::id::{InteractionId, JobId, RunId};
use forge_core::interaction::{Decided, Interaction, Resolve, audit_record, decide};
use forge_core::ports::audit::AuditRecord;
use forge_core::ports::interaction::{
    InteractionFilter, InteractionStore, RESUME_MAX_ATTEMPTS, Resolved, expire_due,
};
use forge_core::scope::{Scope, SystemScope, TenantId};
use forge_core::time::Timestamp;

use crate::SqliteStore;
use crate::rows::{db_error, get, json, to_json};

type Tx = crate::Tx;

/// Inserts an interaction (`$1` id, `$2` tenant, `$3` run, `$4` status, `$5` created, `$6`
/// expires, `$7` body).
pub(crate) const INSERT_SQL: &str = "INSERT INTO forge_interactions (id, tenant_id, run_id, status, created_at, expires_at, body) \
     VALUES ($1, $2, $3, $4, $5, $6, $7)";

/// Appends an audit entry (`$1` tenant, `$2` time, `$3` actor, `$4` action, `$5` subject, `$6`
/// detail).
pub(crate) const AUDIT_SQL: &str = "INSERT INTO forge_audit (tenant_id, at, actor, action, subject, detail) \
     VALUES ($1, $2, $3, $4, $5, $6)";

/// Appends an audit entry.
pub(crate) async fn audit(tx: &mut Tx, r: &AuditRecord) -> Result<(), Error> {
    sqlx::query(AUDIT_SQL)
        .bind(r.tenant_id.as_str())
        .bind(r.at.unix_millis())
        .bind(&r.actor)
        .bind(&r.action)
        .bind(&r.subject)
        .bind(r.detail.to_string())
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
    Ok(())
}

async fn update(tx: &mut Tx, i: &Interaction) -> Result<(), Error> {
    sqlx::query(
        "UPDATE forge_interactions SET status = $1, body = $2 WHERE id = $3 AND tenant_id = $4",
    )
    .bind(i.status.name())
    .bind(to_json(i)?)
    .bind(i.id.to_string())
    .bind(i.tenant_id.as_str())
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

/// Readies a job for `run` when it waits with nothing pending and has no live job.
pub(crate) async fn resume_if_ready(
    tx: &mut Tx,
    tenant: &str,
    run: RunId,
    job: JobId,
    now: Timestamp,
) -> Result<bool, Error> {
    wake(tx, tenant, run, job, now, true).await
}

/// Readies a job for a waiting `run` that has no job waiting to be claimed; with
/// `unless_pending`, only when none of its interactions is pending (a cancel request wakes it
/// regardless). A *claimed* job does not count: its worker parked the run and is about to
/// complete it without looking again, so a wake that lands in between needs a job of its own.
pub(crate) async fn wake(
    tx: &mut Tx,
    tenant: &str,
    run: RunId,
    job: JobId,
    now: Timestamp,
    unless_pending: bool,
) -> Result<bool, Error> {
    let ready: Option<i64> = sqlx::query_scalar(
        "SELECT 1 FROM forge_runs r WHERE r.id = $1 AND r.tenant_id = $2 AND r.status = 'waiting' \
         AND (NOT $3 OR NOT EXISTS (SELECT 1 FROM forge_interactions i WHERE i.run_id = r.id AND i.status = 'pending')) \
         AND NOT EXISTS (SELECT 1 FROM forge_jobs j WHERE j.run_id = r.id AND j.state IN ('ready', 'waiting'))",
    )
    .bind(run.to_string())
    .bind(tenant)
    .bind(unless_pending)
    .fetch_optional(&mut **tx)
    .await
    .map_err(db_error)?;
    if ready.is_none() {
        return Ok(false);
    }
    sqlx::query(
        // A resumed run's job keeps the trace its run was enqueued under.
        "INSERT INTO forge_jobs (id, tenant_id, run_id, state, available_at, attempts, max_attempts, token, traceparent) \
         VALUES ($1, $2, $3, 'ready', $4, 0, $5, 0, \
                 (SELECT p.traceparent FROM forge_jobs p WHERE p.run_id = $3 AND p.traceparent IS NOT NULL LIMIT 1))",
    )
    .bind(job.to_string())
    .bind(tenant)
    .bind(run.to_string())
    .bind(now.unix_millis())
    .bind(i64::from(RESUME_MAX_ATTEMPTS))
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(true)
}

#[async_trait]
impl InteractionStore for SqliteStore {
    async fn get_interaction(
        &self,
        scope: &Scope,
        id: InteractionId,
    ) -> Result<Interaction, Error> {
        let row =
            sqlx::query("SELECT body FROM forge_interactions WHERE id = $1 AND tenant_id = $2")
                .bind(id.to_string())
                .bind(scope.tenant_id().as_str())
                .fetch_optional(&mut *self.conn().await?)
                .await
                .map_err(db_error)?
                .ok_or_else(|| Error::not_found("interaction", id))?;
        json(&row, "body")
    }

    async fn list_interactions(
        &self,
        scope: &Scope,
        filter: InteractionFilter,
    ) -> Result<Vec<Interaction>, Error> {
        let rows = match filter {
            InteractionFilter::Pending => sqlx::query(
                "SELECT body FROM forge_interactions WHERE tenant_id = $1 AND status = 'pending' \
                 ORDER BY created_at, id",
            )
            .bind(scope.tenant_id().as_str())
            .fetch_all(&mut *self.conn().await?)
            .await
            .map_err(db_error)?,
            InteractionFilter::PendingPage { after, limit } => {
                let mut tx = self.pool.begin("BEGIN").await.map_err(db_error)?;
                let cursor: Option<(i64, String)> = match after {
                    Some(after) => Some(
                        sqlx::query_as(
                            "SELECT created_at, id FROM forge_interactions WHERE id = $1 AND tenant_id = $2",
                        )
                        .bind(after.to_string())
                        .bind(scope.tenant_id().as_str())
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err(db_error)?
                        .ok_or_else(|| Error::not_found("interaction", after))?,
                    ),
                    None => None,
                };
                let page = sqlx::query(
                    "SELECT body FROM forge_interactions WHERE tenant_id = $1 AND status = 'pending' \
                     AND ($2 IS NULL OR (created_at, id) > ($2, $3)) ORDER BY created_at, id LIMIT $4",
                )
                .bind(scope.tenant_id().as_str())
                .bind(cursor.as_ref().map(|c| c.0))
                .bind(cursor.map(|c| c.1))
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .fetch_all(&mut *tx)
                .await
                .map_err(db_error)?;
                tx.commit().await.map_err(db_error)?;
                page
            }
            InteractionFilter::Run(run) => {
                let found: Option<i64> =
                    sqlx::query_scalar("SELECT 1 FROM forge_runs WHERE id = $1 AND tenant_id = $2")
                        .bind(run.to_string())
                        .bind(scope.tenant_id().as_str())
                        .fetch_optional(&mut *self.conn().await?)
                        .await
                        .map_err(db_error)?;
                found.ok_or_else(|| Error::not_found("run", run))?;
                sqlx::query(
                    "SELECT body FROM forge_interactions WHERE tenant_id = $1 AND run_id = $2 \
                     ORDER BY created_at, id",
                )
                .bind(scope.tenant_id().as_str())
                .bind(run.to_string())
                .fetch_all(&mut *self.conn().await?)
                .await
                .map_err(db_error)?
            }
        };
        rows.iter().map(|r| json(r, "body")).collect()
    }

    async fn resolve_interaction(&self, scope: &Scope, req: Resolve) -> Result<Resolved, Error> {
        let now = self.clock.now();
        let job = JobId::generate(self.ids.as_ref());
        let tenant = scope.tenant_id().as_str();
        let (_gate, mut tx) = self.write_tx().await?;
        let row =
            sqlx::query("SELECT body FROM forge_interactions WHERE id = $1 AND tenant_id = $2")
                .bind(req.id.to_string())
                .bind(tenant)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?
                .ok_or_else(|| Error::not_found("interaction", req.id))?;
        let current: Interaction = json(&row, "body")?;
        match decide(&current, &req, now)? {
            Decided::Replay => Ok(Resolved {
                interaction: current,
                replayed: true,
                resumed: false,
            }),
            Decided::Expire(expired) => {
                update(&mut tx, &expired).await?;
                audit(&mut tx, &audit_record(&expired, now)).await?;
                resume_if_ready(&mut tx, tenant, expired.run_id, job, now).await?;
                tx.commit().await.map_err(db_error)?;
                Err(Error::Expired {
                    id: expired.id.to_string(),
                    at: expired.expires_at,
                })
            }
            Decided::Apply(resolved) => {
                update(&mut tx, &resolved).await?;
                audit(&mut tx, &audit_record(&resolved, now)).await?;
                let resumed = resume_if_ready(&mut tx, tenant, resolved.run_id, job, now).await?;
                tx.commit().await.map_err(db_error)?;
                Ok(Resolved {
                    interaction: resolved,
                    replayed: false,
                    resumed,
                })
            }
        }
    }

    async fn expire_interactions(&self, _system: &SystemScope) -> Result<usize, Error> {
        let due = sqlx::query(
            "SELECT id, tenant_id FROM forge_interactions WHERE status = 'pending' AND expires_at <= $1",
        )
        .bind(self.clock.now().unix_millis())
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(db_error)?;
        let due = due
            .iter()
            .map(|r| {
                let id = uuid::Uuid::parse_str(&get::<String>(r, "id")?)
                    .map_err(|e| Error::invalid(format!("stored interaction id: {e}")))?;
                let tenant = TenantId::new(get::<String>(r, "tenant_id")?)?;
                Ok((InteractionId(id), tenant))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        expire_due(self, due).await
    }
}
