//! The job queue on SQLite. Claims run in `BEGIN IMMEDIATE` transactions, which SQLite serializes,
//! so two workers never take the same job.

use std::time::Duration;

use async_trait::async_trait;
use forge_core::Error;
use forge_core::id::{JobId, RunId};
use forge_core::ports::audit::{AuditLog, AuditQuery, AuditRecord};
use forge_core::ports::queue::{
    ClaimFilter, Claimed, ClaimedJob, DeadJob, JobInfo, JobQueue, JobState, LeaseRequest, NewJob,
};
use forge_core::scope::{Scope, SystemScope, TenantId};
use forge_core::time::Timestamp;
use forge_sql::statements::{AuditValue, audit_filter};
use sqlx::sqlite::SqliteRow;

use crate::SqliteStore;
use crate::rows::{self, db_error, i64_of};

/// The columns a job row is read with, named rather than `*`: sqlx keeps a prepared
/// statement's columns from when it was prepared, and migrations 5 and 11 widened this table.
macro_rules! job_columns {
    () => {
        "id, tenant_id, run_id, state, available_at, attempts, max_attempts, token, expires_at, \
         last_error, holder, traceparent"
    };
}

/// Completes the job in the lane's transaction if `job` is its current, unexpired claim;
/// whether it did. Shared by `complete` and the step that ends or parks the job's run.
pub(crate) fn complete_claim(
    conn: &rusqlite::Connection,
    job: &ClaimedJob,
    now: Timestamp,
) -> Result<bool, Error> {
    let changed = crate::commit::execute(
        conn,
        "UPDATE forge_jobs SET state = 'completed', expires_at = NULL \
         WHERE id = ?1 AND tenant_id = ?2 AND run_id = ?3 AND state = 'claimed' AND token = ?4 \
         AND expires_at > ?5",
        rusqlite::params![
            job.id.to_string(),
            job.tenant_id.as_str(),
            job.run_id.to_string(),
            i64_of(job.token)?,
            now.unix_millis()
        ],
    )?;
    Ok(changed == 1)
}

impl SqliteStore {
    /// A claim (one operation of the writer lane, `claim_next`) and, with `lease`, its run's
    /// lease in the same operation when the lease is free (`runs::take_free`).
    async fn claim_with(
        &self,
        system: &SystemScope,
        worker: &str,
        ttl: Duration,
        filter: &ClaimFilter,
        lease: Option<&LeaseRequest>,
    ) -> Result<Option<Claimed>, Error> {
        let now = self.clock.now();
        let (run, agents) = (filter.run.map(|r| r.to_string()), filter.agents_json());
        let (worker_name, expires_at) = (worker.to_owned(), now.plus(ttl));
        let wanted = lease.map(|l| (l.holder.clone(), now.plus(l.ttl), l.history));
        let (holders, claimed) = self
            .lane
            .run(move |conn| {
                let (holders, job) = claim_next(
                    conn,
                    now,
                    run.as_deref(),
                    agents.as_deref(),
                    expires_at,
                    &worker_name,
                )?;
                let claimed = match (job, wanted) {
                    (Some(job), Some((holder, until, history))) => {
                        let lease = crate::runs::take_free_with_history(
                            conn,
                            job.run_id,
                            &job.tenant_id,
                            &holder,
                            until,
                            now,
                            history,
                        )?;
                        Some(Claimed { job, lease })
                    }
                    (job, _) => job.map(|job| Claimed { job, lease: None }),
                };
                Ok((holders, claimed))
            })
            .await?;
        // One host holds every process of this store: a claim whose holder is no longer running
        // lapses now, not when its lease runs out (a restarted process takes over at once). When
        // this claim found nothing, it looks again once they have lapsed.
        let dead: Vec<&String> = holders
            .iter()
            .filter(|h| crate::holder::is_dead_here(h))
            .collect();
        if !dead.is_empty() {
            let (gate, mut tx) = self.write_tx().await?;
            for holder in dead {
                sqlx::query(
                    "UPDATE forge_jobs SET expires_at = $1 WHERE state = 'claimed' AND holder = $2",
                )
                .bind(now.unix_millis())
                .bind(holder)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            }
            tx.commit().await.map_err(db_error)?;
            drop(gate);
            if claimed.is_none() {
                return Box::pin(self.claim_with(system, worker, ttl, filter, lease)).await;
            }
        }
        // A history read with the lease is completed with the page after a summary, read
        // under the run's tenant.
        let Some(request) = lease else {
            return Ok(claimed);
        };
        let Some(mut claimed) = claimed else {
            return Ok(None);
        };
        if let (Some(limit), Ok(scope)) = (request.history, request.reader(&claimed.job.tenant_id))
            && let Some(leased) = claimed.lease.take()
        {
            claimed.lease = Some(self.with_page_after_summary(&scope, leased, limit).await);
        }
        Ok(Some(claimed))
    }

