//! Mapping between rows and domain types, and between sqlx errors and `forge_core::Error`.

use chrono::{DateTime, Utc};
use forge_core::Error;
use forge_core::agent::AgentRef;
use forge_core::id::{MessageId, RunId, ThreadId};
use forge_core::message::{Message, Role};
use forge_core::run::{Run, RunLease, RunStatus};
use forge_core::scope::{PrincipalId, TenantId};
use forge_core::thread::{SessionState, Thread};
use forge_core::time::Timestamp;
use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::types::Json;

/// Classifies a sqlx error: serialization failures, deadlocks, lost connections and pool
/// exhaustion may succeed later; a row-level-security refusal is a permanent error.
pub(crate) fn db_error(e: sqlx::Error) -> Error {
    let retryable = match &e {
        sqlx::Error::Database(db) => matches!(
            db.code().as_deref(),
            // Serialization, deadlock, shutdown, too many connections, a lock not had within
            // `LOCK_TIMEOUT`, a session ended for idling inside its transaction.
            Some("40001" | "40P01" | "57P01" | "53300" | "55P03" | "25P03")
        ),
        sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed => true,
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

pub(crate) fn get<'r, T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>>(
    row: &'r PgRow,
    col: &str,
) -> Result<T, Error> {
    row.try_get(col).map_err(db_error)
}

pub(crate) fn ts(row: &PgRow, col: &str) -> Result<Timestamp, Error> {
    Ok(Timestamp(get::<DateTime<Utc>>(row, col)?))
}

pub(crate) fn json<T: serde::de::DeserializeOwned>(row: &PgRow, col: &str) -> Result<T, Error> {
    let v: serde_json::Value = get(row, col)?;
    serde_json::from_value(v).map_err(|e| corrupt(col, e))
}

pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> Result<Encoded, Error> {
    serde_json::value::to_raw_value(value)
        .map(Json)
        .map_err(unencodable)
}

/// `value` as JSON text, for a `json` column fed from a `text` parameter (the event log,
/// migration 30), which PostgreSQL checks but does not convert.
pub(crate) fn to_json_text<T: serde::Serialize>(value: &T) -> Result<String, Error> {
    serde_json::to_string(value).map_err(unencodable)
}

fn unencodable(e: serde_json::Error) -> Error {
    Error::invalid(format!("cannot encode as JSON: {e}"))
}

/// A value encoded as JSON text once, bound as `jsonb` as it stands (no `Value` tree built and
/// serialized again; a statement sent twice sends the same text).
pub(crate) type Encoded = Json<Box<serde_json::value::RawValue>>;

pub(crate) fn u64_of(v: i64, col: &str) -> Result<u64, Error> {
    u64::try_from(v).map_err(|_| corrupt(col, v))
}

pub(crate) fn i64_of(v: u64) -> Result<i64, Error> {
    i64::try_from(v).map_err(|_| Error::invalid(format!("{v} is too large to store")))
}

pub(crate) fn thread(row: &PgRow) -> Result<Thread, Error> {
    thread_as(
        row,
        &[
            "id",
            "tenant_id",
            "created_by",
            "title",
            "state_version",
            "state",
            "active_run",
            "summary",
            "created_at",
            "archived_at",
        ],
    )
}

/// A thread from its columns named as `names`: id, tenant, creator, title, state version, state,
/// active run, summary, creation and archival.
pub(crate) fn thread_as(row: &PgRow, names: &[&str; 10]) -> Result<Thread, Error> {
    let [
        id,
        tenant,
        creator,
        title,
        version,
        state,
        active,
        summary,
        created,
        archived,
    ] = *names;
    Ok(Thread {
        id: ThreadId(get(row, id)?),
        tenant_id: TenantId::new(get::<String>(row, tenant)?)?,
        created_by: PrincipalId::new(get::<String>(row, creator)?)?,
        title: get(row, title)?,
        state: SessionState {
            version: u64_of(get(row, version)?, version)?,
            values: json(row, state)?,
        },
        active_run: get::<Option<uuid::Uuid>>(row, active)?.map(RunId),
        summary: get::<Option<serde_json::Value>>(row, summary)?
            .map(|v| serde_json::from_value(v).map_err(|e| corrupt(summary, e)))
            .transpose()?,
        created_at: ts(row, created)?,
        archived_at: get::<Option<DateTime<Utc>>>(row, archived)?.map(Timestamp),
    })
}

/// Messages from one row's parallel arrays named as `names` (ids, runs, roles, parts, creation
/// times), in their order; null arrays are no messages.
pub(crate) fn messages_of_arrays(row: &PgRow, names: &[&str; 5]) -> Result<Vec<Message>, Error> {
    let [ids, runs, roles, parts, created] = *names;
    let ids: Vec<uuid::Uuid> = get::<Option<_>>(row, ids)?.unwrap_or_default();
    let runs: Vec<uuid::Uuid> = get::<Option<_>>(row, runs)?.unwrap_or_default();
    let roles: Vec<String> = get::<Option<_>>(row, roles)?.unwrap_or_default();
    let bodies: Vec<serde_json::Value> = get::<Option<_>>(row, parts)?.unwrap_or_default();
    let times: Vec<DateTime<Utc>> = get::<Option<_>>(row, created)?.unwrap_or_default();
    if [runs.len(), roles.len(), bodies.len(), times.len()] != [ids.len(); 4] {
        return Err(corrupt("page", "its columns differ in length"));
    }
    ids.into_iter()
        .zip(runs)
        .zip(roles)
        .zip(bodies)
        .zip(times)
        .map(|((((id, run), role), body), at)| {
            Ok(Message {
                id: MessageId(id),
                run_id: RunId(run),
                role: Role::from_name(&role)?,
                parts: serde_json::from_value(body).map_err(|e| corrupt(parts, e))?,
                created_at: Timestamp(at),
            })
        })
        .collect()
}

pub(crate) fn message(row: &PgRow) -> Result<Message, Error> {
    message_as(row, &["id", "run_id", "role", "parts", "created_at"])
}

/// A message from its columns named as `names`: id, run, role, parts and creation time.
pub(crate) fn message_as(row: &PgRow, names: &[&str; 5]) -> Result<Message, Error> {
    let [id, run, role, parts, created] = *names;
    Ok(Message {
        id: MessageId(get(row, id)?),
        run_id: RunId(get(row, run)?),
        role: Role::from_name(&get::<String>(row, role)?)?,
        parts: json(row, parts)?,
        created_at: ts(row, created)?,
    })
}

pub(crate) fn run(row: &PgRow) -> Result<Run, Error> {
    let id = RunId(get(row, "id")?);
    let status_name: String = get(row, "status")?;
    let waiting_for: Option<String> = get(row, "waiting_for")?;
    let lease = match get::<Option<String>>(row, "lease_holder")? {
        None => None,
        Some(holder) => Some(RunLease {
            run_id: id,
            holder,
            token: u64_of(get(row, "lease_token")?, "lease_token")?,
            expires_at: ts(row, "lease_expires_at")?,
        }),
    };
    let failure: Option<serde_json::Value> = get(row, "failure")?;
    Ok(Run {
        id,
        tenant_id: TenantId::new(get::<String>(row, "tenant_id")?)?,
        principal_id: PrincipalId::new(get::<String>(row, "principal_id")?)?,
        role_ids: json(row, "role_ids")?,
        thread_id: ThreadId(get(row, "thread_id")?),
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
            .map(|f| serde_json::from_value(f).map_err(|e| corrupt("failure", e)))
            .transpose()?,
        lease,
        cancel_requested: get::<bool>(row, "cancel_requested")?,
        fence: u64_of(get(row, "fence")?, "fence")?,
        created_at: ts(row, "created_at")?,
        updated_at: ts(row, "updated_at")?,
    })
}
