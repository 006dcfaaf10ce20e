//! The job queue on PostgreSQL: claims take the oldest ready (or lapsed) job with
//! `FOR UPDATE SKIP LOCKED`, so concurrent workers never wait on, or take, the same job.

use std::time::Duration;

use async_trait::async_trait;
use forge_core::Error;
use forge_core::id::{JobId, RunId};
use forge_core::ports::audit::{AuditLog, AuditQuery, AuditRecord, SqlValue};
use forge_core::ports::queue::{ClaimFilter, ClaimedJob, JobInfo, JobQueue, JobState, NewJob};
use forge_core::scope::{Scope, SystemScope, TenantId};
use forge_core::time::Timestamp;
use sqlx::postgres::PgRow;

use crate::PostgresStore;
use crate::rows::{self, db_error, i64_of};

fn claimed(row: &PgRow) -> Result<ClaimedJob, Error> {
    let attempts: i32 = rows::get(row, "attempts")?;
    Ok(ClaimedJob {
        id: JobId(rows::get(row, "id")?),
        tenant_id: TenantId::new(rows::get::<String>(row, "tenant_id")?)?,
        run_id: RunId(rows::get(row, "run_id")?),
        attempt: u32::try_from(attempts).unwrap_or(0),
        token: rows::u64_of(rows::get(row, "token")?, "token")?,
        expires_at: rows::ts(row, "expires_at")?,
        available_at: rows::ts(row, "available_at")?,
        traceparent: rows::get(row, "traceparent")?,
    })
}

fn fenced(job: &ClaimedJob) -> Error {
    Error::Fenced {
        resource: format!("job {}", job.id),
    }
}

#[async_trait]
impl JobQueue for PostgresStore {
    async fn enqueue(&self, scope: &Scope, job: NewJob) -> Result<JobId, Error> {
        if job.max_attempts == 0 {
            return Err(Error::invalid("max_attempts must be at least 1"));
        }
        let id = JobId::generate(self.ids.as_ref());
        let now = self.clock.now();
        let mut tx = self.tenant_tx(scope).await?;
        let found: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM forge_runs WHERE id = $1 AND tenant_id = $2")
                .bind(job.run_id.0)
                .bind(scope.tenant_id().as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?;
        found.ok_or_else(|| Error::not_found("run", job.run_id))?;
        sqlx::query(
            "INSERT INTO forge_jobs (id, tenant_id, run_id, state, available_at, attempts, max_attempts, token, traceparent) \
             VALUES ($1, $2, $3, 'ready', $4, 0, $5, 0, $6)",
        )
        .bind(id.0)
        .bind(scope.tenant_id().as_str())
        .bind(job.run_id.0)
        .bind(job.not_before.unwrap_or(now).0)
        .bind(i32::try_from(job.max_attempts).unwrap_or(i32::MAX))
        .bind(&job.traceparent)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(id)
    }

    async fn claim(
        &self,
        _system: &SystemScope,
        _worker: &str,
        ttl: Duration,
        filter: &ClaimFilter,
    ) -> Result<Option<ClaimedJob>, Error> {
        // Cross-tenant: only through forge_system's function (see sql/system_functions.sql).
        let now = self.clock.now();
        let (names, versions): (Option<Vec<&str>>, Option<Vec<&str>>) = match &filter.agents {
            Some(agents) => (
                Some(agents.iter().map(|a| a.name.as_str()).collect()),
                Some(agents.iter().map(|a| a.version.as_str()).collect()),
            ),
            None => (None, None),
        };
        let mut conn = self.conn().await?;
        let row = sqlx::query("SELECT * FROM forge_sys_claim($1, $2, $3, $4, $5)")
            .bind(now.0)
            .bind(now.plus(ttl).0)
            .bind(filter.run.map(|r| r.0))
            .bind(names)
            .bind(versions)
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_error)?;
        conn.release();
        row.as_ref().map(claimed).transpose()
    }

    async fn heartbeat(
        &self,
        _system: &SystemScope,
        job: &ClaimedJob,
        ttl: Duration,
    ) -> Result<ClaimedJob, Error> {
        let now = self.clock.now();
        let expires_at = now.plus(ttl);
        let mut conn = self.conn().await?;
        let held: bool = sqlx::query_scalar("SELECT forge_sys_heartbeat($1, $2, $3, $4)")
            .bind(job.id.0)
            .bind(i64_of(job.token)?)
            .bind(now.0)
            .bind(expires_at.0)
            .fetch_one(&mut *conn)
            .await
            .map_err(db_error)?;
        conn.release();
        if !held {
            return Err(fenced(job));
        }
        Ok(ClaimedJob {
            expires_at,
            ..job.clone()
        })
    }

    async fn complete(&self, _system: &SystemScope, job: &ClaimedJob) -> Result<(), Error> {
        let mut conn = self.conn().await?;
        let held: bool = sqlx::query_scalar("SELECT forge_sys_complete($1, $2, $3)")
            .bind(job.id.0)
            .bind(i64_of(job.token)?)
            .bind(self.clock.now().0)
            .fetch_one(&mut *conn)
            .await
            .map_err(db_error)?;
        conn.release();
        if held { Ok(()) } else { Err(fenced(job)) }
    }

    async fn fail(
        &self,
        _system: &SystemScope,
        job: &ClaimedJob,
        retry_in: Duration,
        reason: &str,
    ) -> Result<JobState, Error> {
        let now = self.clock.now();
        let mut conn = self.conn().await?;
        let state: Option<String> = sqlx::query_scalar("SELECT forge_sys_fail($1, $2, $3, $4, $5)")
            .bind(job.id.0)
            .bind(i64_of(job.token)?)
            .bind(now.0)
            .bind(now.plus(retry_in).0)
            .bind(reason)
            .fetch_one(&mut *conn)
            .await
            .map_err(db_error)?;
        conn.release();
        JobState::from_name(&state.ok_or_else(|| fenced(job))?)
    }

