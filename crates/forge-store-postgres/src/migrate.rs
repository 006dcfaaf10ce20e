//! Versioned, reversible migrations embedded in the binary. All pending migrations apply in one
//! transaction that first takes a transaction-scoped advisory lock, so processes starting at once
//! queue behind each other and each migration is applied exactly once.

use forge_core::Error;
use sqlx::{Connection, PgConnection, PgPool, Row};

use crate::rows::db_error;
use crate::{Mode, OpenError};

/// One migration: its version, name, and the SQL that applies and reverts it.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Version, ascending from 1.
    pub version: i64,
    /// Name; mode-specific migrations name their mode.
    pub name: &'static str,
    /// SQL that applies it.
    pub up: &'static str,
    /// SQL that reverts it.
    pub down: &'static str,
}

/// Supabase mode's up-migration `$up`, then the system functions provisioned again as they are in
/// this build: as `forge_system`, which owns them since migration 8 and alone may replace them,
/// with the application role recorded for `system_owner.sql`'s grants.
macro_rules! reprovisioned {
    ($up:literal) => {
        concat!(
            include_str!($up),
            "SELECT set_config('forge.app_role', current_user, true);\n",
            "SET LOCAL ROLE forge_system;\n",
            include_str!("../sql/system_functions.sql"),
            "RESET ROLE;\n",
            include_str!("../sql/system_owner.sql")
        )
    };
}

const TABLES: Migration = Migration {
    version: 1,
    name: "tables",
    up: include_str!("../migrations/0001_tables.up.sql"),
    down: include_str!("../migrations/0001_tables.down.sql"),
};

const RLS: Migration = Migration {
    version: 2,
    name: "rls",
    up: include_str!("../migrations/0002_rls.up.sql"),
    down: include_str!("../migrations/0002_rls.down.sql"),
};

const SUPABASE_RLS: Migration = Migration {
    version: 2,
    name: "supabase_rls",
    up: include_str!("../migrations/0002_supabase_rls.up.sql"),
    down: include_str!("../migrations/0002_supabase_rls.down.sql"),
};

const INTERACTIONS: Migration = Migration {
    version: 3,
    name: "interactions",
    up: include_str!("../migrations/0003_interactions.up.sql"),
    down: include_str!("../migrations/0003_interactions.down.sql"),
};

const SUPABASE_INTERACTIONS: Migration = Migration {
    version: 3,
    name: "supabase_interactions",
    up: concat!(
        include_str!("../migrations/0003_interactions.up.sql"),
        include_str!("../migrations/0003_supabase_grants.up.sql")
    ),
    down: concat!(
        include_str!("../migrations/0003_supabase_grants.down.sql"),
        include_str!("../migrations/0003_interactions.down.sql")
    ),
};

const USAGE: Migration = Migration {
    version: 4,
    name: "usage",
    up: include_str!("../migrations/0004_usage.up.sql"),
    down: include_str!("../migrations/0004_usage.down.sql"),
};

const SUPABASE_USAGE: Migration = Migration {
    version: 4,
    name: "supabase_usage",
    up: concat!(
        include_str!("../migrations/0004_usage.up.sql"),
        include_str!("../migrations/0004_supabase_grants.up.sql")
    ),
    down: concat!(
        include_str!("../migrations/0004_supabase_grants.down.sql"),
        include_str!("../migrations/0004_usage.down.sql")
    ),
};

const RUN_ROLES: Migration = Migration {
    version: 5,
    name: "run_roles",
    up: include_str!("../migrations/0005_run_roles.up.sql"),
    down: include_str!("../migrations/0005_run_roles.down.sql"),
};

const EVENT_NOTIFY: Migration = Migration {
    version: 6,
    name: "event_notify",
    up: include_str!("../migrations/0006_event_notify.up.sql"),
    down: include_str!("../migrations/0006_event_notify.down.sql"),
};

