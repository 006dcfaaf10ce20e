//! Group commit (RLS mode): steps that wait for a step writer are committed together, in one
//! statement, each gated, fenced and answered as if it had been sent alone; a group that fails is
//! sent again step by step, so one step's error is never another's.

use std::sync::Arc;
use std::time::Duration;

use forge_core::ErrorKind;
use forge_core::event::{RunEvent, RunEventKind};
use forge_core::id::ModelCallId;
use forge_core::metering::{CallStatus, ModelCall, QuotaPeriod};
use forge_core::ports::store::{Committed, RunStore, StepCommit};
use forge_core::ports::usage::UsageLedger;
use forge_core::run::{Run, RunLease};
use forge_core::scope::Scope;
use forge_core::time::{Clock, ManualClock};
use forge_core::usage::Usage;
use forge_store_postgres::testing::Flavor;
use forge_store_postgres::{PostgresStore, StepGroups};
use forge_testkit::fixtures::{run_on_new_thread, scope, step};
use futures_util::future::join_all;

use crate::row_locks::{hold_run, until_waiting};

const TTL: Duration = Duration::from_secs(30);

/// A store with one step writer (every step sent while another is in flight waits, and is
/// committed in the next group), and its database's administrator URL.
async fn one_writer(clock: Arc<ManualClock>) -> (PostgresStore, String) {
    let (store, _, admin) = crate::fresh(Flavor::Plain, clock).await;
    (store.with_step_writers(1), admin)
}

/// A leased run of `scope`'s tenant, on a new thread.
pub(crate) async fn leased(store: &PostgresStore, scope: &Scope) -> (Run, RunLease) {
    let run = run_on_new_thread(store, scope).await;
    let (lease, run) = store.lease_run(scope, run.id, "worker", TTL).await.unwrap();
    (run, lease)
}

/// The common step of `run` with `events` events after its log.
pub(crate) fn step_of(run: &Run, lease: &RunLease, events: u64, clock: &ManualClock) -> StepCommit {
    let mut commit = step(run, lease, run.checkpoint.step + 1, vec![], clock.now());
    commit.events = (1..=events)
        .map(|i| RunEvent {
            run_id: run.id,
            seq: run.last_seq + i,
            at: clock.now(),
            kind: RunEventKind::StepStarted { step: i as u32 },
        })
        .collect();
    commit
}

/// Commits `steps` at once: the first is sent alone and the others wait for it, in order. The
/// first step's run is held by another transaction until every step was sent or queued, so that
/// the first cannot be answered before the others wait (as it could, were this thread descheduled
/// between sending it and reading its answer).
async fn all_at_once(
    store: &PostgresStore,
    admin: &str,
    steps: Vec<(Scope, StepCommit)>,
) -> Vec<Result<Committed, forge_core::Error>> {
    let mut holder = hold_run(admin, steps[0].1.run_id.0).await;
    let writing = join_all(
        steps
            .into_iter()
            .map(|(scope, commit)| async move { store.commit_step(&scope, commit).await }),
    );
    // Polled in this order: every step is sent or queued before the run is let go.
    let (answers, ()) = tokio::join!(writing, async {
        sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    });
    answers
}

async fn log_length(store: &PostgresStore, scope: &Scope, run: &Run) -> usize {
    store
        .read_events(scope, run.id, 0, 1_000)
        .await
        .unwrap()
        .len()
}

