//! Migrations: up from empty, down, up again leaves an identical catalog.

use std::sync::Arc;

use forge_core::time::ManualClock;
use forge_store_postgres::testing::{APP_ROLE, Flavor, TestDatabase};
use forge_store_postgres::{Mode, PostgresStore};
use forge_testkit::upgrade::{fill, readback};
use sqlx::{Connection, PgConnection};

/// Everything the migrations create, as the catalog describes it, one line an object, sorted. In
/// RLS mode the system functions are an administrator's (`provision_system`), not the migrations'.
async fn catalog(admin_url: &str, flavor: Flavor) -> String {
    let mut conn = PgConnection::connect(admin_url).await.unwrap();
    let queries = [
        "SELECT format('column %s.%s %s %s default %s', table_name, column_name, data_type, is_nullable, coalesce(column_default, '-')) \
         FROM information_schema.columns WHERE table_schema = 'public'",
        "SELECT format('constraint %s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid)) \
         FROM pg_constraint WHERE connamespace = 'public'::regnamespace",
        "SELECT format('index %s', indexdef) FROM pg_indexes WHERE schemaname = 'public'",
        "SELECT format('rls %s enabled=%s forced=%s', relname, relrowsecurity, relforcerowsecurity) \
         FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'r'",
        "SELECT format('policy %s.%s %s %s using %s check %s', tablename, policyname, cmd, roles, qual, with_check) \
         FROM pg_policies WHERE schemaname = 'public'",
        "SELECT format('function %s %s', oid::regprocedure, prosrc) FROM pg_proc WHERE pronamespace = 'public'::regnamespace",
        "SELECT format('grant %s %s %s', table_name, grantee, privilege_type) FROM information_schema.role_table_grants \
         WHERE table_schema = 'public' AND grantee IN ('authenticated', 'anon', 'forge_system')",
    ];
    let mut lines = Vec::new();
    for q in queries {
        let rows: Vec<String> = sqlx::query_scalar(q).fetch_all(&mut conn).await.unwrap();
        lines.extend(
            rows.into_iter()
                .filter(|l| !l.contains("forge_migrations"))
                .filter(|l| flavor == Flavor::Supabase || !l.starts_with("function forge_sys_")),
        );
    }
    lines.sort();
    lines.join("\n")
}

async fn up_down_up(flavor: Flavor) {
    let db = TestDatabase::create(flavor)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let store = PostgresStore::connect(db.url(), crate::mode_of(flavor))
        .await
        .unwrap();
    let admin = db.admin_url().to_owned();
    assert_eq!(
        store.applied_migrations().await.unwrap(),
        [
            1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
            25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36
        ]
    );
    let first = catalog(&admin, flavor).await;
    for expected in [
        "column forge_run_events.seq bigint NO",
        // Migration 30: the log is kept as the text written, not re-parsed into jsonb.
        "column forge_run_events.body json NO",
        "rls forge_runs enabled=t forced=t",
        "policy forge_jobs.forge_tenant",
        "rls forge_interactions enabled=t forced=t",
        "policy forge_interactions.forge_tenant",
        "rls forge_model_calls enabled=t forced=t",
        "column forge_runs.role_ids jsonb NO",
        "grant forge_jobs forge_system UPDATE",
        "rls forge_sources enabled=t forced=t",
        "rls forge_chunks enabled=t forced=t",
        "policy forge_chunks.forge_tenant",
        "rls forge_chunk_vectors enabled=t forced=t",
        "policy forge_chunk_vectors.forge_tenant",
    ] {
        assert!(
            first.contains(expected),
            "missing {expected:?} in:\n{first}"
        );
    }
    // Migration 29 dropped two indexes no statement used, which every write paid for.
    for gone in ["forge_jobs_ready", "forge_threads_tenant"] {
        assert!(
            !first.contains(&format!("INDEX {gone} ON")),
            "the unused index {gone} is still there"
        );
    }
    // In RLS mode the application role owns nothing it could revert or apply: `forge_owner`
    // does both, the second through the administrator's provisioning.
    match flavor {
        Flavor::Plain => db.migrate_down_all_as_owner().await.unwrap(),
        Flavor::Supabase => store.migrate_down_all().await.unwrap(),
    }
    assert_eq!(
        catalog(&admin, flavor).await,
        "",
        "down must remove everything the migrations created"
    );
    assert!(store.applied_migrations().await.unwrap().is_empty());
    match flavor {
        Flavor::Plain => {
            forge_store_postgres::provision_system(db.admin_url(), APP_ROLE)
                .await
                .unwrap();
        }
        Flavor::Supabase => store.migrate_up().await.unwrap(),
    }
    assert_eq!(
        catalog(&admin, flavor).await,
        first,
        "up after down must rebuild the identical schema"
    );
}

