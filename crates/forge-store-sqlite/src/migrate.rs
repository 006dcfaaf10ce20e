//! Versioned, reversible migrations embedded in the binary, applied in `BEGIN IMMEDIATE`
//! transactions so that concurrent openers apply each one exactly once.

use forge_core::Error;
use sqlx::Row;

use crate::rows::db_error;

/// One migration: its version, name, and the SQL that applies and reverts it.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Version, ascending from 1.
    pub version: i64,
    /// Short name.
    pub name: &'static str,
    /// SQL that applies it.
    pub up: &'static str,
    /// SQL that reverts it.
    pub down: &'static str,
}

/// Every migration, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        up: include_str!("../migrations/0001_init.up.sql"),
        down: include_str!("../migrations/0001_init.down.sql"),
    },
    Migration {
        version: 2,
        name: "interactions",
        up: include_str!("../migrations/0002_interactions.up.sql"),
        down: include_str!("../migrations/0002_interactions.down.sql"),
    },
    Migration {
        version: 3,
        name: "usage",
        up: include_str!("../migrations/0003_usage.up.sql"),
        down: include_str!("../migrations/0003_usage.down.sql"),
    },
    Migration {
        version: 4,
        name: "run_roles",
        up: include_str!("../migrations/0004_run_roles.up.sql"),
        down: include_str!("../migrations/0004_run_roles.down.sql"),
    },
    Migration {
        version: 5,
        name: "job_holder",
        up: include_str!("../migrations/0005_job_holder.up.sql"),
        down: include_str!("../migrations/0005_job_holder.down.sql"),
    },
    Migration {
        version: 6,
        name: "sources",
        up: include_str!("../migrations/0006_sources.up.sql"),
        down: include_str!("../migrations/0006_sources.down.sql"),
    },
    Migration {
        version: 7,
        name: "chunk_vectors",
        up: include_str!("../migrations/0007_chunk_vectors.up.sql"),
        down: include_str!("../migrations/0007_chunk_vectors.down.sql"),
    },
    Migration {
        version: 8,
        name: "erasure",
        up: include_str!("../migrations/0008_erasure.up.sql"),
        down: include_str!("../migrations/0008_erasure.down.sql"),
    },
    Migration {
        version: 9,
        name: "chunk_vectors_by_source",
        up: include_str!("../migrations/0009_chunk_vectors_by_source.up.sql"),
        down: include_str!("../migrations/0009_chunk_vectors_by_source.down.sql"),
    },
    Migration {
        version: 10,
        name: "files",
        up: include_str!("../migrations/0010_files.up.sql"),
        down: include_str!("../migrations/0010_files.down.sql"),
    },
    Migration {
        version: 11,
        name: "job_trace",
        up: include_str!("../migrations/0011_job_trace.up.sql"),
        down: include_str!("../migrations/0011_job_trace.down.sql"),
    },
    Migration {
        version: 12,
        name: "thread_summary",
        up: include_str!("../migrations/0012_thread_summary.up.sql"),
        down: include_str!("../migrations/0012_thread_summary.down.sql"),
    },
    Migration {
        version: 13,
        name: "evals",
        up: include_str!("../migrations/0013_evals.up.sql"),
        down: include_str!("../migrations/0013_evals.down.sql"),
    },
    Migration {
        version: 14,
        name: "thread_archive",
        up: include_str!("../migrations/0014_thread_archive.up.sql"),
        down: include_str!("../migrations/0014_thread_archive.down.sql"),
    },
    Migration {
        version: 15,
        name: "open_jobs",
        up: include_str!("../migrations/0015_open_jobs.up.sql"),
        down: include_str!("../migrations/0015_open_jobs.down.sql"),
    },
    Migration {
        version: 16,
        name: "refusals",
        up: include_str!("../migrations/0016_refusals.up.sql"),
        down: include_str!("../migrations/0016_refusals.down.sql"),
    },
    Migration {
        version: 17,
        name: "runs_in_flight",
        up: include_str!("../migrations/0017_runs_in_flight.up.sql"),
        down: include_str!("../migrations/0017_runs_in_flight.down.sql"),
    },
];

const LEDGER: &str = "CREATE TABLE IF NOT EXISTS forge_schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT";

/// Applies pending migrations; returns how many this call applied.
pub(crate) async fn up(pool: &crate::Pool) -> Result<usize, Error> {
    sqlx::query(LEDGER)
        .execute(&mut *pool.acquire().await.map_err(db_error)?)
        .await
        .map_err(db_error)?;
    let mut count = 0;
    for m in MIGRATIONS {
        let mut tx = pool.begin("BEGIN IMMEDIATE").await.map_err(db_error)?;
        let done: Option<i64> =
            sqlx::query_scalar("SELECT version FROM forge_schema_migrations WHERE version = $1")
                .bind(m.version)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?;
        if done.is_none() {
            sqlx::raw_sql(m.up)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            sqlx::query("INSERT INTO forge_schema_migrations (version, name) VALUES ($1, $2)")
                .bind(m.version)
                .bind(m.name)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            count += 1;
        }
        tx.commit().await.map_err(db_error)?;
    }
    Ok(count)
}

pub(crate) async fn applied(pool: &crate::Pool) -> Result<Vec<i64>, Error> {
    let rows = sqlx::query("SELECT version FROM forge_schema_migrations ORDER BY version")
        .fetch_all(&mut *pool.acquire().await.map_err(db_error)?)
        .await
        .map_err(db_error)?;
    rows.iter()
        .map(|r| r.try_get::<i64, _>(0).map_err(db_error))
        .collect()
}

pub(crate) async fn down_all(pool: &crate::Pool) -> Result<(), Error> {
    for m in MIGRATIONS.iter().rev() {
        let mut tx = pool.begin("BEGIN IMMEDIATE").await.map_err(db_error)?;
        let done: Option<i64> =
            sqlx::query_scalar("SELECT version FROM forge_schema_migrations WHERE version = $1")
                .bind(m.version)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?;
        if done.is_some() {
            sqlx::raw_sql(m.down)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            sqlx::query("DELETE FROM forge_schema_migrations WHERE version = $1")
                .bind(m.version)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)?;
    }
    Ok(())
}