#[tokio::test]
async fn steps_that_wait_are_committed_together_each_answered_as_its_own() {
    let clock = Arc::new(ManualClock::at_2026());
    let (store, admin) = one_writer(clock.clone()).await;
    // Six runs of two tenants (a group may hold both: each call sets its own tenant), each step
    // with a different number of events, so that no answer fits another run.
    let scopes = [scope("tenant-a"), scope("tenant-b")];
    let mut runs = Vec::new();
    for i in 0..6 {
        let scope = scopes[i % 2].clone();
        let (run, lease) = leased(&store, &scope).await;
        runs.push((scope, run, lease));
    }
    let before = store.step_groups();
    let steps = runs
        .iter()
        .enumerate()
        .map(|(i, (scope, run, lease))| (scope.clone(), step_of(run, lease, i as u64 + 1, &clock)))
        .collect();
    let answers = all_at_once(&store, &admin, steps).await;
    let after = store.step_groups();
    assert_eq!(
        (after.groups - before.groups, grouped(before, after)),
        (1, (5, 0)),
        "the first step went alone and the five that waited for it went as one group, written \
         as a group"
    );
    for (i, ((scope, run, _), answer)) in runs.iter().zip(answers).enumerate() {
        let committed = answer.unwrap_or_else(|e| panic!("step {i}: {e}"));
        assert_eq!(committed.version, run.version + 1, "step {i}'s version");
        assert_eq!(
            committed.last_seq,
            run.last_seq + i as u64 + 1,
            "step {i} was answered with another step's log end"
        );
        assert_eq!(
            log_length(&store, scope, run).await,
            run.last_seq as usize + i + 1,
            "step {i}'s events in its run's log"
        );
    }
}

#[tokio::test]
async fn a_refused_step_is_refused_alone_and_a_failed_group_is_sent_again_step_by_step() {
    let clock = Arc::new(ManualClock::at_2026());
    let (store, admin) = one_writer(clock.clone()).await;
    let a = scope("tenant-a");
    let (first, first_lease) = leased(&store, &a).await;
    let (good, good_lease) = leased(&store, &a).await;
    let (stale, stale_lease) = leased(&store, &a).await;

    // A group with a stale step: its call returns the refusal as a row, the group commits, and
    // only the stale step hears it.
    let mut outdated = step_of(&stale, &stale_lease, 1, &clock);
    outdated.expected_version += 1;
    let before = store.step_groups();
    let answers = all_at_once(
        &store,
        &admin,
        vec![
            (a.clone(), step_of(&first, &first_lease, 1, &clock)),
            (a.clone(), step_of(&good, &good_lease, 2, &clock)),
            (a.clone(), outdated),
        ],
    )
    .await;
    assert_eq!(grouped(before, store.step_groups()), (2, 0));
    let mut answers = answers.into_iter();
    let first_done = answers.next().unwrap().unwrap();
    let good_done = answers.next().unwrap().unwrap();
    assert_eq!(good_done.last_seq, good.last_seq + 2);
    assert_eq!(
        answers.next().unwrap().map_err(|e| e.kind()).err(),
        Some(ErrorKind::Conflict),
        "the stale step is refused as a version conflict"
    );
    assert_eq!(
        log_length(&store, &a, &stale).await,
        stale.last_seq as usize
    );

    // A group with a step whose call raises (it settles a model call of another tenant, whose
    // row its gate cannot see and row-level security refuses to update): the group is rolled
    // back whole and each step is sent again alone, so the good step is written once and only
    // the bad one fails.
    let b = scope("tenant-b");
    let (other, _) = leased(&store, &b).await;
    let foreign = call(&other, &b, &clock);
    store.reserve(&b, foreign.clone(), None).await.unwrap();
    let (bad, bad_lease) = leased(&store, &a).await;
    let mut settles = step_of(&bad, &bad_lease, 1, &clock);
    settles.settlements = vec![ModelCall {
        tenant_id: a.tenant_id().clone(),
        run_id: bad.id,
        status: CallStatus::Settled,
        actual: Some(Usage::default()),
        cost_micros: Some(0),
        ..foreign.clone()
    }];
    let first = forge_core::run::Run {
        version: first_done.version,
        last_seq: first_done.last_seq,
        ..first
    };
    let good = forge_core::run::Run {
        version: good_done.version,
        last_seq: good_done.last_seq,
        ..good
    };
    let before = store.step_groups();
    let answers = all_at_once(
        &store,
        &admin,
        vec![
            (a.clone(), step_of(&first, &first_lease, 1, &clock)),
            (a.clone(), step_of(&good, &good_lease, 3, &clock)),
            (a.clone(), settles),
        ],
    )
    .await;
    assert_eq!(
        grouped(before, store.step_groups()),
        (2, 1),
        "the group failed and was resent"
    );
    let mut answers = answers.into_iter();
    answers.next().unwrap().unwrap();
    let good_done = answers.next().unwrap().unwrap();
    assert_eq!(good_done.last_seq, good.last_seq + 3);
    assert_eq!(
        log_length(&store, &a, &good).await,
        good.last_seq as usize + 3,
        "the good step is in the log once"
    );
    let failed = answers.next().unwrap().unwrap_err();
    assert!(
        format!("{failed:?}").contains("row-level security"),
        "the step that settled another tenant's call hears why: {failed:?}"
    );
    assert_eq!(log_length(&store, &a, &bad).await, bad.last_seq as usize);
}

