//! The step commit's plan, read from the function that runs it: on tables the planner knows
//! nothing about (a fresh database, where a pooled connection makes the generic plan it keeps for
//! its life), every lookup of `forge_write_step`'s statement is by key. A plan made while
//! `forge_model_calls` was nearly empty scanned the whole table for the settled calls on every
//! step after (0.3 ms a step in the workload benchmark, growing with the table). The statement
//! and the settings are taken from the migration itself, so the test plans what ships.

use std::sync::Arc;

use forge_core::time::ManualClock;
use forge_store_postgres::testing::Flavor;
use sqlx::{Connection, PgConnection};

const MIGRATION: &str = include_str!("../../migrations/0030_json_event_log.up.sql");

/// The function's parameter types, its `SET` clauses as statements, and the statement of its
/// writes (the one that decides the step), as a query to prepare.
fn step_function() -> (String, Vec<String>, String) {
    let start = MIGRATION
        .find("CREATE FUNCTION forge_write_step(")
        .expect("forge_write_step is defined");
    let header = &MIGRATION[start..start + MIGRATION[start..].find("AS $fn$").expect("its body")];
    let open = header.find('(').expect("its parameters") + 1;
    let types = header[open..open + header[open..].find(')').expect("their end")]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let settings = header
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("SET "))
        .map(str::to_owned)
        .collect();
    let body = &MIGRATION[start..];
    let from = body
        .find("WITH updated AS (")
        .expect("the step's statement");
    let to = from
        + body[from..]
            .find(" INTO r FROM updated u;")
            .expect("its end");
    let statement = format!("{} FROM updated u", &body[from..to]);
    (types, settings, statement)
}

#[tokio::test]
async fn every_lookup_of_a_step_commit_is_by_key_whatever_the_tables_held_when_planned() {
    let (_store, _url, admin) = crate::fresh(Flavor::Plain, Arc::new(ManualClock::at_2026())).await;
    let mut conn = PgConnection::connect(&admin).await.unwrap();
    let (types, settings, statement) = step_function();
    assert!(
        settings.iter().any(|s| s.contains("plan_cache_mode")),
        "{settings:?}"
    );
    for setting in &settings {
        sqlx::query(sqlx::AssertSqlSafe(setting.clone()))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    // The migration's own SQL text; simple-protocol statements, as EXPLAIN EXECUTE does not
    // prepare itself.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "PREPARE step ({types}) AS {statement}"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    let nulls = vec!["NULL"; types.split(',').count()].join(", ");
    let shown: Vec<String> = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "EXPLAIN EXECUTE step ({nulls})"
    )))
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .iter()
    .map(|row| sqlx::Row::get(row, 0))
    .collect();
    let shown = shown.join("\n");
    assert!(
        shown.contains("forge_runs_pkey") && shown.contains("forge_model_calls_pkey"),
        "the step does not find its run and its calls by key:\n{shown}"
    );
    assert!(
        !shown.contains("Seq Scan"),
        "the step scans a whole table:\n{shown}"
    );
}

