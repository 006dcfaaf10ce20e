//! Every storage and queue port of `forge-core` on PostgreSQL, with tenants isolated twice: by the
//! `tenant_id` filter in every query, and by row-level security that the database enforces.
//!
//! Two modes:
//! - [`Mode::Rls`]: policies keyed on a per-transaction setting (`forge.tenant_id`), which the
//!   adapter sets at the start of every tenant transaction. The adapter refuses to start as a role
//!   that would bypass the policies (a superuser or a `BYPASSRLS` role).
//! - [`Mode::Supabase`]: policies keyed on the caller's JWT claims through `auth.jwt()`, the way
//!   Supabase projects do it; every tenant transaction runs `SET LOCAL ROLE forge_tenant` (a role
//!   of Forge's own: `authenticated`, which Supabase's REST layer uses for signed-in users, has no
//!   grant on any Forge table) with
//!   `request.jwt.claims` carrying the tenant.
//!
//! Work across tenants (claiming and settling queue jobs, dead letters, the interaction expiry
//! sweep) goes through `SECURITY DEFINER` functions owned by the role `forge_system`, which the
//! application role cannot become; the policies admit cross-tenant rows only to that role, so no
//! setting an application connection makes opens another tenant's rows. In RLS mode an
//! administrator creates the role and its functions once ([`provision_system`]); Supabase mode's
//! migrations do it as Supabase's `postgres`.
//!
//! The schema is provisioned on connect from embedded, versioned, reversible migrations, under an
//! advisory lock so that many processes may start against one empty database at once.

#![deny(missing_docs)]

mod application;
mod erasure;
mod evals;
mod files;
mod interactions;
mod keys;
mod locks;
mod migrate;
pub mod notify;
mod queue;
mod rows;
mod runs;
mod sources;
mod steps;
#[cfg(feature = "testing")]
pub mod testing;
mod threads;
mod usage;

use std::sync::Arc;

use forge_core::id::{IdGenerator, UuidV7Generator};
use forge_core::scope::Scope;
use forge_core::time::{Clock, SystemClock};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

/// The longest a statement of the store waits for a lock before it fails, retryably.
pub const LOCK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long the server lets one of the store's connections sit idle inside a transaction before
/// it ends the session (and lets go of its locks).
pub const IDLE_IN_TRANSACTION: std::time::Duration = std::time::Duration::from_secs(15);
use sqlx::{Connection, PgConnection};

pub use application::provision_application;
pub use forge_sql::migrations::{Migration, Migrations};
pub use migrate::migrations;
pub use steps::{DEFAULT_STEP_WRITERS, MAX_GROUP, StepGroups};

use crate::rows::db_error;

/// A transaction confined to a tenant, on a connection of the hot pool.
pub(crate) type Tx = forge_sql::Tx<PgConnection>;

/// How tenant isolation is enforced in the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Policies keyed on the `forge.tenant_id` transaction setting.
    Rls,
    /// Policies keyed on Supabase JWT claims (`auth.jwt()`), queries as role `forge_tenant`.
    Supabase,
}

impl Mode {
    /// The mode's name in configuration.
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Rls => "rls",
            Mode::Supabase => "supabase",
        }
    }
}

/// Why the store could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The URL is not a PostgreSQL URL.
    #[error("invalid PostgreSQL URL")]
    Url(#[source] sqlx::Error),
    /// The database could not be reached.
    #[error("could not connect to PostgreSQL")]
    Connect(#[source] forge_core::Error),
    /// The role would bypass row-level security, so isolation would rest on the code alone.
    #[error(
        "role {role} bypasses row-level security (superuser or BYPASSRLS); connect as an application role without either"
    )]
    BypassesRls {
        /// The role.
        role: String,
    },
    /// Supabase mode needs the `auth` schema and roles a Supabase database has.
    #[error("supabase mode needs {missing}; is this a Supabase database?")]
    NotSupabase {
        /// What is missing.
        missing: String,
    },
    /// The database was provisioned for the other mode.
    #[error("the database was provisioned for mode {found}, not {wanted}")]
    ModeMismatch {
        /// The mode its migrations were applied for.
        found: String,
        /// The mode asked for.
        wanted: &'static str,
    },
    /// Applying migrations failed.
    #[error("could not apply migrations")]
    Migrate(#[source] forge_core::Error),
    /// RLS mode: migrations this build needs are not applied, and the application role may not
    /// apply them (an administrator does, with [`provision_system`]).
    #[error("{pending} migration(s) this build needs are not applied; {SYSTEM_HINT}")]
    Unmigrated {
        /// How many.
        pending: usize,
    },
    /// The role `forge_system` or its functions are missing, stale, or within the application's
    /// reach.
    #[error("{problem}; {SYSTEM_HINT}")]
    SystemRole {
        /// What is wrong.
        problem: String,
    },
}