#[tokio::test]
async fn two_steps_of_one_run_in_a_group_are_written_in_order() {
    let clock = Arc::new(ManualClock::at_2026());
    let (store, admin) = one_writer(clock.clone()).await;
    let a = scope("tenant-a");
    let (first, first_lease) = leased(&store, &a).await;
    let (run, lease) = leased(&store, &a).await;
    // The run's next step, written as if its first had committed (one `UPDATE` cannot apply
    // both to its row, so the group writes them in successive calls).
    let after = Run {
        version: run.version + 1,
        last_seq: run.last_seq + 1,
        ..run.clone()
    };
    let before = store.step_groups();
    let answers = all_at_once(
        &store,
        &admin,
        vec![
            (a.clone(), step_of(&first, &first_lease, 1, &clock)),
            (a.clone(), step_of(&run, &lease, 1, &clock)),
            (a.clone(), step_of(&after, &lease, 2, &clock)),
        ],
    )
    .await;
    assert_eq!(grouped(before, store.step_groups()), (2, 0));
    let last_seqs: Vec<u64> = answers
        .into_iter()
        .map(|answer| answer.unwrap().last_seq)
        .collect();
    assert_eq!(
        last_seqs[1..],
        [run.last_seq + 1, run.last_seq + 3],
        "both steps written, in order"
    );
    assert_eq!(
        log_length(&store, &a, &run).await,
        run.last_seq as usize + 3
    );
}

#[tokio::test]
async fn a_writer_whose_caller_goes_away_hands_the_waiting_steps_on() {
    let clock = Arc::new(ManualClock::at_2026());
    let (store, admin) = one_writer(clock.clone()).await;
    let a = scope("tenant-a");
    let (first, first_lease) = leased(&store, &a).await;
    let (second, second_lease) = leased(&store, &a).await;
    // The first run is held, so that the first step stays in flight.
    let holder = hold_run(&admin, first.id.0).await;
    let mut sent = Box::pin(store.commit_step(&a, step_of(&first, &first_lease, 1, &clock)));
    let mut waits = Box::pin(store.commit_step(&a, step_of(&second, &second_lease, 1, &clock)));
    // Each polled once: the first is in flight (it holds the one writer), the second waits.
    assert!(
        tokio::time::timeout(Duration::ZERO, &mut sent)
            .await
            .is_err()
    );
    assert!(
        tokio::time::timeout(Duration::ZERO, &mut waits)
            .await
            .is_err()
    );
    // The first caller goes away mid-statement (a cancelled execution, a timeout).
    drop(sent);
    let committed = tokio::time::timeout(Duration::from_secs(10), waits)
        .await
        .expect("the waiting step was handed on, not left waiting for a writer that is gone")
        .unwrap();
    assert_eq!(committed.last_seq, second.last_seq + 1);
    drop(holder);
}