const RLS_TENANT_ROLE: Migration = Migration {
    version: 7,
    name: "tenant_role",
    up: include_str!("../migrations/0007_rls_tenant_role.up.sql"),
    down: include_str!("../migrations/0007_rls_tenant_role.down.sql"),
};

const SUPABASE_TENANT_ROLE: Migration = Migration {
    version: 7,
    name: "supabase_tenant_role",
    up: include_str!("../migrations/0007_supabase_tenant_role.up.sql"),
    down: include_str!("../migrations/0007_supabase_tenant_role.down.sql"),
};

const RLS_SYSTEM_ROLE: Migration = Migration {
    version: 8,
    name: "system_role",
    up: concat!(
        include_str!("../migrations/0008_rls_system_role.up.sql"),
        include_str!("../migrations/0008_system_grants.up.sql")
    ),
    down: include_str!("../migrations/0008_rls_system_role.down.sql"),
};

const SUPABASE_SYSTEM_ROLE: Migration = Migration {
    version: 8,
    name: "supabase_system_role",
    up: concat!(
        include_str!("../migrations/0008_supabase_system_role.up.sql"),
        include_str!("../sql/system_functions.sql"),
        include_str!("../sql/system_owner.sql"),
        include_str!("../migrations/0008_system_grants.up.sql")
    ),
    down: include_str!("../migrations/0008_supabase_system_role.down.sql"),
};

const SOURCES: Migration = Migration {
    version: 9,
    name: "sources",
    up: include_str!("../migrations/0009_sources.up.sql"),
    down: include_str!("../migrations/0009_sources.down.sql"),
};

const SUPABASE_SOURCES: Migration = Migration {
    version: 9,
    name: "supabase_sources",
    up: concat!(
        include_str!("../migrations/0009_sources.up.sql"),
        include_str!("../migrations/0009_supabase_grants.up.sql")
    ),
    down: concat!(
        include_str!("../migrations/0009_supabase_grants.down.sql"),
        include_str!("../migrations/0009_sources.down.sql")
    ),
};

const CHUNK_VECTORS: Migration = Migration {
    version: 10,
    name: "chunk_vectors",
    up: include_str!("../migrations/0010_chunk_vectors.up.sql"),
    down: include_str!("../migrations/0010_chunk_vectors.down.sql"),
};

const SUPABASE_CHUNK_VECTORS: Migration = Migration {
    version: 10,
    name: "supabase_chunk_vectors",
    up: concat!(
        include_str!("../migrations/0010_chunk_vectors.up.sql"),
        include_str!("../migrations/0010_supabase_grants.up.sql")
    ),
    down: concat!(
        include_str!("../migrations/0010_supabase_grants.down.sql"),
        include_str!("../migrations/0010_chunk_vectors.down.sql")
    ),
};

const ERASURE: Migration = Migration {
    version: 11,
    name: "erasure",
    up: include_str!("../migrations/0011_erasure.up.sql"),
    down: include_str!("../migrations/0011_erasure.down.sql"),
};

const SUPABASE_ERASURE: Migration = Migration {
    version: 11,
    name: "supabase_erasure",
    up: concat!(
        include_str!("../migrations/0011_erasure.up.sql"),
        include_str!("../migrations/0011_supabase_grants.up.sql")
    ),
    down: concat!(
        include_str!("../migrations/0011_supabase_grants.down.sql"),
        include_str!("../migrations/0011_erasure.down.sql")
    ),
};

const CHUNK_VECTORS_BY_SOURCE: Migration = Migration {
    version: 12,
    name: "chunk_vectors_by_source",
    up: include_str!("../migrations/0012_chunk_vectors_by_source.up.sql"),
    down: include_str!("../migrations/0012_chunk_vectors_by_source.down.sql"),
};

const FILES: Migration = Migration {
    version: 13,
    name: "files",
    up: include_str!("../migrations/0013_files.up.sql"),
    down: include_str!("../migrations/0013_files.down.sql"),
};