const SYSTEM_HINT: &str = "an administrator provisions the roles forge_system and forge_owner, \
    their functions and the schema: \
    forge migrate --store <app URL> --admin-url <superuser URL of the same database>";

/// Version of `sql/system_functions.sql` this build calls (`forge_sys_version()`).
pub const SYSTEM_FUNCTIONS_VERSION: i32 = 7;

/// The PostgreSQL store.
#[derive(Clone)]
pub struct PostgresStore {
    /// sqlx's pool, for what needs one: the NOTIFY listener, migrations and the cold paths.
    pool: PgPool,
    /// Forge's own pool for the paths every run takes (transactions, claims): no ping when a
    /// connection is handed out or given back (`forge-sql`).
    hot: forge_sql::Pool<PgConnection>,
    /// The writers of the common step, which group the steps that wait for one (RLS mode; none
    /// when group commit is off).
    steps: Option<Arc<steps::StepWriters>>,
    /// How to open a connection (the step writers open their own).
    options: PgConnectOptions,
    mode: Mode,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGenerator>,
    applied_on_connect: usize,
    /// Whether the database has the pgvector extension: nearest-chunk search then runs in it.
    pgvector: bool,
    /// Kept alive as long as the store (tests drop their database with it).
    _guard: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects with the system clock and UUIDv7 ids and checks the role; in Supabase mode it
    /// applies migrations, in RLS mode it refuses a schema behind this build
    /// ([`provision_system`] migrates).
    pub async fn connect(url: &str, mode: Mode) -> Result<Self, OpenError> {
        Self::connect_with(url, mode, Arc::new(SystemClock), Arc::new(UuidV7Generator)).await
    }

    /// Like [`PostgresStore::connect`] with an injected clock and id generator.
    pub async fn connect_with(
        url: &str,
        mode: Mode,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Self, OpenError> {
        let options: PgConnectOptions = url.parse().map_err(OpenError::Url)?;
        let options = options.application_name("forge");
        // One direct connection first: it fails fast with the real reason (a pool would retry a
        // refused connection until its timeout), checks the role and provisions the schema.
        let mut conn = PgConnection::connect_with(&options)
            .await
            .map_err(|e| OpenError::Connect(db_error(e)))?;
        check_role(&mut conn, mode).await?;
        let applied_on_connect = match mode {
            Mode::Supabase => {
                let applied = migrate::up(&mut conn, mode).await?;
                check_tenant_role(&mut conn).await?;
                check_system_role(&mut conn, mode).await?;
                applied
            }
            // The application role owns nothing it could migrate: an administrator's
            // `provision_system` applies the migrations, and a schema behind this build waits
            // for it.
            Mode::Rls => {
                let pending = migrate::pending(&mut conn, mode).await?;
                if pending > 0 {
                    return Err(OpenError::Unmigrated { pending });
                }
                check_system_role(&mut conn, mode).await?;
                0
            }
        };
        let pgvector: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector')",
        )
        .fetch_one(&mut conn)
        .await
        .map_err(|e| OpenError::Connect(db_error(e)))?;
        conn.close()
            .await
            .map_err(|e| OpenError::Connect(db_error(e)))?;
        // Every working connection waits for a row lock at most `LOCK_TIMEOUT`, and the server
        // ends one left idle inside a transaction for `IDLE_IN_TRANSACTION`: a worker frozen
        // while it held a run's row (SIGSTOP, a paused VM) blocks the run's takeover that long
        // at most, not until it wakes. (The migrating connection above has neither: a
        // migration may wait for another process's.)
        let options = options.options([
            ("lock_timeout", format!("{}ms", LOCK_TIMEOUT.as_millis())),
            (
                "idle_in_transaction_session_timeout",
                format!("{}ms", IDLE_IN_TRANSACTION.as_millis()),
            ),
        ]);
        let hot = {
            let options = options.clone();
            forge_sql::Pool::new(16, forge_sql::Checks::NETWORK, move || {
                let options = options.clone();
                Box::pin(async move { PgConnection::connect_with(&options).await })
            })
        };
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect_lazy_with(options.clone());
        Ok(Self {
            pool,
            hot,
            steps: steps::StepWriters::of(mode, DEFAULT_STEP_WRITERS, &options),
            options: options.clone(),
            mode,
            clock,
            ids,
            applied_on_connect,
            pgvector,
            _guard: None,
        })
    }

