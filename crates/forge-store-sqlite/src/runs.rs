//! Threads, runs, leases, the event log and `commit_step` on SQLite.

use std::time::Duration;

use async_trait::async_trait;
use forge_core::Error;
use forge_core::event::RunEvent;
use forge_core::id::{RunId, ThreadId};
use forge_core::message::Message;
use forge_core::ports::store::{
    Admission, Committed, InFlight, LeasedRun, MessageWindow, NewRun, NewThread, RunQuery,
    RunStore, StartStrategy, StepCommit, ThreadStore, admit, next_lease, renewed_lease,
};
use forge_core::run::{Run, RunLease};
use forge_core::scope::Scope;
use forge_core::thread::{SessionState, Thread, ThreadChange, ThreadWindow};

use crate::SqliteStore;
use crate::rows::{self, db_error, i64_of, to_json};

/// The held write gate of a store (see [`SqliteStore::write_tx`]).
pub(crate) type WriteGate = tokio::sync::OwnedMutexGuard<()>;

pub(crate) const RUN_COLUMNS: &str = "id, tenant_id, principal_id, thread_id, agent_name, agent_version, status, waiting_for, \
    version, last_seq, checkpoint, failure, lease_holder, lease_token, lease_expires_at, fence, cancel_requested, created_at, updated_at, input, role_ids";

/// The run's lease for `holder` until `expires_at`, taken on the writer lane if it is free at
/// `now` (no one else holds it unexpired), in one statement returning the run: the lease and the
/// run under it, or `None` when it is not free (or the run is not the tenant's).
pub(crate) fn take_free(
    conn: &rusqlite::Connection,
    id: RunId,
    tenant: &forge_core::scope::TenantId,
    holder: &str,
    expires_at: forge_core::time::Timestamp,
    now: forge_core::time::Timestamp,
) -> Result<Option<(RunLease, Run)>, Error> {
    static TAKE_FREE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "UPDATE forge_runs SET lease_holder = ?1, lease_token = fence + 1, lease_expires_at = ?2, \
             fence = fence + 1 WHERE id = ?3 AND tenant_id = ?4 \
             AND (lease_holder IS NULL OR lease_holder = ?1 OR lease_expires_at <= ?5) \
             RETURNING {RUN_COLUMNS}"
        )
    });
    let values = rusqlite::params![
        holder,
        expires_at.unix_millis(),
        id.to_string(),
        tenant.as_str(),
        now.unix_millis()
    ];
    Ok(
        crate::commit::one_run(conn, &TAKE_FREE, values)?.map(|mut run| {
            let lease = RunLease {
                run_id: id,
                holder: holder.to_owned(),
                token: run.fence,
                expires_at,
            };
            run.lease = Some(lease.clone());
            (lease, run)
        }),
    )
}

/// [`take_free`], and when `history` is set and the lease was taken, what the run begins with read
/// in the same operation of the writer lane (so after the lease, with nothing committed between):
/// its thread and the first page of its history, at most `history` messages (none after a
/// summary: [`SqliteStore::page_after_summary`] reads that page). A read that fails leaves the
/// history to the caller.
pub(crate) fn take_free_with_history(
    conn: &rusqlite::Connection,
    id: RunId,
    tenant: &forge_core::scope::TenantId,
    holder: &str,
    expires_at: forge_core::time::Timestamp,
    now: forge_core::time::Timestamp,
    history: Option<usize>,
) -> Result<Option<LeasedRun>, Error> {
    let Some((lease, run)) = take_free(conn, id, tenant, holder, expires_at, now)? else {
        return Ok(None);
    };
    let history = history
        .and_then(|limit| thread_and_first_page(conn, tenant.as_str(), run.thread_id, limit).ok());
    Ok(Some(LeasedRun {
        lease,
        run,
        history,
    }))
}

impl SqliteStore {
    /// A `BEGIN IMMEDIATE` transaction, and this store's write gate, held until the caller's
    /// scope ends (bind it: `let (_gate, mut tx) = …`; the transaction is dropped first).
    pub(crate) async fn write_tx(&self) -> Result<(WriteGate, crate::Tx), Error> {
        let gate = self.write_gate.clone().lock_owned().await;
        let tx = self.pool.begin("BEGIN IMMEDIATE").await.map_err(db_error)?;
        Ok((gate, tx))
    }

