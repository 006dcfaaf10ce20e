//! Threads, runs, leases, the event log and `commit_step` on PostgreSQL. Every call is one
//! transaction confined to the scope's tenant (see `PostgresStore::tenant_tx`); the run row is
//! locked (`FOR UPDATE`) while a lease or commit is decided, so concurrent writers queue on it.

use std::time::Duration;

use async_trait::async_trait;
use forge_core::Error;
use forge_core::event::{RunEvent, RunEventKind};
use forge_core::id::{RunId, ThreadId};
use forge_core::message::Message;
use forge_core::ports::store::{
    Admission, Committed, MessageWindow, NewRun, NewThread, RunQuery, RunStore, StartStrategy,
    StepCommit, ThreadStore, admit, check_commit, check_summary, next_lease, renewed_lease,
};
use forge_core::run::{Run, RunLease};
use forge_core::scope::Scope;
use forge_core::thread::{SessionState, Thread, ThreadChange, ThreadSummary, ThreadWindow};
use sqlx::{Postgres, Transaction};

use crate::PostgresStore;
use crate::rows::{self, db_error, i64_of, to_json};

type Tx = Transaction<'static, Postgres>;

async fn fetch_run(tx: &mut Tx, scope: &Scope, id: RunId, lock: bool) -> Result<Run, Error> {
    let sql = if lock {
        "SELECT * FROM forge_runs WHERE id = $1 AND tenant_id = $2 FOR UPDATE"
    } else {
        "SELECT * FROM forge_runs WHERE id = $1 AND tenant_id = $2"
    };
    let row = sqlx::query(sql)
        .bind(id.0)
        .bind(scope.tenant_id().as_str())
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_error)?
        .ok_or_else(|| Error::not_found("run", id))?;
    rows::run(&row)
}

async fn thread_exists(tx: &mut Tx, scope: &Scope, id: ThreadId) -> Result<(), Error> {
    let found: Option<i32> =
        sqlx::query_scalar("SELECT 1 FROM forge_threads WHERE id = $1 AND tenant_id = $2")
            .bind(id.0)
            .bind(scope.tenant_id().as_str())
            .fetch_optional(&mut **tx)
            .await
            .map_err(db_error)?;
    found
        .map(|_| ())
        .ok_or_else(|| Error::not_found("thread", id))
}