    /// Keeps `guard` alive as long as any clone of this store.
    pub fn with_guard(mut self, guard: impl std::any::Any + Send + Sync) -> Self {
        self._guard = Some(Arc::new(guard));
        self
    }

    /// Lets at most `writers` step statements be in flight at once, in RLS mode, each writer on
    /// a connection of its own: the steps that arrive while all are busy wait, and the next
    /// writer free commits them together, up to [`MAX_GROUP`] in one statement (group commit).
    /// Fewer writers group more steps per commit, which costs PostgreSQL less CPU per step; more
    /// let more of its cores write at once. [`DEFAULT_STEP_WRITERS`] unless set. `0` turns group
    /// commit off: each step is sent alone on the connections claims and leases use, as many at
    /// once as that pool holds. Supabase mode always sends each step alone.
    pub fn with_step_writers(mut self, writers: usize) -> Self {
        self.steps = steps::StepWriters::of(self.mode, writers, &self.options);
        self
    }

    /// Makes a group whose statement fails answer each of its steps with that failure instead of
    /// sending them again one by one: for tests, so that a group statement that is wrong cannot
    /// pass unseen behind the steps' second, lone write.
    #[cfg(feature = "testing")]
    pub fn with_groups_never_resent(self) -> Self {
        if let Some(writers) = &self.steps {
            writers.never_resend();
        }
        self
    }

    /// How this store's steps have been grouped so far (see [`PostgresStore::with_step_writers`]).
    pub fn step_groups(&self) -> StepGroups {
        self.steps.as_ref().map(|s| s.groups()).unwrap_or_default()
    }

    /// How many migrations this process applied when it connected (0 when another got there first).
    pub fn applied_on_connect(&self) -> usize {
        self.applied_on_connect
    }

    /// Whether nearest-chunk search runs in the database through pgvector (installed in it when
    /// this store connected), rather than by brute force here.
    pub fn uses_pgvector(&self) -> bool {
        self.pgvector
    }

    /// The isolation mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Versions of the applied migrations, ascending.
    pub async fn applied_migrations(&self) -> Result<Vec<i64>, forge_core::Error> {
        migrate::applied(&self.pool).await
    }

    /// Reverts every applied migration (as their owner: in RLS mode, only a connection that is
    /// `forge_owner` may).
    pub async fn migrate_down_all(&self) -> Result<(), forge_core::Error> {
        migrate::down_all(&self.pool, self.mode).await
    }

    /// Applies pending migrations (Supabase mode does on connect; in RLS mode, only a connection
    /// that is `forge_owner` may, as [`provision_system`] does). Idempotent.
    pub async fn migrate_up(&self) -> Result<(), forge_core::Error> {
        let mut conn = self.pool.acquire().await.map_err(db_error)?;
        migrate::up(&mut conn, self.mode)
            .await
            .map(|_| ())
            .map_err(|e| match e {
                OpenError::Migrate(e) | OpenError::Connect(e) => e,
                other => forge_core::Error::invalid(other.to_string()),
            })
    }

    /// Closes the pool.
    pub async fn close(&self) {
        if let Some(writers) = &self.steps {
            writers.close().await;
        }
        self.hot.close().await;
        self.pool.close().await;
    }

    /// Begins a transaction confined to `scope`'s tenant by row-level security. The `BEGIN` and
    /// the settings travel in one simple-query round trip (values quoted as SQL literals).
    pub(crate) async fn tenant_tx(&self, scope: &Scope) -> Result<Tx, forge_core::Error> {
        self.begin_tenant(scope).await.map_err(db_error)
    }