    /// [`SqliteStore::write_tx`] with the run `id` of `scope`'s tenant read in the same trip to
    /// the connection as the `BEGIN IMMEDIATE` (values inlined as literals).
    pub(crate) async fn write_tx_with_run(
        &self,
        scope: &Scope,
        id: RunId,
    ) -> Result<(WriteGate, crate::Tx, Run), Error> {
        let read = format!(
            "SELECT {RUN_COLUMNS} FROM forge_runs WHERE id = '{id}' AND tenant_id = {}",
            crate::rows::literal(scope.tenant_id().as_str())
        );
        let (gate, tx, found) = self.write_tx_reading(&read).await?;
        let row = found.first().ok_or_else(|| Error::not_found("run", id))?;
        Ok((gate, tx, rows::run(row)?))
    }

    /// [`SqliteStore::write_tx`] with `read` (its values inlined as literals) sent in the same
    /// trip to the connection as the `BEGIN IMMEDIATE`: the transaction and the read's rows.
    pub(crate) async fn write_tx_reading(
        &self,
        read: &str,
    ) -> Result<(WriteGate, crate::Tx, Vec<sqlx::sqlite::SqliteRow>), Error> {
        let gate = self.write_gate.clone().lock_owned().await;
        let (tx, found) = self
            .pool
            .begin_reading(sqlx::AssertSqlSafe(format!("BEGIN IMMEDIATE; {read}")))
            .await
            .map_err(db_error)?;
        Ok((gate, tx, found))
    }

    async fn fetch_thread<'e, E: sqlx::SqliteExecutor<'e>>(
        &self,
        ex: E,
        scope: &Scope,
        id: ThreadId,
    ) -> Result<Thread, Error> {
        let row = sqlx::query(forge_sql::statements::THREAD_ROW)
            .bind(id.to_string())
            .bind(scope.tenant_id().as_str())
            .fetch_optional(ex)
            .await
            .map_err(db_error)?
            .ok_or_else(|| Error::not_found("thread", id))?;
        rows::thread(&row)
    }