#[tokio::test]
async fn with_no_writers_each_step_is_sent_alone() {
    let clock = Arc::new(ManualClock::at_2026());
    let (store, _, admin) = crate::fresh(Flavor::Plain, clock.clone()).await;
    let store = store.with_step_writers(0);
    let a = scope("tenant-a");
    let mut steps = Vec::new();
    let mut runs = Vec::new();
    for i in 0..4 {
        let (run, lease) = leased(&store, &a).await;
        steps.push((a.clone(), step_of(&run, &lease, i + 1, &clock)));
        runs.push(run);
    }
    let answers = all_at_once(&store, &admin, steps).await;
    assert_eq!(
        store.step_groups(),
        StepGroups::default(),
        "no step was grouped"
    );
    for (i, (run, answer)) in runs.iter().zip(answers).enumerate() {
        assert_eq!(answer.unwrap().last_seq, run.last_seq + i as u64 + 1);
    }
}

#[tokio::test]
async fn a_group_locks_its_runs_in_the_order_of_their_ids() {
    let clock = Arc::new(ManualClock::at_2026());
    let (store, _, admin) = crate::fresh(Flavor::Plain, clock.clone()).await;
    let store = store.with_step_writers(1);
    let a = scope("tenant-a");
    let (first, first_lease) = leased(&store, &a).await;
    let mut two = vec![leased(&store, &a).await, leased(&store, &a).await];
    two.sort_by_key(|(run, _)| run.id.0);
    let [(low, low_lease), (high, high_lease)] = <[_; 2]>::try_from(two).unwrap();
    // Another transaction holds the row of the run with the lower id.
    let mut other = hold_run(&admin, low.id.0).await;
    let before = store.step_groups();
    // The higher run's step waits first and the lower's second: one group, in that arrival order.
    let writing = all_at_once(
        &store,
        &admin,
        vec![
            (a.clone(), step_of(&first, &first_lease, 1, &clock)),
            (a.clone(), step_of(&high, &high_lease, 1, &clock)),
            (a.clone(), step_of(&low, &low_lease, 1, &clock)),
        ],
    );
    let holder = async {
        until_waiting(&admin, "%group_place%", "the group").await;
        // The group waits for the lower run holding no row: the higher run is free. Had it
        // locked the runs in arrival order, it would hold the higher one, and the two
        // transactions would deadlock (PostgreSQL would abort one after a second).
        sqlx::query("SET LOCAL lock_timeout = '200ms'")
            .execute(&mut other)
            .await
            .unwrap();
        let taken = sqlx::query("SELECT 1 FROM forge_runs WHERE id = $1 FOR UPDATE")
            .bind(high.id.0)
            .execute(&mut other)
            .await;
        sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
        taken
    };
    let (answers, taken) = tokio::join!(writing, holder);
    taken.expect("the group held the higher run while it waited for the lower one");
    assert_eq!(grouped(before, store.step_groups()), (2, 0));
    for (i, answer) in answers.into_iter().enumerate() {
        answer.unwrap_or_else(|e| panic!("step {i}: {e}"));
    }
}

/// How many steps went in groups between `before` and `after`, and how many groups failed and
/// were sent again step by step.
fn grouped(before: StepGroups, after: StepGroups) -> (u64, u64) {
    (after.steps - before.steps, after.resent - before.resent)
}

/// A reserved model call of `run`.
pub(crate) fn call(run: &Run, scope: &Scope, clock: &ManualClock) -> ModelCall {
    let at = clock.now();
    ModelCall {
        id: ModelCallId(uuid::Uuid::now_v7()),
        tenant_id: scope.tenant_id().clone(),
        run_id: run.id,
        step: 1,
        attempt: 1,
        model: "openai:gpt-4o-mini".into(),
        at,
        period_start: QuotaPeriod::Day.start(at),
        estimate: Usage::default(),
        estimated_cost_micros: 0,
        actual: None,
        cost_micros: None,
        request_id: None,
        provider_model: None,
        holder: None,
        trace_id: None,
        status: CallStatus::Reserved,
    }
}
