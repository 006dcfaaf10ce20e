//! The job queue on PostgreSQL: claims take the oldest ready (or lapsed) job with
//! `FOR UPDATE SKIP LOCKED`, so concurrent workers never wait on, or take, the same job.

use std::time::Duration;

use async_trait::async_trait;
use forge_core::Error;
use forge_core::id::{JobId, RunId};
use forge_core::ports::audit::{AuditLog, AuditQuery, AuditRecord};
use forge_core::ports::queue::{
    ClaimFilter, Claimed, ClaimedJob, DeadJob, JobInfo, JobQueue, JobState, LeaseRequest, NewJob,
    claim_leased_each,
};
use forge_core::ports::store::{LeasedRun, RunStore};
use forge_core::scope::{Scope, SystemScope, TenantId};
use forge_core::time::Timestamp;
use forge_sql::statements::audit_page;
use sqlx::postgres::PgRow;

use crate::PostgresStore;
use crate::rows::{self, db_error, i64_of};

fn claimed(row: &PgRow) -> Result<ClaimedJob, Error> {
    claimed_as(row, &CLAIM_COLUMNS)
}

/// `forge_sys_claim`'s columns, as `claim` reads them: id, tenant, run, attempts, token, expiry,
/// availability and trace.
const CLAIM_COLUMNS: [&str; 8] = [
    "id",
    "tenant_id",
    "run_id",
    "attempts",
    "token",
    "expires_at",
    "available_at",
    "traceparent",
];

/// The same columns as `CLAIM_LEASED_SQL` names them, beside the run's.
const LEASED_CLAIM_COLUMNS: [&str; 8] = [
    "job_id",
    "job_tenant_id",
    "job_run_id",
    "job_attempts",
    "job_token",
    "job_expires_at",
    "job_available_at",
    "job_traceparent",
];

/// A claim from `forge_sys_claim`'s columns, named as `names` (in `CLAIM_COLUMNS`' order).
fn claimed_as(row: &PgRow, names: &[&str; 8]) -> Result<ClaimedJob, Error> {
    let [id, tenant, run, attempts, token, expires, available, trace] = *names;
    let attempts: i32 = rows::get(row, attempts)?;
    Ok(ClaimedJob {
        id: JobId(rows::get(row, id)?),
        tenant_id: TenantId::new(rows::get::<String>(row, tenant)?)?,
        run_id: RunId(rows::get(row, run)?),
        attempt: u32::try_from(attempts).unwrap_or(0),
        token: rows::u64_of(rows::get(row, token)?, "token")?,
        expires_at: rows::ts(row, expires)?,
        available_at: rows::ts(row, available)?,
        traceparent: rows::get(row, trace)?,
    })
}

/// The claim statement's shape around the claiming call `$claim`: the claim's columns, then its
/// run's lease and history, joined per claimed job.
macro_rules! claim_leased_sql {
    ($claim:literal) => {
        concat!(
            "SELECT c.id AS job_id, c.tenant_id AS job_tenant_id, \
            c.run_id AS job_run_id, c.attempts AS job_attempts, c.token AS job_token, \
            c.expires_at AS job_expires_at, c.available_at AS job_available_at, \
            c.traceparent AS job_traceparent, (l.o_run).*, l.o_taken AS taken, h.* \
            FROM ",
            $claim,
            " AS c \
            LEFT JOIN LATERAL forge_lease(c.run_id, c.tenant_id, $6, $7, $1) AS l ON true \
            LEFT JOIN LATERAL forge_thread_start((l.o_run).thread_id, c.tenant_id, \
            CASE WHEN l.o_taken THEN $8::bigint END) AS h ON true"
        )
    };
}