    /// `statement` and a page of thread `id`'s history from an end (`window` without cursors),
    /// in one trip outside a transaction: the rows of each, told apart by the result that ends
    /// the first. `statement` may bind `$1` (the thread) and `$2` (the tenant).
    async fn page_beside(
        &self,
        scope: &Scope,
        id: ThreadId,
        statement: &str,
        window: &MessageWindow,
    ) -> Result<(Vec<sqlx::sqlite::SqliteRow>, Vec<sqlx::sqlite::SqliteRow>), Error> {
        use futures_util::TryStreamExt;
        let sql = format!(
            "{statement}; {}",
            forge_sql::statements::message_page(window.from_end)
        );
        let mut conn = self.conn().await?;
        let query = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id.to_string())
            .bind(scope.tenant_id().as_str())
            .bind(0i64)
            .bind(i64::MAX)
            .bind(i64::try_from(window.limit).unwrap_or(i64::MAX));
        let output: Vec<_> = sqlx::Executor::fetch_many(&mut *conn, query)
            .try_collect()
            .await
            .map_err(db_error)?;
        conn.release();
        let (mut first, mut page, mut ended) = (Vec::new(), Vec::new(), false);
        for item in output {
            match item {
                sqlx::Either::Left(_) => ended = true,
                sqlx::Either::Right(row) if !ended => first.push(row),
                sqlx::Either::Right(row) => page.push(row),
            }
        }
        Ok((first, page))
    }

    pub(crate) async fn fetch_run<'e, E: sqlx::SqliteExecutor<'e>>(
        &self,
        ex: E,
        scope: &Scope,
        id: RunId,
    ) -> Result<Run, Error> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM forge_runs WHERE id = $1 AND tenant_id = $2");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id.to_string())
            .bind(scope.tenant_id().as_str())
            .fetch_optional(ex)
            .await
            .map_err(db_error)?
            .ok_or_else(|| Error::not_found("run", id))?;
        rows::run(&row)
    }

    async fn thread_exists(
        &self,
        conn: &mut sqlx::SqliteConnection,
        scope: &Scope,
        id: ThreadId,
    ) -> Result<(), Error> {
        let found: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM forge_threads WHERE id = $1 AND tenant_id = $2")
                .bind(id.to_string())
                .bind(scope.tenant_id().as_str())
                .fetch_optional(conn)
                .await
                .map_err(db_error)?;
        found
            .map(|_| ())
            .ok_or_else(|| Error::not_found("thread", id))
    }

    /// Takes the run's lease in one transaction and returns the run as it now stands.
    async fn lease(
        &self,
        scope: &Scope,
        id: RunId,
        holder: &str,
        ttl: Duration,
    ) -> Result<(RunLease, Run), Error> {
        let now = self.clock.now();
        let expires_at = now.plus(ttl);
        // A lease that is free taken in one statement on the writer lane, returning the new
        // row; one that is not, judged below on the row as it is.
        let (who, tenant) = (holder.to_owned(), scope.tenant_id().clone());
        let taken = self
            .lane
            .run(move |conn| take_free(conn, id, &tenant, &who, expires_at, now))
            .await?;
        match taken {
            Some(taken) => Ok(taken),
            None => self.lease_held(scope, id, holder, ttl).await,
        }
    }

    /// The run's lease when it was not free a moment ago: judged on the run as it now is, under
    /// the write gate.
    async fn lease_held(
        &self,
        scope: &Scope,
        id: RunId,
        holder: &str,
        ttl: Duration,
    ) -> Result<(RunLease, Run), Error> {
        let now = self.clock.now();
        let (_gate, tx, mut run) = self.write_tx_with_run(scope, id).await?;
        // One host holds every process of this store: the lease of a holder that is no longer
        // running is over now, not when it runs out.
        if let Some(held) = run.lease.as_mut()
            && held.expires_at > now
            && held.holder != holder
            && crate::holder::is_dead_here(&held.holder)
        {
            held.expires_at = now;
        }
        let lease = next_lease(&run, holder, ttl, now)?;
        // The lease and the commit in one trip.
        tx.commit_with(async |c| set_lease(c, &lease, Some(lease.token), true).await)
            .await?;
        run.fence = lease.token;
        run.lease = Some(lease.clone());
        Ok((lease, run))
    }
}

impl SqliteStore {
    /// The first page of `thread`'s history after its summary, at most `limit` messages, read
    /// from the pool (the writer lane's reads take none after a summary); `None` without one.
    pub(crate) async fn page_after_summary(
        &self,
        scope: &Scope,
        thread: &Thread,
        limit: usize,
    ) -> Result<Option<Vec<Message>>, Error> {
        let Some(summary) = &thread.summary else {
            return Ok(None);
        };
        let after = MessageWindow::after(Some(summary.through), limit);
        self.page_messages(scope, thread.id, &after).await.map(Some)
    }

    /// `leased`'s history completed with the page after its thread's summary, when it has one;
    /// when that read fails, no history (the engine reads it itself, and hears why).
    pub(crate) async fn with_page_after_summary(
        &self,
        scope: &Scope,
        mut leased: LeasedRun,
        limit: usize,
    ) -> LeasedRun {
        if let Some((thread, page)) = &mut leased.history {
            match self.page_after_summary(scope, thread, limit).await {
                Ok(Some(after)) => *page = after,
                Ok(None) => {}
                Err(_) => leased.history = None,
            }
        }
        leased
    }
}