const SUPABASE_FILES: Migration = Migration {
    version: 13,
    name: "supabase_files",
    up: concat!(
        include_str!("../migrations/0013_files.up.sql"),
        include_str!("../migrations/0013_supabase_grants.up.sql")
    ),
    down: concat!(
        include_str!("../migrations/0013_supabase_grants.down.sql"),
        include_str!("../migrations/0013_files.down.sql")
    ),
};

const JOB_TRACE: Migration = Migration {
    version: 14,
    name: "job_trace",
    up: include_str!("../migrations/0014_job_trace.up.sql"),
    down: include_str!("../migrations/0014_job_trace.down.sql"),
};

/// Supabase mode provisions the system functions itself: version 2 replaces version 1.
const SUPABASE_JOB_TRACE: Migration = Migration {
    version: 14,
    name: "supabase_job_trace",
    up: reprovisioned!("../migrations/0014_job_trace.up.sql"),
    // Version 2's new function goes; the others stay at version 2, which a build of version 1
    // refuses by name at start-up rather than calling.
    down: concat!(
        "SET LOCAL ROLE forge_system;\n",
        "DROP FUNCTION forge_sys_job_counts();\n",
        "RESET ROLE;\n",
        include_str!("../migrations/0014_job_trace.down.sql")
    ),
};

const THREAD_SUMMARY: Migration = Migration {
    version: 15,
    name: "thread_summary",
    up: include_str!("../migrations/0015_thread_summary.up.sql"),
    down: include_str!("../migrations/0015_thread_summary.down.sql"),
};

const EVALS: Migration = Migration {
    version: 16,
    name: "evals",
    up: include_str!("../migrations/0016_evals.up.sql"),
    down: include_str!("../migrations/0016_evals.down.sql"),
};

const SUPABASE_EVALS: Migration = Migration {
    version: 16,
    name: "supabase_evals",
    up: concat!(
        include_str!("../migrations/0016_evals.up.sql"),
        include_str!("../migrations/0016_supabase_grants.up.sql")
    ),
    down: concat!(
        include_str!("../migrations/0016_supabase_grants.down.sql"),
        include_str!("../migrations/0016_evals.down.sql")
    ),
};

const THREAD_ARCHIVE: Migration = Migration {
    version: 17,
    name: "thread_archive",
    up: include_str!("../migrations/0017_thread_archive.up.sql"),
    down: include_str!("../migrations/0017_thread_archive.down.sql"),
};

const OPEN_JOBS: Migration = Migration {
    version: 18,
    name: "open_jobs",
    up: include_str!("../migrations/0018_open_jobs.up.sql"),
    down: include_str!("../migrations/0018_open_jobs.down.sql"),
};

/// Supabase mode provisions the system functions itself: version 3 (a claim planned over the
/// open jobs) replaces version 2.
const SUPABASE_OPEN_JOBS: Migration = Migration {
    version: 18,
    name: "supabase_open_jobs",
    up: reprovisioned!("../migrations/0018_open_jobs.up.sql"),
    // The functions stay at version 3 (their signatures did not change), which a build of
    // version 2 refuses by name at start-up rather than calling.
    down: include_str!("../migrations/0018_open_jobs.down.sql"),
};

/// Step commits write in one statement: no foreign keys from the event log and history to their
/// parents, and no notification trigger (commit_step notifies itself).
const STEP_WRITES: Migration = Migration {
    version: 19,
    name: "step_writes",
    up: include_str!("../migrations/0019_step_writes.up.sql"),
    down: concat!(
        include_str!("../migrations/0006_event_notify.up.sql"),
        include_str!("../migrations/0019_step_writes.down.sql")
    ),
};

const CLAIM_SPLIT: Migration = Migration {
    version: 20,
    name: "claim_split",
    up: include_str!("../migrations/0020_claim_split.up.sql"),
    down: include_str!("../migrations/0020_claim_split.down.sql"),
};