/// A claim through `forge_sys_claim` and, in the same statement, its run's lease through
/// `forge_lease` (`$6` the holder, until `$7`) and, when the lease was taken and `$8` is not null,
/// what the run begins with through `forge_thread_start` (at most `$8` messages of its history,
/// read after the lease): the claim's columns named `job_…`, then the run as it was and whether
/// the lease was taken (no run columns when the run is gone), then the thread's and the page's.
pub(crate) const CLAIM_LEASED_SQL: &str = claim_leased_sql!("forge_sys_claim($1, $2, $3, $4, $5)");

/// `CLAIM_LEASED_SQL` for up to `$9` claims, through `forge_sys_claim_many`: a row per claim.
pub(crate) const CLAIM_LEASED_BATCH_SQL: &str =
    claim_leased_sql!("forge_sys_claim_many($1, $2, $3, $4, $5, $9)");

/// The agent filter's names and versions, as `forge_sys_claim` takes them.
fn agent_columns(filter: &ClaimFilter) -> (Option<Vec<&str>>, Option<Vec<&str>>) {
    match &filter.agents {
        Some(agents) => (
            Some(agents.iter().map(|a| a.name.as_str()).collect()),
            Some(agents.iter().map(|a| a.version.as_str()).collect()),
        ),
        None => (None, None),
    }
}

fn fenced(job: &ClaimedJob) -> Error {
    Error::Fenced {
        resource: format!("job {}", job.id),
    }
}

impl PostgresStore {
    /// The rows of a claim statement (`CLAIM_LEASED_SQL`, or `CLAIM_LEASED_BATCH_SQL` with its
    /// `limit`): one per claim, with its run's lease and history where taken.
    async fn claim_leased_rows(
        &self,
        sql: &'static str,
        now: Timestamp,
        ttl: Duration,
        filter: &ClaimFilter,
        lease: &LeaseRequest,
        limit: Option<i32>,
    ) -> Result<Vec<PgRow>, Error> {
        let (names, versions) = agent_columns(filter);
        let mut query = sqlx::query(sql)
            .bind(now.0)
            .bind(now.plus(ttl).0)
            .bind(filter.run.map(|r| r.0))
            .bind(names)
            .bind(versions)
            .bind(&lease.holder)
            .bind(now.plus(lease.ttl).0)
            .bind(
                lease
                    .history
                    .map(|limit| i64::try_from(limit).unwrap_or(i64::MAX)),
            );
        if let Some(limit) = limit {
            query = query.bind(limit);
        }
        let mut conn = self.conn().await?;
        let rows = query.fetch_all(&mut *conn).await.map_err(db_error)?;
        conn.release();
        Ok(rows)
    }

    /// The claim a row of a claim statement made, with its run's lease (taken at `now`) and
    /// history where the statement took them.
    async fn claimed_leased(
        &self,
        row: &PgRow,
        lease: &LeaseRequest,
        now: Timestamp,
    ) -> Result<Claimed, Error> {
        let job = claimed_as(row, &LEASED_CLAIM_COLUMNS)?;
        // No run row (it is gone), or a lease held by another: the caller takes it (and hears
        // why it cannot).
        let taken = rows::get::<Option<bool>>(row, "taken")?.unwrap_or(false);
        if !taken {
            return Ok(Claimed { job, lease: None });
        }
        let (new_lease, run) = crate::runs::judge_lease(row, &lease.holder, lease.ttl, now)?;
        // Read under the run's tenant; a page after a summary that cannot be read apart is left
        // to the engine, which reads the history itself and hears why.
        let history = match (lease.history, lease.reader(&job.tenant_id)) {
            (Some(limit), Ok(scope)) => self.thread_start(&scope, row, limit).await.ok().flatten(),
            _ => None,
        };
        Ok(Claimed {
            job,
            lease: Some(LeasedRun {
                lease: new_lease,
                run,
                history,
            }),
        })
    }
}