/// Writes `lease` on its run (and the fence, when taken anew), then commits when `then_commit`
/// (the transaction's last statement, sent in the same trip: [`forge_sql::Tx::commit_with`]).
async fn set_lease(
    conn: &mut sqlx::SqliteConnection,
    lease: &RunLease,
    fence: Option<u64>,
    then_commit: bool,
) -> Result<(), Error> {
    let sql = if then_commit {
        "UPDATE forge_runs SET lease_holder = ?, lease_token = ?, lease_expires_at = ?, fence = COALESCE(?, fence) WHERE id = ?; COMMIT"
    } else {
        "UPDATE forge_runs SET lease_holder = ?, lease_token = ?, lease_expires_at = ?, fence = COALESCE(?, fence) WHERE id = ?"
    };
    sqlx::query(sql)
        .bind(&lease.holder)
        .bind(i64_of(lease.token)?)
        .bind(lease.expires_at.unix_millis())
        .bind(fence.map(i64_of).transpose()?)
        .bind(lease.run_id.to_string())
        .execute(conn)
        .await
        .map_err(db_error)?;
    Ok(())
}

#[async_trait]
impl ThreadStore for SqliteStore {
    async fn create_thread(&self, scope: &Scope, new: NewThread) -> Result<Thread, Error> {
        let thread = new.thread(
            ThreadId::generate(self.ids.as_ref()),
            scope,
            self.clock.now(),
        );
        let values = ThreadValues::of(&thread)?;
        self.lane.run(move |conn| values.insert(conn)).await?;
        Ok(thread)
    }

    async fn get_thread(&self, scope: &Scope, id: ThreadId) -> Result<Thread, Error> {
        self.fetch_thread(&mut *self.conn().await?, scope, id).await
    }

    async fn list_messages(&self, scope: &Scope, id: ThreadId) -> Result<Vec<Message>, Error> {
        // One read transaction: the thread check and the rows see the same snapshot.
        let mut tx = self.pool.begin("BEGIN").await.map_err(db_error)?;
        self.thread_exists(&mut tx, scope, id).await?;
        let found = sqlx::query(
            "SELECT * FROM forge_messages WHERE thread_id = $1 AND tenant_id = $2 ORDER BY seq",
        )
        .bind(id.to_string())
        .bind(scope.tenant_id().as_str())
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        found.iter().map(rows::message).collect()
    }

    async fn thread_with_history(
        &self,
        scope: &Scope,
        id: ThreadId,
        limit: usize,
    ) -> Result<(Thread, Vec<Message>), Error> {
        // The thread and the first page from the start in one operation of the writer lane. A
        // thread with a summary reads its page after the summary from the pool.
        let tenant = scope.tenant_id().as_str().to_owned();
        let (thread, mut page) = self
            .lane
            .run(move |conn| thread_and_first_page(conn, &tenant, id, limit))
            .await?;
        if let Some(after) = self.page_after_summary(scope, &thread, limit).await? {
            page = after;
        }
        Ok((thread, page))
    }

