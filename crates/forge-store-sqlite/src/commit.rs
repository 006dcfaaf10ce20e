//! `commit_step` on SQLite: one operation of the writer lane (`lane`).
//!
//! The step is judged where it is written: the run's row is read inside the lane's transaction
//! (which holds SQLite's write lock), `check_commit` decides the fence, version, status and
//! event sequence on it, the calls the step settles are checked to be this run's open calls, and
//! only then is anything written. A refusal is the operation's error, and the savepoint it ran in
//! is rolled back, so a refused step leaves nothing behind; a step is answered only once the
//! group it was committed with is on disk.

use forge_core::Error;
use forge_core::id::ThreadId;
use forge_core::metering::ModelCall;
use forge_core::ports::store::{
    Committed, StepCommit, check_commit, check_summary, foreign_settlement, not_an_open_call,
};
use forge_core::run::Run;
use forge_core::scope::{Scope, TenantId};
use forge_core::thread::SessionState;
use forge_core::time::Timestamp;
use rusqlite::{Connection, params};

use crate::SqliteStore;
use crate::db::{self, execute};
use crate::rows::{self, i64_of, to_json};
use crate::threads::{SET_STATE_SQL, SET_SUMMARY_SQL, STATE_VERSION_SQL, SUMMARY_SQL};

/// Appends one event to a run's log (`$1` run, `$2` seq, `$3` tenant, `$4` time, `$5` body).
pub(crate) const INSERT_EVENT: &str =
    "INSERT INTO forge_run_events (run_id, seq, tenant_id, at, body) VALUES ($1, $2, $3, $4, $5)";

/// The first call `commit` settles a second time (it finds the call settled by then).
fn repeated_settlement(commit: &StepCommit) -> Option<&ModelCall> {
    let mut seen = std::collections::HashSet::new();
    commit.settlements.iter().find(|c| !seen.insert(c.id))
}

impl SqliteStore {
    /// See [`forge_core::ports::store::RunStore::commit_step`]: one operation of the lane.
    pub(crate) async fn commit(
        &self,
        scope: &Scope,
        commit: StepCommit,
    ) -> Result<Committed, Error> {
        let tenant = scope.tenant_id().clone();
        let now = self.clock.now();
        self.write(move |conn| write_step(conn, &tenant, &commit, now))
            .await
    }
}

/// Judges and writes `commit` on the lane's connection, inside its transaction.
fn write_step(
    conn: &Connection,
    tenant: &TenantId,
    commit: &StepCommit,
    now: Timestamp,
) -> Result<Committed, Error> {
    let run = crate::runs::read_run(conn, tenant.as_str(), commit.run_id)?
        .ok_or_else(|| Error::not_found("run", commit.run_id))?;
    let committed = check_commit(&run, commit, now)?;
    if let Some(update) = &commit.state {
        set_state(
            conn,
            tenant,
            run.thread_id,
            update.expected_version,
            update.values.clone(),
        )?;
    }
    if let Some(summary) = &commit.summary {
        check_summary(&run, summary)?;
        let current: Option<Option<String>> = db::first(
            conn,
            SUMMARY_SQL,
            params![run.thread_id.to_string(), tenant.as_str()],
            |row| row.get(0).map_err(db::error),
        )?;
        let current = current
            .ok_or_else(|| Error::not_found("thread", run.thread_id))?
            .map(|s| serde_json::from_str(&s).map_err(|e| rows::corrupt("summary", e)))
            .transpose()?;
        forge_core::thread::check_summary_version(run.thread_id, current.as_ref(), summary)?;
        execute(
            conn,
            SET_SUMMARY_SQL,
            params![
                to_json(summary)?,
                run.thread_id.to_string(),
                tenant.as_str()
            ],
        )?;
    }
    for i in &commit.interactions {
        execute(
            conn,
            crate::interactions::INSERT_SQL,
            params![
                i.id.to_string(),
                i.tenant_id.as_str(),
                i.run_id.to_string(),
                i.status.name(),
                i.created_at.unix_millis(),
                i.expires_at.unix_millis(),
                to_json(i)?
            ],
        )?;
    }
    for r in &commit.audit {
        crate::interactions::audit(conn, r)?;
    }
    if let Some(call) = foreign_settlement(commit, tenant) {
        return Err(not_an_open_call(call.id));
    }
    // A call settled twice in one step finds it settled the second time.
    if let Some(call) = repeated_settlement(commit) {
        return Err(not_an_open_call(call.id));
    }
    for call in &commit.settlements {
        let open: Option<i64> = db::value(
            conn,
            "SELECT 1 FROM forge_model_calls WHERE id = ?1 \
             AND NOT (status = 'reserved' AND tenant_id = ?2)",
            params![call.id.to_string(), tenant.as_str()],
        )?;
        if open.is_some() {
            return Err(not_an_open_call(call.id));
        }
    }
    for e in &commit.events {
        execute(
            conn,
            INSERT_EVENT,
            params![
                e.run_id.to_string(),
                i64_of(e.seq)?,
                tenant.as_str(),
                e.at.unix_millis(),
                to_json(e)?
            ],
        )?;
    }
    for m in &commit.messages {
        execute(
            conn,
            "INSERT INTO forge_messages (tenant_id, thread_id, id, run_id, role, parts, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                tenant.as_str(),
                run.thread_id.to_string(),
                m.id.to_string(),
                m.run_id.to_string(),
                m.role.name(),
                to_json(&m.parts)?,
                m.created_at.unix_millis()
            ],
        )?;
    }
    let ends = commit.releases_lease();
    let changed = execute(
        conn,
        "UPDATE forge_runs SET version = ?1, last_seq = ?2, status = ?3, waiting_for = ?4, \
         checkpoint = ?5, failure = ?6, updated_at = ?7, \
         lease_holder = CASE WHEN ?8 THEN NULL ELSE lease_holder END, \
         lease_token = CASE WHEN ?8 THEN NULL ELSE lease_token END, \
         lease_expires_at = CASE WHEN ?8 THEN NULL ELSE lease_expires_at END \
         WHERE id = ?9 AND tenant_id = ?10 AND version = ?11",
        params![
            i64_of(committed.version)?,
            i64_of(committed.last_seq)?,
            commit.status.name(),
            commit.status.wait_reason().map(|r| r.name()),
            to_json(&commit.checkpoint)?,
            commit.failure.as_ref().map(to_json).transpose()?,
            now.unix_millis(),
            ends,
            commit.run_id.to_string(),
            tenant.as_str(),
            i64_of(run.version)?
        ],
    )?;
    if changed != 1 {
        // Unreachable under the write lock the lane holds; kept as a guard.
        return Err(Error::VersionConflict {
            entity: "run",
            id: run.id.to_string(),
            expected: run.version,
            actual: run.version + 1,
        });
    }
    for call in &commit.settlements {
        let settled = execute(
            conn,
            "INSERT INTO forge_model_calls (id, tenant_id, run_id, period_start, at, status, body) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
             ON CONFLICT (id) DO UPDATE SET status = excluded.status, body = excluded.body \
             WHERE forge_model_calls.status = 'reserved' \
             AND forge_model_calls.tenant_id = excluded.tenant_id",
            params![
                call.id.to_string(),
                call.tenant_id.as_str(),
                call.run_id.to_string(),
                call.period_start.unix_millis(),
                call.at.unix_millis(),
                call.status.name(),
                to_json(call)?
            ],
        )?;
        if settled != 1 {
            return Err(not_an_open_call(call.id));
        }
    }
    if commit.status.is_terminal() {
        end_run(conn, tenant, &run, now)?;
    }
    let job_completed = match commit.completes(tenant) {
        Some(job) => crate::queue::complete_claim(conn, job, now)?,
        None => false,
    };
    Ok(Committed {
        job_completed,
        ..committed
    })
}