async fn insert_messages(
    tx: &mut Tx,
    scope: &Scope,
    thread: ThreadId,
    messages: &[Message],
) -> Result<(), Error> {
    if messages.is_empty() {
        return Ok(());
    }
    let ids: Vec<uuid::Uuid> = messages.iter().map(|m| m.id.0).collect();
    let runs: Vec<uuid::Uuid> = messages.iter().map(|m| m.run_id.0).collect();
    let roles: Vec<&str> = messages.iter().map(|m| m.role.name()).collect();
    let parts = messages
        .iter()
        .map(|m| to_json(&m.parts).map(|j| j.0))
        .collect::<Result<Vec<_>, _>>()?;
    let at: Vec<chrono::DateTime<chrono::Utc>> = messages.iter().map(|m| m.created_at.0).collect();
    sqlx::query(
        "INSERT INTO forge_messages (tenant_id, thread_id, id, run_id, role, parts, created_at) \
         SELECT $1, $2, m.id, m.run_id, m.role, m.parts, m.created_at \
         FROM UNNEST($3::uuid[], $4::uuid[], $5::text[], $6::jsonb[], $7::timestamptz[]) \
         WITH ORDINALITY AS m(id, run_id, role, parts, created_at, n) ORDER BY m.n",
    )
    .bind(scope.tenant_id().as_str())
    .bind(thread.0)
    .bind(ids)
    .bind(runs)
    .bind(roles)
    .bind(parts)
    .bind(at)
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

async fn insert_events(
    tx: &mut Tx,
    scope: &Scope,
    run: RunId,
    events: &[RunEvent],
) -> Result<(), Error> {
    if events.is_empty() {
        return Ok(());
    }
    let seqs = events
        .iter()
        .map(|e| i64_of(e.seq))
        .collect::<Result<Vec<_>, _>>()?;
    let ats: Vec<chrono::DateTime<chrono::Utc>> = events.iter().map(|e| e.at.0).collect();
    let bodies = events
        .iter()
        .map(|e| to_json(e).map(|j| j.0))
        .collect::<Result<Vec<_>, _>>()?;
    sqlx::query(
        "INSERT INTO forge_run_events (run_id, seq, tenant_id, at, body) \
         SELECT $1, e.seq, $2, e.at, e.body FROM UNNEST($3::bigint[], $4::timestamptz[], $5::jsonb[]) AS e(seq, at, body)",
    )
    .bind(run.0)
    .bind(scope.tenant_id().as_str())
    .bind(seqs)
    .bind(ats)
    .bind(bodies)
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

/// After `finished` ends, makes its thread's oldest queued run active and that run's job ready.
async fn promote_next(
    tx: &mut Tx,
    scope: &Scope,
    thread: ThreadId,
    finished: RunId,
    now: forge_core::time::Timestamp,
) -> Result<(), Error> {
    let next: Option<uuid::Uuid> = sqlx::query_scalar(
        "SELECT id FROM forge_runs WHERE thread_id = $1 AND tenant_id = $2 AND status = 'queued' AND id <> $3 \
         ORDER BY created_at, id LIMIT 1",
    )
    .bind(thread.0)
    .bind(scope.tenant_id().as_str())
    .bind(finished.0)
    .fetch_optional(&mut **tx)
    .await
    .map_err(db_error)?;
    sqlx::query("UPDATE forge_threads SET active_run = $1 WHERE id = $2 AND tenant_id = $3 AND active_run = $4")
        .bind(next)
        .bind(thread.0)
        .bind(scope.tenant_id().as_str())
        .bind(finished.0)
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
    if let Some(next) = next {
        sqlx::query("UPDATE forge_jobs SET state = 'ready', available_at = $1 WHERE run_id = $2 AND state = 'waiting'")
            .bind(now.0)
            .bind(next)
            .execute(&mut **tx)
            .await
            .map_err(db_error)?;
    }
    Ok(())
}

async fn set_lease(tx: &mut Tx, lease: &RunLease, fence: Option<u64>) -> Result<(), Error> {
    sqlx::query(
        "UPDATE forge_runs SET lease_holder = $1, lease_token = $2, lease_expires_at = $3, fence = COALESCE($4, fence) WHERE id = $5",
    )
    .bind(&lease.holder)
    .bind(i64_of(lease.token)?)
    .bind(lease.expires_at.0)
    .bind(fence.map(i64_of).transpose()?)
    .bind(lease.run_id.0)
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

#[async_trait]
impl ThreadStore for PostgresStore {
    async fn create_thread(&self, scope: &Scope, new: NewThread) -> Result<Thread, Error> {
        let thread = Thread {
            id: ThreadId::generate(self.ids.as_ref()),
            tenant_id: scope.tenant_id().clone(),
            created_by: scope.principal_id().clone(),
            title: new.title,
            state: SessionState {
                version: 0,
                values: new.state,
            },
            active_run: None,
            summary: None,
            created_at: self.clock.now(),
            archived_at: None,
        };
        let mut tx = self.tenant_tx(scope).await?;
        sqlx::query(
            "INSERT INTO forge_threads (id, tenant_id, created_by, title, state, state_version, created_at) VALUES ($1, $2, $3, $4, $5, 0, $6)",
        )
        .bind(thread.id.0)
        .bind(thread.tenant_id.as_str())
        .bind(thread.created_by.as_str())
        .bind(&thread.title)
        .bind(to_json(&thread.state.values)?)
        .bind(thread.created_at.0)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(thread)
    }

    async fn get_thread(&self, scope: &Scope, id: ThreadId) -> Result<Thread, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        let row = sqlx::query(ThreadWindow::ROW_SQL)
            .bind(id.0)
            .bind(scope.tenant_id().as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?
            .ok_or_else(|| Error::not_found("thread", id))?;
        tx.commit().await.map_err(db_error)?;
        rows::thread(&row)
    }

    async fn list_messages(&self, scope: &Scope, id: ThreadId) -> Result<Vec<Message>, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        thread_exists(&mut tx, scope, id).await?;
        let found = sqlx::query(
            "SELECT * FROM forge_messages WHERE thread_id = $1 AND tenant_id = $2 ORDER BY seq",
        )
        .bind(id.0)
        .bind(scope.tenant_id().as_str())
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        found.iter().map(rows::message).collect()
    }

    async fn page_messages(
        &self,
        scope: &Scope,
        id: ThreadId,
        window: &MessageWindow,
    ) -> Result<Vec<Message>, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        thread_exists(&mut tx, scope, id).await?;
        let mut bounds = [0i64, i64::MAX];
        for (bound, cursor) in bounds.iter_mut().zip([window.after, window.before]) {
            let Some(cursor) = cursor else { continue };
            let seq: Option<i64> = sqlx::query_scalar(MessageWindow::CURSOR_SQL)
                .bind(cursor.0)
                .bind(id.0)
                .bind(scope.tenant_id().as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?;
            *bound = seq.ok_or_else(|| MessageWindow::unknown_cursor(id, cursor))?;
        }
        let found = sqlx::query(window.page_sql())
            .bind(id.0)
            .bind(scope.tenant_id().as_str())
            .bind(bounds[0])
            .bind(bounds[1])
            .bind(i64::try_from(window.limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        found.iter().map(rows::message).collect()
    }

    async fn page_threads(
        &self,
        scope: &Scope,
        window: &ThreadWindow,
    ) -> Result<Vec<Thread>, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        let cursor = match window.before {
            Some(before) => {
                let at: Option<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
                    "SELECT created_at FROM forge_threads WHERE id = $1 AND tenant_id = $2",
                )
                .bind(before.0)
                .bind(scope.tenant_id().as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?;
                Some((
                    at.ok_or_else(|| Error::not_found("thread", before))?,
                    before.0,
                ))
            }
            None => None,
        };
        let found = sqlx::query(ThreadWindow::PAGE_SQL)
            .bind(scope.tenant_id().as_str())
            .bind(window.archived)
            .bind(cursor.map(|c| c.0))
            .bind(cursor.map(|c| c.1))
            .bind(i64::try_from(window.limit).unwrap_or(i64::MAX))
            .bind(window.created_by.as_ref().map(|p| p.as_str()))
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        found.iter().map(rows::thread).collect()
    }

    async fn update_thread(
        &self,
        scope: &Scope,
        id: ThreadId,
        change: &ThreadChange,
    ) -> Result<Thread, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        let row =
            sqlx::query("SELECT * FROM forge_threads WHERE id = $1 AND tenant_id = $2 FOR UPDATE")
                .bind(id.0)
                .bind(scope.tenant_id().as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?
                .ok_or_else(|| Error::not_found("thread", id))?;
        let changed = change.apply(rows::thread(&row)?, self.clock.now());
        sqlx::query(
            "UPDATE forge_threads SET title = $3, archived_at = $4 WHERE id = $1 AND tenant_id = $2",
        )
        .bind(id.0)
        .bind(scope.tenant_id().as_str())
        .bind(&changed.title)
        .bind(changed.archived_at.map(|t| t.0))
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(changed)
    }

    async fn put_session_state(
        &self,
        scope: &Scope,
        id: ThreadId,
        expected_version: u64,
        values: serde_json::Map<String, serde_json::Value>,
    ) -> Result<SessionState, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        let state = set_state(&mut tx, scope, id, expected_version, values).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(state)
    }
}

/// Replaces a thread's session state in `tx` if it is still at `expected_version` (the row
/// locked until the transaction ends).
/// Replaces the thread's summary in `tx` if `summary` builds on the current one.
async fn set_summary(
    tx: &mut Tx,
    scope: &Scope,
    run: &Run,
    summary: &ThreadSummary,
) -> Result<(), Error> {
    check_summary(run, summary)?;
    let current: Option<Option<serde_json::Value>> = sqlx::query_scalar(
        "SELECT summary FROM forge_threads WHERE id = $1 AND tenant_id = $2 FOR UPDATE",
    )
    .bind(run.thread_id.0)
    .bind(scope.tenant_id().as_str())
    .fetch_optional(&mut **tx)
    .await
    .map_err(db_error)?;
    let current: Option<ThreadSummary> = current
        .ok_or_else(|| Error::not_found("thread", run.thread_id))?
        .map(|v| serde_json::from_value(v).map_err(|e| rows::corrupt("summary", e)))
        .transpose()?;
    forge_core::thread::check_summary_version(run.thread_id, current.as_ref(), summary)?;
    sqlx::query("UPDATE forge_threads SET summary = $1 WHERE id = $2 AND tenant_id = $3")
        .bind(to_json(summary)?)
        .bind(run.thread_id.0)
        .bind(scope.tenant_id().as_str())
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
    Ok(())
}

async fn set_state(
    tx: &mut Transaction<'static, Postgres>,
    scope: &Scope,
    id: ThreadId,
    expected_version: u64,
    values: serde_json::Map<String, serde_json::Value>,
) -> Result<SessionState, Error> {
    let actual: Option<i64> = sqlx::query_scalar(
        "SELECT state_version FROM forge_threads WHERE id = $1 AND tenant_id = $2 FOR UPDATE",
    )
    .bind(id.0)
    .bind(scope.tenant_id().as_str())
    .fetch_optional(&mut **tx)
    .await
    .map_err(db_error)?;
    let actual = rows::u64_of(
        actual.ok_or_else(|| Error::not_found("thread", id))?,
        "state_version",
    )?;
    forge_core::thread::check_state_version(id, expected_version, actual)?;
    sqlx::query(
        "UPDATE forge_threads SET state = $1, state_version = $2 WHERE id = $3 AND tenant_id = $4",
    )
    .bind(to_json(&values)?)
    .bind(i64_of(actual + 1)?)
    .bind(id.0)
    .bind(scope.tenant_id().as_str())
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(SessionState {
        version: actual + 1,
        values,
    })
}

#[async_trait]
impl RunStore for PostgresStore {
    async fn create_run(&self, scope: &Scope, new: NewRun) -> Result<Run, Error> {
        if new.input.is_empty() {
            return Err(Error::invalid(
                "a run needs an input message with at least one part",
            ));
        }
        if new.max_attempts == 0 {
            return Err(Error::invalid("max_attempts must be at least 1"));
        }
        let now = self.clock.now();
        let mut run = Run::queued(RunId::generate(self.ids.as_ref()), scope, &new, now);
        let mut tx = self.tenant_tx(scope).await?;
        // Locking the thread row serializes admissions to one thread.
        let active: Option<Option<uuid::Uuid>> = sqlx::query_scalar(
            "SELECT active_run FROM forge_threads WHERE id = $1 AND tenant_id = $2 FOR UPDATE",
        )
        .bind(run.thread_id.0)
        .bind(scope.tenant_id().as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        let active = active
            .ok_or_else(|| Error::not_found("thread", run.thread_id))?
            .map(RunId);
        let admission = admit(run.thread_id, active, new.strategy)?;
        let mut queued_event = None;
        let job_state = match admission {
            Admission::Active => "ready",
            Admission::Queued { behind } => {
                run.last_seq = 1;
                queued_event = Some(RunEvent {
                    run_id: run.id,
                    seq: 1,
                    at: now,
                    kind: RunEventKind::RunQueued {
                        thread_id: run.thread_id,
                        behind,
                    },
                });
                "waiting"
            }
        };
        sqlx::query(
            "INSERT INTO forge_runs (id, tenant_id, principal_id, thread_id, agent_name, agent_version, status, version, last_seq, \
             checkpoint, fence, created_at, updated_at, input, role_ids) VALUES ($1, $2, $3, $4, $5, $6, 'queued', 0, $7, $8, 0, $9, $9, $10, $11)",
        )
        .bind(run.id.0)
        .bind(run.tenant_id.as_str())
        .bind(run.principal_id.as_str())
        .bind(run.thread_id.0)
        .bind(&run.agent.name)
        .bind(&run.agent.version)
        .bind(i64_of(run.last_seq)?)
        .bind(to_json(&run.checkpoint)?)
        .bind(now.0)
        .bind(to_json(&run.input)?)
        .bind(to_json(&run.role_ids)?)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        if let Some(e) = &queued_event {
            insert_events(&mut tx, scope, run.id, std::slice::from_ref(e)).await?;
        }
        match admission {
            Admission::Active => {
                sqlx::query(
                    "UPDATE forge_threads SET active_run = $1 WHERE id = $2 AND tenant_id = $3",
                )
                .bind(run.id.0)
                .bind(run.thread_id.0)
                .bind(scope.tenant_id().as_str())
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            }
            Admission::Queued { .. } if new.strategy == StartStrategy::Interrupt => {
                sqlx::query(
                    "UPDATE forge_runs SET cancel_requested = true WHERE thread_id = $1 AND tenant_id = $2 AND id <> $3 \
                     AND status NOT IN ('completed', 'failed', 'cancelled')",
                )
                .bind(run.thread_id.0)
                .bind(scope.tenant_id().as_str())
                .bind(run.id.0)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            }
            Admission::Queued { .. } => {}
        }
        sqlx::query(
            "INSERT INTO forge_jobs (id, tenant_id, run_id, state, available_at, attempts, max_attempts, token, traceparent) \
             VALUES ($1, $2, $3, $4, $5, 0, $6, 0, $7)",
        )
        .bind(forge_core::id::JobId::generate(self.ids.as_ref()).0)
        .bind(scope.tenant_id().as_str())
        .bind(run.id.0)
        .bind(job_state)
        .bind(now.0)
        .bind(i32::try_from(new.max_attempts).unwrap_or(i32::MAX))
        .bind(&new.traceparent)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(run)
    }

    async fn request_cancel(&self, scope: &Scope, id: RunId) -> Result<bool, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        let run = fetch_run(&mut tx, scope, id, true).await?;
        if run.status.is_terminal() || run.cancel_requested {
            return Ok(false);
        }
        sqlx::query(
            "UPDATE forge_runs SET cancel_requested = true WHERE id = $1 AND tenant_id = $2",
        )
        .bind(id.0)
        .bind(scope.tenant_id().as_str())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        // A waiting run holds no job: give it one, so a worker comes and cancels it.
        let job = forge_core::id::JobId::generate(self.ids.as_ref());
        let now = self.clock.now();
        crate::interactions::wake(&mut tx, scope.tenant_id().as_str(), id, job, now, false).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(true)
    }

    async fn get_run(&self, scope: &Scope, id: RunId) -> Result<Run, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        let run = fetch_run(&mut tx, scope, id, false).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(run)
    }

    async fn list_runs(&self, scope: &Scope, thread_id: ThreadId) -> Result<Vec<Run>, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        thread_exists(&mut tx, scope, thread_id).await?;
        let found = sqlx::query("SELECT * FROM forge_runs WHERE thread_id = $1 AND tenant_id = $2 ORDER BY created_at, id")
            .bind(thread_id.0)
            .bind(scope.tenant_id().as_str())
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        found.iter().map(rows::run).collect()
    }

    async fn query_runs(&self, scope: &Scope, query: &RunQuery) -> Result<Vec<Run>, Error> {
        // RunQuery::admits, in SQL.
        let mut tx = self.tenant_tx(scope).await?;
        // Below the cursor, checked to be the tenant's first.
        let cursor = match query.before {
            Some(before) => {
                let run = fetch_run(&mut tx, scope, before, false).await?;
                Some((run.created_at.0, run.id.0))
            }
            None => None,
        };
        let found = sqlx::query(
            "SELECT * FROM forge_runs WHERE tenant_id = $1 AND ($2::text IS NULL OR status = $2) \
             AND ($3::uuid IS NULL OR thread_id = $3) \
             AND ($5::timestamptz IS NULL OR (created_at, id) < ($5, $6::uuid)) \
             ORDER BY created_at DESC, id DESC LIMIT $4",
        )
        .bind(scope.tenant_id().as_str())
        .bind(query.status.as_deref())
        .bind(query.thread_id.map(|t| t.0))
        .bind(i64::try_from(query.limit).unwrap_or(i64::MAX))
        .bind(cursor.map(|c| c.0))
        .bind(cursor.map(|c| c.1))
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        found.iter().map(rows::run).collect()
    }

    async fn acquire_lease(
        &self,
        scope: &Scope,
        id: RunId,
        holder: &str,
        ttl: Duration,
    ) -> Result<RunLease, Error> {
        let now = self.clock.now();
        let mut tx = self.tenant_tx(scope).await?;
        let run = fetch_run(&mut tx, scope, id, true).await?;
        let lease = next_lease(&run, holder, ttl, now)?;
        set_lease(&mut tx, &lease, Some(lease.token)).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(lease)
    }

    async fn lease_run(
        &self,
        scope: &Scope,
        id: RunId,
        holder: &str,
        ttl: Duration,
    ) -> Result<(RunLease, Run), Error> {
        let now = self.clock.now();
        let mut tx = self.tenant_tx(scope).await?;
        let mut run = fetch_run(&mut tx, scope, id, true).await?;
        let lease = next_lease(&run, holder, ttl, now)?;
        set_lease(&mut tx, &lease, Some(lease.token)).await?;
        tx.commit().await.map_err(db_error)?;
        run.fence = lease.token;
        run.lease = Some(lease.clone());
        Ok((lease, run))
    }

    async fn renew_lease(
        &self,
        scope: &Scope,
        lease: &RunLease,
        ttl: Duration,
    ) -> Result<RunLease, Error> {
        let now = self.clock.now();
        let mut tx = self.tenant_tx(scope).await?;
        let run = fetch_run(&mut tx, scope, lease.run_id, true).await?;
        let renewed = renewed_lease(&run, lease, ttl, now)?;
        set_lease(&mut tx, &renewed, None).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(renewed)
    }

    async fn release_lease(&self, scope: &Scope, lease: &RunLease) -> Result<(), Error> {
        let mut tx = self.tenant_tx(scope).await?;
        fetch_run(&mut tx, scope, lease.run_id, true).await?;
        sqlx::query(
            "UPDATE forge_runs SET lease_holder = NULL, lease_token = NULL, lease_expires_at = NULL \
             WHERE id = $1 AND tenant_id = $2 AND lease_token = $3",
        )
        .bind(lease.run_id.0)
        .bind(scope.tenant_id().as_str())
        .bind(i64_of(lease.token)?)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)
    }

    async fn commit_step(&self, scope: &Scope, commit: StepCommit) -> Result<Committed, Error> {
        let now = self.clock.now();
        let mut tx = self.tenant_tx(scope).await?;
        let run = fetch_run(&mut tx, scope, commit.run_id, true).await?;
        let committed = check_commit(&run, &commit, now)?;
        if let Some(update) = commit.state.clone() {
            set_state(
                &mut tx,
                scope,
                run.thread_id,
                update.expected_version,
                update.values,
            )
            .await?;
        }
        if let Some(summary) = &commit.summary {
            set_summary(&mut tx, scope, &run, summary).await?;
        }
        insert_events(&mut tx, scope, run.id, &commit.events).await?;
        insert_messages(&mut tx, scope, run.thread_id, &commit.messages).await?;
        sqlx::query(
            "UPDATE forge_runs SET version = $1, last_seq = $2, status = $3, waiting_for = $4, checkpoint = $5, failure = $6, \
             updated_at = $7, lease_holder = CASE WHEN $10 THEN NULL ELSE lease_holder END, \
             lease_token = CASE WHEN $10 THEN NULL ELSE lease_token END, \
             lease_expires_at = CASE WHEN $10 THEN NULL ELSE lease_expires_at END \
             WHERE id = $8 AND tenant_id = $9",
        )
        .bind(i64_of(committed.version)?)
        .bind(i64_of(committed.last_seq)?)
        .bind(commit.status.name())
        .bind(commit.status.wait_reason().map(|r| r.name()))
        .bind(to_json(&commit.checkpoint)?)
        .bind(commit.failure.as_ref().map(to_json).transpose()?)
        .bind(now.0)
        .bind(run.id.0)
        .bind(scope.tenant_id().as_str())
        .bind(commit.releases_lease())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        for i in &commit.interactions {
            crate::interactions::insert(&mut tx, i).await?;
        }
        for record in &commit.audit {
            crate::interactions::audit(&mut tx, record).await?;
        }
        for call in &commit.settlements {
            if call.run_id != run.id || call.tenant_id != run.tenant_id {
                return Err(Error::invalid(format!(
                    "model call {} is not an open call of this run",
                    call.id
                )));
            }
            crate::usage::record_call(&mut tx, call).await?;
        }
        if commit.status.is_terminal() {
            // A run that ends leaves nothing for a person to decide.
            sqlx::query(
                "UPDATE forge_interactions SET status = 'expired', body = jsonb_set(body, '{status}', '\"expired\"') \
                 WHERE run_id = $1 AND tenant_id = $2 AND status = 'pending'",
            )
            .bind(run.id.0)
            .bind(scope.tenant_id().as_str())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
            promote_next(&mut tx, scope, run.thread_id, run.id, now).await?;
        }
        tx.commit().await.map_err(db_error)?;
        Ok(committed)
    }

    async fn read_events(
        &self,
        scope: &Scope,
        id: RunId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<RunEvent>, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        fetch_run(&mut tx, scope, id, false).await?;
        let found = sqlx::query(
            "SELECT body FROM forge_run_events WHERE run_id = $1 AND tenant_id = $2 AND seq > $3 ORDER BY seq LIMIT $4",
        )
        .bind(id.0)
        .bind(scope.tenant_id().as_str())
        .bind(i64::try_from(after_seq).unwrap_or(i64::MAX))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        found.iter().map(|r| rows::json(r, "body")).collect()
    }
}