    async fn page_messages(
        &self,
        scope: &Scope,
        id: ThreadId,
        window: &MessageWindow,
    ) -> Result<Vec<Message>, Error> {
        let limit = i64::try_from(window.limit).unwrap_or(i64::MAX);
        if window.after.is_none() && window.before.is_none() {
            // A page from an end, and whether the thread is the tenant's, in one trip.
            let (exists, page) = self
                .page_beside(
                    scope,
                    id,
                    "SELECT 1 FROM forge_threads WHERE id = $1 AND tenant_id = $2",
                    window,
                )
                .await?;
            if exists.is_empty() {
                return Err(Error::not_found("thread", id));
            }
            return page.iter().map(rows::message).collect();
        }
        let mut tx = self.pool.begin("BEGIN").await.map_err(db_error)?;
        self.thread_exists(&mut tx, scope, id).await?;
        let mut bounds = [0i64, i64::MAX];
        for (bound, cursor) in bounds.iter_mut().zip([window.after, window.before]) {
            let Some(cursor) = cursor else { continue };
            let seq: Option<i64> = sqlx::query_scalar(forge_sql::statements::MESSAGE_CURSOR)
                .bind(cursor.to_string())
                .bind(id.to_string())
                .bind(scope.tenant_id().as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?;
            *bound = seq.ok_or_else(|| MessageWindow::unknown_cursor(id, cursor))?;
        }
        let found = sqlx::query(forge_sql::statements::message_page(window.from_end))
            .bind(id.to_string())
            .bind(scope.tenant_id().as_str())
            .bind(bounds[0])
            .bind(bounds[1])
            .bind(limit)
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
        let mut tx = self.pool.begin("BEGIN").await.map_err(db_error)?;
        let cursor = match window.before {
            Some(before) => {
                let t = self.fetch_thread(&mut *tx, scope, before).await?;
                Some((t.created_at.unix_millis(), t.id.to_string()))
            }
            None => None,
        };
        let found = sqlx::query(forge_sql::statements::THREAD_PAGE)
            .bind(scope.tenant_id().as_str())
            .bind(window.archived)
            .bind(cursor.as_ref().map(|c| c.0))
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
        let (_gate, mut tx) = self.write_tx().await?;
        let thread = self.fetch_thread(&mut *tx, scope, id).await?;
        let changed = change.apply(thread, self.clock.now());
        sqlx::query(
            "UPDATE forge_threads SET title = $3, archived_at = $4 WHERE id = $1 AND tenant_id = $2",
        )
        .bind(id.to_string())
        .bind(scope.tenant_id().as_str())
        .bind(&changed.title)
        .bind(changed.archived_at.map(|t| t.unix_millis()))
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
        let tenant = scope.tenant_id().clone();
        self.lane
            .run(move |conn| crate::commit::set_state(conn, &tenant, id, expected_version, values))
            .await
    }
}

/// A new thread's columns, encoded before they go to the lane.
struct ThreadValues {
    id: String,
    tenant: String,
    created_by: String,
    title: Option<String>,
    state: String,
    created_at: i64,
}

impl ThreadValues {
    fn of(thread: &Thread) -> Result<Self, Error> {
        Ok(Self {
            id: thread.id.to_string(),
            tenant: thread.tenant_id.as_str().to_owned(),
            created_by: thread.created_by.as_str().to_owned(),
            title: thread.title.clone(),
            state: to_json(&thread.state.values)?,
            created_at: thread.created_at.unix_millis(),
        })
    }