/// Supabase mode provisions the system functions itself: version 4 (a claim over the lapsing and
/// the ready jobs apart) replaces version 3.
const SUPABASE_CLAIM_SPLIT: Migration = Migration {
    version: 20,
    name: "supabase_claim_split",
    up: reprovisioned!("../migrations/0020_claim_split.up.sql"),
    // The functions stay at version 4, which a build of version 3 refuses at start-up.
    down: include_str!("../migrations/0020_claim_split.down.sql"),
};

/// A step commit and a lease in one round trip: functions that set the tenant themselves, so a
/// call in autocommit is the whole transaction.
const ONE_TRIP_WRITES: Migration = Migration {
    version: 21,
    name: "one_trip_writes",
    up: include_str!("../migrations/0021_one_trip_writes.up.sql"),
    down: include_str!("../migrations/0021_one_trip_writes.down.sql"),
};

/// Supabase mode calls them as `forge_tenant`, inside its tenant transaction.
const SUPABASE_ONE_TRIP_WRITES: Migration = Migration {
    version: 21,
    name: "supabase_one_trip_writes",
    up: concat!(
        include_str!("../migrations/0021_one_trip_writes.up.sql"),
        include_str!("../migrations/0021_supabase_grants.up.sql")
    ),
    // Dropping the functions drops their grants.
    down: include_str!("../migrations/0021_one_trip_writes.down.sql"),
};

/// A step commit with a smaller plan: the gate in the run row's update, the whole row read only
/// for a refusal (`forge_write_step`; `forge_step` stays for a rolling deploy's older processes).
const LEAN_STEP: Migration = Migration {
    version: 22,
    name: "lean_step",
    up: include_str!("../migrations/0022_lean_step.up.sql"),
    down: include_str!("../migrations/0022_lean_step.down.sql"),
};

/// Supabase mode calls it as `forge_tenant`, inside its tenant transaction.
const SUPABASE_LEAN_STEP: Migration = Migration {
    version: 22,
    name: "supabase_lean_step",
    up: concat!(
        include_str!("../migrations/0022_lean_step.up.sql"),
        include_str!("../migrations/0022_supabase_grants.up.sql")
    ),
    // Dropping the function drops its grant.
    down: include_str!("../migrations/0022_lean_step.down.sql"),
};

/// The reads a run begins with (its thread, the first page of its history) as functions that
/// set the tenant themselves: prepared calls, no longer parsed and planned each time.
const TENANT_READS: Migration = Migration {
    version: 23,
    name: "tenant_reads",
    up: include_str!("../migrations/0023_tenant_reads.up.sql"),
    down: include_str!("../migrations/0023_tenant_reads.down.sql"),
};

/// Supabase mode calls them as `forge_tenant`, inside its tenant transaction.
const SUPABASE_TENANT_READS: Migration = Migration {
    version: 23,
    name: "supabase_tenant_reads",
    up: concat!(
        include_str!("../migrations/0023_tenant_reads.up.sql"),
        include_str!("../migrations/0023_supabase_grants.up.sql")
    ),
    // Dropping the functions drops their grants.
    down: include_str!("../migrations/0023_tenant_reads.down.sql"),
};

/// The processes listening for run-event notifications, so that steps notify only while one does.
const LISTENERS: Migration = Migration {
    version: 24,
    name: "listeners",
    up: include_str!("../migrations/0024_listeners.up.sql"),
    down: include_str!("../migrations/0024_listeners.down.sql"),
};

/// Supabase mode commits steps as `forge_tenant`, which reads the listeners.
const SUPABASE_LISTENERS: Migration = Migration {
    version: 24,
    name: "supabase_listeners",
    up: concat!(
        include_str!("../migrations/0024_listeners.up.sql"),
        include_str!("../migrations/0024_supabase_grants.up.sql")
    ),
    // Dropping the table drops its grants.
    down: include_str!("../migrations/0024_listeners.down.sql"),
};