/// Replaces a thread's session state if it is still at `expected_version` (a step's, or
/// `put_session_state`), on the lane's connection.
pub(crate) fn set_state(
    conn: &Connection,
    tenant: &TenantId,
    thread: ThreadId,
    expected_version: u64,
    values: serde_json::Map<String, serde_json::Value>,
) -> Result<SessionState, Error> {
    let actual: Option<i64> = db::value(
        conn,
        STATE_VERSION_SQL,
        params![thread.to_string(), tenant.as_str()],
    )?;
    let actual = rows::u64_of(
        actual.ok_or_else(|| Error::not_found("thread", thread))?,
        "state_version",
    )?;
    forge_core::thread::check_state_version(thread, expected_version, actual)?;
    execute(
        conn,
        SET_STATE_SQL,
        params![
            to_json(&values)?,
            i64_of(actual + 1)?,
            thread.to_string(),
            tenant.as_str()
        ],
    )?;
    Ok(SessionState {
        version: actual + 1,
        values,
    })
}

/// A run that ends: its pending interactions expire (nothing is left for a person to decide),
/// and its thread's oldest queued run becomes the active one, with that run's job ready.
fn end_run(conn: &Connection, tenant: &TenantId, run: &Run, now: Timestamp) -> Result<(), Error> {
    let (id, thread, tenant) = (
        run.id.to_string(),
        run.thread_id.to_string(),
        tenant.as_str(),
    );
    execute(
        conn,
        "UPDATE forge_interactions SET status = 'expired', body = json_set(body, '$.status', 'expired') \
         WHERE status = 'pending' AND run_id = ?1 AND tenant_id = ?2",
        params![id, tenant],
    )?;
    execute(
        conn,
        "UPDATE forge_threads SET active_run = (SELECT id FROM forge_runs WHERE status = 'queued' \
         AND thread_id = ?1 AND tenant_id = ?2 AND id <> ?3 ORDER BY created_at, id LIMIT 1) \
         WHERE id = ?1 AND tenant_id = ?2 AND active_run = ?3",
        params![thread, tenant, id],
    )?;
    execute(
        conn,
        "UPDATE forge_jobs SET state = 'ready', available_at = ?1 WHERE state = 'waiting' \
         AND run_id = (SELECT active_run FROM forge_threads WHERE id = ?2 AND tenant_id = ?3)",
        params![now.unix_millis(), thread, tenant],
    )?;
    Ok(())
}
