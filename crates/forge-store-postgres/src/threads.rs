//! Threads and their history on PostgreSQL: creation, reads (the ones a run begins with in one
//! round trip each), pages of messages, session state and summaries. Writes that belong to a
//! step (`set_state`, `set_summary`) run inside the step's transaction in `runs`.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::id::ThreadId;
use forge_core::message::Message;
use forge_core::ports::store::{MessageWindow, NewThread, ThreadStore, check_summary};
use forge_core::run::Run;
use forge_core::scope::Scope;
use forge_core::thread::{SessionState, Thread, ThreadChange, ThreadSummary, ThreadWindow};
use sqlx::postgres::PgRow;

use crate::rows::{self, db_error, i64_of, to_json};
use crate::{PostgresStore, Tx};

/// Whether a thread is the tenant's: binds the thread and the tenant.
const THREAD_EXISTS_SQL: &str = "SELECT 1 FROM forge_threads WHERE id = $1 AND tenant_id = $2";

pub(crate) async fn thread_exists(tx: &mut Tx, scope: &Scope, id: ThreadId) -> Result<(), Error> {
    let found: Option<i32> = sqlx::query_scalar(THREAD_EXISTS_SQL)
        .bind(id.0)
        .bind(scope.tenant_id().as_str())
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_error)?;
    found
        .map(|_| ())
        .ok_or_else(|| Error::not_found("thread", id))
}

/// A thread of the tenant through `forge_thread_row` (migration 23): `$1` the id, `$2` the
/// tenant; no row when it is not the tenant's.
const THREAD_ROW_SQL: &str = "SELECT * FROM forge_thread_row($1, $2)";

/// A page of a thread's history through `forge_message_page` (migration 23): `$1` the thread,
/// `$2` the tenant, strictly between positions `$3` and `$4`, at most `$5`, the last of them when
/// `$6`; oldest first. An empty page of a thread that is not the tenant's raises `P0002`.
const MESSAGE_PAGE_SQL: &str = "SELECT * FROM forge_message_page($1, $2, $3, $4, $5, $6)";

/// What a run begins with, in one statement: the tenant's thread through `forge_thread_row`
/// joined to the first page of its history from the start through `forge_message_page` (at most
/// `$3` messages; none when the thread has a summary, whose page begins after it and is read
/// apart). The page's columns are named `message_…` ([`PAGE_COLUMNS`]); a thread without
/// messages gives one row with them null, and a thread that is not the tenant's no row. The
/// thread is read as a subquery of one row so that the join is costed as the page alone: costed
/// as the functions' default thousand rows each, the join and its sort passed the threshold of
/// JIT compilation, which then took 4.5 ms of every call.
pub(crate) const THREAD_WITH_PAGE_SQL: &str = "SELECT t.*, m.id AS message_id, m.run_id AS message_run_id, \
    m.role AS message_role, m.parts AS message_parts, m.created_at AS message_created_at \
    FROM (SELECT * FROM forge_thread_row($1, $2) LIMIT 1) AS t \
    LEFT JOIN LATERAL forge_message_page($1, $2, 0::bigint, 9223372036854775807::bigint, \
    CASE WHEN t.summary IS NULL THEN $3::bigint ELSE 0::bigint END, false) AS m ON true \
    ORDER BY m.seq";

/// `THREAD_WITH_PAGE_SQL`'s message columns, as `rows::message_as` reads them.
const PAGE_COLUMNS: [&str; 5] = [
    "message_id",
    "message_run_id",
    "message_role",
    "message_parts",
    "message_created_at",
];

/// The thread's columns as `forge_thread_start` (migration 27) names them, beside a run's in
/// `LEASE_WITH_HISTORY_SQL` and `CLAIM_LEASED_SQL`, in `rows::thread_as`'s order.
const START_THREAD_COLUMNS: [&str; 10] = [
    "t_id",
    "t_tenant_id",
    "t_created_by",
    "t_title",
    "t_state_version",
    "t_state",
    "t_active_run",
    "t_summary",
    "t_created_at",
    "t_archived_at",
];

/// `forge_thread_start`'s page columns, arrays in the history's order, as
/// `rows::messages_of_arrays` reads them.
const START_PAGE_COLUMNS: [&str; 5] = ["m_ids", "m_run_ids", "m_roles", "m_parts", "m_created_at"];

/// A new thread through `forge_insert_thread` (migration 26), in one round trip: `$1` its id, of
/// the tenant `$2`, created by `$3`, titled `$4`, with the session state `$5`, at `$6`.
const INSERT_THREAD_SQL: &str = "SELECT forge_insert_thread($1, $2, $3, $4, $5, $6)";

impl PostgresStore {
    /// What a run begins with, from a row that carries `forge_thread_start`'s columns: its
    /// thread and the first page of its history (at most `limit` messages), or `None` when the
    /// row has none (the function read nothing). The thread was read in one snapshot with its
    /// page; the page after a summary is read apart.
    pub(crate) async fn thread_start(
        &self,
        scope: &Scope,
        row: &PgRow,
        limit: usize,
    ) -> Result<Option<(Thread, Vec<Message>)>, Error> {
        if rows::get::<Option<uuid::Uuid>>(row, START_THREAD_COLUMNS[0])?.is_none() {
            return Ok(None);
        }
        let thread = rows::thread_as(row, &START_THREAD_COLUMNS)?;
        let page = self
            .first_page(scope, &thread, limit, || {
                rows::messages_of_arrays(row, &START_PAGE_COLUMNS)
            })
            .await?;
        Ok(Some((thread, page)))
    }