    async fn begin_tenant(&self, scope: &Scope) -> Result<Tx, sqlx::Error> {
        let settings = self.tenant_settings(scope);
        self.hot
            .begin(sqlx::AssertSqlSafe(format!("BEGIN; {settings}")))
            .await
    }

    /// Runs `query`, a call of one of the functions that confine themselves to the tenant
    /// (`forge_write_step`: migration 22, `forge_lease`: migration 21, `forge_thread_row` and
    /// `forge_message_page`: migration 23), as its own transaction: in RLS mode one round trip in
    /// autocommit, sent again on another connection when the server had closed the one it met
    /// (the reads change nothing, and the writes refuse a write done already: it is gated on the
    /// version or fence it changes); in Supabase mode inside a tenant transaction, whose role and
    /// claims the policies need. Returns its rows once committed.
    pub(crate) async fn tenant_call<'q>(
        &self,
        scope: &Scope,
        query: impl Fn() -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<Vec<sqlx::postgres::PgRow>, sqlx::Error> {
        if self.mode == Mode::Supabase {
            let mut tx = self.begin_tenant(scope).await?;
            let rows = query().fetch_all(&mut *tx).await?;
            tx.commit().await?;
            return Ok(rows);
        }
        autocommit(&self.hot, query).await
    }

    /// The settings that confine a transaction to `scope`'s tenant (see [`Mode`]).
    fn tenant_settings(&self, scope: &Scope) -> String {
        match self.mode {
            Mode::Rls => format!(
                "SELECT set_config('forge.tenant_id', {}, true)",
                literal(scope.tenant_id().as_str())
            ),
            Mode::Supabase => {
                let claims = serde_json::json!({
                    "role": "authenticated",
                    "sub": scope.principal_id().as_str(),
                    "tenant_id": scope.tenant_id().as_str(),
                });
                format!(
                    "SELECT set_config('role', 'forge_tenant', true), set_config('request.jwt.claims', {}, true)",
                    literal(&claims.to_string())
                )
            }
        }
    }

    /// A connection from the pool of the hot paths; [`forge_sql::Conn::release`] it
    /// after a successful use.
    pub(crate) async fn conn(&self) -> Result<forge_sql::Conn<PgConnection>, forge_core::Error> {
        self.hot.acquire().await.map_err(db_error)
    }
}

