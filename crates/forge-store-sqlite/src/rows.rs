//! Mapping between rows and domain types.
//!
//! The domain rows (threads, messages, runs, sources, chunks) are read through
//! [`Columns`] by the shared mappers of [`forge_sql::rows`]: one mapping for both SQL stores.

use forge_core::Error;
use forge_core::message::Message;
use forge_core::run::Run;
use forge_core::thread::Thread;
use forge_core::time::Timestamp;
use forge_sql::rows::Columns;

use crate::db;

pub(crate) use forge_sql::rows::{corrupt, signed as i64_of, unsigned as u64_of};

/// A row as the shared mappers read it: SQLite's storage classes are what [`Columns`]' provided
/// methods read.
pub(crate) struct Row<'a, 'r>(pub(crate) &'a rusqlite::Row<'r>);

impl Columns for Row<'_, '_> {
    fn text(&self, col: &str) -> Result<Option<String>, Error> {
        self.0.get(col).map_err(db::error)
    }

    fn int(&self, col: &str) -> Result<Option<i64>, Error> {
        self.0.get(col).map_err(db::error)
    }
}

/// The text in `col`, which must not be NULL.
pub(crate) fn text(row: &rusqlite::Row<'_>, col: &str) -> Result<String, Error> {
    Row(row).text(col)?.ok_or_else(|| corrupt(col, "NULL"))
}

/// The integer in `col`, which must not be NULL.
pub(crate) fn int(row: &rusqlite::Row<'_>, col: &str) -> Result<i64, Error> {
    Row(row).int(col)?.ok_or_else(|| corrupt(col, "NULL"))
}

pub(crate) fn uuid(row: &rusqlite::Row<'_>, col: &str) -> Result<uuid::Uuid, Error> {
    let s = text(row, col)?;
    uuid::Uuid::parse_str(&s).map_err(|e| corrupt(col, e))
}

pub(crate) fn ts(row: &rusqlite::Row<'_>, col: &str) -> Result<Timestamp, Error> {
    let ms = int(row, col)?;
    Timestamp::from_unix_millis(ms).ok_or_else(|| corrupt(col, ms))
}

pub(crate) fn json<T: serde::de::DeserializeOwned>(
    row: &rusqlite::Row<'_>,
    col: &str,
) -> Result<T, Error> {
    let s = text(row, col)?;
    serde_json::from_str(&s).map_err(|e| corrupt(col, e))
}

pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> Result<String, Error> {
    serde_json::to_string(value).map_err(|e| Error::invalid(format!("cannot encode as JSON: {e}")))
}

pub(crate) fn thread(row: &rusqlite::Row<'_>) -> Result<Thread, Error> {
    forge_sql::rows::thread(&Row(row))
}

pub(crate) fn message(row: &rusqlite::Row<'_>) -> Result<Message, Error> {
    forge_sql::rows::message(&Row(row))
}

pub(crate) fn run(row: &rusqlite::Row<'_>) -> Result<Run, Error> {
    forge_sql::rows::run(&Row(row))
}

pub(crate) fn source(row: &rusqlite::Row<'_>) -> Result<forge_rag::model::Source, Error> {
    forge_sql::rows::source(&Row(row))
}

pub(crate) fn chunk(row: &rusqlite::Row<'_>) -> Result<forge_rag::model::Chunk, Error> {
    forge_sql::rows::chunk(&Row(row))
}