/// The functions that return at most one row say so, so that the statements calling them keep a
/// generic plan (the same in both modes).
const ONE_ROW_FUNCTIONS: Migration = Migration {
    version: 25,
    name: "one_row_functions",
    up: include_str!("../migrations/0025_one_row_functions.up.sql"),
    down: include_str!("../migrations/0025_one_row_functions.down.sql"),
};

/// A thread's creation and a run's start on an idle thread, one round trip each.
const ONE_TRIP_STARTS: Migration = Migration {
    version: 26,
    name: "one_trip_starts",
    up: include_str!("../migrations/0026_one_trip_starts.up.sql"),
    down: include_str!("../migrations/0026_one_trip_starts.down.sql"),
};

/// Supabase mode calls them as `forge_tenant`, inside its tenant transaction.
const SUPABASE_ONE_TRIP_STARTS: Migration = Migration {
    version: 26,
    name: "supabase_one_trip_starts",
    up: concat!(
        include_str!("../migrations/0026_one_trip_starts.up.sql"),
        include_str!("../migrations/0026_supabase_grants.up.sql")
    ),
    // Dropping the functions drops their grants.
    down: include_str!("../migrations/0026_one_trip_starts.down.sql"),
};

/// A run's thread and the first page of its history, read in the statement that takes its lease.
const LEASE_WITH_HISTORY: Migration = Migration {
    version: 27,
    name: "lease_with_history",
    up: include_str!("../migrations/0027_lease_with_history.up.sql"),
    down: include_str!("../migrations/0027_lease_with_history.down.sql"),
};

/// Supabase mode calls it as `forge_tenant`, inside its tenant transaction.
const SUPABASE_LEASE_WITH_HISTORY: Migration = Migration {
    version: 27,
    name: "supabase_lease_with_history",
    up: concat!(
        include_str!("../migrations/0027_lease_with_history.up.sql"),
        include_str!("../migrations/0027_supabase_grants.up.sql")
    ),
    // Dropping the function drops its grant.
    down: include_str!("../migrations/0027_lease_with_history.down.sql"),
};

/// The system functions' version 5 (the claim plans its lookups by key); RLS mode's administrator
/// provisions them.
const CLAIM_BY_KEY: Migration = Migration {
    version: 28,
    name: "claim_by_key",
    up: include_str!("../migrations/0028_claim_by_key.up.sql"),
    down: include_str!("../migrations/0028_claim_by_key.down.sql"),
};

/// Supabase mode provisions the system functions itself: version 5 replaces version 4.
const SUPABASE_CLAIM_BY_KEY: Migration = Migration {
    version: 28,
    name: "supabase_claim_by_key",
    up: reprovisioned!("../migrations/0028_claim_by_key.up.sql"),
    // The functions stay at version 5, which a build of version 4 refuses at start-up.
    down: include_str!("../migrations/0028_claim_by_key.down.sql"),
};

/// Two indexes no statement uses, which every job's claim and completion and every new thread
/// wrote to. The same in both modes.
const UNUSED_INDEXES: Migration = Migration {
    version: 29,
    name: "unused_indexes",
    up: include_str!("../migrations/0029_unused_indexes.up.sql"),
    down: include_str!("../migrations/0029_unused_indexes.down.sql"),
};

/// The event log kept as the JSON text Forge wrote (`json`, not re-parsed into `jsonb`), and
/// `forge_write_step`'s overload that takes the events as text.
const JSON_EVENT_LOG: Migration = Migration {
    version: 30,
    name: "json_event_log",
    up: include_str!("../migrations/0030_json_event_log.up.sql"),
    down: include_str!("../migrations/0030_json_event_log.down.sql"),
};

