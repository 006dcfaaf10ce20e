//! Test support: a fresh database per test on a real PostgreSQL, used through an application role
//! that is neither superuser nor `BYPASSRLS`, and dropped afterwards.
//!
//! The server is `FORGE_TEST_DATABASE_URL` (an administrator URL), or
//! `postgres://postgres@127.0.0.1:5432/postgres`. The administrator only creates roles and
//! databases; every query under test runs as the application role.
//!
//! The pgvector path runs on a second server with that extension: `FORGE_TEST_PGVECTOR_URL`, or
//! the throwaway one `pgvector/start.sh` starts on 127.0.0.1:55433 (see [`pgvector_admin_url`]).
//!
//! A Supabase database is imitated by what Supabase's Postgres provides and Forge relies on: the
//! roles `anon`, `authenticated` and `service_role` (the last with `BYPASSRLS`), a login role that
//! may switch to them (like Supabase's `authenticator`), and `auth.jwt()` / `auth.uid()` /
//! `auth.role()` reading `request.jwt.claims` as Supabase defines them.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection};

/// Application role used by `Rls` tests: no superuser, no `BYPASSRLS`.
pub const APP_ROLE: &str = "forge_test_app";
/// Login role used by `Supabase` tests, a member of `anon`, `authenticated` and `service_role`.
pub const SUPABASE_LOGIN_ROLE: &str = "forge_test_authenticator";
const PASSWORD: &str = "forge_test";

/// Which kind of database to provision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// Plain PostgreSQL, used as [`APP_ROLE`].
    Plain,
    /// PostgreSQL with Supabase's `auth` functions and roles, used as [`SUPABASE_LOGIN_ROLE`].
    Supabase,
}

/// The statements of a run's hot path, as the store sends them (named `step`, `step_alone` (as
/// Supabase mode sends a step), `claim_leased`, `claim_leased_batch`, `lease_with_history` and
/// `thread_with_page`), for tests of how PostgreSQL plans them.
pub const HOT_STATEMENTS: [(&str, &str); 6] = [
    ("step", crate::steps::STEP_SQL),
    ("step_alone", crate::steps::STEP_ALONE_SQL),
    ("claim_leased", crate::queue::CLAIM_LEASED_SQL),
    ("claim_leased_batch", crate::queue::CLAIM_LEASED_BATCH_SQL),
    ("lease_with_history", crate::runs::LEASE_WITH_HISTORY_SQL),
    ("thread_with_page", crate::threads::THREAD_WITH_PAGE_SQL),
];

/// The statement that group-commits a group in `n` calls of `forge_write_steps` (1 ≤ `n` ≤
/// [`crate::MAX_GROUP`]; empty otherwise): one call per tenant, each with its own 35 parameters
/// (the function's 33, then the jobs and tokens of the claims its steps complete), joined by
/// `UNION ALL`.
pub fn group_statement(n: usize) -> &'static str {
    crate::steps::group_sql(n)
}

