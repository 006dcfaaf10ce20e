//! The store's migrations, each listed once with what Supabase mode runs differently, applied
//! through the shared layer ([`forge_sql::migrations`]) in one transaction that first takes a
//! transaction-scoped advisory lock, so processes starting at once queue behind each other and
//! each migration is applied exactly once.
//!
//! Supabase mode provisions the system functions itself: after a run that applied anything, they
//! are created again as this build has them, as `forge_system` (which owns them since migration
//! 8 and alone may replace them). RLS mode's administrator provisions them
//! ([`crate::provision_system`]).

use std::borrow::Cow;
use std::sync::LazyLock;

use forge_core::Error;
use forge_sql::dialect::Dialect;
use forge_sql::migrations::{Migration, MigrationError, Migrations, Sqlx};
use sqlx::{Connection, PgConnection, PgPool};

use crate::rows::db_error;
use crate::{Mode, OpenError};
use Supabase::{Also, Own, Same};

/// PostgreSQL's differences, as the shared SQL layer needs them.
pub(crate) struct Pg;

impl Dialect for Pg {
    type Database = sqlx::Postgres;

    fn table_exists(table: &str) -> String {
        format!("SELECT to_regclass('{table}') IS NOT NULL")
    }
}

/// The SQL that applies a migration and the SQL that reverts it.
#[derive(Clone, Copy)]
struct Scripts {
    up: &'static str,
    down: &'static str,
}

impl Scripts {
    /// Nothing: Supabase mode's migrations that re-created the system functions, which now
    /// follow every run that applied anything ([`REPROVISION`]).
    const NONE: Self = Self { up: "", down: "" };
}

/// The text of `migrations/{$file}.sql`.
macro_rules! sql {
    ($file:expr) => {
        include_str!(concat!("../migrations/", $file, ".sql"))
    };
}

/// The scripts of `migrations/{$stem}.up.sql` and `.down.sql`; or, several files each way, run
/// in the order given.
macro_rules! scripts {
    ($stem:literal) => {
        Scripts {
            up: sql!(concat!($stem, ".up")),
            down: sql!(concat!($stem, ".down")),
        }
    };
    (up: [$($up:literal),*], down: [$($down:literal),*]) => {
        Scripts {
            up: concat!("" $(, sql!(concat!($up, ".up")))*),
            down: concat!("" $(, sql!(concat!($down, ".down")))*),
        }
    };
}

/// What Supabase mode runs for a migration instead of RLS mode's scripts.
enum Supabase {
    /// The same scripts (and the same name).
    Same,
    /// The same scripts, with these run after `up` and before `down`: grants to
    /// `forge_tenant`, or nothing where the migration's point was a new version of the system
    /// functions.
    Also(Scripts),
    /// Scripts of its own.
    Own(Scripts),
}

/// A migration as RLS mode runs it, and what Supabase mode runs (named `supabase_{name}` when
/// not the same).
struct Entry {
    version: i64,
    name: &'static str,
    scripts: Scripts,
    supabase: Supabase,
}

/// Supabase mode's version 14 adds a system function, which its down drops as its owner.
const DROP_JOB_COUNTS: &str =
    "SET LOCAL ROLE forge_system;\nDROP FUNCTION forge_sys_job_counts();\nRESET ROLE;\n";