#[tokio::test]
async fn migrations_up_down_up_leave_an_identical_schema() {
    up_down_up(Flavor::Plain).await;
}

#[tokio::test]
async fn supabase_migrations_up_down_up_leave_an_identical_schema() {
    up_down_up(Flavor::Supabase).await;
}

/// The migration ledger turned back into the one builds before sqlx's migrator kept
/// (`forge_schema_migrations`: version, name, applied at; same owner, the application role
/// reading it in RLS mode). The schema is the same scripts' either way, so this is the database
/// such a build left.
async fn back_to_the_legacy_ledger(admin_url: &str, flavor: Flavor) {
    let mut conn = PgConnection::connect(admin_url).await.unwrap();
    sqlx::raw_sql(
        "DO $$
         DECLARE owner text := (SELECT tableowner FROM pg_tables WHERE tablename = 'forge_migrations');
         BEGIN
             CREATE TABLE forge_schema_migrations (
                 version bigint PRIMARY KEY,
                 name text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now()
             );
             INSERT INTO forge_schema_migrations (version, name)
                 SELECT version, description FROM forge_migrations;
             EXECUTE format('ALTER TABLE forge_schema_migrations OWNER TO %I', owner);
             DROP TABLE forge_migrations;
         END $$",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    if flavor == Flavor::Plain {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "GRANT SELECT ON forge_schema_migrations TO {APP_ROLE}"
        )))
        .execute(&mut conn)
        .await
        .unwrap();
    }
    conn.close().await.unwrap();
}

/// The ledger tables the database has.
async fn ledgers(admin_url: &str) -> Vec<String> {
    let mut conn = PgConnection::connect(admin_url).await.unwrap();
    let names = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE tablename LIKE 'forge%migrations' ORDER BY 1",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    names
}

/// A database an earlier build migrated and filled keeps everything when this build migrates it:
/// the earlier ledger is adopted (each name checked), nothing is applied twice.
async fn upgrades_in_place(flavor: Flavor) {
    let clock = Arc::new(ManualClock::at_2026());
    let (store, url, admin) = crate::fresh(flavor, clock.clone()).await;
    let store = Arc::new(store);
    fill::<crate::Postgres>(store.clone(), clock).await;
    let expected = readback(&*store).await;
    back_to_the_legacy_ledger(&admin, flavor).await;
    assert_eq!(ledgers(&admin).await, ["forge_schema_migrations"]);
    let all: Vec<i64> =
        (1..=forge_store_postgres::migrations(crate::mode_of(flavor)).latest()).collect();
    let upgraded = match flavor {
        Flavor::Plain => {
            // The application role starts on the earlier ledger (it reads it), and the
            // administrator's next provisioning adopts it, applying nothing.
            let before = PostgresStore::connect(&url, Mode::Rls).await.unwrap();
            assert_eq!(before.applied_migrations().await.unwrap(), all);
            before.close().await;
            assert_eq!(
                forge_store_postgres::provision_system(&admin, APP_ROLE)
                    .await
                    .unwrap(),
                0
            );
            PostgresStore::connect(&url, Mode::Rls).await.unwrap()
        }
        Flavor::Supabase => {
            let upgraded = PostgresStore::connect(&url, Mode::Supabase).await.unwrap();
            assert_eq!(upgraded.applied_on_connect(), 0);
            upgraded
        }
    };
    assert_eq!(ledgers(&admin).await, ["forge_migrations"]);
    assert_eq!(upgraded.applied_migrations().await.unwrap(), all);
    assert_eq!(readback(&upgraded).await, expected);
    if flavor == Flavor::Supabase {
        // The other mode's ledger is refused by name, not run over.
        let err = PostgresStore::connect(&url, Mode::Rls).await.unwrap_err();
        assert!(
            matches!(err, forge_store_postgres::OpenError::ModeMismatch { .. }),
            "{err}"
        );
    }
    upgraded.close().await;
    store.close().await;
}

#[tokio::test]
async fn an_rls_database_of_an_earlier_build_upgrades_in_place() {
    upgrades_in_place(Flavor::Plain).await;
}

#[tokio::test]
async fn a_supabase_database_of_an_earlier_build_upgrades_in_place() {
    upgrades_in_place(Flavor::Supabase).await;
}
