//! The store's migrations, each listed once, applied through the shared layer
//! ([`forge_sql::migrations`]) in one `BEGIN IMMEDIATE` transaction, so that concurrent openers
//! apply each one exactly once.

use std::sync::LazyLock;

use forge_core::Error;
use forge_sql::dialect::Dialect;
use forge_sql::migrations::{Migration, MigrationError, Migrations};
use sqlx::Connection;

use crate::rows::db_error;

/// SQLite's differences, as the shared SQL layer needs them.
pub(crate) struct Sqlite;

impl Dialect for Sqlite {
    type Database = sqlx::Sqlite;

    fn table_exists(table: &str) -> String {
        format!(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '{table}')"
        )
    }
}

/// Migration `$version` named `$name`, from `migrations/{$version:04}_{$name}.{up,down}.sql`.
macro_rules! migration {
    ($version:literal, $file:literal, $name:literal) => {
        Migration {
            version: $version,
            name: std::borrow::Cow::Borrowed($name),
            up: std::borrow::Cow::Borrowed(include_str!(concat!(
                "../migrations/",
                $file,
                "_",
                $name,
                ".up.sql"
            ))),
            down: std::borrow::Cow::Borrowed(include_str!(concat!(
                "../migrations/",
                $file,
                "_",
                $name,
                ".down.sql"
            ))),
        }
    };
}

static MIGRATIONS: LazyLock<Migrations> = LazyLock::new(|| {
    Migrations::new(vec![
        migration!(1, "0001", "init"),
        migration!(2, "0002", "interactions"),
        migration!(3, "0003", "usage"),
        migration!(4, "0004", "run_roles"),
        migration!(5, "0005", "job_holder"),
        migration!(6, "0006", "sources"),
        migration!(7, "0007", "chunk_vectors"),
        migration!(8, "0008", "erasure"),
        migration!(9, "0009", "chunk_vectors_by_source"),
        migration!(10, "0010", "files"),
        migration!(11, "0011", "job_trace"),
        migration!(12, "0012", "thread_summary"),
        migration!(13, "0013", "evals"),
        migration!(14, "0014", "thread_archive"),
        migration!(15, "0015", "open_jobs"),
        migration!(16, "0016", "refusals"),
        migration!(17, "0017", "runs_in_flight"),
    ])
});

/// Every migration, in order.
pub fn migrations() -> &'static Migrations {
    &MIGRATIONS
}

fn failed(e: MigrationError) -> Error {
    match e {
        MigrationError::Database(e) => db_error(e),
        other => Error::backend(false, other),
    }
}

/// Applies pending migrations; returns how many this call applied.
pub(crate) async fn up(pool: &crate::Pool) -> Result<usize, Error> {
    let mut conn = pool.acquire().await.map_err(db_error)?;
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(db_error)?;
    let applied = MIGRATIONS
        .apply::<Sqlite, _>(&mut *tx)
        .await
        .map_err(failed)?;
    tx.commit().await.map_err(db_error)?;
    conn.release();
    Ok(applied)
}

/// Versions of the applied migrations, ascending.
pub(crate) async fn applied(pool: &crate::Pool) -> Result<Vec<i64>, Error> {
    let mut conn = pool.acquire().await.map_err(db_error)?;
    let applied = Migrations::applied::<Sqlite, _>(&mut *conn)
        .await
        .map_err(db_error)?;
    conn.release();
    Ok(applied.into_iter().map(|(version, _)| version).collect())
}

/// Reverts every applied migration, newest first.
pub(crate) async fn down_all(pool: &crate::Pool) -> Result<(), Error> {
    let mut conn = pool.acquire().await.map_err(db_error)?;
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(db_error)?;
    MIGRATIONS
        .revert_all::<Sqlite, _>(&mut *tx)
        .await
        .map_err(failed)?;
    tx.commit().await.map_err(db_error)?;
    conn.release();
    Ok(())
}
