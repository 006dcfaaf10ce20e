//! The claim's plans, read from the function that runs them: over a backlog of finished, held
//! and ready jobs, it walks the lapsing claims by expiry and then the ready jobs by id, each in
//! its own index, and stops — no sort, no scan of the whole table, no step past the claims in
//! flight — so a claim costs a few index entries whatever the backlog (a plan that sorted the
//! candidates cost 12 ms at 540 ready jobs), and its agent filter looks each candidate's run up
//! by key whatever the runs table held when the plan was made. The queries are taken from
//! `sql/system_functions.sql` itself and planned generic, with the function's settings, so the
//! test plans what ships.

use std::sync::Arc;

use forge_core::time::ManualClock;
use forge_store_postgres::testing::Flavor;
use sqlx::{Connection, PgConnection};

/// The candidate queries inside `forge_sys_claim` (lapsed claims, then ready jobs), as
/// statements to `PREPARE` with parameters `$1` now, `$2` the run, `$3` names and `$4` versions.
fn claim_queries() -> Vec<String> {
    let sql = include_str!("../../sql/system_functions.sql");
    let start = sql
        .find("CREATE FUNCTION forge_sys_claim")
        .expect("forge_sys_claim is defined");
    let body = &sql[start..sql[start..].find("$$;").expect("its end") + start];
    let queries: Vec<String> = body
        .split("SELECT f.id INTO picked FROM forge_jobs f")
        .skip(1)
        .map(|rest| {
            let end = rest.find("SKIP LOCKED;").expect("the query's end");
            format!("SELECT f.id FROM forge_jobs f{} SKIP LOCKED", &rest[..end])
                .replace("p_now", "$1")
                .replace("p_run", "$2")
                .replace("p_names", "$3")
                .replace("p_versions", "$4")
        })
        .collect();
    assert_eq!(
        queries.len(),
        2,
        "a lapsed-claim query and a ready-job query"
    );
    queries
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

/// The generic plan of `query` (prepared, its parameters unknown to the planner) for `args`.
async fn plan(conn: &mut PgConnection, query: &str, args: &str) -> String {
    // The query is this repository's own SQL text; simple-protocol statements, as EXPLAIN
    // EXECUTE does not prepare itself.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "PREPARE claim (timestamptz, uuid, text[], text[]) AS {query}"
    )))
    .execute(&mut *conn)
    .await
    .unwrap();
    let rows: Vec<String> = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "EXPLAIN EXECUTE claim ({args})"
    )))
    .fetch_all(&mut *conn)
    .await
    .unwrap()
    .iter()
    .map(|row| sqlx::Row::get(row, 0))
    .collect();
    sqlx::raw_sql("DEALLOCATE claim")
        .execute(&mut *conn)
        .await
        .unwrap();
    rows.join("\n")
}

#[tokio::test]
async fn the_claim_walks_the_lapsing_then_the_ready_jobs_index_without_sorting() {
    let (_store, _url, admin) = crate::fresh(Flavor::Plain, Arc::new(ManualClock::at_2026())).await;
    let mut conn = PgConnection::connect(&admin).await.unwrap();
    // A backlog the planner has no statistics for (never analyzed, as after a burst): 3,000
    // finished jobs, 1,000 held claims and 2,000 ready jobs, their runs left out (foreign keys
    // off for the load).
    sqlx::query("SET session_replication_role = replica")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO forge_jobs (id, tenant_id, run_id, state, available_at, attempts, max_attempts, token, expires_at) \
         SELECT gen_random_uuid(), 't', gen_random_uuid(), \
                CASE WHEN g <= 3000 THEN 'completed' WHEN g <= 4000 THEN 'claimed' ELSE 'ready' END, \
                now() - interval '1 minute', 1, 5, 1, \
                CASE WHEN g > 3000 AND g <= 4000 THEN now() + interval '1 minute' END \
         FROM generate_series(1, 6000) g",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    // With the settings the function declares (`SET enable_sort = off`, generic plans), as it
    // runs.
    for setting in function_settings() {
        sqlx::query(sqlx::AssertSqlSafe(setting))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let queries = claim_queries();
    for (query, index) in queries
        .iter()
        .zip(["forge_jobs_lapsing", "forge_jobs_claimable"])
    {
        for args in [
            "now(), NULL, NULL, NULL",
            "now(), NULL, ARRAY['support'], ARRAY['1']",
        ] {
            let shown = plan(&mut conn, query, args).await;
            assert!(
                shown.contains(index),
                "the claim does not walk {index}:\n{shown}"
            );
            assert!(!shown.contains("Sort"), "the claim sorts:\n{shown}");
            // Nor a scan of the runs for the agent filter: planned while the runs table is
            // empty (as a connection of a new deployment plans it), the filter's subquery was a
            // hashed scan of every run, kept with the plan as the table grew (1.9 ms a claim
            // at 3,000 runs, in proportion to them).
            assert!(
                !shown.contains("Seq Scan"),
                "the claim scans a whole table:\n{shown}"
            );
        }
    }
}
