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

use rusqlite::{Connection, params};

use crate::SqliteStore;
use crate::db;
use crate::rows::{json, text, to_json};

/// Inserts an interaction (`$1` id, `$2` tenant, `$3` run, `$4` status, `$5` created, `$6`
/// expires, `$7` body).
pub(crate) const INSERT_SQL: &str = "INSERT INTO forge_interactions (id, tenant_id, run_id, status, created_at, expires_at, body) \
     VALUES ($1, $2, $3, $4, $5, $6, $7)";

/// Appends an audit entry, in the caller's transaction.
pub(crate) fn audit(conn: &Connection, r: &AuditRecord) -> Result<(), Error> {
    db::execute(
        conn,
        "INSERT INTO forge_audit (tenant_id, at, actor, action, subject, detail) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            r.tenant_id.as_str(),
            r.at.unix_millis(),
            r.actor,
            r.action,
            r.subject,
            r.detail.to_string()
        ],
    )?;
    Ok(())
}

fn update(conn: &Connection, i: &Interaction) -> Result<(), Error> {
    db::execute(
        conn,
        "UPDATE forge_interactions SET status = ?1, body = ?2 WHERE id = ?3 AND tenant_id = ?4",
        params![
            i.status.name(),
            to_json(i)?,
            i.id.to_string(),
            i.tenant_id.as_str()
        ],
    )?;
    Ok(())
}

/// Readies a job for `run` when it waits with nothing pending and has no live job.
pub(crate) fn resume_if_ready(
    conn: &Connection,
    tenant: &str,
    run: RunId,
    job: JobId,
    now: Timestamp,
) -> Result<bool, Error> {
    wake(conn, tenant, run, job, now, true)
}

/// Readies a job for a waiting `run` that has no job waiting to be claimed; with
/// `unless_pending`, only when none of its interactions is pending (a cancel request wakes it
/// regardless). A *claimed* job does not count: its worker parked the run and is about to
/// complete it without looking again, so a wake that lands in between needs a job of its own.
pub(crate) fn wake(
    conn: &Connection,
    tenant: &str,
    run: RunId,
    job: JobId,
    now: Timestamp,
    unless_pending: bool,
) -> Result<bool, Error> {
    let run = run.to_string();
    let ready: Option<i64> = db::value(
        conn,
        "SELECT 1 FROM forge_runs r WHERE r.id = ?1 AND r.tenant_id = ?2 AND r.status = 'waiting' \
         AND (NOT ?3 OR NOT EXISTS (SELECT 1 FROM forge_interactions i WHERE i.run_id = r.id AND i.status = 'pending')) \
         AND NOT EXISTS (SELECT 1 FROM forge_jobs j WHERE j.run_id = r.id AND j.state IN ('ready', 'waiting'))",
        params![run, tenant, unless_pending],
    )?;
    if ready.is_none() {
        return Ok(false);
    }
    db::execute(
        conn,
        // A resumed run's job keeps the trace its run was enqueued under.
        "INSERT INTO forge_jobs (id, tenant_id, run_id, state, available_at, attempts, max_attempts, token, traceparent) \
         VALUES (?1, ?2, ?3, 'ready', ?4, 0, ?5, 0, \
                 (SELECT p.traceparent FROM forge_jobs p WHERE p.run_id = ?3 AND p.traceparent IS NOT NULL LIMIT 1))",
        params![
            job.to_string(),
            tenant,
            run,
            now.unix_millis(),
            i64::from(RESUME_MAX_ATTEMPTS)
        ],
    )?;
    Ok(true)
}

/// What a resolution did: the interaction it found already resolved, or resolved (`resumed` when
/// its run got a job), or expired (the caller's error, committed as such).
enum Outcome {
    Replayed(Interaction),
    Applied(Interaction, bool),
    Expired(Interaction),
}

#[async_trait]
impl InteractionStore for SqliteStore {
    async fn get_interaction(
        &self,
        scope: &Scope,
        id: InteractionId,
    ) -> Result<Interaction, Error> {
        let tenant = scope.tenant_id().to_string();
        self.read(move |conn| {
            db::first(
                conn,
                "SELECT body FROM forge_interactions WHERE id = ?1 AND tenant_id = ?2",
                params![id.to_string(), tenant],
                |row| json(row, "body"),
            )?
            .ok_or_else(|| Error::not_found("interaction", id))
        })
        .await
    }