/// Supabase mode calls the new overload as `forge_tenant`, inside its tenant transaction.
const SUPABASE_JSON_EVENT_LOG: Migration = Migration {
    version: 30,
    name: "supabase_json_event_log",
    up: concat!(
        include_str!("../migrations/0030_json_event_log.up.sql"),
        include_str!("../migrations/0030_supabase_grants.up.sql")
    ),
    // Dropping the function drops its grant.
    down: include_str!("../migrations/0030_json_event_log.down.sql"),
};

/// Group commit writes each tenant's steps of a group as sets (RLS mode only: Supabase mode sends
/// each step alone, so its `forge_tenant` is granted nothing new).
const SET_BASED_GROUP_WRITE: Migration = Migration {
    version: 31,
    name: "set_based_group_write",
    up: include_str!("../migrations/0031_set_based_group_write.up.sql"),
    down: include_str!("../migrations/0031_set_based_group_write.down.sql"),
};

/// The system functions' version 6 (a worker claims for several loops in one statement); RLS
/// mode's administrator provisions them.
const CLAIM_BATCH: Migration = Migration {
    version: 32,
    name: "claim_batch",
    up: include_str!("../migrations/0032_claim_batch.up.sql"),
    down: include_str!("../migrations/0032_claim_batch.down.sql"),
};

/// Supabase mode provisions the system functions itself: version 6 replaces version 5.
const SUPABASE_CLAIM_BATCH: Migration = Migration {
    version: 32,
    name: "supabase_claim_batch",
    up: reprovisioned!("../migrations/0032_claim_batch.up.sql"),
    // The functions stay at version 6, which a build of version 5 refuses at start-up.
    down: include_str!("../migrations/0032_claim_batch.down.sql"),
};

/// The system functions' version 7 (a job completed in one statement); RLS mode's administrator
/// provisions them.
const ONE_STATEMENT_COMPLETE: Migration = Migration {
    version: 33,
    name: "one_statement_complete",
    up: include_str!("../migrations/0033_one_statement_complete.up.sql"),
    down: include_str!("../migrations/0033_one_statement_complete.down.sql"),
};

/// Supabase mode provisions the system functions itself: version 7 replaces version 6.
const SUPABASE_ONE_STATEMENT_COMPLETE: Migration = Migration {
    version: 33,
    name: "supabase_one_statement_complete",
    up: reprovisioned!("../migrations/0033_one_statement_complete.up.sql"),
    // The functions stay at version 7, which a build of version 6 refuses at start-up.
    down: include_str!("../migrations/0033_one_statement_complete.down.sql"),
};

/// An index of the runs queued or running, which a server counts before each start (both modes).
const RUNS_IN_FLIGHT: Migration = Migration {
    version: 34,
    name: "runs_in_flight",
    up: include_str!("../migrations/0034_runs_in_flight.up.sql"),
    down: include_str!("../migrations/0034_runs_in_flight.down.sql"),
};