/// Every migration, in order.
const ENTRIES: &[Entry] = &[
    Entry {
        version: 1,
        name: "tables",
        scripts: scripts!("0001_tables"),
        supabase: Same,
    },
    Entry {
        version: 2,
        name: "rls",
        scripts: scripts!("0002_rls"),
        supabase: Own(scripts!("0002_supabase_rls")),
    },
    Entry {
        version: 3,
        name: "interactions",
        scripts: scripts!("0003_interactions"),
        supabase: Also(scripts!("0003_supabase_grants")),
    },
    Entry {
        version: 4,
        name: "usage",
        scripts: scripts!("0004_usage"),
        supabase: Also(scripts!("0004_supabase_grants")),
    },
    Entry {
        version: 5,
        name: "run_roles",
        scripts: scripts!("0005_run_roles"),
        supabase: Same,
    },
    Entry {
        version: 6,
        name: "event_notify",
        scripts: scripts!("0006_event_notify"),
        supabase: Same,
    },
    Entry {
        version: 7,
        name: "tenant_role",
        scripts: scripts!("0007_rls_tenant_role"),
        supabase: Own(scripts!("0007_supabase_tenant_role")),
    },
    Entry {
        version: 8,
        name: "system_role",
        scripts: scripts!(up: ["0008_rls_system_role", "0008_system_grants"], down: ["0008_rls_system_role"]),
        supabase: Own(
            scripts!(up: ["0008_supabase_system_role", "0008_system_grants"], down: ["0008_supabase_system_role"]),
        ),
    },
    Entry {
        version: 9,
        name: "sources",
        scripts: scripts!("0009_sources"),
        supabase: Also(scripts!("0009_supabase_grants")),
    },
    Entry {
        version: 10,
        name: "chunk_vectors",
        scripts: scripts!("0010_chunk_vectors"),
        supabase: Also(scripts!("0010_supabase_grants")),
    },
    Entry {
        version: 11,
        name: "erasure",
        scripts: scripts!("0011_erasure"),
        supabase: Also(scripts!("0011_supabase_grants")),
    },
    Entry {
        version: 12,
        name: "chunk_vectors_by_source",
        scripts: scripts!("0012_chunk_vectors_by_source"),
        supabase: Same,
    },
    Entry {
        version: 13,
        name: "files",
        scripts: scripts!("0013_files"),
        supabase: Also(scripts!("0013_supabase_grants")),
    },
    Entry {
        version: 14,
        name: "job_trace",
        scripts: scripts!("0014_job_trace"),
        supabase: Also(Scripts {
            up: "",
            down: DROP_JOB_COUNTS,
        }),
    },
    Entry {
        version: 15,
        name: "thread_summary",
        scripts: scripts!("0015_thread_summary"),
        supabase: Same,
    },
    Entry {
        version: 16,
        name: "evals",
        scripts: scripts!("0016_evals"),
        supabase: Also(scripts!("0016_supabase_grants")),
    },
    Entry {
        version: 17,
        name: "thread_archive",
        scripts: scripts!("0017_thread_archive"),
        supabase: Same,
    },
    Entry {
        version: 18,
        name: "open_jobs",
        scripts: scripts!("0018_open_jobs"),
        supabase: Also(Scripts::NONE),
    },
    Entry {
        version: 19,
        name: "step_writes",
        scripts: Scripts {
            up: sql!("0019_step_writes.up"),
            // Back to the notification trigger of version 6.
            down: concat!(sql!("0006_event_notify.up"), sql!("0019_step_writes.down")),
        },
        supabase: Same,
    },
    Entry {
        version: 20,
        name: "claim_split",
        scripts: scripts!("0020_claim_split"),
        supabase: Also(Scripts::NONE),
    },
    Entry {
        version: 21,
        name: "one_trip_writes",
        scripts: scripts!("0021_one_trip_writes"),
        supabase: Also(scripts!(up: ["0021_supabase_grants"], down: [])),
    },
    Entry {
        version: 22,
        name: "lean_step",
        scripts: scripts!("0022_lean_step"),
        supabase: Also(scripts!(up: ["0022_supabase_grants"], down: [])),
    },
    Entry {
        version: 23,
        name: "tenant_reads",
        scripts: scripts!("0023_tenant_reads"),
        supabase: Also(scripts!(up: ["0023_supabase_grants"], down: [])),
    },
    Entry {
        version: 24,
        name: "listeners",
        scripts: scripts!("0024_listeners"),
        supabase: Also(scripts!(up: ["0024_supabase_grants"], down: [])),
    },
    Entry {
        version: 25,
        name: "one_row_functions",
        scripts: scripts!("0025_one_row_functions"),
        supabase: Same,
    },
    Entry {
        version: 26,
        name: "one_trip_starts",
        scripts: scripts!("0026_one_trip_starts"),
        supabase: Also(scripts!(up: ["0026_supabase_grants"], down: [])),
    },
    Entry {
        version: 27,
        name: "lease_with_history",
        scripts: scripts!("0027_lease_with_history"),
        supabase: Also(scripts!(up: ["0027_supabase_grants"], down: [])),
    },
    Entry {
        version: 28,
        name: "claim_by_key",
        scripts: scripts!("0028_claim_by_key"),
        supabase: Also(Scripts::NONE),
    },
    Entry {
        version: 29,
        name: "unused_indexes",
        scripts: scripts!("0029_unused_indexes"),
        supabase: Same,
    },
    Entry {
        version: 30,
        name: "json_event_log",
        scripts: scripts!("0030_json_event_log"),
        supabase: Also(scripts!(up: ["0030_supabase_grants"], down: [])),
    },
    Entry {
        version: 31,
        name: "set_based_group_write",
        scripts: scripts!("0031_set_based_group_write"),
        supabase: Same,
    },
    Entry {
        version: 32,
        name: "claim_batch",
        scripts: scripts!("0032_claim_batch"),
        supabase: Also(Scripts::NONE),
    },
    Entry {
        version: 33,
        name: "one_statement_complete",
        scripts: scripts!("0033_one_statement_complete"),
        supabase: Also(Scripts::NONE),
    },
    Entry {
        version: 34,
        name: "runs_in_flight",
        scripts: scripts!("0034_runs_in_flight"),
        supabase: Same,
    },
    Entry {
        version: 35,
        name: "source_owner",
        scripts: scripts!("0035_source_owner"),
        supabase: Same,
    },
    Entry {
        version: 36,
        name: "request_keys",
        scripts: scripts!("0036_request_keys"),
        supabase: Also(scripts!("0036_supabase_grants")),
    },
];

