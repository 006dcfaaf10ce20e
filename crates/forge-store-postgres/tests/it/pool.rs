//! The store survives its connections being closed by the server while idle (a restart, an
//! administrator ending sessions): the next call retries its `BEGIN`, its read, or its one-trip
//! lease or step on a new connection instead of failing, as sqlx's pinging pool did.

use std::sync::Arc;

use std::time::Duration;

use forge_core::event::{RunEvent, RunEventKind};
use forge_core::part::Part;
use forge_core::ports::store::{NewRun, NewThread, RunStore, StepCommit, ThreadStore};
use forge_core::run::{Checkpoint, RunStatus};
use forge_core::time::ManualClock;
use forge_store_postgres::testing::Flavor;
use forge_testkit::fixtures::{agent_ref, scope};
use sqlx::Connection;

#[tokio::test]
async fn a_call_after_the_server_ended_every_idle_session_succeeds() {
    let (store, _, admin) = crate::fresh(Flavor::Plain, Arc::new(ManualClock::at_2026())).await;
    let acme = scope("acme");
    // Several connections into the pool, idle now.
    let threads = futures_util::future::try_join_all(
        (0..4).map(|_| store.create_thread(&acme, NewThread::default())),
    )
    .await
    .expect("threads");
    let mut conn = sqlx::PgConnection::connect(&admin).await.expect("admin");
    // Twice: once under a write (a transaction's `BEGIN` meets the closed connections), once
    // under reads (a one-trip read does).
    end_forge_sessions(&mut conn).await;
    store
        .create_thread(&acme, NewThread::default())
        .await
        .expect("a write after");
    end_forge_sessions(&mut conn).await;
    for thread in &threads {
        let read = store
            .get_thread(&acme, thread.id)
            .await
            .expect("a read after");
        assert_eq!(read.id, thread.id);
    }
    // The one-trip writes, each sent in autocommit on a connection the server closed.
    let run = store
        .create_run(
            &acme,
            NewRun::new(threads[0].id, agent_ref(), vec![Part::text("hi")]),
        )
        .await
        .expect("run");
    end_forge_sessions(&mut conn).await;
    let (lease, run) = store
        .lease_run(&acme, run.id, "w", Duration::from_secs(30))
        .await
        .expect("a lease after");
    end_forge_sessions(&mut conn).await;
    let step = StepCommit {
        run_id: run.id,
        expected_version: run.version,
        lease,
        events: vec![RunEvent {
            run_id: run.id,
            seq: run.last_seq + 1,
            at: run.created_at,
            kind: RunEventKind::StepStarted { step: 1 },
        }],
        messages: vec![],
        checkpoint: Checkpoint::default(),
        status: RunStatus::Running,
        failure: None,
        interactions: vec![],
        audit: vec![],
        settlements: vec![],
        state: None,
        summary: None,
        job: None,
    };
    let committed = store.commit_step(&acme, step).await.expect("a step after");
    assert_eq!(committed.version, run.version + 1);
}

/// Ends every Forge session on the test database, as a restart or an administrator would.
async fn end_forge_sessions(admin: &mut sqlx::PgConnection) {
    let ended: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND application_name = 'forge' AND pid <> pg_backend_pid()",
    )
    .fetch_all(admin)
    .await
    .expect("terminate");
    assert!(!ended.is_empty(), "no Forge session to end");
}
