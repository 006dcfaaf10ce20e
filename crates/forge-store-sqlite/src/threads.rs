//! Threads, their messages and session state on SQLite. Reads run on a reader connection, each
//! in one read transaction where it takes more than one statement; writes on the writer lane.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::id::ThreadId;
use forge_core::message::Message;
use forge_core::ports::store::{MessageWindow, NewThread, ThreadStore};
use forge_core::scope::Scope;
use forge_core::thread::{SessionState, Thread, ThreadChange, ThreadWindow};
use forge_sql::statements::{MESSAGE_CURSOR, THREAD_PAGE, THREAD_ROW, message_page};
use rusqlite::{Connection, params};

use crate::SqliteStore;
use crate::db;
use crate::rows::{self, to_json};

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

/// Thread `id` of `tenant`.
pub(crate) fn thread(conn: &Connection, tenant: &str, id: ThreadId) -> Result<Thread, Error> {
    db::first(
        conn,
        THREAD_ROW,
        params![id.to_string(), tenant],
        rows::thread,
    )?
    .ok_or_else(|| Error::not_found("thread", id))
}

/// Refuses a thread that is not `tenant`'s.
pub(crate) fn exists(conn: &Connection, tenant: &str, id: ThreadId) -> Result<(), Error> {
    let found: Option<i64> = db::value(
        conn,
        "SELECT 1 FROM forge_threads WHERE id = ?1 AND tenant_id = ?2",
        params![id.to_string(), tenant],
    )?;
    found
        .map(|_| ())
        .ok_or_else(|| Error::not_found("thread", id))
}

/// A page of thread `id`'s messages (the thread known to be `tenant`'s).
fn page(
    conn: &Connection,
    tenant: &str,
    id: ThreadId,
    window: &MessageWindow,
) -> Result<Vec<Message>, Error> {
    let thread = id.to_string();
    let mut bounds = [0i64, i64::MAX];
    for (bound, cursor) in bounds.iter_mut().zip([window.after, window.before]) {
        let Some(cursor) = cursor else { continue };
        let seq: Option<i64> = db::value(
            conn,
            MESSAGE_CURSOR,
            params![cursor.to_string(), thread, tenant],
        )?;
        *bound = seq.ok_or_else(|| MessageWindow::unknown_cursor(id, cursor))?;
    }
    db::all(
        conn,
        message_page(window.from_end),
        params![
            thread,
            tenant,
            bounds[0],
            bounds[1],
            db::saturating(window.limit)
        ],
        rows::message,
    )
}

/// Thread `id` of `tenant` and the first page of its history, at most `limit` messages: from
/// its start, or after its summary when it has one.
pub(crate) fn thread_and_first_page(
    conn: &Connection,
    tenant: &str,
    id: ThreadId,
    limit: usize,
) -> Result<(Thread, Vec<Message>), Error> {
    let thread = thread(conn, tenant, id)?;
    let window = MessageWindow::after(thread.summary.as_ref().map(|s| s.through), limit);
    let page = page(conn, tenant, id, &window)?;
    Ok((thread, page))
}

/// A new thread's columns, encoded before they go to the lane.
pub(crate) struct ThreadValues {
    id: String,
    tenant: String,
    created_by: String,
    title: Option<String>,
    state: String,
    created_at: i64,
}

impl ThreadValues {
    /// `thread`'s columns.
    pub(crate) fn of(thread: &Thread) -> Result<Self, Error> {
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
    pub(crate) fn insert(&self, conn: &Connection) -> Result<usize, Error> {
        db::execute(
            conn,
            "INSERT INTO forge_threads (id, tenant_id, created_by, title, state, state_version, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6)",
            params![
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

#[async_trait]
impl ThreadStore for SqliteStore {
    async fn create_thread(&self, scope: &Scope, new: NewThread) -> Result<Thread, Error> {
        let id = new.id_or_new(self.ids.as_ref());
        let thread = new.thread(id, scope, self.clock.now());
        let values = ThreadValues::of(&thread)?;
        self.write(move |conn| values.insert(conn)).await?;
        Ok(thread)
    }

    async fn get_thread(&self, scope: &Scope, id: ThreadId) -> Result<Thread, Error> {
        let tenant = scope.tenant_id().to_string();
        self.read(move |conn| thread(conn, &tenant, id)).await
    }

    async fn list_messages(&self, scope: &Scope, id: ThreadId) -> Result<Vec<Message>, Error> {
        let tenant = scope.tenant_id().to_string();
        self.read(move |conn| {
            db::snapshot(conn, |conn| {
                exists(conn, &tenant, id)?;
                db::all(
                    conn,
                    "SELECT * FROM forge_messages WHERE thread_id = ?1 AND tenant_id = ?2 ORDER BY seq",
                    params![id.to_string(), tenant],
                    rows::message,
                )
            })
        })
        .await
    }

    async fn thread_with_history(
        &self,
        scope: &Scope,
        id: ThreadId,
        limit: usize,
    ) -> Result<(Thread, Vec<Message>), Error> {
        let tenant = scope.tenant_id().to_string();
        self.read(move |conn| {
            db::snapshot(conn, |conn| thread_and_first_page(conn, &tenant, id, limit))
        })
        .await
    }

    async fn page_messages(
        &self,
        scope: &Scope,
        id: ThreadId,
        window: &MessageWindow,
    ) -> Result<Vec<Message>, Error> {
        let (tenant, window) = (scope.tenant_id().to_string(), *window);
        self.read(move |conn| {
            db::snapshot(conn, |conn| {
                exists(conn, &tenant, id)?;
                page(conn, &tenant, id, &window)
            })
        })
        .await
    }

    async fn page_threads(
        &self,
        scope: &Scope,
        window: &ThreadWindow,
    ) -> Result<Vec<Thread>, Error> {
        let (tenant, window) = (scope.tenant_id().to_string(), window.clone());
        self.read(move |conn| {
            db::snapshot(conn, |conn| {
                let cursor = window
                    .before
                    .map(|before| thread(conn, &tenant, before))
                    .transpose()?
                    .map(|t| (t.created_at.unix_millis(), t.id.to_string()));
                let (at, id) = cursor.unzip();
                db::all(
                    conn,
                    THREAD_PAGE,
                    params![
                        tenant,
                        window.archived,
                        at,
                        id,
                        db::saturating(window.limit),
                        window.created_by.as_ref().map(|p| p.as_str())
                    ],
                    rows::thread,
                )
            })
        })
        .await
    }

    async fn update_thread(
        &self,
        scope: &Scope,
        id: ThreadId,
        change: &ThreadChange,
    ) -> Result<Thread, Error> {
        let (tenant, change, now) = (
            scope.tenant_id().to_string(),
            change.clone(),
            self.clock.now(),
        );
        self.write(move |conn| {
            let changed = change.apply(thread(conn, &tenant, id)?, now);
            db::execute(
                conn,
                "UPDATE forge_threads SET title = ?3, archived_at = ?4 WHERE id = ?1 AND tenant_id = ?2",
                params![
                    id.to_string(),
                    tenant,
                    changed.title,
                    changed.archived_at.map(|t| t.unix_millis())
                ],
            )?;
            Ok(changed)
        })
        .await
    }

    async fn put_session_state(
        &self,
        scope: &Scope,
        id: ThreadId,
        expected_version: u64,
        values: serde_json::Map<String, serde_json::Value>,
    ) -> Result<SessionState, Error> {
        let tenant = scope.tenant_id().clone();
        self.write(move |conn| {
            crate::commit::set_state(conn, &tenant, id, expected_version, values)
        })
        .await
    }
}
