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
const GROUP_MIGRATION: &str = include_str!("../../migrations/0031_set_based_group_write.up.sql");

/// A function header's `SET` clauses, as statements.
fn settings_of(header: &str) -> Vec<String> {
    header
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("SET "))
        .map(str::to_owned)
        .collect()
}

/// `forge_write_steps`' parameter types, its `SET` clauses as statements, and the statement of
/// its writes, its named parameters numbered as a query to prepare takes them.
fn group_function() -> (String, Vec<String>, String) {
    let start = GROUP_MIGRATION
        .find("CREATE FUNCTION forge_write_steps(")
        .expect("forge_write_steps is defined");
    let header =
        &GROUP_MIGRATION[start..start + GROUP_MIGRATION[start..].find("AS $fn$").expect("body")];
    let open = header.find('(').expect("its parameters") + 1;
    let close = open + header[open..].find(")\nRETURNS").expect("their end");
    let (names, types): (Vec<&str>, Vec<&str>) = header[open..close]
        .split(',')
        .map(|p| p.split_whitespace().collect::<Vec<_>>())
        .map(|p| (p[0], p[1]))
        .unzip();
    let settings = settings_of(header);
    let body = &GROUP_MIGRATION[start..];
    let from = body.find("WITH s AS (").expect("the group's statement");
    let to = from + body[from..].find("\n    INTO w_places").expect("its end");
    let mut statement = format!("{} FROM updated u", &body[from..to]);
    // Longest names first, so that no name is replaced inside a longer one.
    let mut numbered: Vec<(usize, &str)> = names.iter().copied().enumerate().collect();
    numbered.sort_by_key(|(_, name)| std::cmp::Reverse(name.len()));
    for (i, name) in numbered {
        statement = replace_name(&statement, name, &format!("${}", i + 1));
    }
    (types.join(", "), settings, statement)
}

/// `text` with each unqualified whole-word `name` (not after a `.`) replaced by `with`.
fn replace_name(text: &str, name: &str, with: &str) -> String {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(name) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + name.len()..].chars().next();
        let whole =
            !before.is_some_and(|c| word(c) || c == '.' || c == '$') && !after.is_some_and(word);
        out.push_str(&rest[..at]);
        out.push_str(if whole { with } else { name });
        rest = &rest[at + name.len()..];
    }
    out.push_str(rest);
    out
}

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
    let settings = settings_of(header);
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

/// Runs a function's `SET` clauses on `conn`.
async fn apply(conn: &mut PgConnection, settings: &[String]) {
    for setting in settings {
        sqlx::query(sqlx::AssertSqlSafe(setting.clone()))
            .execute(&mut *conn)
            .await
            .unwrap();
    }
}

/// The generic plan of `statement` (whose parameters are `types`), prepared as `name`, as
/// `EXPLAIN EXECUTE` shows it with every argument null. The migration's own SQL text is sent as
/// simple-protocol statements, as `EXPLAIN EXECUTE` does not prepare itself.
async fn explain(conn: &mut PgConnection, name: &str, types: &str, statement: &str) -> String {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "PREPARE {name} ({types}) AS {statement}"
    )))
    .execute(&mut *conn)
    .await
    .unwrap_or_else(|e| panic!("{name}: {e}\n{statement}"));
    let nulls = vec!["NULL"; types.split(',').count()].join(", ");
    let shown: Vec<String> = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "EXPLAIN EXECUTE {name} ({nulls})"
    )))
    .fetch_all(&mut *conn)
    .await
    .unwrap()
    .iter()
    .map(|row| sqlx::Row::get(row, 0))
    .collect();
    shown.join("\n")
}

#[tokio::test]
async fn every_lookup_of_a_step_commit_is_by_key_whatever_the_tables_held_when_planned() {
    let (_store, _url, admin) = crate::fresh(Flavor::Plain, Arc::new(ManualClock::at_2026())).await;
    let mut conn = PgConnection::connect(&admin).await.unwrap();
    for (name, (types, settings, statement)) in
        [("step", step_function()), ("step_group", group_function())]
    {
        assert!(
            settings.iter().any(|s| s.contains("plan_cache_mode")),
            "{name}: {settings:?}"
        );
        apply(&mut conn, &settings).await;
        let shown = explain(&mut conn, name, &types, &statement).await;
        assert!(
            shown.contains("forge_runs_pkey") && shown.contains("forge_model_calls_pkey"),
            "{name} does not find its runs and their calls by key:\n{shown}"
        );
        assert!(
            !shown.contains("Seq Scan"),
            "{name} scans a whole table:\n{shown}"
        );
    }
}

/// The statements `forge_write_steps` runs after its writes (a run's end, the notifications, the
/// refused steps' rows), with its `PL/pgSQL` variables and parameters as parameters of a query.
fn group_function_tail() -> Vec<String> {
    let between = |from: &str, to: &str| {
        let start = GROUP_MIGRATION.find(from).expect(from);
        let end = start + GROUP_MIGRATION[start..].find(to).expect(to);
        GROUP_MIGRATION[start..end].to_owned()
    };
    let statements = [
        between("WITH expired AS (", ";"),
        between("PERFORM pg_notify", ";").replace("PERFORM", "SELECT"),
        between("SELECT s.place, NULL::bigint", ";"),
    ];
    // The loop's elements first, then the arrays and the function's parameters.
    let variables = [
        "w_runs[i]",
        "w_threads[i]",
        "w_nows[i]",
        "tenant",
        "w_runs",
        "w_threads",
        "w_notifies",
        "w_nows",
        "w_places",
        "places",
        "runs",
        "c_places",
        "c_ids",
    ];
    statements
        .into_iter()
        .map(|mut statement| {
            for (i, name) in variables.iter().enumerate() {
                statement = if name.ends_with("[i]") {
                    statement.replace(name, &format!("${}", i + 1))
                } else {
                    replace_name(&statement, name, &format!("${}", i + 1))
                };
            }
            statement
        })
        .collect()
}