/// `query`'s rows, sent in autocommit on a connection of `pool`, and sent again on another when
/// the server had closed the one it met ([`forge_sql::Pool::retries`]: for a statement
/// harmless to repeat, such as a write gated on the version it changes).
pub(crate) async fn autocommit<'q>(
    pool: &forge_sql::Pool<PgConnection>,
    query: impl Fn() -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
) -> Result<Vec<sqlx::postgres::PgRow>, sqlx::Error> {
    let mut attempts = 0;
    loop {
        let mut conn = pool.acquire().await?;
        match query().fetch_all(&mut *conn).await {
            Ok(rows) => {
                conn.release();
                return Ok(rows);
            }
            Err(e) if pool.retries(&e, &mut attempts) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Provisions, as an administrator, what RLS mode needs and the application role must not be able
/// to create or change: the role `forge_system` (no login, no `BYPASSRLS`) and the system
/// functions it owns, executable by `app_role` alone; and the schema, owned by the role
/// `forge_owner` (no login either), with Forge's migrations applied as it and `app_role` granted
/// only what running Forge needs. `admin_url` is a superuser's URL of Forge's database.
/// Idempotent; run it before the application's first start and after every upgrade (a process
/// refuses to start on a schema behind its build). Refuses an `app_role` that could become
/// `forge_system` or `forge_owner`, or that is a superuser or `BYPASSRLS`. Returns how many
/// migrations it applied.
pub async fn provision_system(admin_url: &str, app_role: &str) -> Result<usize, OpenError> {
    let options: PgConnectOptions = admin_url.parse().map_err(OpenError::Url)?;
    let mut conn = PgConnection::connect_with(&options.application_name("forge-provision"))
        .await
        .map_err(|e| OpenError::Connect(db_error(e)))?;
    let fail = |e: sqlx::Error| OpenError::Migrate(db_error(e));
    let mut tx = conn.begin().await.map_err(fail)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(migrate::LOCK_KEY)
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
    let app: Option<(bool, bool)> =
        sqlx::query_as("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = $1")
            .bind(app_role)
            .fetch_optional(&mut *tx)
            .await
            .map_err(fail)?;
    match app {
        None => {
            return Err(OpenError::SystemRole {
                problem: format!("the application role {app_role} does not exist"),
            });
        }
        Some((true, _) | (_, true)) => {
            return Err(OpenError::BypassesRls {
                role: app_role.to_owned(),
            });
        }
        Some(_) => {}
    }
    sqlx::raw_sql(
        "DO $$ BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'forge_system') THEN
                CREATE ROLE forge_system NOLOGIN NOINHERIT NOBYPASSRLS;
            END IF;
        END $$",
    )
    .execute(&mut *tx)
    .await
    .map_err(fail)?;
    refuse_member(&mut tx, app_role, "forge_system", "act as it").await?;
    sqlx::raw_sql(include_str!("../sql/system_functions.sql"))
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
    for_app(&mut tx, app_role, include_str!("../sql/system_owner.sql")).await?;
    tx.commit().await.map_err(fail)?;
    let applied = migrate_as_owner(&mut conn, app_role).await?;
    conn.close()
        .await
        .map_err(|e| OpenError::Connect(db_error(e)))?;
    Ok(applied)
}

/// RLS mode's schema, as an administrator: the role `forge_owner` owns Forge's tables, policies
/// and tenant functions (taking over what an earlier build's application role created), the
/// migrations run as it, and `app_role` is granted what running Forge needs (rows, sequences,
/// functions), owning nothing. Returns how many migrations it applied.
async fn migrate_as_owner(conn: &mut PgConnection, app_role: &str) -> Result<usize, OpenError> {
    let fail = |e: sqlx::Error| OpenError::Migrate(db_error(e));
    let mut tx = conn.begin().await.map_err(fail)?;
    migrate::lock(&mut tx).await?;
    for_app(&mut tx, app_role, include_str!("../sql/owner_adopt.sql")).await?;
    refuse_member(
        &mut tx,
        app_role,
        "forge_owner",
        "change Forge's tables and policies",
    )
    .await?;
    sqlx::query("SET LOCAL ROLE forge_owner")
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
    let applied = migrate::apply(&mut tx, Mode::Rls).await?;
    for_app(&mut tx, app_role, include_str!("../sql/app_grants.sql")).await?;
    tx.commit().await.map_err(fail)?;
    Ok(applied)
}

/// Runs an administrator's `script` that reads the application role's name from the
/// transaction setting `forge.app_role`.
async fn for_app(tx: &mut PgConnection, app_role: &str, script: &str) -> Result<(), OpenError> {
    let fail = |e: sqlx::Error| OpenError::Migrate(db_error(e));
    sqlx::query("SELECT set_config('forge.app_role', $1, true)")
        .bind(app_role)
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(script))
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
    Ok(())
}

/// Refuses an application role that is a member of `role` (and so could `could`).
async fn refuse_member(
    tx: &mut PgConnection,
    app_role: &str,
    role: &str,
    could: &str,
) -> Result<(), OpenError> {
    let member: bool = sqlx::query_scalar("SELECT pg_has_role($1, $2, 'MEMBER')")
        .bind(app_role)
        .bind(role)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| OpenError::Migrate(db_error(e)))?;
    if member {
        return Err(OpenError::SystemRole {
            problem: format!(
                "the application role {app_role} is a member of {role} and could {could}; revoke the membership"
            ),
        });
    }
    Ok(())
}

/// The system functions must be this build's, owned by `forge_system`, and (in RLS mode) out of
/// the application role's reach: it must not be able to become `forge_system`.
async fn check_system_role(conn: &mut PgConnection, mode: Mode) -> Result<(), OpenError> {
    let err = |e: sqlx::Error| OpenError::Connect(db_error(e));
    let (owned, total): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE p.prosecdef AND pg_get_userbyid(p.proowner) = 'forge_system'), \
                count(*) \
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
          WHERE n.nspname = 'public' AND p.proname LIKE 'forge\\_sys\\_%' AND p.proname <> 'forge_sys_version'",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(err)?;
    if total == 0 || owned != total {
        return Err(OpenError::SystemRole {
            problem: format!(
                "{owned} of {total} system functions are SECURITY DEFINER and owned by forge_system"
            ),
        });
    }
    let exists: bool =
        sqlx::query_scalar("SELECT to_regprocedure('forge_sys_version()') IS NOT NULL")
            .fetch_one(&mut *conn)
            .await
            .map_err(err)?;
    let version: Option<i32> = if exists {
        sqlx::query_scalar("SELECT forge_sys_version()")
            .fetch_one(&mut *conn)
            .await
            .map_err(err)?
    } else {
        None
    };
    if version != Some(SYSTEM_FUNCTIONS_VERSION) {
        return Err(OpenError::SystemRole {
            problem: format!(
                "the system functions are version {}, this build needs {SYSTEM_FUNCTIONS_VERSION}",
                version.map_or_else(|| "unknown".to_owned(), |v| v.to_string())
            ),
        });
    }
    if mode == Mode::Rls {
        let member: bool =
            sqlx::query_scalar("SELECT pg_has_role(current_user, 'forge_system', 'MEMBER')")
                .fetch_one(&mut *conn)
                .await
                .map_err(err)?;
        if member {
            return Err(OpenError::SystemRole {
                problem: "the application role is a member of forge_system and could act as it"
                    .into(),
            });
        }
    }
    Ok(())
}