    /// Inserts the thread on the lane's connection; one of the same id (of any tenant) fails it.
    fn insert(&self, conn: &rusqlite::Connection) -> Result<usize, Error> {
        crate::commit::execute(
            conn,
            "INSERT INTO forge_threads (id, tenant_id, created_by, title, state, state_version, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6)",
            rusqlite::params![
                self.id,
                self.tenant,
                self.created_by,
                self.title,
                self.state,
                self.created_at
            ],
        )
    }
}

/// Creates `run` with its job (`job`) on the lane's connection: the active run of its thread, or
/// queued behind it (then with its `run.queued` event, and the runs ahead of it asked to cancel
/// when it interrupts them); the thread `created` first, when the run asked for one.
fn insert_run(
    conn: &rusqlite::Connection,
    mut run: Run,
    new: &NewRun,
    created: Option<&ThreadValues>,
    job: forge_core::id::JobId,
    now: forge_core::time::Timestamp,
) -> Result<Run, Error> {
    use crate::commit::execute;
    use crate::lane::db;
    use rusqlite::{OptionalExtension, params};
    if let Some(thread) = created {
        thread.insert(conn)?;
    }
    let (thread, tenant) = (run.thread_id.to_string(), run.tenant_id.as_str().to_owned());
    let active: Option<Option<String>> = conn
        .prepare_cached("SELECT active_run FROM forge_threads WHERE id = ?1 AND tenant_id = ?2")
        .map_err(db)?
        .query_row(params![thread, tenant], |r| r.get(0))
        .optional()
        .map_err(db)?;
    let active = active
        .ok_or_else(|| Error::not_found("thread", run.thread_id))?
        .map(|s| {
            s.parse::<RunId>()
                .map_err(|e| Error::invalid(format!("stored active run: {e}")))
        })
        .transpose()?;
    let admission = admit(run.thread_id, active, new.strategy)?;
    let queued_event = admission.begin(&mut run, now);
    let job_state = match admission {
        Admission::Active => "ready",
        Admission::Queued { .. } => "waiting",
    };
    let id = run.id.to_string();
    execute(
        conn,
        "INSERT INTO forge_runs (id, tenant_id, principal_id, thread_id, agent_name, agent_version, status, version, last_seq, \
         checkpoint, fence, created_at, updated_at, input, role_ids) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'queued', 0, ?7, ?8, 0, ?9, ?9, ?10, ?11)",
        params![
            id,
            tenant,
            run.principal_id.as_str(),
            thread,
            run.agent.name,
            run.agent.version,
            i64_of(run.last_seq)?,
            to_json(&run.checkpoint)?,
            now.unix_millis(),
            to_json(&run.input)?,
            to_json(&run.role_ids)?
        ],
    )?;
    if let Some(e) = &queued_event {
        execute(
            conn,
            crate::commit::INSERT_EVENT,
            params![id, i64_of(e.seq)?, tenant, e.at.unix_millis(), to_json(e)?],
        )?;
    }
    match admission {
        Admission::Active => {
            execute(
                conn,
                "UPDATE forge_threads SET active_run = ?1 WHERE id = ?2 AND tenant_id = ?3",
                params![id, thread, tenant],
            )?;
        }
        Admission::Queued { .. } if new.strategy == StartStrategy::Interrupt => {
            execute(
                conn,
                "UPDATE forge_runs SET cancel_requested = 1 WHERE thread_id = ?1 AND tenant_id = ?2 \
                 AND id <> ?3 AND status NOT IN ('completed', 'failed', 'cancelled')",
                params![thread, tenant, id],
            )?;
        }
        Admission::Queued { .. } => {}
    }
    execute(
        conn,
        "INSERT INTO forge_jobs (id, tenant_id, run_id, state, available_at, attempts, max_attempts, token, traceparent) \
         VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, 0, ?7)",
        params![
            job.to_string(),
            tenant,
            id,
            job_state,
            now.unix_millis(),
            i64::from(new.max_attempts),
            new.traceparent
        ],
    )?;
    Ok(run)
}

/// Thread `id` of `tenant` and the first page of its history (none when it has a summary: that
/// page starts after the summary), on the lane's connection.
fn thread_and_first_page(
    conn: &rusqlite::Connection,
    tenant: &str,
    id: ThreadId,
    limit: usize,
) -> Result<(Thread, Vec<Message>), Error> {
    use crate::lane::db;
    let thread = {
        let mut statement = conn
            .prepare_cached(forge_sql::statements::THREAD_ROW)
            .map_err(db)?;
        let mut found = statement
            .query(rusqlite::params![id.to_string(), tenant])
            .map_err(db)?;
        match found.next().map_err(db)? {
            Some(row) => rows::thread(row)?,
            None => return Err(Error::not_found("thread", id)),
        }
    };
    let mut page = Vec::new();
    if thread.summary.is_none() {
        let window = MessageWindow::after(None, limit);
        let mut statement = conn
            .prepare_cached(forge_sql::statements::message_page(window.from_end))
            .map_err(db)?;
        let mut found = statement
            .query(rusqlite::params![
                id.to_string(),
                tenant,
                0i64,
                i64::MAX,
                i64::try_from(limit).unwrap_or(i64::MAX)
            ])
            .map_err(db)?;
        while let Some(row) = found.next().map_err(db)? {
            page.push(rows::message(row)?);
        }
    }
    Ok((thread, page))
}

/// A thread's summary (`$1` thread, `$2` tenant).
pub(crate) const SUMMARY_SQL: &str =
    "SELECT summary FROM forge_threads WHERE id = $1 AND tenant_id = $2";

/// Replaces a thread's summary (`$1` summary, `$2` thread, `$3` tenant).
pub(crate) const SET_SUMMARY_SQL: &str =
    "UPDATE forge_threads SET summary = $1 WHERE id = $2 AND tenant_id = $3";

/// A thread's session state version (`$1` thread, `$2` tenant).
pub(crate) const STATE_VERSION_SQL: &str =
    "SELECT state_version FROM forge_threads WHERE id = $1 AND tenant_id = $2";

/// Replaces a thread's session state (`$1` values, `$2` version, `$3` thread, `$4` tenant).
pub(crate) const SET_STATE_SQL: &str =
    "UPDATE forge_threads SET state = $1, state_version = $2 WHERE id = $3 AND tenant_id = $4";

#[async_trait]
impl RunStore for SqliteStore {
    async fn create_run(&self, scope: &Scope, new: NewRun) -> Result<Run, Error> {
        forge_core::ports::rules::check_new_run(&new)?;
        let now = self.clock.now();
        let run = new.queued(RunId::generate(self.ids.as_ref()), scope, now);
        let job = forge_core::id::JobId::generate(self.ids.as_ref());
        let created = new
            .thread_to_create(scope, now)
            .map(|t| ThreadValues::of(&t))
            .transpose()?;
        self.lane
            .run(move |conn| insert_run(conn, run, &new, created.as_ref(), job, now))
            .await
    }

