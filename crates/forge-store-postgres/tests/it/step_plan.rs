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

const MIGRATION: &str = include_str!("../../migrations/0022_lean_step.up.sql");

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
