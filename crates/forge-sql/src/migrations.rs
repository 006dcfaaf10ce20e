//! Migrations through sqlx's [`Migrator`], the same on every SQL store.
//!
//! A store lists its migrations once ([`Migration`]: version, name, up and down scripts) and
//! hands them to [`Migrations::new`]. The ledger is sqlx's (version, description, checksum,
//! success, times) in the table [`LEDGER`]; sqlx refuses a database whose applied migration's
//! script changed since (its checksum), or one a failed migration left dirty.
//!
//! They run on a [`Ledger`]: sqlx's [`Migrate`] and three statements more. A sqlx connection is
//! one through [`Sqlx`] and its store's [`Dialect`]; a store on another driver (SQLite's, on
//! rusqlite) implements both traits on its connection, and sqlx's migrator does the rest.
//!
//! The caller owns the transaction and the lock: it begins a transaction, takes its dialect's
//! lock (PostgreSQL's `pg_advisory_xact_lock`; SQLite's `BEGIN IMMEDIATE` is one), and calls
//! [`Migrations::apply`] or [`Migrations::revert_all`] inside it. Each migration runs within a
//! savepoint of that transaction, so all pending migrations apply or none do, and many processes
//! starting against an empty database at once apply each migration exactly once.
//!
//! A database migrated by a build before this ledger has [`LEGACY_LEDGER`] (version, name,
//! applied at) instead: its rows are adopted into the ledger — each name checked against this
//! build's migration of that version — and the old table dropped, in the same transaction.

use std::borrow::Cow;
use std::marker::PhantomData;
use std::time::Duration;

use futures_util::future::BoxFuture;
pub use sqlx::migrate::{AppliedMigration, Migrate, MigrateError, Migration as Script};
use sqlx::migrate::{MigrationType, Migrator};
use sqlx::{AssertSqlSafe, Database, Executor, FromRow, IntoArguments, SqlSafeStr};

use crate::dialect::Dialect;

/// The ledger of applied migrations: sqlx's table, under a name of Forge's.
pub const LEDGER: &str = "forge_migrations";

/// The ledger of builds before [`LEDGER`]: (version, name, applied at).
pub const LEGACY_LEDGER: &str = "forge_schema_migrations";

/// One migration: its version, its name, and the SQL that applies and reverts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    /// Version, ascending from 1.
    pub version: i64,
    /// Name (sqlx's description).
    pub name: Cow<'static, str>,
    /// SQL that applies it.
    pub up: Cow<'static, str>,
    /// SQL that reverts it.
    pub down: Cow<'static, str>,
}