    async fn cancels_requested(&self, scope: &Scope, ids: &[RunId]) -> Result<Vec<RunId>, Error> {
        let ids = serde_json::to_string(&ids.iter().map(|id| id.to_string()).collect::<Vec<_>>())
            .map_err(|e| Error::invalid(e.to_string()))?;
        let asked: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM forge_runs WHERE tenant_id = $1 AND cancel_requested = 1 \
             AND status NOT IN ('completed', 'failed', 'cancelled') \
             AND id IN (SELECT value FROM json_each($2))",
        )
        .bind(scope.tenant_id().as_str())
        .bind(ids)
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(db_error)?;
        asked
            .iter()
            .map(|id| {
                id.parse()
                    .map_err(|_| Error::invalid("a stored run id is not a UUID"))
            })
            .collect()
    }

    async fn request_cancel(&self, scope: &Scope, id: RunId) -> Result<bool, Error> {
        let (_gate, mut tx) = self.write_tx().await?;
        let run = self.fetch_run(&mut *tx, scope, id).await?;
        if run.status.is_terminal() || run.cancel_requested {
            return Ok(false);
        }
        sqlx::query("UPDATE forge_runs SET cancel_requested = 1 WHERE id = $1 AND tenant_id = $2")
            .bind(id.to_string())
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
        self.fetch_run(&mut *self.conn().await?, scope, id).await
    }

