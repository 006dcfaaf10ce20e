//! The event log as `json` (migration 30): a step's events are kept as the text this build wrote,
//! not re-parsed into `jsonb`, and the previous build's step statement (migration 22's overload
//! of `forge_write_step`, events as `jsonb[]`) still writes to the log during a rolling deploy.

use std::sync::Arc;
use std::time::Duration;

use forge_core::event::{RunEvent, RunEventKind};
use forge_core::ports::store::RunStore;
use forge_core::run::{Checkpoint, RunStatus};
use forge_core::time::{Clock, ManualClock};
use forge_store_postgres::testing::Flavor;
use forge_testkit::fixtures::{run_on_new_thread, scope, step};
use sqlx::{Connection, PgConnection};

const TTL: Duration = Duration::from_secs(30);

#[tokio::test]
async fn the_log_keeps_what_was_written_and_takes_the_previous_builds_steps() {
    let clock = Arc::new(ManualClock::at_2026());
    let (store, url, _admin) = crate::fresh(Flavor::Plain, clock.clone()).await;
    let scope = scope("tenant-a");
    let run = run_on_new_thread(&store, &scope).await;
    let (lease, run) = store
        .lease_run(&scope, run.id, "worker", TTL)
        .await
        .unwrap();
    // This build's step: its event is stored as the text it was encoded to.
    let commit = step(&run, &lease, run.checkpoint.step + 1, vec![], clock.now());
    let first = commit.events[0].clone();
    let committed = store.commit_step(&scope, commit).await.unwrap();
    let mut conn = PgConnection::connect(&url).await.unwrap();
    // The tenant this session reads as (row-level security), as `tenant_tx` sets it.
    sqlx::query("SELECT set_config('forge.tenant_id', $1, false)")
        .bind(scope.tenant_id().as_str())
        .execute(&mut conn)
        .await
        .unwrap();
    let stored: String = sqlx::query_scalar(
        "SELECT body::text FROM forge_run_events WHERE run_id = $1 AND seq = $2",
    )
    .bind(run.id.0)
    .bind(first.seq as i64)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(
        stored,
        serde_json::to_string(&first).unwrap(),
        "the log re-encoded the event (jsonb reorders its keys)"
    );

    // The previous build's step: a call of `forge_write_step` with the events as jsonb[], which
    // selects migration 22's overload, as that build's statement did.
    let second = RunEvent {
        seq: first.seq + 1,
        kind: RunEventKind::StepStarted { step: 2 },
        ..first.clone()
    };
    let from: Vec<String> =
        forge_core::ports::store::statuses_reaching(RunStatus::Running).collect();
    let written: Option<i64> = sqlx::query_scalar(
        "SELECT s.o_version FROM forge_write_step($1, 1, 'running', NULL, $9::jsonb, NULL, $2, \
         $3, $4, false, false, false, $5, ARRAY[$6::bigint], ARRAY[$2], ARRAY[$7::jsonb], \
         NULL::uuid[], NULL::uuid[], NULL::text[], NULL::jsonb[], NULL::timestamptz[], \
         NULL::uuid[], NULL::timestamptz[], NULL::timestamptz[], NULL::text[], NULL::jsonb[], \
         $6, $8, true) AS s",
    )
    .bind(committed.version as i64)
    .bind(clock.now().0)
    .bind(run.id.0)
    .bind(scope.tenant_id().as_str())
    .bind(lease.token as i64)
    .bind(second.seq as i64)
    .bind(sqlx::types::Json(&second))
    .bind(&from)
    .bind(sqlx::types::Json(Checkpoint {
        step: run.checkpoint.step + 2,
        ..Checkpoint::default()
    }))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(written, Some(committed.version as i64 + 1));
    assert_eq!(
        store.read_events(&scope, run.id, 0, 10).await.unwrap(),
        vec![first, second]
    );
}