    async fn release(
        &self,
        _system: &SystemScope,
        job: &ClaimedJob,
        not_before: Timestamp,
    ) -> Result<(), Error> {
        let mut conn = self.conn().await?;
        let held: bool = sqlx::query_scalar("SELECT forge_sys_release($1, $2, $3, $4)")
            .bind(job.id.0)
            .bind(i64_of(job.token)?)
            .bind(self.clock.now().0)
            .bind(not_before.0)
            .fetch_one(&mut *conn)
            .await
            .map_err(db_error)?;
        conn.release();
        if held { Ok(()) } else { Err(fenced(job)) }
    }

    async fn dead_jobs(&self, _system: &SystemScope, limit: usize) -> Result<Vec<JobInfo>, Error> {
        let found = sqlx::query("SELECT * FROM forge_sys_jobs(NULL, 'dead', $1)")
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        found.iter().map(info).collect()
    }

    async fn job_counts(
        &self,
        _system: &SystemScope,
    ) -> Result<std::collections::BTreeMap<&'static str, u64>, Error> {
        let rows: Vec<(String, i64)> = sqlx::query_as("SELECT * FROM forge_sys_job_counts()")
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        rows.into_iter()
            .map(|(state, n)| Ok((JobState::from_name(&state)?.name(), n.max(0) as u64)))
            .collect()
    }

    async fn job(&self, _system: &SystemScope, id: JobId) -> Result<JobInfo, Error> {
        let row = sqlx::query("SELECT * FROM forge_sys_jobs($1, NULL, 1)")
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?
            .ok_or_else(|| Error::not_found("job", id))?;
        info(&row)
    }

    async fn replay(
        &self,
        _system: &SystemScope,
        id: JobId,
        actor: &str,
    ) -> Result<JobInfo, Error> {
        self.operate(id, actor, "job.replayed", JobState::Ready)
            .await
    }

    async fn discard(
        &self,
        _system: &SystemScope,
        id: JobId,
        actor: &str,
    ) -> Result<JobInfo, Error> {
        self.operate(id, actor, "job.discarded", JobState::Discarded)
            .await
    }

    async fn job_state(&self, system: &SystemScope, id: JobId) -> Result<JobState, Error> {
        Ok(self.job(system, id).await?.state)
    }
}

fn info(row: &PgRow) -> Result<JobInfo, Error> {
    let attempts: i32 = rows::get(row, "attempts")?;
    let max: i32 = rows::get(row, "max_attempts")?;
    Ok(JobInfo {
        id: JobId(rows::get(row, "id")?),
        tenant_id: TenantId::new(rows::get::<String>(row, "tenant_id")?)?,
        run_id: RunId(rows::get(row, "run_id")?),
        state: JobState::from_name(&rows::get::<String>(row, "state")?)?,
        attempts: u32::try_from(attempts).unwrap_or(0),
        max_attempts: u32::try_from(max).unwrap_or(0),
        last_error: rows::get(row, "last_error")?,
    })
}

impl PostgresStore {
    /// Moves a dead job to `to` (a replay resets its attempts) and audits it, in one transaction.
    async fn operate(
        &self,
        id: JobId,
        actor: &str,
        action: &str,
        to: JobState,
    ) -> Result<JobInfo, Error> {
        let row = sqlx::query("SELECT * FROM forge_sys_operate($1, $2, $3, $4, $5)")
            .bind(id.0)
            .bind(actor)
            .bind(action)
            .bind(to.name())
            .bind(self.clock.now().0)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?
            .ok_or_else(|| Error::not_found("job", id))?;
        let mut job = info(&row)?;
        if job.state != JobState::Dead {
            return Err(Error::invalid(format!(
                "job {id} is {}, not dead",
                job.state.name()
            )));
        }
        job.state = to;
        if to == JobState::Ready {
            job.attempts = 0;
        }
        Ok(job)
    }
}

#[async_trait]
impl AuditLog for PostgresStore {
    async fn query_audit(
        &self,
        scope: &Scope,
        query: &AuditQuery,
    ) -> Result<Vec<AuditRecord>, Error> {
        let (filter, values) = forge_core::ports::audit::sql_filter(query);
        let sql = format!(
            "SELECT * FROM forge_audit WHERE tenant_id = $1{filter} ORDER BY seq DESC LIMIT ${}",
            values.len() + 2
        );
        let mut tx = self.tenant_tx(scope).await?;
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(scope.tenant_id().as_str());
        for v in values {
            q = match v {
                SqlValue::Text(t) => q.bind(t),
                SqlValue::Time(v) => q.bind(v.0),
            };
        }
        let found = q
            .bind(i64::try_from(query.limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        found
            .iter()
            .map(|r| {
                Ok(AuditRecord {
                    tenant_id: TenantId::new(rows::get::<String>(r, "tenant_id")?)?,
                    at: rows::ts(r, "at")?,
                    actor: rows::get(r, "actor")?,
                    action: rows::get(r, "action")?,
                    subject: rows::get(r, "subject")?,
                    detail: rows::get(r, "detail")?,
                })
            })
            .collect()
    }

    async fn record_audit(&self, scope: &Scope, record: AuditRecord) -> Result<(), Error> {
        forge_core::ports::audit::check_tenant(scope, &record)?;
        let mut tx = self.tenant_tx(scope).await?;
        crate::interactions::audit(&mut tx, &record).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(())
    }
}
