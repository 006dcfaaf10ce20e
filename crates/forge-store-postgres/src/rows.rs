//! Mapping between rows and domain types, and between sqlx errors and `forge_core::Error`.

use chrono::{DateTime, Utc};
use forge_core::Error;
use forge_core::id::{MessageId, RunId};
use forge_core::message::{Message, Role};
use forge_core::run::Run;
use forge_core::thread::Thread;
use forge_core::time::Timestamp;
use forge_sql::rows::Columns;
use sqlx::Row;
use sqlx::postgres::{PgArguments, PgRow};
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

pub(crate) use forge_sql::rows::{corrupt, signed as i64_of, unsigned as u64_of};

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

/// A PostgreSQL row as the shared mappers ([`forge_sql::rows`]) read it, in its native types.
pub(crate) struct Pg<'r>(pub(crate) &'r PgRow);

impl Columns for Pg<'_> {
    fn text(&self, col: &str) -> Result<Option<String>, Error> {
        get(self.0, col)
    }

    fn int(&self, col: &str) -> Result<Option<i64>, Error> {
        use sqlx::{Column as _, TypeInfo as _};
        // Decoded as the column's own width: sqlx refuses an `integer` read as `i64`.
        match self.0.try_column(col).map_err(db_error)?.type_info().name() {
            "INT4" => Ok(get::<Option<i32>>(self.0, col)?.map(i64::from)),
            "INT2" => Ok(get::<Option<i16>>(self.0, col)?.map(i64::from)),
            _ => get(self.0, col),
        }
    }

    fn uuid(&self, col: &str) -> Result<Option<uuid::Uuid>, Error> {
        get(self.0, col)
    }

    fn time(&self, col: &str) -> Result<Option<Timestamp>, Error> {
        Ok(get::<Option<DateTime<Utc>>>(self.0, col)?.map(Timestamp))
    }

    fn json<T: serde::de::DeserializeOwned>(&self, col: &str) -> Result<Option<T>, Error> {
        get::<Option<serde_json::Value>>(self.0, col)?
            .map(|v| serde_json::from_value(v).map_err(|e| corrupt(col, e)))
            .transpose()
    }

    fn flag(&self, col: &str) -> Result<Option<bool>, Error> {
        get(self.0, col)
    }
}

pub(crate) fn thread(row: &PgRow) -> Result<Thread, Error> {
    forge_sql::rows::thread(&Pg(row))
}

/// A thread from its columns named as `names` ([`forge_sql::rows::thread_as`]).
pub(crate) fn thread_as(row: &PgRow, names: &[&str; 10]) -> Result<Thread, Error> {
    forge_sql::rows::thread_as(&Pg(row), names)
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
    forge_sql::rows::message(&Pg(row))
}

/// A message from its columns named as `names` ([`forge_sql::rows::message_as`]).
pub(crate) fn message_as(row: &PgRow, names: &[&str; 5]) -> Result<Message, Error> {
    forge_sql::rows::message_as(&Pg(row), names)
}

pub(crate) fn run(row: &PgRow) -> Result<Run, Error> {
    forge_sql::rows::run(&Pg(row))
}

/// `query` with the values a shared statement (`forge_sql::statements`) binds after those
/// already bound.
pub(crate) fn binds<'q>(
    mut query: sqlx::query::Query<'q, sqlx::Postgres, PgArguments>,
    values: Vec<forge_sql::statements::Bind>,
) -> sqlx::query::Query<'q, sqlx::Postgres, PgArguments> {
    use forge_sql::statements::Bind;
    for v in values {
        query = match v {
            Bind::Text(t) => query.bind(t),
            Bind::Time(t) => query.bind(t.0),
            Bind::Id(id) => query.bind(id),
            Bind::Limit(n) => query.bind(n),
        };
    }
    query
}