    async fn list_runs(&self, scope: &Scope, thread_id: ThreadId) -> Result<Vec<Run>, Error> {
        let mut tx = self.pool.begin("BEGIN").await.map_err(db_error)?;
        self.thread_exists(&mut tx, scope, thread_id).await?;
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM forge_runs WHERE thread_id = $1 AND tenant_id = $2 ORDER BY created_at, id"
        );
        let found = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(thread_id.to_string())
            .bind(scope.tenant_id().as_str())
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        found.iter().map(rows::run).collect()
    }

    async fn query_runs(&self, scope: &Scope, query: &RunQuery) -> Result<Vec<Run>, Error> {
        // RunQuery::admits, in SQL, below the cursor (checked to be the tenant's first).
        let mut tx = self.pool.begin("BEGIN").await.map_err(db_error)?;
        let cursor = match query.before {
            Some(before) => {
                let run = self.fetch_run(&mut *tx, scope, before).await?;
                Some((run.created_at.unix_millis(), run.id.to_string()))
            }
            None => None,
        };
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM forge_runs WHERE tenant_id = $1 AND ($2 IS NULL OR status = $2) \
             AND ($3 IS NULL OR thread_id = $3) AND ($5 IS NULL OR (created_at, id) < ($5, $6)) \
             ORDER BY created_at DESC, id DESC LIMIT $4"
        );
        let found = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(scope.tenant_id().as_str())
            .bind(query.status.as_deref())
            .bind(query.thread_id.map(|t| t.to_string()))
            .bind(i64::try_from(query.limit).unwrap_or(i64::MAX))
            .bind(cursor.as_ref().map(|c| c.0))
            .bind(cursor.map(|c| c.1))
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        found.iter().map(rows::run).collect()
    }

    async fn runs_in_flight(&self, scope: &Scope, at_most: usize) -> Result<InFlight, Error> {
        // Over `forge_runs_in_flight`, which holds only the runs queued or running.
        let (tenant, principal): (i64, i64) = sqlx::query_as(
            "SELECT count(*), coalesce(sum(principal_id = $3), 0) FROM (SELECT principal_id \
             FROM forge_runs WHERE tenant_id = $1 AND status IN ('queued', 'running') LIMIT $2)",
        )
        .bind(scope.tenant_id().as_str())
        .bind(i64::try_from(at_most).unwrap_or(i64::MAX))
        .bind(scope.principal_id().as_str())
        .fetch_one(&mut *self.conn().await?)
        .await
        .map_err(db_error)?;
        Ok(InFlight {
            tenant: usize::try_from(tenant).unwrap_or(0),
            principal: usize::try_from(principal).unwrap_or(0),
        })
    }

    async fn acquire_lease(
        &self,
        scope: &Scope,
        id: RunId,
        holder: &str,
        ttl: Duration,
    ) -> Result<RunLease, Error> {
        self.lease(scope, id, holder, ttl)
            .await
            .map(|(lease, _)| lease)
    }

    async fn lease_run(
        &self,
        scope: &Scope,
        id: RunId,
        holder: &str,
        ttl: Duration,
    ) -> Result<(RunLease, Run), Error> {
        self.lease(scope, id, holder, ttl).await
    }

    async fn lease_run_with_history(
        &self,
        scope: &Scope,
        id: RunId,
        holder: &str,
        ttl: Duration,
        limit: usize,
    ) -> Result<LeasedRun, Error> {
        let now = self.clock.now();
        let expires_at = now.plus(ttl);
        let (who, tenant) = (holder.to_owned(), scope.tenant_id().clone());
        let taken = self
            .lane
            .run(move |conn| {
                take_free_with_history(conn, id, &tenant, &who, expires_at, now, Some(limit))
            })
            .await?;
        match taken {
            Some(leased) => Ok(self.with_page_after_summary(scope, leased, limit).await),
            None => {
                let (lease, run) = self.lease_held(scope, id, holder, ttl).await?;
                Ok(LeasedRun {
                    lease,
                    run,
                    history: None,
                })
            }
        }
    }

    async fn renew_lease(
        &self,
        scope: &Scope,
        lease: &RunLease,
        ttl: Duration,
    ) -> Result<RunLease, Error> {
        let (_gate, mut tx) = self.write_tx().await?;
        let run = self.fetch_run(&mut *tx, scope, lease.run_id).await?;
        // Read once the writer's turn came: a renewal that waited is not written already
        // (partly) expired.
        let now = self.clock.now();
        let renewed = renewed_lease(&run, lease, ttl, now)?;
        set_lease(&mut tx, &renewed, None, false).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(renewed)
    }

    async fn release_lease(&self, scope: &Scope, lease: &RunLease) -> Result<(), Error> {
        let (_gate, mut tx) = self.write_tx().await?;
        self.fetch_run(&mut *tx, scope, lease.run_id).await?;
        sqlx::query(
            "UPDATE forge_runs SET lease_holder = NULL, lease_token = NULL, lease_expires_at = NULL \
             WHERE id = $1 AND tenant_id = $2 AND lease_token = $3",
        )
        .bind(lease.run_id.to_string())
        .bind(scope.tenant_id().as_str())
        .bind(i64_of(lease.token)?)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(())
    }

    async fn commit_step(&self, scope: &Scope, commit: StepCommit) -> Result<Committed, Error> {
        self.commit(scope, commit).await
    }

    async fn read_events(
        &self,
        scope: &Scope,
        id: RunId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<RunEvent>, Error> {
        let mut tx = self.pool.begin("BEGIN").await.map_err(db_error)?;
        self.fetch_run(&mut *tx, scope, id).await?;
        let found = sqlx::query("SELECT body FROM forge_run_events WHERE run_id = $1 AND tenant_id = $2 AND seq > $3 ORDER BY seq LIMIT $4")
            .bind(id.to_string())
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
