//! Mapping between rows and domain types, and between sqlx errors and `forge_core::Error`.

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

pub(crate) fn uuid(row: &SqliteRow, col: &str) -> Result<uuid::Uuid, Error> {
    let s: String = get(row, col)?;
    uuid::Uuid::parse_str(&s).map_err(|e| corrupt(col, e))
}

pub(crate) fn ts(row: &SqliteRow, col: &str) -> Result<Timestamp, Error> {
    let ms: i64 = get(row, col)?;
    Timestamp::from_unix_millis(ms).ok_or_else(|| corrupt(col, ms))
}

pub(crate) fn json<T: serde::de::DeserializeOwned>(row: &SqliteRow, col: &str) -> Result<T, Error> {
    let s: String = get(row, col)?;
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

pub(crate) fn thread(row: &SqliteRow) -> Result<Thread, Error> {
    let active: Option<String> = get(row, "active_run")?;
    Ok(Thread {
        id: ThreadId(uuid(row, "id")?),
        tenant_id: TenantId::new(get::<String>(row, "tenant_id")?)?,
        created_by: PrincipalId::new(get::<String>(row, "created_by")?)?,
        title: get(row, "title")?,
        state: SessionState {
            version: u64_of(get(row, "state_version")?, "state_version")?,
            values: json(row, "state")?,
        },
        active_run: active
            .map(|s| {
                uuid::Uuid::parse_str(&s)
                    .map(RunId)
                    .map_err(|e| corrupt("active_run", e))
            })
            .transpose()?,
        summary: get::<Option<String>>(row, "summary")?
            .map(|s| serde_json::from_str(&s).map_err(|e| corrupt("summary", e)))
            .transpose()?,
        created_at: ts(row, "created_at")?,
        archived_at: get::<Option<i64>>(row, "archived_at")?
            .map(|ms| Timestamp::from_unix_millis(ms).ok_or_else(|| corrupt("archived_at", ms)))
            .transpose()?,
    })
}

pub(crate) fn message(row: &SqliteRow) -> Result<Message, Error> {
    Ok(Message {
        id: MessageId(uuid(row, "id")?),
        run_id: RunId(uuid(row, "run_id")?),
        role: Role::from_name(&get::<String>(row, "role")?)?,
        parts: json(row, "parts")?,
        created_at: ts(row, "created_at")?,
    })
}

pub(crate) fn run(row: &SqliteRow) -> Result<Run, Error> {
    let id = RunId(uuid(row, "id")?);
    let status_name: String = get(row, "status")?;
    let waiting_for: Option<String> = get(row, "waiting_for")?;
    let holder: Option<String> = get(row, "lease_holder")?;
    let lease = match holder {
        None => None,
        Some(holder) => {
            let token: i64 = get(row, "lease_token")?;
            let expires: i64 = get(row, "lease_expires_at")?;
            Some(RunLease {
                run_id: id,
                holder,
                token: u64_of(token, "lease_token")?,
                expires_at: Timestamp::from_unix_millis(expires)
                    .ok_or_else(|| corrupt("lease_expires_at", expires))?,
            })
        }
    };
    let failure: Option<String> = get(row, "failure")?;
    Ok(Run {
        id,
        tenant_id: TenantId::new(get::<String>(row, "tenant_id")?)?,
        principal_id: PrincipalId::new(get::<String>(row, "principal_id")?)?,
        role_ids: json(row, "role_ids")?,
        thread_id: ThreadId(uuid(row, "thread_id")?),
        agent: AgentRef {
            name: get(row, "agent_name")?,
            version: get(row, "agent_version")?,
        },
        input: json(row, "input")?,
        status: RunStatus::from_stored(&status_name, waiting_for.as_deref())?,
        version: u64_of(get(row, "version")?, "version")?,
        last_seq: u64_of(get(row, "last_seq")?, "last_seq")?,
        checkpoint: json(row, "checkpoint")?,
        failure: failure
            .map(|f| serde_json::from_str(&f).map_err(|e| corrupt("failure", e)))
            .transpose()?,
        lease,
        cancel_requested: get::<i64>(row, "cancel_requested")? != 0,
        fence: u64_of(get(row, "fence")?, "fence")?,
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