    async fn list_interactions(
        &self,
        scope: &Scope,
        filter: InteractionFilter,
    ) -> Result<Vec<Interaction>, Error> {
        let tenant = scope.tenant_id().to_string();
        let body = |row: &rusqlite::Row<'_>| json(row, "body");
        self.read(move |conn| match filter {
            InteractionFilter::Pending => db::all(
                conn,
                "SELECT body FROM forge_interactions WHERE tenant_id = ?1 AND status = 'pending' \
                 ORDER BY created_at, id",
                params![tenant],
                body,
            ),
            InteractionFilter::PendingPage { after, limit } => db::snapshot(conn, |conn| {
                let cursor = match after {
                    Some(after) => Some(
                        db::first(
                            conn,
                            "SELECT created_at, id FROM forge_interactions WHERE id = ?1 AND tenant_id = ?2",
                            params![after.to_string(), tenant],
                            |row| Ok((crate::rows::int(row, "created_at")?, text(row, "id")?)),
                        )?
                        .ok_or_else(|| Error::not_found("interaction", after))?,
                    ),
                    None => None,
                };
                let (at, id) = cursor.unzip();
                db::all(
                    conn,
                    "SELECT body FROM forge_interactions WHERE tenant_id = ?1 AND status = 'pending' \
                     AND (?2 IS NULL OR (created_at, id) > (?2, ?3)) ORDER BY created_at, id LIMIT ?4",
                    params![tenant, at, id, db::saturating(limit)],
                    body,
                )
            }),
            InteractionFilter::Run(run) => db::snapshot(conn, |conn| {
                crate::runs::exists(conn, &tenant, run)?;
                db::all(
                    conn,
                    "SELECT body FROM forge_interactions WHERE tenant_id = ?1 AND run_id = ?2 \
                     ORDER BY created_at, id",
                    params![tenant, run.to_string()],
                    body,
                )
            }),
        })
        .await
    }

    async fn resolve_interaction(&self, scope: &Scope, req: Resolve) -> Result<Resolved, Error> {
        let now = self.clock.now();
        let job = JobId::generate(self.ids.as_ref());
        let tenant = scope.tenant_id().to_string();
        let outcome = self
            .write(move |conn| {
                let current: Interaction = db::first(
                    conn,
                    "SELECT body FROM forge_interactions WHERE id = ?1 AND tenant_id = ?2",
                    params![req.id.to_string(), tenant],
                    |row| json(row, "body"),
                )?
                .ok_or_else(|| Error::not_found("interaction", req.id))?;
                Ok(match decide(&current, &req, now)? {
                    Decided::Replay => Outcome::Replayed(current),
                    Decided::Expire(expired) => {
                        update(conn, &expired)?;
                        audit(conn, &audit_record(&expired, now))?;
                        resume_if_ready(conn, &tenant, expired.run_id, job, now)?;
                        Outcome::Expired(expired)
                    }
                    Decided::Apply(resolved) => {
                        update(conn, &resolved)?;
                        audit(conn, &audit_record(&resolved, now))?;
                        let resumed = resume_if_ready(conn, &tenant, resolved.run_id, job, now)?;
                        Outcome::Applied(resolved, resumed)
                    }
                })
            })
            .await?;
        match outcome {
            Outcome::Replayed(interaction) => Ok(Resolved {
                interaction,
                replayed: true,
                resumed: false,
            }),
            Outcome::Applied(interaction, resumed) => Ok(Resolved {
                interaction,
                replayed: false,
                resumed,
            }),
            Outcome::Expired(expired) => Err(Error::Expired {
                id: expired.id.to_string(),
                at: expired.expires_at,
            }),
        }
    }

    async fn expire_interactions(&self, _system: &SystemScope) -> Result<usize, Error> {
        let now = self.clock.now().unix_millis();
        let due = self
            .read(move |conn| {
                db::all(
                    conn,
                    "SELECT id, tenant_id FROM forge_interactions WHERE status = 'pending' AND expires_at <= ?1",
                    params![now],
                    |row| {
                        let id = crate::rows::uuid(row, "id")?;
                        Ok((InteractionId(id), TenantId::new(text(row, "tenant_id")?)?))
                    },
                )
            })
            .await?;
        expire_due(self, due).await
    }
}
