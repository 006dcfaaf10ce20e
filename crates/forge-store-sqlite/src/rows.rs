//! Mapping between rows and domain types, and between sqlx errors and `forge_core::Error`.
//!
//! The domain rows (threads, messages, runs, sources, chunks) are read through [`Cols`], which
//! both drivers' rows implement (the sqlx pool's and the writer lane's, rusqlite), by the shared
//! mappers of [`forge_sql::rows`]: one mapping for both drivers and both SQL stores.

use forge_core::Error;
use forge_core::message::Message;
use forge_core::run::Run;
use forge_core::thread::Thread;
use forge_core::time::Timestamp;
use forge_sql::rows::Columns;
use sqlx::Row as _;
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

pub(crate) use forge_sql::rows::{corrupt, signed as i64_of, unsigned as u64_of};

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

/// A row of either driver as the shared mappers ([`forge_sql::rows`]) read it: SQLite's storage
/// classes are what [`Columns`]' provided methods read.
pub(crate) struct Row<'r, C: ?Sized>(pub(crate) &'r C);

impl<C: Cols + ?Sized> Columns for Row<'_, C> {
    fn text(&self, col: &str) -> Result<Option<String>, Error> {
        self.0.text(col)
    }

    fn int(&self, col: &str) -> Result<Option<i64>, Error> {
        self.0.int(col)
    }
}

pub(crate) fn thread(row: &impl Cols) -> Result<Thread, Error> {
    forge_sql::rows::thread(&Row(row))
}

pub(crate) fn message(row: &impl Cols) -> Result<Message, Error> {
    forge_sql::rows::message(&Row(row))
}

pub(crate) fn run(row: &impl Cols) -> Result<Run, Error> {
    forge_sql::rows::run(&Row(row))
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