/// The migrations of a mode, in order.
pub fn migrations(mode: Mode) -> [Migration; 34] {
    match mode {
        Mode::Rls => [
            TABLES,
            RLS,
            INTERACTIONS,
            USAGE,
            RUN_ROLES,
            EVENT_NOTIFY,
            RLS_TENANT_ROLE,
            RLS_SYSTEM_ROLE,
            SOURCES,
            CHUNK_VECTORS,
            ERASURE,
            CHUNK_VECTORS_BY_SOURCE,
            FILES,
            JOB_TRACE,
            THREAD_SUMMARY,
            EVALS,
            THREAD_ARCHIVE,
            OPEN_JOBS,
            STEP_WRITES,
            CLAIM_SPLIT,
            ONE_TRIP_WRITES,
            LEAN_STEP,
            TENANT_READS,
            LISTENERS,
            ONE_ROW_FUNCTIONS,
            ONE_TRIP_STARTS,
            LEASE_WITH_HISTORY,
            CLAIM_BY_KEY,
            UNUSED_INDEXES,
            JSON_EVENT_LOG,
            SET_BASED_GROUP_WRITE,
            CLAIM_BATCH,
            ONE_STATEMENT_COMPLETE,
            RUNS_IN_FLIGHT,
        ],
        Mode::Supabase => [
            TABLES,
            SUPABASE_RLS,
            SUPABASE_INTERACTIONS,
            SUPABASE_USAGE,
            RUN_ROLES,
            EVENT_NOTIFY,
            SUPABASE_TENANT_ROLE,
            SUPABASE_SYSTEM_ROLE,
            SUPABASE_SOURCES,
            SUPABASE_CHUNK_VECTORS,
            SUPABASE_ERASURE,
            CHUNK_VECTORS_BY_SOURCE,
            SUPABASE_FILES,
            SUPABASE_JOB_TRACE,
            THREAD_SUMMARY,
            SUPABASE_EVALS,
            THREAD_ARCHIVE,
            SUPABASE_OPEN_JOBS,
            STEP_WRITES,
            SUPABASE_CLAIM_SPLIT,
            SUPABASE_ONE_TRIP_WRITES,
            SUPABASE_LEAN_STEP,
            SUPABASE_TENANT_READS,
            SUPABASE_LISTENERS,
            ONE_ROW_FUNCTIONS,
            SUPABASE_ONE_TRIP_STARTS,
            SUPABASE_LEASE_WITH_HISTORY,
            SUPABASE_CLAIM_BY_KEY,
            UNUSED_INDEXES,
            SUPABASE_JSON_EVENT_LOG,
            SET_BASED_GROUP_WRITE,
            SUPABASE_CLAIM_BATCH,
            SUPABASE_ONE_STATEMENT_COMPLETE,
            RUNS_IN_FLIGHT,
        ],
    }
}

/// Key of the advisory lock migrations hold (`'forge'` in ASCII).
pub(crate) const LOCK_KEY: i64 = 0x0066_6f72_6765;

const LEDGER: &str = "CREATE TABLE IF NOT EXISTS forge_schema_migrations (
    version bigint PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)";

/// Waits, within a transaction, for any other transaction that migrates or provisions: many
/// processes may start against one database at once.
pub(crate) async fn lock(tx: &mut PgConnection) -> Result<(), OpenError> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(LOCK_KEY)
        .execute(&mut *tx)
        .await
        .map_err(|e| OpenError::Migrate(db_error(e)))?;
    Ok(())
}

/// Applies pending migrations in their own transaction; returns how many this call applied.
pub(crate) async fn up(conn: &mut PgConnection, mode: Mode) -> Result<usize, OpenError> {
    let fail = |e: sqlx::Error| OpenError::Migrate(db_error(e));
    let mut tx = conn.begin().await.map_err(fail)?;
    lock(&mut tx).await?;
    let count = apply(&mut tx, mode).await?;
    if mode == Mode::Supabase {
        // Supabase grants what its login role creates in `public` to `anon` and `authenticated`
        // by default (TRUNCATE included); taken back on every start, from every Forge object
        // this role owns, so a table a later migration adds is never left open.
        sqlx::raw_sql(REVOKE_FROM_SUPABASE_USERS)
            .execute(&mut *tx)
            .await
            .map_err(fail)?;
    }
    tx.commit().await.map_err(fail)?;
    Ok(count)
}

/// Applies pending migrations within `tx`, which holds the migration lock ([`lock`]); returns
/// how many it applied.
pub(crate) async fn apply(tx: &mut PgConnection, mode: Mode) -> Result<usize, OpenError> {
    let fail = |e: sqlx::Error| OpenError::Migrate(db_error(e));
    sqlx::query(LEDGER).execute(&mut *tx).await.map_err(fail)?;
    let mut count = 0;
    for m in migrations(mode) {
        let applied: Option<String> =
            sqlx::query_scalar("SELECT name FROM forge_schema_migrations WHERE version = $1")
                .bind(m.version)
                .fetch_optional(&mut *tx)
                .await
                .map_err(fail)?;
        match applied {
            Some(name) if name == m.name => {}
            Some(name) => return Err(mismatch(&name, mode)),
            None => {
                sqlx::raw_sql(m.up).execute(&mut *tx).await.map_err(fail)?;
                sqlx::query("INSERT INTO forge_schema_migrations (version, name) VALUES ($1, $2)")
                    .bind(m.version)
                    .bind(m.name)
                    .execute(&mut *tx)
                    .await
                    .map_err(fail)?;
                count += 1;
            }
        }
    }
    Ok(count)
}

