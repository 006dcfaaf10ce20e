//! A group's set-based write (`forge_write_steps`, migration 31) writes exactly what its steps
//! write one by one (`forge_write_step`): the same steps, on two databases built by the same calls
//! (ids and clock are deterministic), once committed as one group and once each alone, leave the
//! same rows in every table a step writes, and are answered alike.

use std::sync::Arc;
use std::time::Duration;

use forge_core::id::{MessageId, ModelCallId};
use forge_core::message::{Message, Role};
use forge_core::metering::{CallStatus, ModelCall};
use forge_core::part::Part;
use forge_core::ports::queue::{ClaimFilter, JobQueue, LeaseRequest};
use forge_core::ports::store::{Committed, NewRun, NewThread, RunStore, StepCommit, ThreadStore};
use forge_core::ports::usage::UsageLedger;
use forge_core::run::{Run, RunLease, RunStatus};
use forge_core::scope::{Scope, SystemScope};
use forge_core::time::{Clock, ManualClock};
use forge_core::usage::Usage;
use forge_store_postgres::PostgresStore;
use forge_store_postgres::testing::Flavor;
use forge_testkit::fixtures::{agent_ref, scope};
use futures_util::future::join_all;
use sqlx::{Connection, PgConnection};

use crate::group_commit::leased;
use crate::row_locks::hold_run;

const TTL: Duration = Duration::from_secs(30);

/// The tables a step writes, each with the order its rows are compared in and what is compared
/// of a row: a message's `seq` is its place among all messages, which steps committed at once on
/// different runs take in no set order, so its place in its run is compared instead.
const TABLES: [(&str, &str, &str); 7] = [
    ("forge_runs", "id", "to_jsonb(t)"),
    ("forge_run_events", "run_id, seq", "to_jsonb(t)"),
    (
        "forge_messages",
        "id",
        "to_jsonb(t) - 'seq' || jsonb_build_object('place', \
         row_number() OVER (PARTITION BY run_id ORDER BY seq))",
    ),
    ("forge_model_calls", "id", "to_jsonb(t)"),
    ("forge_threads", "id", "to_jsonb(t)"),
    ("forge_jobs", "id", "to_jsonb(t)"),
    ("forge_interactions", "id", "to_jsonb(t)"),
];

/// `run`'s step with `events` events, an assistant message, and `status`.
fn step_of(
    run: &Run,
    lease: &RunLease,
    events: u64,
    status: RunStatus,
    clock: &ManualClock,
) -> StepCommit {
    let mut commit = crate::group_commit::step_of(run, lease, events, clock);
    commit.messages = vec![Message {
        id: MessageId(uuid::Uuid::from_u128(
            run.id.0.as_u128() ^ 0xfeed_0000_0000_0000_0000_0000_0000_0000,
        )),
        run_id: run.id,
        role: Role::Assistant,
        parts: vec![Part::text(format!("step of {}", run.id))],
        created_at: clock.now(),
    }];
    commit.status = status;
    commit
}

/// A model call of `run` reserved in the ledger, and its settlement.
async fn reserved_call(
    store: &PostgresStore,
    scope: &Scope,
    run: &Run,
    clock: &ManualClock,
) -> ModelCall {
    // Its id derived from the run's, so that both databases hold the same rows.
    let call = ModelCall {
        id: ModelCallId(uuid::Uuid::from_u128(
            run.id.0.as_u128() ^ 0xca11_0000_0000_0000_0000_0000_0000_0000,
        )),
        estimated_cost_micros: 10,
        ..crate::group_commit::call(run, scope, clock)
    };
    store.reserve(scope, call.clone(), None).await.unwrap();
    ModelCall {
        status: CallStatus::Settled,
        actual: Some(Usage::default()),
        cost_micros: Some(7),
        ..call
    }
}