/// `value` as an escape-string literal, whatever `standard_conforming_strings` says: backslashes
/// and single quotes doubled (tenant ids and principals are validated, but may contain either).
fn literal(value: &str) -> String {
    format!("E'{}'", value.replace('\\', "\\\\").replace('\'', "''"))
}

async fn check_role(pool: &mut PgConnection, mode: Mode) -> Result<(), OpenError> {
    let q = "SELECT rolname::text, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = $1";
    match mode {
        Mode::Rls => {
            let (role, superuser, bypass): (String, bool, bool) = sqlx::query_as(
                "SELECT rolname::text, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user",
            )
            .fetch_one(&mut *pool)
            .await
            .map_err(|e| OpenError::Connect(db_error(e)))?;
            if superuser || bypass {
                return Err(OpenError::BypassesRls { role });
            }
        }
        Mode::Supabase => {
            let role: Option<(String, bool, bool)> = sqlx::query_as(q)
                .bind("authenticated")
                .fetch_optional(&mut *pool)
                .await
                .map_err(|e| OpenError::Connect(db_error(e)))?;
            let Some((role, superuser, bypass)) = role else {
                return Err(OpenError::NotSupabase {
                    missing: "the role authenticated".into(),
                });
            };
            if superuser || bypass {
                return Err(OpenError::BypassesRls { role });
            }
            let jwt: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_proc p \
                 JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'auth' AND p.proname = 'jwt')",
            )
            .fetch_one(&mut *pool)
            .await
            .map_err(|e| OpenError::Connect(db_error(e)))?;
            if !jwt {
                return Err(OpenError::NotSupabase {
                    missing: "the function auth.jwt()".into(),
                });
            }
        }
    }
    Ok(())
}

/// Supabase mode acts as `forge_tenant` (created by the migrations where the login role may
/// create roles, else by an administrator): the login role must be able to become it.
async fn check_tenant_role(conn: &mut PgConnection) -> Result<(), OpenError> {
    let member: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'forge_tenant' \
         AND NOT rolsuper AND NOT rolbypassrls) AND pg_has_role(current_user, 'forge_tenant', 'MEMBER')",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| OpenError::Connect(db_error(e)))?;
    if !member {
        return Err(OpenError::NotSupabase {
            missing: "a login role that may SET ROLE forge_tenant, a role without BYPASSRLS \
                      (create it NOLOGIN and grant it to the login role)"
                .into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod literal_tests {
    #[test]
    fn quotes_and_backslashes_are_escaped() {
        assert_eq!(super::literal("acme"), "E'acme'");
        assert_eq!(super::literal(r"a'b\c"), r"E'a''b\\c'");
    }
}