    /// Applies `set` (which may use `?4`, bound to `value`) to the job if `job` is its current,
    /// unexpired claim, in one statement on the writer lane; `Fenced` otherwise.
    async fn update_claim(
        &self,
        job: &ClaimedJob,
        set: &'static str,
        value: Option<i64>,
    ) -> Result<(), Error> {
        let sql = format!(
            "UPDATE forge_jobs SET {set} WHERE id = ?1 AND state = 'claimed' AND token = ?2 AND expires_at > ?3"
        );
        let (id, token, now) = (job.id, i64_of(job.token)?, self.clock.now().unix_millis());
        let changed = self
            .lane
            .run(move |conn| {
                crate::commit::execute(
                    conn,
                    &sql,
                    rusqlite::params![id.to_string(), token, now, value],
                )
            })
            .await?;
        if changed == 1 {
            Ok(())
        } else {
            Err(Error::Fenced {
                resource: format!("job {id}"),
            })
        }
    }

    /// The job's row if `job` is its current, unexpired claim; `Fenced` otherwise.
    async fn current_claim(
        &self,
        tx: &mut crate::Tx,
        job: &ClaimedJob,
    ) -> Result<SqliteRow, Error> {
        let now = self.clock.now().unix_millis();
        sqlx::query(concat!("SELECT ", job_columns!(), " FROM forge_jobs WHERE id = $1 AND state = 'claimed' AND token = $2 AND expires_at > $3"))
            .bind(job.id.to_string())
            .bind(i64_of(job.token)?)
            .bind(now)
            .fetch_optional(&mut **tx)
            .await
            .map_err(db_error)?
            .ok_or_else(|| Error::Fenced { resource: format!("job {}", job.id) })
    }
}

#[async_trait]
impl JobQueue for SqliteStore {
    async fn enqueue(&self, scope: &Scope, job: NewJob) -> Result<JobId, Error> {
        forge_core::ports::rules::check_attempts(job.max_attempts)?;
        let id = JobId::generate(self.ids.as_ref());
        let now = self.clock.now();
        let (_gate, mut tx) = self.write_tx().await?;
        let found: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM forge_runs WHERE id = $1 AND tenant_id = $2")
                .bind(job.run_id.to_string())
                .bind(scope.tenant_id().as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?;
        found.ok_or_else(|| Error::not_found("run", job.run_id))?;
        sqlx::query(
            "INSERT INTO forge_jobs (id, tenant_id, run_id, state, available_at, attempts, max_attempts, token, traceparent) \
             VALUES ($1, $2, $3, 'ready', $4, 0, $5, 0, $6)",
        )
        .bind(id.to_string())
        .bind(scope.tenant_id().as_str())
        .bind(job.run_id.to_string())
        .bind(job.not_before.unwrap_or(now).unix_millis())
        .bind(i64::from(job.max_attempts))
        .bind(&job.traceparent)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(id)
    }

    async fn claim(
        &self,
        system: &SystemScope,
        worker: &str,
        ttl: Duration,
        filter: &ClaimFilter,
    ) -> Result<Option<ClaimedJob>, Error> {
        Ok(self
            .claim_with(system, worker, ttl, filter, None)
            .await?
            .map(|c| c.job))
    }

    async fn claim_leased(
        &self,
        system: &SystemScope,
        worker: &str,
        ttl: Duration,
        filter: &ClaimFilter,
        lease: &LeaseRequest,
    ) -> Result<Option<Claimed>, Error> {
        self.claim_with(system, worker, ttl, filter, Some(lease))
            .await
    }

    async fn heartbeat(
        &self,
        _system: &SystemScope,
        job: &ClaimedJob,
        ttl: Duration,
    ) -> Result<ClaimedJob, Error> {
        let expires_at = self.clock.now().plus(ttl);
        self.update_claim(job, "expires_at = ?4", Some(expires_at.unix_millis()))
            .await?;
        Ok(ClaimedJob {
            expires_at,
            ..job.clone()
        })
    }

    async fn complete(&self, _system: &SystemScope, job: &ClaimedJob) -> Result<(), Error> {
        let (claim, now) = (job.clone(), self.clock.now());
        let done = self
            .lane
            .run(move |conn| complete_claim(conn, &claim, now))
            .await?;
        if done {
            Ok(())
        } else {
            Err(Error::Fenced {
                resource: format!("job {}", job.id),
            })
        }
    }

    async fn fail(
        &self,
        _system: &SystemScope,
        job: &ClaimedJob,
        retry_in: Duration,
        reason: &str,
    ) -> Result<JobState, Error> {
        let (_gate, mut tx) = self.write_tx().await?;
        let row = self.current_claim(&mut tx, job).await?;
        let attempts: i64 = rows::get(&row, "attempts")?;
        let max: i64 = rows::get(&row, "max_attempts")?;
        let next = if attempts >= max {
            JobState::Dead
        } else {
            JobState::Ready
        };
        sqlx::query(
            "UPDATE forge_jobs SET state = $1, expires_at = NULL, available_at = $2, last_error = $4 WHERE id = $3",
        )
        .bind(next.name())
        .bind(self.clock.now().plus(retry_in).unix_millis())
        .bind(job.id.to_string())
        .bind(reason)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(next)
    }

    async fn release(
        &self,
        _system: &SystemScope,
        job: &ClaimedJob,
        not_before: Timestamp,
    ) -> Result<(), Error> {
        self.update_claim(
            job,
            "state = 'ready', attempts = MAX(attempts - 1, 0), expires_at = NULL, available_at = ?4",
            Some(not_before.unix_millis()),
        )
        .await
    }

    async fn dead_jobs(&self, _system: &SystemScope, limit: usize) -> Result<Vec<JobInfo>, Error> {
        let found = sqlx::query(concat!(
            "SELECT ",
            job_columns!(),
            " FROM forge_jobs WHERE state = 'dead' ORDER BY id LIMIT $1"
        ))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(db_error)?;
        found.iter().map(info).collect()
    }

    async fn job_counts(
        &self,
        _system: &SystemScope,
    ) -> Result<std::collections::BTreeMap<&'static str, u64>, Error> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT state, count(*) FROM forge_jobs GROUP BY state")
                .fetch_all(&mut *self.conn().await?)
                .await
                .map_err(db_error)?;
        rows.into_iter()
            .map(|(state, n)| Ok((JobState::from_name(&state)?.name(), n.max(0) as u64)))
            .collect()
    }