/// Builds the same runs on `store` and commits their steps at once (the first alone, the others
/// together when `store` groups), returning the answers, each named by what it shows.
async fn scenario(store: &PostgresStore, admin: &str, clock: &ManualClock) -> Vec<String> {
    let (a, b) = (scope("tenant-a"), scope("tenant-b"));
    // A thread whose active run ends under its claim while another run waits behind it.
    let thread = store.create_thread(&a, NewThread::default()).await.unwrap();
    let new = || NewRun::new(thread.id, agent_ref(), vec![Part::text("hi")]);
    store.create_run(&a, new()).await.unwrap();
    let queued = store.create_run(&a, new()).await.unwrap();
    let request = LeaseRequest {
        holder: "worker".into(),
        ttl: TTL,
        history: None,
    };
    let claimed = store
        .claim_leased(
            &SystemScope::new("test"),
            "worker",
            TTL,
            &ClaimFilter::any(),
            &request,
        )
        .await
        .unwrap()
        .expect("the active run's job");
    let leased_active = claimed.lease.expect("the free lease");
    let (active, active_lease) = (leased_active.run, leased_active.lease);
    assert_ne!(active.id, queued.id);

    let (first, first_lease) = leased(store, &a).await;
    let (settling, settling_lease) = leased(store, &a).await;
    let (stale, stale_lease) = leased(store, &a).await;
    let (raced, raced_lease) = leased(store, &a).await;
    let (other, other_lease) = leased(store, &b).await;
    let (parks, parks_lease) = leased(store, &b).await;

    let mut ends = step_of(&active, &active_lease, 2, RunStatus::Completed, clock);
    ends.job = Some(claimed.job.clone());
    let mut settles = step_of(&settling, &settling_lease, 3, RunStatus::Running, clock);
    settles.settlements = vec![reserved_call(store, &a, &settling, clock).await];
    // Two messages, written in the step's order.
    let mut second = settles.messages[0].clone();
    second.id = MessageId(uuid::Uuid::from_u128(second.id.0.as_u128() ^ 1));
    second.role = Role::User;
    settles.messages.push(second);
    let mut outdated = step_of(&stale, &stale_lease, 1, RunStatus::Running, clock);
    outdated.expected_version += 1;
    let race = step_of(&raced, &raced_lease, 2, RunStatus::Running, clock);
    let mut fails = step_of(&other, &other_lease, 1, RunStatus::Failed, clock);
    fails.failure = Some(forge_core::run::RunFailure {
        code: forge_core::run::FailureCode::ProviderError,
        message: "a test".into(),
    });
    let mut waits = step_of(
        &parks,
        &parks_lease,
        1,
        RunStatus::Waiting(forge_core::run::WaitReason::Approval),
        clock,
    );
    waits.messages.clear();

    // A pending interaction of the run that ends, which its end expires (written as the
    // administrator: only its row matters here).
    let mut conn = PgConnection::connect(admin).await.unwrap();
    sqlx::query(
        "INSERT INTO forge_interactions (id, tenant_id, run_id, status, created_at, expires_at, \
         body) VALUES ($1, 'tenant-a', $2, 'pending', $3, $3, '{\"status\": \"pending\"}')",
    )
    .bind(uuid::Uuid::from_u128(active.id.0.as_u128() ^ 0x1))
    .bind(active.id.0)
    .bind(clock.now().0)
    .execute(&mut conn)
    .await
    .unwrap();

    let mut holder = hold_run(admin, first.id.0).await;
    let steps = vec![
        (
            a.clone(),
            step_of(&first, &first_lease, 1, RunStatus::Running, clock),
        ),
        (a.clone(), ends),
        (b.clone(), fails),
        (a.clone(), settles),
        (a.clone(), outdated),
        (a.clone(), race.clone()),
        (a.clone(), race),
        (b.clone(), waits),
    ];
    let writing = join_all(
        steps
            .into_iter()
            .map(|(scope, commit)| async move { store.commit_step(&scope, commit).await }),
    );
    let (answers, ()) = tokio::join!(writing, async {
        sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    });
    let mut shown: Vec<String> = answers.into_iter().map(show).collect();
    // The two identical steps of one run race: which wins may differ, not what it wrote.
    shown[5..7].sort();
    shown
}

/// An answer as compared: a committed step's figures, a refusal's kind.
fn show(answer: Result<Committed, forge_core::Error>) -> String {
    match answer {
        Ok(c) => format!(
            "version {} last_seq {} cancel {} job_completed {}",
            c.version, c.last_seq, c.cancel_requested, c.job_completed
        ),
        Err(e) => format!("refused: {:?}", e.kind()),
    }
}

/// Every row of the tables a step writes, as JSON, table by table.
async fn rows(admin: &str) -> Vec<(String, Vec<serde_json::Value>)> {
    let mut conn = PgConnection::connect(admin).await.unwrap();
    let mut all = Vec::new();
    for (table, order, row) in TABLES {
        let rows: Vec<serde_json::Value> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT {row} FROM {table} t ORDER BY {order}"
        )))
        .fetch_all(&mut conn)
        .await
        .unwrap();
        all.push((table.to_owned(), rows));
    }
    all
}

#[tokio::test]
async fn a_group_writes_what_its_steps_write_one_by_one() {
    let grouped_clock = Arc::new(ManualClock::at_2026());
    let (grouped, _, grouped_admin) = crate::fresh(Flavor::Plain, grouped_clock.clone()).await;
    let grouped = grouped.with_step_writers(1).with_groups_never_resent();
    let alone_clock = Arc::new(ManualClock::at_2026());
    let (alone, _, alone_admin) = crate::fresh(Flavor::Plain, alone_clock.clone()).await;
    let alone = alone.with_step_writers(0);

    let in_groups = scenario(&grouped, &grouped_admin, &grouped_clock).await;
    let one_by_one = scenario(&alone, &alone_admin, &alone_clock).await;
    let groups = grouped.step_groups();
    assert_eq!(
        (groups.groups, groups.steps, groups.resent),
        (1, 7, 0),
        "every step but the first was written in one group, which did not fail"
    );
    assert_eq!(in_groups, one_by_one, "the answers");
    assert!(
        in_groups[4].contains("Conflict") && in_groups[5].starts_with("refused"),
        "the stale step and one of the racing pair are refused: {in_groups:?}"
    );
    assert!(
        in_groups[1].ends_with("job_completed true"),
        "{in_groups:?}"
    );
    let (in_groups, one_by_one) = (rows(&grouped_admin).await, rows(&alone_admin).await);
    for ((table, grouped), (_, alone)) in in_groups.iter().zip(&one_by_one) {
        assert_eq!(grouped.len(), alone.len(), "{table}: rows");
        for (g, a) in grouped.iter().zip(alone) {
            assert_eq!(g, a, "{table}");
        }
    }
}
