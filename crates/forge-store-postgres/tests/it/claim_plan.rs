//! The claim's plan, read from the function that runs it: over a backlog it walks the open-jobs
//! index in id order and stops, with no sort and no scan of the whole table — so a claim costs
//! a few index entries whatever the backlog (a plan that sorted the candidates cost 12 ms at 540
//! ready jobs). The query is taken from `sql/system_functions.sql` itself, so the test plans
//! what ships.

use std::sync::Arc;

use forge_core::time::ManualClock;
use forge_store_postgres::testing::Flavor;
use sqlx::{Connection, PgConnection};

/// The candidate query inside `forge_sys_claim`, its parameters replaced by `args`.
fn claim_query(names: &str, versions: &str) -> String {
    let sql = include_str!("../../sql/system_functions.sql");
    let start = sql
        .find("CREATE FUNCTION forge_sys_claim")
        .expect("forge_sys_claim is defined");
    let body = &sql[start..];
    let from = body
        .find("(SELECT f.id FROM forge_jobs f")
        .expect("its candidate query")
        + 1;
    let to = from + body[from..].find(") next").expect("the query's end");
    body[from..to]
        .replace("p_now", "now()")
        .replace("p_run", "NULL::uuid")
        .replace("p_names", names)
        .replace("p_versions", versions)
}

/// The `SET name = value` clauses of `forge_sys_claim`'s definition, as statements.
fn function_settings() -> Vec<String> {
    let sql = include_str!("../../sql/system_functions.sql");
    let start = sql
        .find("CREATE FUNCTION forge_sys_claim")
        .expect("forge_sys_claim is defined");
    let header = &sql[start..start + sql[start..].find("AS $$").expect("its body")];
    header
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("SET ") && !l.starts_with("SET search_path"))
        .map(str::to_owned)
        .collect()
}

async fn plan(conn: &mut PgConnection, query: &str) -> String {
    let rows: Vec<String> = // The query is this repository's own SQL text, with literals for its parameters.
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN {query}")))
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    rows.join("\n")
}

#[tokio::test]
async fn the_claim_walks_the_open_jobs_index_over_a_backlog_without_sorting() {
    let (_store, _url, admin) = crate::fresh(Flavor::Plain, Arc::new(ManualClock::at_2026())).await;
    let mut conn = PgConnection::connect(&admin).await.unwrap();
    // A backlog the planner has no statistics for (never analyzed, as after a burst): 3,000
    // finished jobs and 2,000 ready ones, their runs left out (foreign keys off for the load).
    sqlx::query("SET session_replication_role = replica")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO forge_jobs (id, tenant_id, run_id, state, available_at, attempts, max_attempts, token) \
         SELECT gen_random_uuid(), 't', gen_random_uuid(), CASE WHEN g <= 3000 THEN 'completed' ELSE 'ready' END, \
                now() - interval '1 minute', 0, 5, 0 FROM generate_series(1, 5000) g",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    // With the settings the function declares (`SET enable_sort = off`), as it runs.
    for setting in function_settings() {
        sqlx::query(sqlx::AssertSqlSafe(setting))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    for (names, versions) in [
        ("NULL::text[]", "NULL::text[]"),
        ("ARRAY['support']", "ARRAY['1']"),
    ] {
        let shown = plan(&mut conn, &claim_query(names, versions)).await;
        assert!(
            shown.contains("forge_jobs_open"),
            "the claim does not walk the open-jobs index:\n{shown}"
        );
        assert!(!shown.contains("Sort"), "the claim sorts:\n{shown}");
        assert!(
            !shown.contains("Seq Scan on forge_jobs"),
            "the claim scans the whole table:\n{shown}"
        );
    }
}
