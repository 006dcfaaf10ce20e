//! The store's migrations, each listed once, applied by sqlx's migrator through the shared layer
//! ([`forge_sql::migrations`]) in one `BEGIN IMMEDIATE` transaction, so that concurrent openers
//! apply each one exactly once. sqlx's migrator runs on a rusqlite connection here: [`Migrating`]
//! is sqlx's `Migrate` on it, keeping sqlx's ledger as sqlx's SQLite driver lays it out.

use std::borrow::Cow;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use forge_core::Error;
use forge_sql::migrations::{
    AppliedMigration, Ledger, Migrate, MigrateError, Migration, MigrationError, Migrations, Script,
    ledger_rows_sql,
};
use futures_util::future::BoxFuture;
use rusqlite::Connection;

use crate::db;

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
        migration!(18, "0018", "source_owner"),
        migration!(19, "0019", "request_keys"),
    ])
});

/// Every migration, in order.
pub fn migrations() -> &'static Migrations {
    &MIGRATIONS
}

/// A connection migrations run on, inside the caller's `BEGIN IMMEDIATE` transaction.
pub(crate) struct Migrating(pub(crate) Connection);

/// A rusqlite error as sqlx's migrator reports a database's.
fn refused(e: rusqlite::Error) -> MigrateError {
    MigrateError::Execute(sqlx_error(e))
}

fn sqlx_error(e: rusqlite::Error) -> sqlx::Error {
    sqlx::Error::AnyDriverError(Box::new(e))
}

impl Migrating {
    /// Runs `work` in a savepoint: kept if it succeeds, undone if it fails.
    fn savepoint<T>(
        &self,
        work: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        self.0.execute_batch("SAVEPOINT forge_migration")?;
        match work(&self.0) {
            Ok(out) => {
                self.0.execute_batch("RELEASE forge_migration")?;
                Ok(out)
            }
            Err(e) => {
                let _ = self
                    .0
                    .execute_batch("ROLLBACK TO forge_migration; RELEASE forge_migration");
                Err(e)
            }
        }
    }

    fn record(&self, table: &str, migration: &Script) -> rusqlite::Result<()> {
        self.0
            .execute(
                &format!(
                    "INSERT INTO {table} (version, description, success, checksum, execution_time)                      VALUES (?1, ?2, TRUE, ?3, -1)"
                ),
                rusqlite::params![
                    migration.version,
                    migration.description.as_ref(),
                    migration.checksum.as_ref()
                ],
            )
            .map(|_| ())
    }
}

impl Migrate for Migrating {
    fn create_schema_if_not_exists<'e>(
        &'e mut self,
        schema: &'e str,
    ) -> BoxFuture<'e, Result<(), MigrateError>> {
        let schema = schema.to_owned();
        Box::pin(async move { Err(MigrateError::CreateSchemasNotSupported(schema)) })
    }

    fn ensure_migrations_table<'e>(
        &'e mut self,
        table: &'e str,
    ) -> BoxFuture<'e, Result<(), MigrateError>> {
        let created = self.0.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS {table} (version BIGINT PRIMARY KEY,              description TEXT NOT NULL, installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,              success BOOLEAN NOT NULL, checksum BLOB NOT NULL, execution_time BIGINT NOT NULL)"
        ));
        Box::pin(async move { created.map_err(refused) })
    }

    fn dirty_version<'e>(
        &'e mut self,
        table: &'e str,
    ) -> BoxFuture<'e, Result<Option<i64>, MigrateError>> {
        let sql =
            format!("SELECT version FROM {table} WHERE success = false ORDER BY version LIMIT 1");
        let dirty = db::value(&self.0, &sql, rusqlite::params![]);
        Box::pin(async move { dirty.map_err(unavailable) })
    }

    fn list_applied_migrations<'e>(
        &'e mut self,
        table: &'e str,
    ) -> BoxFuture<'e, Result<Vec<AppliedMigration>, MigrateError>> {
        let sql = format!("SELECT version, checksum FROM {table} ORDER BY version");
        let applied = db::all(&self.0, &sql, rusqlite::params![], |row| {
            Ok(AppliedMigration {
                version: row.get(0).map_err(db::error)?,
                checksum: Cow::Owned(row.get(1).map_err(db::error)?),
            })
        });
        Box::pin(async move { applied.map_err(unavailable) })
    }

    fn lock(&mut self) -> BoxFuture<'_, Result<(), MigrateError>> {
        // The caller's `BEGIN IMMEDIATE` holds the write lock.
        Box::pin(async { Ok(()) })
    }

    fn unlock(&mut self) -> BoxFuture<'_, Result<(), MigrateError>> {
        Box::pin(async { Ok(()) })
    }

    fn apply<'e>(
        &'e mut self,
        table: &'e str,
        migration: &'e Script,
    ) -> BoxFuture<'e, Result<Duration, MigrateError>> {
        let start = Instant::now();
        let applied = self
            .savepoint(|conn| conn.execute_batch(migration.sql.as_str()))
            .map_err(|e| MigrateError::ExecuteMigration(sqlx_error(e), migration.version))
            .and_then(|()| self.record(table, migration).map_err(refused));
        let elapsed = start.elapsed();
        let timed = applied.and_then(|()| {
            self.0
                .execute(
                    &format!("UPDATE {table} SET execution_time = ?1 WHERE version = ?2"),
                    rusqlite::params![db::saturating(elapsed.as_nanos()), migration.version],
                )
                .map_err(refused)
        });
        Box::pin(async move { timed.map(|_| elapsed) })
    }

    fn revert<'e>(
        &'e mut self,
        table: &'e str,
        migration: &'e Script,
    ) -> BoxFuture<'e, Result<Duration, MigrateError>> {
        let start = Instant::now();
        let reverted = self
            .savepoint(|conn| {
                conn.execute_batch(migration.sql.as_str())?;
                conn.execute(
                    &format!("DELETE FROM {table} WHERE version = ?1"),
                    [migration.version],
                )
            })
            .map_err(|e| MigrateError::ExecuteMigration(sqlx_error(e), migration.version));
        let elapsed = start.elapsed();
        Box::pin(async move { reverted.map(|_| elapsed) })
    }

    fn skip<'e>(
        &'e mut self,
        table: &'e str,
        migration: &'e Script,
    ) -> BoxFuture<'e, Result<(), MigrateError>> {
        let skipped = self.record(table, migration).map_err(refused);
        Box::pin(async move { skipped })
    }
}