/// Why migrating failed.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    /// The ledger records this version under another name: another series of migrations (a
    /// PostgreSQL database provisioned for the other mode) was applied to the database.
    #[error("migration {version} is recorded as {found:?}; this build's is {expected:?}")]
    Mismatch {
        /// The version.
        version: i64,
        /// The name the ledger records.
        found: String,
        /// This build's name of that version.
        expected: String,
    },
    /// sqlx's migrator refused or failed: a changed script, a dirty ledger, a failed script.
    #[error(transparent)]
    Migrate(#[from] MigrateError),
    /// The database failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// A store's migrations, in order, and sqlx's migrator of them.
#[derive(Debug)]
pub struct Migrations {
    list: Vec<Migration>,
    migrator: Migrator,
}

impl Migrations {
    /// The migrations of `list`, which is in ascending version order.
    pub fn new(list: Vec<Migration>) -> Self {
        let mut scripts = Vec::with_capacity(list.len() * 2);
        for m in &list {
            for (kind, sql) in [
                (MigrationType::ReversibleUp, &m.up),
                (MigrationType::ReversibleDown, &m.down),
            ] {
                scripts.push(Script::new(
                    m.version,
                    m.name.clone(),
                    kind,
                    AssertSqlSafe(sql.clone()).into_sql_str(),
                    false,
                ));
            }
        }
        let mut migrator = Migrator::with_migrations(scripts);
        migrator.dangerous_set_table_name(LEDGER);
        // The caller holds the lock, within the transaction the migrations run in.
        migrator.set_locking(false);
        Self { list, migrator }
    }

    /// The migrations, in order.
    pub fn list(&self) -> &[Migration] {
        &self.list
    }

    /// The newest version (0 when there are none).
    pub fn latest(&self) -> i64 {
        self.list.last().map_or(0, |m| m.version)
    }

    /// Applies the pending migrations on `conn`, which is in a transaction holding the
    /// dialect's migration lock, adopting a legacy ledger first; returns how many it applied.
    pub async fn apply<L: Ledger>(&self, conn: &mut L) -> Result<usize, MigrationError> {
        conn.ensure_migrations_table(LEDGER).await?;
        self.adopt_legacy(conn).await?;
        let recorded = conn.ledger_rows(LEDGER).await?;
        self.check_names(&recorded)?;
        self.migrator.run_direct(None, conn, false).await?;
        let after = conn.list_applied_migrations(LEDGER).await?.len();
        Ok(after.saturating_sub(recorded.len()))
    }

    /// Reverts every applied migration on `conn`, newest first, within the caller's transaction
    /// holding the migration lock.
    pub async fn revert_all<L: Ledger>(&self, conn: &mut L) -> Result<(), MigrationError> {
        conn.ensure_migrations_table(LEDGER).await?;
        self.adopt_legacy(conn).await?;
        let applied = conn.list_applied_migrations(LEDGER).await?;
        for script in self.migrator.iter().rev() {
            if script.migration_type.is_down_migration()
                && applied.iter().any(|a| a.version == script.version)
            {
                conn.revert(LEDGER, script).await?;
            }
        }
        Ok(())
    }

    /// The applied migrations (version, name) as the ledger — or a legacy ledger not adopted
    /// yet — records them, ascending; empty on a database never migrated.
    pub async fn applied<L: Ledger>(conn: &mut L) -> Result<Vec<(i64, String)>, MigrationError> {
        for table in [LEDGER, LEGACY_LEDGER] {
            if conn.table_exists(table).await? {
                return conn.ledger_rows(table).await;
            }
        }
        Ok(Vec::new())
    }

    /// How many of this build's migrations `applied` (from [`Migrations::applied`]) lacks, or
    /// the first it records under another name.
    pub fn pending(&self, applied: &[(i64, String)]) -> Result<usize, MigrationError> {
        self.check_names(applied)?;
        Ok(self
            .list
            .iter()
            .filter(|m| !applied.iter().any(|(v, _)| *v == m.version))
            .count())
    }

    /// Refuses a ledger that records one of this build's versions under another name.
    fn check_names(&self, applied: &[(i64, String)]) -> Result<(), MigrationError> {
        for (version, found) in applied {
            if let Some(m) = self.list.iter().find(|m| m.version == *version)
                && m.name != found.as_str()
            {
                return Err(MigrationError::Mismatch {
                    version: *version,
                    found: found.clone(),
                    expected: m.name.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Moves a legacy ledger's rows into the ledger (each name checked) and drops it.
    async fn adopt_legacy<L: Ledger>(&self, conn: &mut L) -> Result<(), MigrationError> {
        if !conn.table_exists(LEGACY_LEDGER).await? {
            return Ok(());
        }
        let legacy = conn.ledger_rows(LEGACY_LEDGER).await?;
        self.check_names(&legacy)?;
        let adopted = conn.list_applied_migrations(LEDGER).await?;
        for (version, _) in &legacy {
            let up = self
                .migrator
                .iter()
                .find(|s| s.version == *version && !s.migration_type.is_down_migration());
            match up {
                Some(script) if !adopted.iter().any(|a| a.version == *version) => {
                    // Recorded as applied, with this build's checksum: the name matched.
                    conn.skip(LEDGER, script).await?;
                }
                Some(_) => {}
                // A version this build does not know: sqlx refuses it as missing.
                None => return Err(MigrateError::VersionMissing(*version).into()),
            }
        }
        conn.drop_table(LEGACY_LEDGER).await
    }
}

/// A connection migrations run on: sqlx's [`Migrate`] (the ledger's bookkeeping and each
/// script's run), and the few statements around it this layer needs — whether a ledger exists,
/// what a ledger records, and dropping the legacy one. Only names this crate writes ([`LEDGER`],
/// [`LEGACY_LEDGER`]) are passed, never input.
pub trait Ledger: Migrate + Send {
    /// Whether `table` exists in the schema Forge uses.
    fn table_exists<'e>(
        &'e mut self,
        table: &'e str,
    ) -> BoxFuture<'e, Result<bool, MigrationError>>;

    /// The (version, name) rows of the ledger `table` — [`LEDGER`] (its `description`) or
    /// [`LEGACY_LEDGER`] (its `name`) — ascending.
    fn ledger_rows<'e>(
        &'e mut self,
        table: &'e str,
    ) -> BoxFuture<'e, Result<Vec<(i64, String)>, MigrationError>>;

    /// Drops `table`.
    fn drop_table<'e>(&'e mut self, table: &'e str) -> BoxFuture<'e, Result<(), MigrationError>>;
}

/// The statement reading a ledger's (version, name) rows, ascending.
pub fn ledger_rows_sql(table: &str) -> String {
    let name = if table == LEDGER {
        "description"
    } else {
        "name"
    };
    format!("SELECT version, {name} FROM {table} ORDER BY version")
}

/// A sqlx connection of the dialect `D` as a [`Ledger`]: sqlx's own [`Migrate`] for the
/// bookkeeping, `D`'s statements for the rest.
pub struct Sqlx<'c, D, C> {
    conn: &'c mut C,
    dialect: PhantomData<fn() -> D>,
}

impl<'c, D, C> Sqlx<'c, D, C> {
    /// `conn` (in the caller's transaction) as a ledger.
    pub fn new(conn: &'c mut C) -> Self {
        Self {
            conn,
            dialect: PhantomData,
        }
    }
}

impl<D, C: Migrate + Send> Migrate for Sqlx<'_, D, C> {
    fn create_schema_if_not_exists<'e>(
        &'e mut self,
        schema: &'e str,
    ) -> BoxFuture<'e, Result<(), MigrateError>> {
        self.conn.create_schema_if_not_exists(schema)
    }

    fn ensure_migrations_table<'e>(
        &'e mut self,
        table: &'e str,
    ) -> BoxFuture<'e, Result<(), MigrateError>> {
        self.conn.ensure_migrations_table(table)
    }

    fn dirty_version<'e>(
        &'e mut self,
        table: &'e str,
    ) -> BoxFuture<'e, Result<Option<i64>, MigrateError>> {
        self.conn.dirty_version(table)
    }

    fn list_applied_migrations<'e>(
        &'e mut self,
        table: &'e str,
    ) -> BoxFuture<'e, Result<Vec<AppliedMigration>, MigrateError>> {
        self.conn.list_applied_migrations(table)
    }

    fn lock(&mut self) -> BoxFuture<'_, Result<(), MigrateError>> {
        self.conn.lock()
    }

    fn unlock(&mut self) -> BoxFuture<'_, Result<(), MigrateError>> {
        self.conn.unlock()
    }

    fn apply<'e>(
        &'e mut self,
        table: &'e str,
        migration: &'e Script,
    ) -> BoxFuture<'e, Result<Duration, MigrateError>> {
        self.conn.apply(table, migration)
    }

    fn revert<'e>(
        &'e mut self,
        table: &'e str,
        migration: &'e Script,
    ) -> BoxFuture<'e, Result<Duration, MigrateError>> {
        self.conn.revert(table, migration)
    }

    fn skip<'e>(
        &'e mut self,
        table: &'e str,
        migration: &'e Script,
    ) -> BoxFuture<'e, Result<(), MigrateError>> {
        self.conn.skip(table, migration)
    }
}