/// Each statement of a run's hot path, its parameters' types, and the arguments of calls like the
/// engine's: a step of a run in the middle (notifying, completing no job) and the step that ends
/// it (completing its job).
fn hot_calls() -> Vec<(&'static str, String, Vec<String>)> {
    const T: &str = "'2026-01-01T00:00:00Z'";
    const RUN: &str = "'00000000-0000-0000-0000-000000000001'";
    const ID: &str = "'00000000-0000-0000-0000-000000000002'";
    let (function_types, _, _) = step_function();
    let step = |version: u32, last: bool, completes: bool| {
        let (ends, job, token) = if last {
            ("true", ID, "1")
        } else {
            ("false", "NULL", "NULL")
        };
        let claim = if completes {
            format!(", {job}, {token}")
        } else {
            String::new()
        };
        format!(
            "{version}, 2, 'running', NULL, '{{\"step\": 1}}', NULL, {T}, {RUN}, 'tenant', {ends}, \
             {ends}, true, 1, '{{3,4}}', ARRAY[{T}, {T}]::timestamptz[], \
             ARRAY['{{}}', '{{}}']::text[], ARRAY[{ID}]::uuid[], ARRAY[{RUN}]::uuid[], \
             '{{assistant}}', ARRAY['[]']::jsonb[], ARRAY[{T}]::timestamptz[], \
             ARRAY[{ID}]::uuid[], ARRAY[{T}]::timestamptz[], ARRAY[{T}]::timestamptz[], \
             '{{settled}}', ARRAY['{{}}']::jsonb[], 3, '{{running}}', true{claim}"
        )
    };
    let mut hot: std::collections::HashMap<_, _> = forge_store_postgres::testing::hot_statements()
        .into_iter()
        .collect();
    // Group commit's statement for three steps (each size is a statement of its own).
    hot.insert(
        "group_of_3",
        forge_store_postgres::testing::group_statement(3),
    );
    let calls = vec![
        (
            "step",
            format!("{function_types}, uuid, bigint"),
            (1..=8).map(|n| step(n, n % 4 == 0, true)).collect(),
        ),
        (
            "step_alone",
            function_types.clone(),
            (1..=8).map(|n| step(n, n % 4 == 0, false)).collect(),
        ),
        (
            "group_of_3",
            vec![format!("{function_types}, uuid, bigint"); 3].join(", "),
            (1..=8)
                .map(|n| {
                    (0..3)
                        .map(|i| step(n, (n + i) % 4 == 0, true))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .collect(),
        ),
        (
            "claim_leased",
            "timestamptz, timestamptz, uuid, text[], text[], text, timestamptz, bigint".to_owned(),
            vec![format!("{T}, {T}, NULL, NULL, NULL, 'worker', {T}, 256"); 8],
        ),
        (
            "lease_with_history",
            "uuid, text, text, timestamptz, timestamptz, bigint".to_owned(),
            // As `lease_run` sends it (no history) and as `lease_run_with_history` does.
            (1..=8)
                .map(|n| {
                    let limit = if n % 2 == 0 { "256" } else { "NULL" };
                    format!("{RUN}, 'tenant', 'worker', {T}, {T}, {limit}")
                })
                .collect(),
        ),
        (
            "thread_with_page",
            "uuid, text, bigint".to_owned(),
            vec![format!("{RUN}, 'tenant', 256"); 8],
        ),
    ];
    assert_eq!(calls.len(), hot.len(), "every hot statement is tried");
    for (name, _, _) in &calls {
        assert!(hot.contains_key(name), "{name} is a hot statement");
    }
    calls
        .into_iter()
        .map(|(name, types, args)| {
            let sql = format!("PREPARE {name} ({types}) AS {}", hot[name]);
            (name, sql, args)
        })
        .collect()
}

/// A connection plans each statement of a run's hot path once and keeps the plan: PostgreSQL
/// plans a prepared statement for its first five executions and then keeps a generic plan only if
/// that costs no more than the custom ones did. The step's statement used to fail that choice (its
/// function costed at a thousand rows, each evaluating whether to complete a job, where a custom
/// plan folded that away), so every step was planned again: 0.2 ms of every step's Bind.
#[tokio::test]
async fn a_connection_plans_each_hot_statement_once() {
    let (_store, url, _admin) = crate::fresh(Flavor::Plain, Arc::new(ManualClock::at_2026())).await;
    let mut conn = PgConnection::connect(&url).await.unwrap();
    for (name, prepare, calls) in hot_calls() {
        sqlx::raw_sql(sqlx::AssertSqlSafe(prepare))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        // EXPLAIN EXECUTE takes the plan as EXECUTE would, and writes nothing.
        for args in &calls {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "EXPLAIN EXECUTE {name} ({args})"
            )))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let (generic, custom): (i64, i64) = sqlx::query_as(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = $1",
        )
        .bind(name)
        .fetch_one(&mut conn)
        .await
        .unwrap();
        assert_eq!(
            (generic, custom),
            (3, 5),
            "{name}: after five custom plans, its generic plan is kept"
        );
    }
}
