//! The history a run begins with is read in the statement that takes its lease (migration 27), in
//! a snapshot of its own taken after the lease: a lease that waited for the run row's lock still
//! reads the messages committed while it waited, on both paths (a direct lease and a worker's
//! claim). Read in the statement's snapshot, taken before the wait, they would be missing.

use std::sync::Arc;
use std::time::Duration;

use forge_core::part::Part;
use forge_core::ports::queue::{ClaimFilter, JobQueue, LeaseRequest};
use forge_core::ports::store::{LeasedRun, NewRun, NewThread, RunStore, ThreadStore};
use forge_core::run::Run;
use forge_core::scope::SystemScope;
use forge_core::time::{Clock, ManualClock};
use forge_store_postgres::PostgresStore;
use forge_store_postgres::testing::Flavor;
use forge_testkit::fixtures::{agent_ref, scope};

const TTL: Duration = Duration::from_secs(30);

/// Holds `run`'s row locked in a transaction of the administrator that also writes a message of
/// its thread, runs `lease` meanwhile, commits once the lease waits on the lock, and returns what
/// the lease read with the message's id.
async fn lease_while_locked(
    admin: &str,
    run: &Run,
    lease: impl Future<Output = LeasedRun> + Send + 'static,
) -> (LeasedRun, uuid::Uuid) {
    let mut holder = crate::row_locks::hold_run(admin, run.id.0).await;
    let message = uuid::Uuid::now_v7();
    sqlx::query(
        "INSERT INTO forge_messages (tenant_id, thread_id, id, run_id, role, parts, created_at) \
         VALUES ($1, $2, $3, $4, 'user', '[{\"type\": \"text\", \"text\": \"meanwhile\"}]', now())",
    )
    .bind(run.tenant_id.as_str())
    .bind(run.thread_id.0)
    .bind(message)
    .bind(run.id.0)
    .execute(&mut holder)
    .await
    .unwrap();
    let leasing = tokio::spawn(lease);
    // The lease's backend waits on the row lock before the holder lets go.
    crate::row_locks::until_waiting(admin, "%", "the lease").await;
    sqlx::raw_sql("COMMIT").execute(&mut holder).await.unwrap();
    (leasing.await.unwrap(), message)
}

/// The message ids of what a lease read with it.
fn page(leased: &LeasedRun) -> Vec<uuid::Uuid> {
    let (_, page) = leased
        .history
        .as_ref()
        .expect("the history read with the lease");
    page.iter().map(|m| m.id.0).collect()
}

async fn new_run(store: &PostgresStore) -> Run {
    let a = scope("t-a");
    let thread = store.create_thread(&a, NewThread::default()).await.unwrap();
    store
        .create_run(
            &a,
            NewRun::new(thread.id, agent_ref(), vec![Part::text("go")]),
        )
        .await
        .unwrap()
}

#[tokio::test]
async fn a_lease_that_waited_for_the_run_reads_the_history_committed_meanwhile() {
    let (store, _, admin) = crate::fresh(Flavor::Plain, Arc::new(ManualClock::at_2026())).await;
    let store = Arc::new(store);
    let run = new_run(&store).await;
    let leasing = store.clone();
    let id = run.id;
    let (leased, message) = lease_while_locked(&admin, &run, async move {
        leasing
            .lease_run_with_history(&scope("t-a"), id, "w", TTL, 10)
            .await
            .unwrap()
    })
    .await;
    assert_eq!(page(&leased), [message]);
}

#[tokio::test]
async fn a_claim_whose_lease_waited_for_the_run_reads_the_history_committed_meanwhile() {
    let (store, _, admin) = crate::fresh(Flavor::Plain, Arc::new(ManualClock::at_2026())).await;
    let store = Arc::new(store);
    let run = new_run(&store).await;
    let claiming = store.clone();
    let (leased, message) = lease_while_locked(&admin, &run, async move {
        let request = LeaseRequest {
            holder: "w".into(),
            ttl: TTL,
            history: Some(10),
        };
        let claimed = claiming
            .claim_leased(
                &SystemScope::new("test"),
                "worker",
                TTL,
                &ClaimFilter::any(),
                &request,
            )
            .await
            .unwrap()
            .expect("the run's job");
        claimed.lease.expect("the free lease")
    })
    .await;
    assert_eq!(leased.run.id, run.id);
    assert_eq!(page(&leased), [message]);
}

/// A worker frozen while it held a run's row (issue 62, item 7) blocks the run's takeover for
/// the store's lock timeout at most: the lease gives up, retryably, instead of waiting until the
/// holder wakes (here, never: the holder's transaction stays open until the test ends).
#[tokio::test]
async fn a_lease_behind_a_frozen_holder_of_the_run_gives_up_retryably() {
    let (store, _, admin) = crate::fresh(Flavor::Plain, Arc::new(ManualClock::at_2026())).await;
    let store = Arc::new(store);
    let run = new_run(&store).await;
    let _frozen = crate::row_locks::hold_run(&admin, run.id.0).await;
    let leasing = store.clone();
    let leased = tokio::spawn(async move {
        leasing
            .lease_run_with_history(&scope("t-a"), run.id, "w2", TTL, 10)
            .await
    });
    crate::row_locks::until_waiting(&admin, "%", "the lease").await;
    // A guard only: the lease answers after the lock timeout (5 s), or never without one.
    let answer = tokio::time::timeout(Duration::from_secs(120), leased)
        .await
        .expect("the lease waited on the frozen holder past any lock timeout")
        .unwrap();
    let err = answer.expect_err("the row is held");
    assert_eq!(err.kind(), forge_core::ErrorKind::Retryable, "{err}");
}

/// A lease that waited for the run's row is timed from when it got the row, not from before the
/// wait (issue 62, item 7): it is never written already (partly) expired.
#[tokio::test]
async fn a_lease_that_waited_for_the_row_is_timed_from_when_it_got_it() {
    let clock = Arc::new(ManualClock::at_2026());
    let (store, _, admin) = crate::fresh(Flavor::Plain, clock.clone()).await;
    let store = Arc::new(store);
    let run = new_run(&store).await;
    let mut holder = crate::row_locks::hold_run(&admin, run.id.0).await;
    let leasing = store.clone();
    let lease = tokio::spawn(async move {
        leasing
            .acquire_lease(&scope("t-a"), run.id, "w", TTL)
            .await
            .unwrap()
    });
    crate::row_locks::until_waiting(&admin, "%", "the lease").await;
    // The wait took (by the store's clock) most of a lease's life.
    clock.advance(Duration::from_secs(25));
    let got_the_row = clock.now();
    sqlx::raw_sql("COMMIT").execute(&mut holder).await.unwrap();
    let lease = lease.await.unwrap();
    assert_eq!(lease.expires_at, got_the_row.plus(TTL));
}