/// The types of [`group_function_tail`]'s parameters.
const TAIL_TYPES: &str = "uuid, uuid, timestamptz, text, uuid[], uuid[], boolean[], \
    timestamptz[], int[], int[], uuid[], int[], uuid[]";

/// What follows a group's writes reaches each table by key or by the index on its run or thread,
/// as planned on tables the planner knows nothing about, and is never compiled just in time: the
/// notifications' scan of `forge_listeners` (which no index serves) was costed at the disabled
/// seq scan's ten billion and compiled on every group, half a second each.
#[tokio::test]
async fn a_group_reaches_what_follows_its_writes_by_key_and_compiles_nothing() {
    let (_store, _url, admin) = crate::fresh(Flavor::Plain, Arc::new(ManualClock::at_2026())).await;
    let mut conn = PgConnection::connect(&admin).await.unwrap();
    let (_, settings, _) = group_function();
    apply(&mut conn, &settings).await;
    let mut plans = String::new();
    for (i, statement) in group_function_tail().iter().enumerate() {
        let shown = explain(&mut conn, &format!("tail_{i}"), TAIL_TYPES, statement).await;
        assert!(!shown.contains("JIT"), "compiled just in time:\n{shown}");
        assert!(
            !shown.contains("Seq Scan") || shown.contains("Seq Scan on forge_listeners"),
            "scans a whole table:\n{shown}"
        );
        plans.push_str(&shown);
        plans.push('\n');
    }
    for index in [
        "forge_runs_thread",
        "forge_threads_pkey",
        "forge_jobs_run",
        "forge_runs_pkey",
        "forge_model_calls_pkey",
    ] {
        assert!(plans.contains(index), "{index} is not used:\n{plans}");
    }
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
    // One call of `forge_write_steps` in a group: three steps at `base`, the last ending its
    // run and completing its job, each with two events, a message and a settled call.
    let (group_types, _, _) = group_function();
    let group_call = |version: u32, base: u32| {
        let places = format!("'{{{},{},{}}}'", base, base + 1, base + 2);
        let tagged = format!("'{{{0},{0},{1},{1},{2},{2}}}'", base, base + 1, base + 2);
        let three = |v: &str| format!("ARRAY[{v}, {v}, {v}]");
        let six = |v: &str| format!("ARRAY[{v}, {v}, {v}, {v}, {v}, {v}]");
        format!(
            "'tenant', {places}, '{{{version},{version},{version}}}', '{{2,2,2}}', \
             '{{running,running,completed}}', ARRAY[NULL, NULL, NULL]::text[], \
             {checkpoints}::jsonb[], ARRAY[NULL, NULL, NULL]::jsonb[], {times}::timestamptz[], \
             {runs}::uuid[], '{{false,false,true}}', '{{false,false,true}}', '{{true,true,true}}', \
             '{{1,1,1}}', '{{3,3,3}}', '{{running,running,running}}', '{{true,true,true}}', \
             {tagged}, '{{3,4,3,4,3,4}}', {six_times}::timestamptz[], {bodies}::text[], \
             {places}, {ids}::uuid[], {runs}::uuid[], '{{assistant,assistant,assistant}}', \
             {parts}::jsonb[], {times}::timestamptz[], {places}, {ids}::uuid[], \
             {times}::timestamptz[], {times}::timestamptz[], '{{settled,settled,settled}}', \
             {empties}::jsonb[], ARRAY[NULL, NULL, {ID}]::uuid[], ARRAY[NULL, NULL, 1]::bigint[]",
            checkpoints = three("'{\"step\": 1}'"),
            times = three(T),
            runs = three(RUN),
            six_times = six(T),
            bodies = six("'{}'"),
            ids = three(ID),
            parts = three("'[]'"),
            empties = three("'{}'"),
        )
    };
    let mut hot: std::collections::HashMap<_, _> = forge_store_postgres::testing::HOT_STATEMENTS
        .into_iter()
        .collect();
    // Group commit's statement for three steps (each size is a statement of its own).
    hot.insert(
        "group_of_2_calls",
        forge_store_postgres::testing::group_statement(2),
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
            "group_of_2_calls",
            vec![format!("{group_types}, uuid[], bigint[]"); 2].join(", "),
            (1..=8)
                .map(|n| format!("{}, {}", group_call(n, 0), group_call(n, 3)))
                .collect(),
        ),
        (
            "claim_leased",
            "timestamptz, timestamptz, uuid, text[], text[], text, timestamptz, bigint".to_owned(),
            vec![format!("{T}, {T}, NULL, NULL, NULL, 'worker', {T}, 256"); 8],
        ),
        (
            "claim_leased_batch",
            "timestamptz, timestamptz, uuid, text[], text[], text, timestamptz, bigint, integer"
                .to_owned(),
            vec![format!("{T}, {T}, NULL, NULL, NULL, 'worker', {T}, 256, 8"); 8],
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