/// A migration applied under another name: the database was provisioned for the other mode.
fn mismatch(name: &str, mode: Mode) -> OpenError {
    let found = if name.starts_with("supabase") {
        "supabase"
    } else {
        "rls"
    };
    OpenError::ModeMismatch {
        found: found.into(),
        wanted: mode.name(),
    }
}

/// How many of the mode's migrations are not applied (all of them on an empty database), or the
/// mode the database was provisioned for when it is the other.
pub(crate) async fn pending(conn: &mut PgConnection, mode: Mode) -> Result<usize, OpenError> {
    let fail = |e: sqlx::Error| OpenError::Connect(db_error(e));
    let ledger: bool =
        sqlx::query_scalar("SELECT to_regclass('forge_schema_migrations') IS NOT NULL")
            .fetch_one(&mut *conn)
            .await
            .map_err(fail)?;
    if !ledger {
        return Ok(migrations(mode).len());
    }
    let applied: Vec<(i64, String)> =
        sqlx::query_as("SELECT version, name FROM forge_schema_migrations")
            .fetch_all(&mut *conn)
            .await
            .map_err(fail)?;
    let mut missing = 0;
    for m in migrations(mode) {
        match applied.iter().find(|(v, _)| *v == m.version) {
            Some((_, name)) if name == m.name => {}
            Some((_, name)) => return Err(mismatch(name, mode)),
            None => missing += 1,
        }
    }
    Ok(missing)
}

/// Revokes every privilege `anon` and `authenticated` hold on the Forge tables, sequences and
/// functions the current role owns in the current schema.
const REVOKE_FROM_SUPABASE_USERS: &str = r"
DO $$
DECLARE
    r record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'anon')
        OR NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'authenticated') THEN
        RETURN;
    END IF;
    FOR r IN
        SELECT c.oid::regclass AS obj, c.relkind
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relname LIKE 'forge\_%'
          AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
          AND c.relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
    LOOP
        IF r.relkind = 'S' THEN
            EXECUTE format('REVOKE ALL ON SEQUENCE %s FROM anon, authenticated', r.obj);
        ELSE
            EXECUTE format('REVOKE ALL ON TABLE %s FROM anon, authenticated', r.obj);
        END IF;
    END LOOP;
    FOR r IN
        SELECT p.oid::regprocedure AS obj
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = current_schema() AND p.proname LIKE 'forge\_%'
          AND p.proowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM anon, authenticated', r.obj);
    END LOOP;
END
$$;
";

pub(crate) async fn applied(pool: &PgPool) -> Result<Vec<i64>, Error> {
    let rows = sqlx::query("SELECT version FROM forge_schema_migrations ORDER BY version")
        .fetch_all(pool)
        .await
        .map_err(db_error)?;
    rows.iter()
        .map(|r| r.try_get::<i64, _>(0).map_err(db_error))
        .collect()
}

pub(crate) async fn down_all(pool: &PgPool, mode: Mode) -> Result<(), Error> {
    let mut tx = pool.begin().await.map_err(db_error)?;
    revert_all(&mut tx, mode).await?;
    tx.commit().await.map_err(db_error)
}

/// Reverts every applied migration within `tx`, newest first.
pub(crate) async fn revert_all(tx: &mut PgConnection, mode: Mode) -> Result<(), Error> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(LOCK_KEY)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    for m in migrations(mode).iter().rev() {
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
    }
    Ok(())
}