    /// The first page of `thread`'s history, at most `limit` messages: the one its statement
    /// read (`read`), or, when it has a summary (those statements read none then), the page after
    /// the summary, read apart.
    async fn first_page(
        &self,
        scope: &Scope,
        thread: &Thread,
        limit: usize,
        read: impl FnOnce() -> Result<Vec<Message>, Error>,
    ) -> Result<Vec<Message>, Error> {
        match &thread.summary {
            Some(summary) => {
                let after = MessageWindow::after(Some(summary.through), limit);
                self.page_messages(scope, thread.id, &after).await
            }
            None => read(),
        }
    }
}

#[async_trait]
impl ThreadStore for PostgresStore {
    async fn create_thread(&self, scope: &Scope, new: NewThread) -> Result<Thread, Error> {
        let id = new.id_or_new(self.ids.as_ref());
        let thread = new.thread(id, scope, self.clock.now());
        let state = to_json(&thread.state.values)?;
        self.tenant_call(scope, || {
            sqlx::query(INSERT_THREAD_SQL)
                .bind(thread.id.0)
                .bind(thread.tenant_id.as_str())
                .bind(thread.created_by.as_str())
                .bind(&thread.title)
                .bind(&state)
                .bind(thread.created_at.0)
        })
        .await
        .map_err(db_error)?;
        Ok(thread)
    }

    async fn get_thread(&self, scope: &Scope, id: ThreadId) -> Result<Thread, Error> {
        let found = self
            .tenant_call(scope, || {
                sqlx::query(THREAD_ROW_SQL)
                    .bind(id.0)
                    .bind(scope.tenant_id().as_str())
            })
            .await
            .map_err(db_error)?;
        let row = found
            .first()
            .ok_or_else(|| Error::not_found("thread", id))?;
        rows::thread(row)
    }

    async fn thread_with_history(
        &self,
        scope: &Scope,
        id: ThreadId,
        limit: usize,
    ) -> Result<(Thread, Vec<Message>), Error> {
        // The thread and the first page from the start in one round trip (and one snapshot). A
        // thread with a summary reads its page after the summary apart.
        let found = self
            .tenant_call(scope, || {
                sqlx::query(THREAD_WITH_PAGE_SQL)
                    .bind(id.0)
                    .bind(scope.tenant_id().as_str())
                    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            })
            .await
            .map_err(db_error)?;
        let thread = rows::thread(
            found
                .first()
                .ok_or_else(|| Error::not_found("thread", id))?,
        )?;
        let page = self
            .first_page(scope, &thread, limit, || {
                let mut page = Vec::with_capacity(found.len());
                for row in &found {
                    if rows::get::<Option<uuid::Uuid>>(row, PAGE_COLUMNS[0])?.is_some() {
                        page.push(rows::message_as(row, &PAGE_COLUMNS)?);
                    }
                }
                Ok(page)
            })
            .await?;
        Ok((thread, page))
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
        let limit = i64::try_from(window.limit).unwrap_or(i64::MAX);
        if window.after.is_none() && window.before.is_none() {
            // A page from an end, and whether the thread is the tenant's, in one round trip.
            let found = self
                .tenant_call(scope, || {
                    sqlx::query(MESSAGE_PAGE_SQL)
                        .bind(id.0)
                        .bind(scope.tenant_id().as_str())
                        .bind(0i64)
                        .bind(i64::MAX)
                        .bind(limit)
                        .bind(window.from_end)
                })
                .await
                .map_err(|e| match &e {
                    sqlx::Error::Database(db) if db.code().as_deref() == Some("P0002") => {
                        Error::not_found("thread", id)
                    }
                    _ => db_error(e),
                })?;
            return found.iter().map(rows::message).collect();
        }
        let mut tx = self.tenant_tx(scope).await?;
        let mut bounds = [0i64, i64::MAX];
        for (bound, cursor) in bounds.iter_mut().zip([window.after, window.before]) {
            let Some(cursor) = cursor else { continue };
            let seq: Option<i64> = sqlx::query_scalar(forge_sql::statements::MESSAGE_CURSOR)
                .bind(cursor.0)
                .bind(id.0)
                .bind(scope.tenant_id().as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?;
            *bound = seq.ok_or_else(|| MessageWindow::unknown_cursor(id, cursor))?;
        }
        let found = sqlx::query(forge_sql::statements::message_page(window.from_end))
            .bind(id.0)
            .bind(scope.tenant_id().as_str())
            .bind(bounds[0])
            .bind(bounds[1])
            .bind(limit)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
        // A message found (or a cursor, looked up in this thread) shows the thread is the
        // tenant's; only an empty page from the start asks.
        if found.is_empty() && window.after.is_none() && window.before.is_none() {
            thread_exists(&mut tx, scope, id).await?;
        }
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
        let found = sqlx::query(forge_sql::statements::THREAD_PAGE)
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

/// Replaces the thread's summary in `tx` if `summary` builds on the current one.
pub(crate) async fn set_summary(
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

/// Replaces a thread's session state in `tx` if it is still at `expected_version` (the row
/// locked until the transaction ends).
pub(crate) async fn set_state(
    tx: &mut Tx,
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