/// The administrator URL tests use.
pub fn admin_url() -> String {
    std::env::var("FORGE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// The administrator URL of a PostgreSQL server with the pgvector extension available:
/// `FORGE_TEST_PGVECTOR_URL`, else the throwaway server `pgvector/start.sh` starts (once per
/// process; it downloads PostgreSQL 16 with pgvector from PyPI the first time).
pub fn pgvector_admin_url() -> Result<String, String> {
    static STARTED: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    if let Ok(url) = std::env::var("FORGE_TEST_PGVECTOR_URL") {
        return Ok(url);
    }
    STARTED
        .get_or_init(|| {
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/pgvector/start.sh");
            let out = std::process::Command::new("bash")
                .arg(script)
                .output()
                .map_err(|e| format!("could not run {script}: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "{script} could not start PostgreSQL with pgvector (it needs python3, pip and \
                     PyPI): {}\nset FORGE_TEST_PGVECTOR_URL to an administrator URL of a server \
                     with pgvector instead",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            let port = std::env::var("FORGE_PGVECTOR_PORT").unwrap_or_else(|_| "55433".into());
            Ok(format!("postgres://postgres@127.0.0.1:{port}/postgres"))
        })
        .clone()
}

fn unreachable(url: &str, e: impl std::fmt::Display) -> String {
    format!(
        "PostgreSQL is not reachable at {url}: {e}\nrun `scripts/test-services.sh` (it starts PostgreSQL, or names \
         the package to install) or point FORGE_TEST_DATABASE_URL at an administrator URL"
    )
}

/// A database created for one test and dropped when this value is dropped.
#[derive(Debug)]
pub struct TestDatabase {
    name: String,
    url: String,
    admin: String,
    /// The server's administrator URL (its `postgres` database), which drops this one.
    server: String,
}

impl TestDatabase {
    /// Creates a database owned by the flavor's login role (for [`Flavor::Plain`], with
    /// `forge_system` and its functions and the schema provisioned, as an administrator does
    /// before Forge starts; a Supabase database's schema is its login role's to migrate).
    pub async fn create(flavor: Flavor) -> Result<Self, String> {
        Self::create_on(&admin_url(), flavor).await
    }

    /// Like [`TestDatabase::create`], on the server of the administrator URL `server`.
    pub async fn create_on(server: &str, flavor: Flavor) -> Result<Self, String> {
        let db = Self::create_unprovisioned_on(server, flavor).await?;
        db.provision(flavor).await?;
        Ok(db)
    }

    /// Like [`TestDatabase::create_on`] for [`Flavor::Plain`], with the pgvector extension
    /// installed before the schema is (as an operator does where the server has it).
    pub async fn create_with_pgvector_on(server: &str) -> Result<Self, String> {
        let db = Self::create_unprovisioned_on(server, Flavor::Plain).await?;
        db.install_pgvector().await?;
        db.provision(Flavor::Plain).await?;
        Ok(db)
    }

    /// For [`Flavor::Plain`], what an administrator provisions before Forge starts: the system
    /// role and functions, and the schema owned by `forge_owner`.
    async fn provision(&self, flavor: Flavor) -> Result<(), String> {
        if flavor == Flavor::Plain {
            crate::provision_system(&self.admin, APP_ROLE)
                .await
                .map_err(|e| format!("could not provision forge_system and the schema: {e}"))?;
        }
        Ok(())
    }

    /// Like [`TestDatabase::create`], without the system functions an administrator provisions
    /// for RLS mode (the cluster-wide role `forge_system` may exist).
    pub async fn create_unprovisioned(flavor: Flavor) -> Result<Self, String> {
        Self::create_unprovisioned_on(&admin_url(), flavor).await
    }

    async fn create_unprovisioned_on(server: &str, flavor: Flavor) -> Result<Self, String> {
        let admin = server.to_owned();
        let mut conn = PgConnection::connect(&admin)
            .await
            .map_err(|e| unreachable(&admin, e))?;
        ensure_roles(&mut conn).await?;
        let name = format!("forge_test_{}", uuid::Uuid::new_v4().simple());
        let owner = match flavor {
            Flavor::Plain => APP_ROLE,
            Flavor::Supabase => SUPABASE_LOGIN_ROLE,
        };
        exec(&mut conn, &format!("CREATE DATABASE {name} OWNER {owner}")).await?;
        conn.close().await.map_err(|e| e.to_string())?;
        let options: PgConnectOptions = admin.parse().map_err(|e| format!("bad admin URL: {e}"))?;
        let url = format!(
            "postgres://{owner}:{PASSWORD}@{}:{}/{name}",
            options.get_host(),
            options.get_port()
        );
        let db = Self {
            admin: database_url(&admin, &name),
            name,
            url,
            server: admin,
        };
        if flavor == Flavor::Supabase {
            let mut conn = PgConnection::connect(&db.admin)
                .await
                .map_err(|e| unreachable(&db.admin, e))?;
            // Like Supabase's login roles, ours is NOINHERIT, so it needs its rights on `public` and
            // `auth` granted directly.
            // And like Supabase, whatever its login role creates in `public` is granted to `anon`,
            // `authenticated` and `service_role` by default: Forge must take those grants back.
            let auth = format!(
                "{SUPABASE_AUTH}\nGRANT USAGE ON SCHEMA auth TO {SUPABASE_LOGIN_ROLE};\nGRANT ALL ON SCHEMA public TO {SUPABASE_LOGIN_ROLE};\nGRANT CREATE ON SCHEMA public TO forge_system;\n\
                 ALTER DEFAULT PRIVILEGES FOR ROLE {SUPABASE_LOGIN_ROLE} IN SCHEMA public GRANT ALL ON TABLES TO anon, authenticated, service_role;\n\
                 ALTER DEFAULT PRIVILEGES FOR ROLE {SUPABASE_LOGIN_ROLE} IN SCHEMA public GRANT ALL ON SEQUENCES TO anon, authenticated, service_role;\n\
                 ALTER DEFAULT PRIVILEGES FOR ROLE {SUPABASE_LOGIN_ROLE} IN SCHEMA public GRANT ALL ON FUNCTIONS TO anon, authenticated, service_role;"
            );
            exec(&mut conn, &auth)
                .await
                .map_err(|e| format!("could not provision auth: {e}"))?;
            conn.close().await.map_err(|e| e.to_string())?;
        }
        Ok(db)
    }

    /// The URL of the login role for this database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The administrator URL for this database (only for setting up and inspecting).
    pub fn admin_url(&self) -> &str {
        &self.admin
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reverts every migration of RLS mode as their owner, `forge_owner` (what the application
    /// role may not do), for tests of the migrations; [`crate::provision_system`] applies them
    /// again.
    pub async fn migrate_down_all_as_owner(&self) -> Result<(), String> {
        let mut conn = PgConnection::connect(&self.admin)
            .await
            .map_err(|e| unreachable(&self.admin, e))?;
        let mut tx = conn.begin().await.map_err(|e| e.to_string())?;
        sqlx::query("SET LOCAL ROLE forge_owner")
            .execute(&mut *tx)
            .await
            .map_err(|e| e.to_string())?;
        crate::migrate::revert_all(&mut tx, crate::Mode::Rls)
            .await
            .map_err(|e| e.to_string())?;
        tx.commit().await.map_err(|e| e.to_string())
    }

    /// Installs the pgvector extension in this database (as its administrator), as an operator
    /// does where the server has it: before the schema is provisioned, which makes the vector
    /// table only where the extension is ([`TestDatabase::create_with_pgvector_on`]).
    pub async fn install_pgvector(&self) -> Result<(), String> {
        let mut conn = PgConnection::connect(&self.admin)
            .await
            .map_err(|e| unreachable(&self.admin, e))?;
        exec(&mut conn, "CREATE EXTENSION IF NOT EXISTS vector").await?;
        conn.close().await.map_err(|e| e.to_string())
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let (admin, name) = (self.server.clone(), self.name.clone());
        // Drop runs outside any async context we can rely on; use a thread with its own runtime.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async {
                let pool = PgPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(Duration::from_secs(10))
                    .connect(&admin)
                    .await
                    .map_err(|e| e.to_string())?;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&pool)
                .await
                .map_err(|e| e.to_string())?;
                pool.close().await;
                Ok::<(), String>(())
            })
        })
        .join();
        if let Ok(Err(e)) | Err(e) = dropped.map_err(|_| "panicked".to_string()) {
            eprintln!("warning: could not drop test database {}: {e}", self.name);
        }
    }
}

fn database_url(admin: &str, name: &str) -> String {
    // Replace the path (database name) of the administrator URL, keeping any query string.
    let (base, query) = admin
        .split_once('?')
        .map_or((admin, None), |(b, q)| (b, Some(q)));
    let prefix = base
        .rfind('/')
        .filter(|i| *i > "postgres://".len())
        .map_or(base, |i| &base[..i]);
    match query {
        Some(q) => format!("{prefix}/{name}?{q}"),
        None => format!("{prefix}/{name}"),
    }
}

async fn exec(conn: &mut PgConnection, sql: &str) -> Result<(), String> {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(conn)
        .await
        .map(|_| ())
        .map_err(|e| format!("{sql}: {e}"))
}

/// Creates the cluster-wide roles once, under an advisory lock (test binaries run concurrently).
async fn ensure_roles(conn: &mut PgConnection) -> Result<(), String> {
    let sql = format!(
        "BEGIN;
        SELECT pg_advisory_xact_lock(7277265);
        DO $$ BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
                CREATE ROLE {APP_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD '{PASSWORD}';
            END IF;
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'anon') THEN
                CREATE ROLE anon NOLOGIN NOINHERIT;
            END IF;
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'authenticated') THEN
                CREATE ROLE authenticated NOLOGIN NOINHERIT;
            END IF;
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'service_role') THEN
                CREATE ROLE service_role NOLOGIN NOINHERIT BYPASSRLS;
            END IF;
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{SUPABASE_LOGIN_ROLE}') THEN
                CREATE ROLE {SUPABASE_LOGIN_ROLE} LOGIN NOINHERIT NOSUPERUSER NOBYPASSRLS PASSWORD '{PASSWORD}';
                GRANT anon, authenticated, service_role TO {SUPABASE_LOGIN_ROLE};
            END IF;
            -- What a Supabase `postgres` creates through the migrations: Forge's own tenant role.
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'forge_tenant') THEN
                CREATE ROLE forge_tenant NOLOGIN NOINHERIT NOBYPASSRLS;
            END IF;
            IF NOT pg_has_role('{SUPABASE_LOGIN_ROLE}', 'forge_tenant', 'MEMBER') THEN
                GRANT forge_tenant TO {SUPABASE_LOGIN_ROLE};
            END IF;
            -- Likewise its system role, which Supabase's `postgres` may become (it administers
            -- the database); RLS mode's application role never may.
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'forge_owner') THEN
                CREATE ROLE forge_owner NOLOGIN NOINHERIT NOBYPASSRLS;
            END IF;
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'forge_system') THEN
                CREATE ROLE forge_system NOLOGIN NOINHERIT NOBYPASSRLS;
            END IF;
            IF NOT pg_has_role('{SUPABASE_LOGIN_ROLE}', 'forge_system', 'MEMBER') THEN
                GRANT forge_system TO {SUPABASE_LOGIN_ROLE};
            END IF;
        END $$;
        COMMIT;"
    );
    exec(conn, &sql).await
}

