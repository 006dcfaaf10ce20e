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
use forge_sql::rows::Columns;
use forge_sql::statements::audit_page;
use rusqlite::{Connection, params};

use crate::SqliteStore;
use crate::db;
use crate::rows::{self, i64_of, int, text};

/// The columns a job row is read with, named rather than `*` (migrations 5 and 11 widened this
/// table).
macro_rules! job_columns {
    () => {
        "id, tenant_id, run_id, state, available_at, attempts, max_attempts, token, expires_at, \
         last_error, holder, traceparent"
    };
}

/// Completes the job in the lane's transaction if `job` is its current, unexpired claim;
/// whether it did. Shared by `complete` and the step that ends or parks the job's run.
pub(crate) fn complete_claim(
    conn: &Connection,
    job: &ClaimedJob,
    now: Timestamp,
) -> Result<bool, Error> {
    let changed = db::execute(
        conn,
        "UPDATE forge_jobs SET state = 'completed', expires_at = NULL \
         WHERE id = ?1 AND tenant_id = ?2 AND run_id = ?3 AND state = 'claimed' AND token = ?4 \
         AND expires_at > ?5",
        params![
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
            .write(move |conn| {
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
            let dead: Vec<String> = dead.into_iter().cloned().collect();
            self.write(move |conn| {
                for holder in &dead {
                    db::execute(
                        conn,
                        "UPDATE forge_jobs SET expires_at = ?1 WHERE state = 'claimed' AND holder = ?2",
                        params![now.unix_millis(), holder],
                    )?;
                }
                Ok(())
            })
            .await?;
            if claimed.is_none() {
                return Box::pin(self.claim_with(system, worker, ttl, filter, lease)).await;
            }
        }
        Ok(claimed)
    }

    /// Runs `sql` — an update of job `?1` that holds only while its claim is current: token
    /// `?2`, unexpired at `?3` — binding `value` as `?4`; `Fenced` when the claim is not.
    async fn update_claim(
        &self,
        job: &ClaimedJob,
        sql: &'static str,
        value: Option<i64>,
    ) -> Result<(), Error> {
        let (id, token, now) = (job.id, i64_of(job.token)?, self.clock.now().unix_millis());
        let changed = self
            .write(move |conn| db::execute(conn, sql, params![id.to_string(), token, now, value]))
            .await?;
        if changed == 1 {
            Ok(())
        } else {
            Err(Error::Fenced {
                resource: format!("job {id}"),
            })
        }
    }
}

/// The job's row if `job` is its current, unexpired claim at `now`; `Fenced` otherwise.
fn current_claim(conn: &Connection, job: &ClaimedJob, now: Timestamp) -> Result<JobInfo, Error> {
    db::first(
        conn,
        concat!(
            "SELECT ",
            job_columns!(),
            " FROM forge_jobs WHERE id = ?1 AND state = 'claimed' AND token = ?2 AND expires_at > ?3"
        ),
        params![job.id.to_string(), i64_of(job.token)?, now.unix_millis()],
        info,
    )?
    .ok_or_else(|| Error::Fenced {
        resource: format!("job {}", job.id),
    })
}

#[async_trait]
impl JobQueue for SqliteStore {
    async fn enqueue(&self, scope: &Scope, job: NewJob) -> Result<JobId, Error> {
        forge_core::ports::rules::check_attempts(job.max_attempts)?;
        let id = JobId::generate(self.ids.as_ref());
        let now = self.clock.now();
        let tenant = scope.tenant_id().to_string();
        self.write(move |conn| {
            crate::runs::exists(conn, &tenant, job.run_id)?;
            let run = job.run_id.to_string();
            db::execute(
                conn,
                "INSERT INTO forge_jobs (id, tenant_id, run_id, state, available_at, attempts, max_attempts, token, traceparent) \
                 VALUES (?1, ?2, ?3, 'ready', ?4, 0, ?5, 0, ?6)",
                params![
                    id.to_string(),
                    tenant,
                    run,
                    job.not_before.unwrap_or(now).unix_millis(),
                    i64::from(job.max_attempts),
                    job.traceparent
                ],
            )?;
            Ok(id)
        })
        .await
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
        self.update_claim(
            job,
            "UPDATE forge_jobs SET expires_at = ?4 \
             WHERE id = ?1 AND state = 'claimed' AND token = ?2 AND expires_at > ?3",
            Some(expires_at.unix_millis()),
        )
        .await?;
        Ok(ClaimedJob {
            expires_at,
            ..job.clone()
        })
    }

    async fn complete(&self, _system: &SystemScope, job: &ClaimedJob) -> Result<(), Error> {
        let (claim, now) = (job.clone(), self.clock.now());
        let done = self
            .write(move |conn| complete_claim(conn, &claim, now))
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
        let (claim, reason) = (job.clone(), reason.to_owned());
        let clock = std::sync::Arc::clone(&self.clock);
        self.write(move |conn| {
            let now = clock.now();
            let row = current_claim(conn, &claim, now)?;
            let next = if row.attempts >= row.max_attempts {
                JobState::Dead
            } else {
                JobState::Ready
            };
            db::execute(
                conn,
                "UPDATE forge_jobs SET state = ?1, expires_at = NULL, available_at = ?2, last_error = ?4 \
                 WHERE id = ?3",
                params![
                    next.name(),
                    now.plus(retry_in).unix_millis(),
                    claim.id.to_string(),
                    reason
                ],
            )?;
            Ok(next)
        })
        .await
    }

    async fn release(
        &self,
        _system: &SystemScope,
        job: &ClaimedJob,
        not_before: Timestamp,
    ) -> Result<(), Error> {
        self.update_claim(
            job,
            "UPDATE forge_jobs SET state = 'ready', attempts = MAX(attempts - 1, 0), \
             expires_at = NULL, available_at = ?4 \
             WHERE id = ?1 AND state = 'claimed' AND token = ?2 AND expires_at > ?3",
            Some(not_before.unix_millis()),
        )
        .await
    }

    async fn dead_jobs(&self, _system: &SystemScope, limit: usize) -> Result<Vec<JobInfo>, Error> {
        let limit = db::saturating(limit);
        self.read(move |conn| {
            db::all(
                conn,
                concat!(
                    "SELECT ",
                    job_columns!(),
                    " FROM forge_jobs WHERE state = 'dead' ORDER BY id LIMIT ?1"
                ),
                params![limit],
                info,
            )
        })
        .await
    }

    async fn job_counts(
        &self,
        _system: &SystemScope,
    ) -> Result<std::collections::BTreeMap<&'static str, u64>, Error> {
        self.read(|conn| {
            db::all(
                conn,
                "SELECT state, count(*) AS n FROM forge_jobs GROUP BY state",
                params![],
                |row| {
                    let state = JobState::from_name(&text(row, "state")?)?;
                    Ok((state.name(), u64::try_from(int(row, "n")?).unwrap_or(0)))
                },
            )
            .map(|counts| counts.into_iter().collect())
        })
        .await
    }

    async fn job(&self, _system: &SystemScope, id: JobId) -> Result<JobInfo, Error> {
        self.read(move |conn| job(conn, id)).await
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
    conn: &Connection,
    now: Timestamp,
    run: Option<&str>,
    agents: Option<&str>,
    expires_at: Timestamp,
    worker: &str,
) -> Result<(Vec<String>, Option<ClaimedJob>), Error> {
    let holders = db::all(
        conn,
        "SELECT DISTINCT holder FROM forge_jobs WHERE state = 'claimed' AND expires_at > ?1 \
         AND holder IS NOT NULL AND holder <> ?2",
        params![now.unix_millis(), worker],
        |row| text(row, "holder"),
    )?;
    let claimed = db::first(
        conn,
        concat!(
            "UPDATE forge_jobs SET state = 'claimed', attempts = attempts + 1, token = token + 1, \
             expires_at = ?4, holder = ?5 WHERE id = (SELECT id FROM forge_jobs j INDEXED BY forge_jobs_open \
             WHERE state IN ('ready', 'claimed') \
             AND ((state = 'ready' AND available_at <= ?1) OR (state = 'claimed' AND expires_at <= ?1 AND attempts < max_attempts)) \
             AND (?2 IS NULL OR run_id = ?2) \
             AND (?3 IS NULL OR EXISTS (SELECT 1 FROM forge_runs r, json_each(?3) a WHERE r.id = j.run_id \
                  AND r.agent_name = json_extract(a.value, '$[0]') AND r.agent_version = json_extract(a.value, '$[1]'))) \
             ORDER BY id LIMIT 1) RETURNING ",
            job_columns!()
        ),
        params![
            now.unix_millis(),
            run,
            agents,
            expires_at.unix_millis(),
            worker
        ],
        |row| {
            Ok(ClaimedJob {
                id: JobId(rows::uuid(row, "id")?),
                tenant_id: TenantId::new(text(row, "tenant_id")?)?,
                run_id: RunId(rows::uuid(row, "run_id")?),
                attempt: u32::try_from(int(row, "attempts")?).unwrap_or(u32::MAX),
                token: rows::u64_of(int(row, "token")?, "token")?,
                expires_at,
                available_at: rows::ts(row, "available_at")?,
                traceparent: rows::Row(row).text("traceparent")?,
            })
        },
    )?;
    if claimed.is_none() {
        db::execute(
            conn,
            "UPDATE forge_jobs SET state = 'dead', expires_at = NULL, last_error = ?2 \
             WHERE state = 'claimed' AND expires_at <= ?1 AND attempts >= max_attempts",
            params![now.unix_millis(), forge_core::ports::queue::WORKER_LOST],
        )?;
    }
    Ok((holders, claimed))
}

fn info(row: &rusqlite::Row<'_>) -> Result<JobInfo, Error> {
    forge_sql::rows::job_info(&rows::Row(row))
}

/// Job `id`, of any tenant.
fn job(conn: &Connection, id: JobId) -> Result<JobInfo, Error> {
    db::first(
        conn,
        concat!("SELECT ", job_columns!(), " FROM forge_jobs WHERE id = ?1"),
        params![id.to_string()],
        info,
    )?
    .ok_or_else(|| Error::not_found("job", id))
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
        let actor = actor.to_owned();
        self.write(move |conn| {
            let mut found = job(conn, id)?;
            if found.state != JobState::Dead {
                return Err(Error::invalid(format!(
                    "job {id} is {}, not dead",
                    found.state.name()
                )));
            }
            let reset = to == JobState::Ready;
            db::execute(
                conn,
                "UPDATE forge_jobs SET state = ?1, attempts = CASE WHEN ?2 THEN 0 ELSE attempts END, \
                 available_at = CASE WHEN ?2 THEN ?3 ELSE available_at END WHERE id = ?4",
                params![to.name(), reset, now.unix_millis(), id.to_string()],
            )?;
            let detail = serde_json::json!({ "run_id": found.run_id, "last_error": found.last_error });
            crate::interactions::audit(
                conn,
                &AuditRecord {
                    tenant_id: found.tenant_id.clone(),
                    at: now,
                    actor,
                    action: action.to_owned(),
                    subject: format!("job {id}"),
                    detail,
                },
            )?;
            found.state = to;
            if reset {
                found.attempts = 0;
            }
            Ok(found)
        })
        .await
    }
}

#[async_trait]
impl AuditLog for SqliteStore {
    async fn read_audit(
        &self,
        scope: &Scope,
        query: &AuditQuery,
    ) -> Result<Vec<AuditRecord>, Error> {
        let (sql, values) = audit_page(query);
        let bound = db::binds(scope.tenant_id().to_string(), values);
        self.read(move |conn| {
            db::all(conn, &sql, &db::refs(&bound), |row| {
                forge_sql::rows::audit_record(&rows::Row(row))
            })
        })
        .await
    }

    async fn append_audit(&self, _: &Scope, record: AuditRecord) -> Result<(), Error> {
        self.write(move |conn| crate::interactions::audit(conn, &record))
            .await
    }
}