impl<D, C> Ledger for Sqlx<'_, D, C>
where
    D: Dialect,
    C: Migrate + Send,
    for<'c> &'c mut C: Executor<'c, Database = D::Database>,
    for<'r> (i64, String): FromRow<'r, <D::Database as Database>::Row>,
    for<'r> (bool,): FromRow<'r, <D::Database as Database>::Row>,
    <D::Database as Database>::Arguments: IntoArguments<D::Database>,
{
    fn table_exists<'e>(
        &'e mut self,
        table: &'e str,
    ) -> BoxFuture<'e, Result<bool, MigrationError>> {
        Box::pin(async move {
            let (exists,): (bool,) = sqlx::query_as(AssertSqlSafe(D::table_exists(table)))
                .fetch_one(&mut *self.conn)
                .await?;
            Ok(exists)
        })
    }

    fn ledger_rows<'e>(
        &'e mut self,
        table: &'e str,
    ) -> BoxFuture<'e, Result<Vec<(i64, String)>, MigrationError>> {
        Box::pin(async move {
            Ok(sqlx::query_as(AssertSqlSafe(ledger_rows_sql(table)))
                .fetch_all(&mut *self.conn)
                .await?)
        })
    }

    fn drop_table<'e>(&'e mut self, table: &'e str) -> BoxFuture<'e, Result<(), MigrationError>> {
        Box::pin(async move {
            (&mut *self.conn)
                .execute(AssertSqlSafe(format!("DROP TABLE {table}")))
                .await?;
            Ok(())
        })
    }
}