/// What a Supabase database provides in its `auth` schema, as far as Forge relies on it.
const SUPABASE_AUTH: &str = "
CREATE SCHEMA IF NOT EXISTS auth;
CREATE OR REPLACE FUNCTION auth.jwt() RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT coalesce(
        nullif(current_setting('request.jwt.claim', true), ''),
        nullif(current_setting('request.jwt.claims', true), '')
    )::jsonb
$$;
CREATE OR REPLACE FUNCTION auth.role() RETURNS text LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('request.jwt.claim.role', true), ''), auth.jwt() ->> 'role')
$$;
CREATE OR REPLACE FUNCTION auth.uid() RETURNS uuid LANGUAGE sql STABLE AS $$
    SELECT nullif(coalesce(nullif(current_setting('request.jwt.claim.sub', true), ''), auth.jwt() ->> 'sub'), '')::uuid
$$;
GRANT USAGE ON SCHEMA auth TO anon, authenticated, service_role, forge_tenant, forge_system;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA auth TO anon, authenticated, service_role, forge_tenant,
    forge_system;
";

#[cfg(test)]
mod tests {
    use super::database_url;

    #[test]
    fn database_url_replaces_only_the_database() {
        assert_eq!(
            database_url("postgres://postgres@127.0.0.1:5432/postgres", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            database_url("postgres://u:p@h:1/db?sslmode=disable", "x"),
            "postgres://u:p@h:1/x?sslmode=disable"
        );
        assert_eq!(database_url("postgres://u@h:1", "x"), "postgres://u@h:1/x");
    }
}
