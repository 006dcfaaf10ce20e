//! Migrations through sqlx's [`Migrator`], the same on every SQL store.
//!
//! A store lists its migrations once ([`Migration`]: version, name, up and down scripts) and
//! hands them to [`Migrations::new`]. The ledger is sqlx's (version, description, checksum,
//! success, times) in the table [`LEDGER`]; sqlx refuses a database whose applied migration's
//! script changed since (its checksum), or one a failed migration left dirty.
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

use sqlx::migrate::{Migrate, MigrateError, Migration as Script, MigrationType, Migrator};
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
    pub async fn apply<D, C>(&self, conn: &mut C) -> Result<usize, MigrationError>
    where
        D: Dialect,
        C: Migrate + Send,
        for<'c> &'c mut C: Executor<'c, Database = D::Database>,
        for<'r> (i64, String): FromRow<'r, <D::Database as Database>::Row>,
        for<'r> (bool,): FromRow<'r, <D::Database as Database>::Row>,
        <D::Database as Database>::Arguments: IntoArguments<D::Database>,
    {
        conn.ensure_migrations_table(LEDGER).await?;
        self.adopt_legacy::<D, C>(conn).await?;
        self.check_names(&read(&mut *conn, LEDGER).await?)?;
        let before = conn.list_applied_migrations(LEDGER).await?.len();
        self.migrator.run_direct(None, conn, false).await?;
        let after = conn.list_applied_migrations(LEDGER).await?.len();
        Ok(after.saturating_sub(before))
    }

    /// Reverts every applied migration on `conn`, newest first, within the caller's transaction
    /// holding the migration lock.
    pub async fn revert_all<D, C>(&self, conn: &mut C) -> Result<(), MigrationError>
    where
        D: Dialect,
        C: Migrate + Send,
        for<'c> &'c mut C: Executor<'c, Database = D::Database>,
        for<'r> (i64, String): FromRow<'r, <D::Database as Database>::Row>,
        for<'r> (bool,): FromRow<'r, <D::Database as Database>::Row>,
        <D::Database as Database>::Arguments: IntoArguments<D::Database>,
    {
        conn.ensure_migrations_table(LEDGER).await?;
        self.adopt_legacy::<D, C>(conn).await?;
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
    pub async fn applied<D, C>(conn: &mut C) -> Result<Vec<(i64, String)>, sqlx::Error>
    where
        D: Dialect,
        for<'c> &'c mut C: Executor<'c, Database = D::Database>,
        for<'r> (i64, String): FromRow<'r, <D::Database as Database>::Row>,
        for<'r> (bool,): FromRow<'r, <D::Database as Database>::Row>,
        <D::Database as Database>::Arguments: IntoArguments<D::Database>,
    {
        for table in [LEDGER, LEGACY_LEDGER] {
            if exists::<D, C>(conn, table).await? {
                return read(conn, table).await;
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
    async fn adopt_legacy<D, C>(&self, conn: &mut C) -> Result<(), MigrationError>
    where
        D: Dialect,
        C: Migrate + Send,
        for<'c> &'c mut C: Executor<'c, Database = D::Database>,
        for<'r> (i64, String): FromRow<'r, <D::Database as Database>::Row>,
        for<'r> (bool,): FromRow<'r, <D::Database as Database>::Row>,
        <D::Database as Database>::Arguments: IntoArguments<D::Database>,
    {
        if !exists::<D, C>(&mut *conn, LEGACY_LEDGER).await? {
            return Ok(());
        }
        let legacy = read(&mut *conn, LEGACY_LEDGER).await?;
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
        (&mut *conn)
            .execute(AssertSqlSafe(format!("DROP TABLE {LEGACY_LEDGER}")))
            .await?;
        Ok(())
    }
}

/// Whether `table` exists.
async fn exists<D, C>(conn: &mut C, table: &str) -> Result<bool, sqlx::Error>
where
    D: Dialect,
    for<'c> &'c mut C: Executor<'c, Database = D::Database>,
    for<'r> (bool,): FromRow<'r, <D::Database as Database>::Row>,
    <D::Database as Database>::Arguments: IntoArguments<D::Database>,
{
    let (exists,): (bool,) = sqlx::query_as(AssertSqlSafe(D::table_exists(table)))
        .fetch_one(conn)
        .await?;
    Ok(exists)
}

/// A ledger's (version, name) rows, ascending.
async fn read<DB, C>(conn: &mut C, table: &str) -> Result<Vec<(i64, String)>, sqlx::Error>
where
    DB: Database,
    for<'c> &'c mut C: Executor<'c, Database = DB>,
    for<'r> (i64, String): FromRow<'r, DB::Row>,
    DB::Arguments: IntoArguments<DB>,
{
    let name = if table == LEDGER {
        "description"
    } else {
        "name"
    };
    sqlx::query_as(AssertSqlSafe(format!(
        "SELECT version, {name} FROM {table} ORDER BY version"
    )))
    .fetch_all(conn)
    .await
}