#[async_trait]
impl JobQueue for PostgresStore {
    async fn enqueue(&self, scope: &Scope, job: NewJob) -> Result<JobId, Error> {
        forge_core::ports::rules::check_attempts(job.max_attempts)?;
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
        let (names, versions) = agent_columns(filter);
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

    async fn claim_leased(
        &self,
        system: &SystemScope,
        worker: &str,
        ttl: Duration,
        filter: &ClaimFilter,
        lease: &LeaseRequest,
    ) -> Result<Option<Claimed>, Error> {
        if self.mode == crate::Mode::Supabase {
            // `forge_lease` needs the tenant's role and claims, which a claim (across tenants)
            // has not: the lease is taken after the claim, in a transaction of the tenant's.
            let Some(job) = self.claim(system, worker, ttl, filter).await? else {
                return Ok(None);
            };
            let scope = lease.reader(&job.tenant_id)?;
            let leased = match lease.history {
                Some(limit) => self
                    .lease_run_with_history(&scope, job.run_id, &lease.holder, lease.ttl, limit)
                    .await
                    .ok(),
                None => self
                    .lease_run(&scope, job.run_id, &lease.holder, lease.ttl)
                    .await
                    .ok()
                    .map(|(lease, run)| LeasedRun {
                        lease,
                        run,
                        history: None,
                    }),
            };
            return Ok(Some(Claimed { job, lease: leased }));
        }
        let now = self.clock.now();
        let rows = self
            .claim_leased_rows(CLAIM_LEASED_SQL, now, ttl, filter, lease, None)
            .await?;
        match rows.first() {
            Some(row) => Ok(Some(self.claimed_leased(row, lease, now).await?)),
            None => Ok(None),
        }
    }

    async fn claim_leased_batch(
        &self,
        system: &SystemScope,
        worker: &str,
        ttl: Duration,
        filter: &ClaimFilter,
        lease: &LeaseRequest,
        max: usize,
    ) -> Result<Vec<Claimed>, Error> {
        if self.mode == crate::Mode::Supabase || max <= 1 {
            // Supabase mode leases each claim apart anyway (see `claim_leased`).
            return claim_leased_each(self, system, worker, ttl, filter, lease, max).await;
        }
        let now = self.clock.now();
        let limit = i32::try_from(max).unwrap_or(i32::MAX);
        let rows = self
            .claim_leased_rows(CLAIM_LEASED_BATCH_SQL, now, ttl, filter, lease, Some(limit))
            .await?;
        let mut claimed = Vec::with_capacity(rows.len());
        for row in &rows {
            claimed.push(self.claimed_leased(row, lease, now).await?);
        }
        Ok(claimed)
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

    async fn operate(
        &self,
        _system: &SystemScope,
        id: JobId,
        actor: &str,
        operation: DeadJob,
    ) -> Result<JobInfo, Error> {
        self.operate_dead(id, actor, operation).await
    }
}

fn info(row: &PgRow) -> Result<JobInfo, Error> {
    forge_sql::rows::job_info(&crate::rows::Pg(row))
}

impl PostgresStore {
    /// Moves a dead job to `to` (a replay resets its attempts) and audits it, in one transaction.
    async fn operate_dead(
        &self,
        id: JobId,
        actor: &str,
        operation: DeadJob,
    ) -> Result<JobInfo, Error> {
        let (action, to) = (operation.action(), operation.to());
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
    async fn read_audit(
        &self,
        scope: &Scope,
        query: &AuditQuery,
    ) -> Result<Vec<AuditRecord>, Error> {
        let (sql, values) = audit_page(query);
        let mut tx = self.tenant_tx(scope).await?;
        let q = rows::binds(
            sqlx::query(sqlx::AssertSqlSafe(sql)).bind(scope.tenant_id().as_str()),
            values,
        );
        let found = q.fetch_all(&mut *tx).await.map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        found
            .iter()
            .map(|r| forge_sql::rows::audit_record(&rows::Pg(r)))
            .collect()
    }

    async fn append_audit(&self, scope: &Scope, record: AuditRecord) -> Result<(), Error> {
        let mut tx = self.tenant_tx(scope).await?;
        crate::interactions::audit(&mut tx, &record).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(())
    }
}