    async fn job(&self, _system: &SystemScope, id: JobId) -> Result<JobInfo, Error> {
        let row = sqlx::query(concat!(
            "SELECT ",
            job_columns!(),
            " FROM forge_jobs WHERE id = $1"
        ))
        .bind(id.to_string())
        .fetch_optional(&mut *self.conn().await?)
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

/// Claims the next job `worker` may take, on the lane's connection, and reads the other live
/// claims' holders first.
///
/// The filter (ClaimFilter::admits) in SQL: the run's agent version among the worker's
/// `[name, version]` pairs, and the run itself when one is named. The walk is over the open jobs
/// in id order (migration 15), so it stops at the first admitted job instead of testing and
/// sorting the whole backlog; `INDEXED BY` makes a plan that does otherwise an error rather than
/// a slow claim. The job found is claimed in the same statement, which returns it as it now
/// stands. When it found none, lapsed claims with no attempts left become dead letters (the claim
/// never takes them): only while the queue is idle.
fn claim_next(
    conn: &rusqlite::Connection,
    now: Timestamp,
    run: Option<&str>,
    agents: Option<&str>,
    expires_at: Timestamp,
    worker: &str,
) -> Result<(Vec<String>, Option<ClaimedJob>), Error> {
    use crate::lane::db;
    use crate::rows::{Cols, int, text};
    let mut holders = Vec::new();
    {
        let mut statement = conn
            .prepare_cached(
                "SELECT DISTINCT holder FROM forge_jobs WHERE state = 'claimed' AND expires_at > ?1 \
                 AND holder IS NOT NULL AND holder <> ?2",
            )
            .map_err(db)?;
        let mut found = statement
            .query(rusqlite::params![now.unix_millis(), worker])
            .map_err(db)?;
        while let Some(row) = found.next().map_err(db)? {
            holders.push(text(row, "holder")?);
        }
    }
    let mut statement = conn
        .prepare_cached(concat!(
            "UPDATE forge_jobs SET state = 'claimed', attempts = attempts + 1, token = token + 1, \
             expires_at = ?4, holder = ?5 WHERE id = (SELECT id FROM forge_jobs j INDEXED BY forge_jobs_open \
             WHERE state IN ('ready', 'claimed') \
             AND ((state = 'ready' AND available_at <= ?1) OR (state = 'claimed' AND expires_at <= ?1 AND attempts < max_attempts)) \
             AND (?2 IS NULL OR run_id = ?2) \
             AND (?3 IS NULL OR EXISTS (SELECT 1 FROM forge_runs r, json_each(?3) a WHERE r.id = j.run_id \
                  AND r.agent_name = json_extract(a.value, '$[0]') AND r.agent_version = json_extract(a.value, '$[1]'))) \
             ORDER BY id LIMIT 1) RETURNING ",
            job_columns!()
        ))
        .map_err(db)?;
    let mut found = statement
        .query(rusqlite::params![
            now.unix_millis(),
            run,
            agents,
            expires_at.unix_millis(),
            worker
        ])
        .map_err(db)?;
    let claimed = match found.next().map_err(db)? {
        Some(row) => Some(ClaimedJob {
            id: JobId(rows::uuid(row, "id")?),
            tenant_id: TenantId::new(text(row, "tenant_id")?)?,
            run_id: RunId(rows::uuid(row, "run_id")?),
            attempt: u32::try_from(int(row, "attempts")?).unwrap_or(u32::MAX),
            token: rows::u64_of(int(row, "token")?, "token")?,
            expires_at,
            available_at: rows::ts(row, "available_at")?,
            traceparent: row.text("traceparent")?,
        }),
        None => None,
    };
    drop(found);
    drop(statement);
    if claimed.is_none() {
        crate::commit::execute(
            conn,
            "UPDATE forge_jobs SET state = 'dead', expires_at = NULL, last_error = ?2 \
             WHERE state = 'claimed' AND expires_at <= ?1 AND attempts >= max_attempts",
            rusqlite::params![now.unix_millis(), forge_core::ports::queue::WORKER_LOST],
        )?;
    }
    Ok((holders, claimed))
}

fn info(row: &SqliteRow) -> Result<JobInfo, Error> {
    forge_sql::rows::job_info(&crate::rows::Row(row))
}

impl SqliteStore {
    /// Moves a dead job to `to` (a replay resets its attempts) and audits it, in one transaction.
    async fn operate_dead(
        &self,
        id: JobId,
        actor: &str,
        operation: DeadJob,
    ) -> Result<JobInfo, Error> {
        let (action, to) = (operation.action(), operation.to());
        let now = self.clock.now();
        let (_gate, mut tx) = self.write_tx().await?;
        let row = sqlx::query(concat!(
            "SELECT ",
            job_columns!(),
            " FROM forge_jobs WHERE id = $1"
        ))
        .bind(id.to_string())
        .fetch_optional(&mut *tx)
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
        let reset = to == JobState::Ready;
        sqlx::query(
            "UPDATE forge_jobs SET state = $1, attempts = CASE WHEN $2 THEN 0 ELSE attempts END, \
             available_at = CASE WHEN $2 THEN $3 ELSE available_at END WHERE id = $4",
        )
        .bind(to.name())
        .bind(reset)
        .bind(now.unix_millis())
        .bind(id.to_string())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        let detail = serde_json::json!({ "run_id": job.run_id, "last_error": job.last_error });
        sqlx::query("INSERT INTO forge_audit (tenant_id, at, actor, action, subject, detail) VALUES ($1, $2, $3, $4, $5, $6)")
            .bind(job.tenant_id.as_str())
            .bind(now.unix_millis())
            .bind(actor)
            .bind(action)
            .bind(format!("job {id}"))
            .bind(detail.to_string())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        job.state = to;
        if reset {
            job.attempts = 0;
        }
        Ok(job)
    }
}

#[async_trait]
impl AuditLog for SqliteStore {
    async fn read_audit(
        &self,
        scope: &Scope,
        query: &AuditQuery,
    ) -> Result<Vec<AuditRecord>, Error> {
        let (filter, values) = audit_filter(query);
        let sql = format!(
            "SELECT * FROM forge_audit WHERE tenant_id = $1{filter} ORDER BY seq DESC LIMIT ${}",
            values.len() + 2
        );

        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(scope.tenant_id().as_str());
        for v in values {
            q = match v {
                AuditValue::Text(t) => q.bind(t),
                AuditValue::Time(v) => q.bind(v.unix_millis()),
            };
        }
        let found = q
            .bind(i64::try_from(query.limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *self.conn().await?)
            .await
            .map_err(db_error)?;

        found
            .iter()
            .map(|r| {
                Ok(AuditRecord {
                    tenant_id: TenantId::new(rows::get::<String>(r, "tenant_id")?)?,
                    at: rows::ts(r, "at")?,
                    actor: rows::get(r, "actor")?,
                    action: rows::get(r, "action")?,
                    subject: rows::get(r, "subject")?,
                    detail: rows::json(r, "detail")?,
                })
            })
            .collect()
    }

    async fn append_audit(&self, _: &Scope, record: AuditRecord) -> Result<(), Error> {
        let (_gate, mut tx) = self.write_tx().await?;
        crate::interactions::audit(&mut tx, &record).await?;
        tx.commit().await.map_err(db_error)?;

        Ok(())
    }
}
