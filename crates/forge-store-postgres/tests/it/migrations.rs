//! Migrations: up from empty, down, up again leaves an identical catalog.

use forge_store_postgres::PostgresStore;
use forge_store_postgres::testing::{APP_ROLE, Flavor, TestDatabase};
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
                .filter(|l| !l.contains("forge_schema_migrations"))
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
            25, 26, 27, 28, 29, 30, 31, 32, 33, 34
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