/// The migrations of a mode, in order.
pub fn migrations(mode: Mode) -> &'static Migrations {
    static RLS: LazyLock<Migrations> = LazyLock::new(|| of(Mode::Rls));
    static SUPABASE: LazyLock<Migrations> = LazyLock::new(|| of(Mode::Supabase));
    match mode {
        Mode::Rls => &RLS,
        Mode::Supabase => &SUPABASE,
    }
}

fn of(mode: Mode) -> Migrations {
    let list = ENTRIES.iter().map(|e| {
        let (name, up, down): (Cow<'static, str>, Cow<'static, str>, Cow<'static, str>) =
            match (mode, &e.supabase) {
                (Mode::Rls, _) | (Mode::Supabase, Supabase::Same) => {
                    (e.name.into(), e.scripts.up.into(), e.scripts.down.into())
                }
                (Mode::Supabase, Supabase::Also(also)) => (
                    format!("supabase_{}", e.name).into(),
                    format!("{}{}", e.scripts.up, also.up).into(),
                    format!("{}{}", also.down, e.scripts.down).into(),
                ),
                (Mode::Supabase, Supabase::Own(own)) => (
                    format!("supabase_{}", e.name).into(),
                    own.up.into(),
                    own.down.into(),
                ),
            };
        Migration {
            version: e.version,
            name,
            up,
            down,
        }
    });
    Migrations::new(list.collect())
}

/// Supabase mode's system functions as this build has them, created as `forge_system`, with the
/// application role recorded for `system_owner.sql`'s grants.
const REPROVISION: &str = concat!(
    "SELECT set_config('forge.app_role', current_user, true);\n",
    "SET LOCAL ROLE forge_system;\n",
    include_str!("../sql/system_functions.sql"),
    "RESET ROLE;\n",
    include_str!("../sql/system_owner.sql")
);

/// Key of the advisory lock migrations hold (`'forge'` in ASCII).
pub(crate) const LOCK_KEY: i64 = 0x0066_6f72_6765;

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
        if count > 0 {
            sqlx::raw_sql(REPROVISION)
                .execute(&mut *tx)
                .await
                .map_err(fail)?;
        }
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
    migrations(mode)
        .apply(&mut Sqlx::<Pg, _>::new(tx))
        .await
        .map_err(|e| refused(e, mode))
}

/// The error of a migration run: a ledger of the other mode's migrations is
/// [`OpenError::ModeMismatch`].
fn refused(e: MigrationError, mode: Mode) -> OpenError {
    match e {
        MigrationError::Mismatch { found, .. } => OpenError::ModeMismatch {
            found: if found.starts_with("supabase") {
                "supabase"
            } else {
                "rls"
            }
            .into(),
            wanted: mode.name(),
        },
        other => OpenError::Migrate(failed(other)),
    }
}

/// How many of the mode's migrations are not applied (all of them on an empty database), or the
/// mode the database was provisioned for when it is the other.
pub(crate) async fn pending(conn: &mut PgConnection, mode: Mode) -> Result<usize, OpenError> {
    let applied = Migrations::applied(&mut Sqlx::<Pg, _>::new(conn))
        .await
        .map_err(|e| OpenError::Connect(failed(e)))?;
    migrations(mode)
        .pending(&applied)
        .map_err(|e| refused(e, mode))
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

/// Versions of the applied migrations, ascending.
pub(crate) async fn applied(pool: &PgPool) -> Result<Vec<i64>, Error> {
    let mut conn = pool.acquire().await.map_err(db_error)?;
    let applied = Migrations::applied(&mut Sqlx::<Pg, _>::new(&mut *conn))
        .await
        .map_err(failed)?;
    Ok(applied.into_iter().map(|(version, _)| version).collect())
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
    migrations(mode)
        .revert_all(&mut Sqlx::<Pg, _>::new(tx))
        .await
        .map_err(failed)
}

/// A migration error as the store's: the database's, classified, or the migrator's.
fn failed(e: MigrationError) -> Error {
    match e {
        MigrationError::Database(e) => db_error(e),
        other => Error::backend(false, other),
    }
}
