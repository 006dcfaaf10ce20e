//! Mapping between rows and domain types, and between sqlx errors and `forge_core::Error`.
//!
//! The domain rows (threads, messages, runs) are read through [`Cols`], which both drivers'
//! rows implement: the sqlx pool's and the writer lane's (rusqlite), one mapping for both.

use forge_core::Error;
use forge_core::agent::AgentRef;
use forge_core::id::{MessageId, RunId, ThreadId};
use forge_core::message::{Message, Role};
use forge_core::run::{Run, RunLease, RunStatus};
use forge_core::scope::{PrincipalId, TenantId};
use forge_core::thread::{SessionState, Thread};
use forge_core::time::Timestamp;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

/// Classifies a sqlx error: lock contention and pool exhaustion may succeed later.
pub(crate) fn db_error(e: sqlx::Error) -> Error {
    let retryable = match &e {
        sqlx::Error::Database(db) => matches!(db.code().as_deref(), Some("5" | "6" | "517")),
        sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) => true,
        _ => false,
    };
    Error::backend(retryable, e)
}

pub(crate) fn corrupt(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::backend(
        false,
        std::io::Error::other(format!("stored {what} is unreadable: {detail}")),
    )
}

pub(crate) fn get<'r, T: sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite>>(
    row: &'r SqliteRow,
    col: &str,
) -> Result<T, Error> {
    row.try_get(col).map_err(db_error)
}

/// A row of either driver, read by column name as the two SQLite storage classes the domain
/// rows use.
pub(crate) trait Cols {
    /// The text in `col`, `None` for NULL.
    fn text(&self, col: &str) -> Result<Option<String>, Error>;
    /// The integer in `col`, `None` for NULL.
    fn int(&self, col: &str) -> Result<Option<i64>, Error>;
}

impl Cols for SqliteRow {
    fn text(&self, col: &str) -> Result<Option<String>, Error> {
        get(self, col)
    }

    fn int(&self, col: &str) -> Result<Option<i64>, Error> {
        get(self, col)
    }
}

impl Cols for rusqlite::Row<'_> {
    fn text(&self, col: &str) -> Result<Option<String>, Error> {
        self.get(col).map_err(crate::lane::db)
    }

    fn int(&self, col: &str) -> Result<Option<i64>, Error> {
        self.get(col).map_err(crate::lane::db)
    }
}

/// The text in `col`, which must not be NULL.
pub(crate) fn text(row: &impl Cols, col: &str) -> Result<String, Error> {
    row.text(col)?.ok_or_else(|| corrupt(col, "NULL"))
}

/// The integer in `col`, which must not be NULL.
pub(crate) fn int(row: &impl Cols, col: &str) -> Result<i64, Error> {
    row.int(col)?.ok_or_else(|| corrupt(col, "NULL"))
}

pub(crate) fn uuid(row: &impl Cols, col: &str) -> Result<uuid::Uuid, Error> {
    let s = text(row, col)?;
    uuid::Uuid::parse_str(&s).map_err(|e| corrupt(col, e))
}

pub(crate) fn ts(row: &impl Cols, col: &str) -> Result<Timestamp, Error> {
    let ms = int(row, col)?;
    Timestamp::from_unix_millis(ms).ok_or_else(|| corrupt(col, ms))
}

pub(crate) fn json<T: serde::de::DeserializeOwned>(row: &impl Cols, col: &str) -> Result<T, Error> {
    let s = text(row, col)?;
    serde_json::from_str(&s).map_err(|e| corrupt(col, e))
}

pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> Result<String, Error> {
    serde_json::to_string(value).map_err(|e| Error::invalid(format!("cannot encode as JSON: {e}")))
}

pub(crate) fn u64_of(v: i64, col: &str) -> Result<u64, Error> {
    u64::try_from(v).map_err(|_| corrupt(col, v))
}

pub(crate) fn i64_of(v: u64) -> Result<i64, Error> {
    i64::try_from(v).map_err(|_| Error::invalid(format!("{v} is too large to store")))
}

pub(crate) fn thread(row: &impl Cols) -> Result<Thread, Error> {
    let active = row.text("active_run")?;
    Ok(Thread {
        id: ThreadId(uuid(row, "id")?),
        tenant_id: TenantId::new(text(row, "tenant_id")?)?,
        created_by: PrincipalId::new(text(row, "created_by")?)?,
        title: row.text("title")?,
        state: SessionState {
            version: u64_of(int(row, "state_version")?, "state_version")?,
            values: json(row, "state")?,
        },
        active_run: active
            .map(|s| {
                uuid::Uuid::parse_str(&s)
                    .map(RunId)
                    .map_err(|e| corrupt("active_run", e))
            })
            .transpose()?,
        summary: row
            .text("summary")?
            .map(|s| serde_json::from_str(&s).map_err(|e| corrupt("summary", e)))
            .transpose()?,
        created_at: ts(row, "created_at")?,
        archived_at: row
            .int("archived_at")?
            .map(|ms| Timestamp::from_unix_millis(ms).ok_or_else(|| corrupt("archived_at", ms)))
            .transpose()?,
    })
}

pub(crate) fn message(row: &impl Cols) -> Result<Message, Error> {
    Ok(Message {
        id: MessageId(uuid(row, "id")?),
        run_id: RunId(uuid(row, "run_id")?),
        role: Role::from_name(&text(row, "role")?)?,
        parts: json(row, "parts")?,
        created_at: ts(row, "created_at")?,
    })
}

pub(crate) fn run(row: &impl Cols) -> Result<Run, Error> {
    let id = RunId(uuid(row, "id")?);
    let status_name = text(row, "status")?;
    let waiting_for = row.text("waiting_for")?;
    let lease = match row.text("lease_holder")? {
        None => None,
        Some(holder) => {
            let token = int(row, "lease_token")?;
            let expires = int(row, "lease_expires_at")?;
            Some(RunLease {
                run_id: id,
                holder,
                token: u64_of(token, "lease_token")?,
                expires_at: Timestamp::from_unix_millis(expires)
                    .ok_or_else(|| corrupt("lease_expires_at", expires))?,
            })
        }
    };
    Ok(Run {
        id,
        tenant_id: TenantId::new(text(row, "tenant_id")?)?,
        principal_id: PrincipalId::new(text(row, "principal_id")?)?,
        role_ids: json(row, "role_ids")?,
        thread_id: ThreadId(uuid(row, "thread_id")?),
        agent: AgentRef {
            name: text(row, "agent_name")?,
            version: text(row, "agent_version")?,
        },
        input: json(row, "input")?,
        status: RunStatus::from_stored(&status_name, waiting_for.as_deref())?,
        version: u64_of(int(row, "version")?, "version")?,
        last_seq: u64_of(int(row, "last_seq")?, "last_seq")?,
        checkpoint: json(row, "checkpoint")?,
        failure: row
            .text("failure")?
            .map(|f| serde_json::from_str(&f).map_err(|e| corrupt("failure", e)))
            .transpose()?,
        lease,
        cancel_requested: int(row, "cancel_requested")? != 0,
        fence: u64_of(int(row, "fence")?, "fence")?,
        created_at: ts(row, "created_at")?,
        updated_at: ts(row, "updated_at")?,
    })
}

/// `value` as an SQLite string literal (single quotes doubled; SQLite has no backslash escapes).
pub(crate) fn literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_literal_doubles_its_quotes_and_nothing_else() {
        assert_eq!(super::literal("acme"), "'acme'");
        assert_eq!(super::literal("o'brien\\x"), "'o''brien\\x'");
    }
}