impl Ledger for Migrating {
    fn table_exists<'e>(
        &'e mut self,
        table: &'e str,
    ) -> BoxFuture<'e, Result<bool, MigrationError>> {
        let exists = db::value(
            &self.0,
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
            rusqlite::params![table],
        );
        Box::pin(async move { Ok(exists.map_err(other)?.unwrap_or(false)) })
    }

    fn ledger_rows<'e>(
        &'e mut self,
        table: &'e str,
    ) -> BoxFuture<'e, Result<Vec<(i64, String)>, MigrationError>> {
        let rows = db::all(
            &self.0,
            &ledger_rows_sql(table),
            rusqlite::params![],
            |row| {
                Ok((
                    row.get(0).map_err(db::error)?,
                    row.get(1).map_err(db::error)?,
                ))
            },
        );
        Box::pin(async move { rows.map_err(other) })
    }

    fn drop_table<'e>(&'e mut self, table: &'e str) -> BoxFuture<'e, Result<(), MigrationError>> {
        let dropped = self.0.execute_batch(&format!("DROP TABLE {table}"));
        Box::pin(async move { dropped.map_err(|e| MigrationError::Database(sqlx_error(e))) })
    }
}

/// A store error as the shared layer's.
fn other(e: Error) -> MigrationError {
    MigrationError::Database(sqlx::Error::AnyDriverError(Box::new(e)))
}

/// A store error as sqlx's migrator's.
fn unavailable(e: Error) -> MigrateError {
    MigrateError::Execute(sqlx::Error::AnyDriverError(Box::new(e)))
}

/// A migration error as the store's: a database's (classified), or the migrator's refusal.
fn failed(e: MigrationError) -> Error {
    match e {
        MigrationError::Database(sqlx::Error::AnyDriverError(e)) => match e.downcast::<Error>() {
            Ok(e) => *e,
            Err(e) => match e.downcast::<rusqlite::Error>() {
                Ok(e) => db::error(*e),
                Err(e) => Error::backend(false, std::io::Error::other(e)),
            },
        },
        other => Error::backend(false, other),
    }
}

/// Runs `step` on `conn` inside one `BEGIN IMMEDIATE` transaction, committed if it succeeds.
/// sqlx's migrator is async, but everything it awaits here is done when asked: it is driven to
/// its end on this (blocking) thread.
fn in_transaction<T>(
    conn: Connection,
    step: impl for<'c> FnOnce(&'c mut Migrating) -> BoxFuture<'c, Result<T, MigrationError>>,
) -> Result<(Connection, T), Error> {
    let mut migrating = Migrating(conn);
    migrating
        .0
        .execute_batch("BEGIN IMMEDIATE")
        .map_err(db::error)?;
    let outcome = tokio::runtime::Handle::current().block_on(step(&mut migrating));
    let ended = match &outcome {
        Ok(_) => migrating.0.execute_batch("COMMIT"),
        Err(_) => migrating.0.execute_batch("ROLLBACK"),
    };
    let out = outcome.map_err(failed)?;
    ended.map_err(db::error)?;
    Ok((migrating.0, out))
}

/// Applies pending migrations on `conn` (a writer's); the connection back, and how many this
/// call applied. Run on a blocking thread.
pub(crate) fn up(conn: Connection) -> Result<(Connection, usize), Error> {
    in_transaction(conn, |m| Box::pin(MIGRATIONS.apply(m)))
}

/// Versions of the applied migrations, ascending. Run on a blocking thread.
pub(crate) fn applied(conn: Connection) -> Result<Vec<i64>, Error> {
    let mut migrating = Migrating(conn);
    let applied = tokio::runtime::Handle::current()
        .block_on(Migrations::applied(&mut migrating))
        .map_err(failed)?;
    Ok(applied.into_iter().map(|(version, _)| version).collect())
}

/// Reverts every applied migration, newest first. Run on a blocking thread.
pub(crate) fn down_all(conn: Connection) -> Result<(), Error> {
    in_transaction(conn, |m| Box::pin(MIGRATIONS.revert_all(m))).map(|_| ())
}
