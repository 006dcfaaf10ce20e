//! Cross-process wake-ups: one `NOTIFY` per committed step that appends events, and one for a
//! run queued behind another (its first event), each sent on commit; a refused step sends none.

use std::sync::Arc;
use std::time::Duration;

use forge_core::event::{RunEvent, RunEventKind};
use forge_core::id::{RunId, ThreadId};
use forge_core::part::Part;
use forge_core::ports::store::{NewRun, NewThread, RunStore, StepCommit, ThreadStore};
use forge_core::run::{Checkpoint, Run, RunLease, RunStatus};
use forge_core::time::{Clock, ManualClock};
use forge_store_postgres::testing::Flavor;
use forge_testkit::fixtures::{agent_ref, scope};
use tokio::sync::mpsc;

const TTL: Duration = Duration::from_secs(60);

fn step(
    run: &Run,
    lease: RunLease,
    expected_version: u64,
    seq: u64,
    clock: &ManualClock,
) -> StepCommit {
    StepCommit {
        run_id: run.id,
        expected_version,
        lease,
        events: vec![RunEvent {
            run_id: run.id,
            seq,
            at: clock.now(),
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
    }
}

async fn next_wake(wakes: &mut mpsc::UnboundedReceiver<(RunId, ThreadId)>) -> (RunId, ThreadId) {
    tokio::time::timeout(Duration::from_secs(10), wakes.recv())
        .await
        .expect("a notification within 10 s")
        .expect("the listener is running")
}

/// A listener on `store`, once it listens, and the wakes it reports.
async fn listen(
    store: &forge_store_postgres::PostgresStore,
) -> (
    tokio::task::JoinHandle<()>,
    mpsc::UnboundedReceiver<(RunId, ThreadId)>,
) {
    let (ready_tx, ready) = tokio::sync::oneshot::channel();
    let ready_tx = std::sync::Mutex::new(Some(ready_tx));
    let (tx, wakes) = mpsc::unbounded_channel();
    let listener = store.listen_run_events(move |wake| {
        match wake {
            None => {
                if let Some(ready) = ready_tx.lock().unwrap().take() {
                    let _ = ready.send(());
                }
            }
            Some(wake) => {
                let _ = tx.send(wake);
            }
        }
        true
    });
    tokio::time::timeout(Duration::from_secs(10), ready)
        .await
        .expect("listening within 10 s")
        .unwrap();
    (listener, wakes)
}

/// A new thread with one run, and the run's lease.
async fn leased_run(
    store: &forge_store_postgres::PostgresStore,
    s: &forge_core::scope::Scope,
) -> (Run, RunLease) {
    let thread = store.create_thread(s, NewThread::default()).await.unwrap();
    let run = store
        .create_run(
            s,
            NewRun::new(thread.id, agent_ref(), vec![Part::text("hi")]),
        )
        .await
        .unwrap();
    let lease = store.acquire_lease(s, run.id, "w", TTL).await.unwrap();
    (run, lease)
}

async fn notifies(flavor: Flavor) {
    let clock = Arc::new(ManualClock::at_2026());
    let (store, _, _) = crate::fresh(flavor, clock.clone()).await;
    let (listener, mut wakes) = listen(&store).await;

    let s = scope("tenant-a");
    let thread = store.create_thread(&s, NewThread::default()).await.unwrap();
    let new = || NewRun::new(thread.id, agent_ref(), vec![Part::text("hi")]);
    let active = store.create_run(&s, new()).await.unwrap();
    let queued = store.create_run(&s, new()).await.unwrap();
    assert_eq!(
        next_wake(&mut wakes).await,
        (queued.id, thread.id),
        "the queued run's run.queued event wakes listeners (the active run appended nothing)"
    );

    let lease = store.acquire_lease(&s, active.id, "w", TTL).await.unwrap();
    let done = store
        .commit_step(&s, step(&active, lease.clone(), 0, 1, &clock))
        .await
        .unwrap();
    assert_eq!(next_wake(&mut wakes).await, (active.id, thread.id));

    // A refused step (a stale version) notifies nobody: the next wake is the other thread's.
    store
        .commit_step(&s, step(&active, lease, 0, 2, &clock))
        .await
        .expect_err("a stale version is refused");
    let (other, lease) = leased_run(&store, &s).await;
    store
        .commit_step(&s, step(&other, lease, 0, 1, &clock))
        .await
        .unwrap();
    assert_eq!(
        next_wake(&mut wakes).await,
        (other.id, other.thread_id),
        "the refused step of {} sent no notification (version {} stands)",
        active.id,
        done.version
    );
    listener.abort();
}

#[tokio::test]
async fn committed_steps_and_queued_runs_notify_listeners() {
    notifies(Flavor::Plain).await;
}

#[tokio::test]
async fn committed_steps_and_queued_runs_notify_listeners_in_supabase_mode() {
    notifies(Flavor::Supabase).await;
}

/// Steps committed at once on many runs (their commits contending for the notification queue)
/// each wake the listener; with `writers`, through that many step writers, whose groups may not
/// fall back to writing their steps one by one.
async fn concurrent_steps_each_wake(flavor: Flavor, writers: Option<usize>) {
    let clock = Arc::new(ManualClock::at_2026());
    let (mut store, _, _) = crate::fresh(flavor, clock.clone()).await;
    if let Some(writers) = writers {
        store = store.with_step_writers(writers).with_groups_never_resent();
    }
    let (listener, mut wakes) = listen(&store).await;

    let s = scope("tenant-a");
    let mut runs = Vec::new();
    for _ in 0..24 {
        runs.push(leased_run(&store, &s).await);
    }
    let commits = runs.iter().map(|(run, lease)| {
        let (store, s, clock) = (store.clone(), s.clone(), clock.clone());
        let commit = step(run, lease.clone(), 0, 1, &clock);
        tokio::spawn(async move { store.commit_step(&s, commit).await })
    });
    for done in futures_util::future::join_all(commits).await {
        done.unwrap().expect("the step commits");
    }
    if writers.is_some() {
        assert!(store.step_groups().groups > 0, "no step was grouped");
    }
    let mut expected: std::collections::BTreeSet<(RunId, ThreadId)> = runs
        .iter()
        .map(|(run, _)| (run.id, run.thread_id))
        .collect();
    while !expected.is_empty() {
        let wake = next_wake(&mut wakes).await;
        assert!(expected.remove(&wake), "an unexpected wake {wake:?}");
    }
    listener.abort();
}

#[tokio::test]
async fn steps_committed_at_once_each_wake_listeners() {
    concurrent_steps_each_wake(Flavor::Plain, None).await;
}

#[tokio::test]
async fn steps_committed_in_groups_each_wake_listeners() {
    concurrent_steps_each_wake(Flavor::Plain, Some(2)).await;
}

#[tokio::test]
async fn steps_committed_at_once_each_wake_listeners_in_supabase_mode() {
    concurrent_steps_each_wake(Flavor::Supabase, None).await;
}

/// Steps notify only while a listener is registered: a bare `LISTEN` (no registration) hears
/// nothing of a committed step; once `listen_run_events` registers, the next step is heard by
/// both; once its registration lapses, nothing again.
async fn steps_notify_only_while_someone_listens(flavor: Flavor) {
    let clock = Arc::new(ManualClock::at_2026());
    let (store, url, _) = crate::fresh(flavor, clock.clone()).await;
    let mut bare = sqlx::postgres::PgListener::connect(&url).await.unwrap();
    bare.listen("forge_run_events").await.unwrap();
    let heard = async |bare: &mut sqlx::postgres::PgListener| {
        tokio::time::timeout(Duration::from_millis(1500), bare.recv())
            .await
            .ok()
            .map(|n| n.expect("the bare listener").payload().to_owned())
    };

    let s = scope("tenant-a");
    let (run, lease) = leased_run(&store, &s).await;
    let first = store
        .commit_step(&s, step(&run, lease.clone(), 0, 1, &clock))
        .await
        .unwrap();
    assert_eq!(heard(&mut bare).await, None, "no one was registered");

    let (listener, mut wakes) = listen(&store).await;
    let second = store
        .commit_step(&s, step(&run, lease.clone(), first.version, 2, &clock))
        .await
        .unwrap();
    let payload = format!("{} {}", run.id, run.thread_id);
    assert_eq!(heard(&mut bare).await, Some(payload));
    assert_eq!(next_wake(&mut wakes).await, (run.id, run.thread_id));

    // A registration not renewed lapses (the listener's task is gone; its clock moved on).
    listener.abort();
    clock.advance(Duration::from_secs(31));
    let lease = store.acquire_lease(&s, run.id, "w", TTL).await.unwrap();
    store
        .commit_step(&s, step(&run, lease, second.version, 3, &clock))
        .await
        .unwrap();
    assert_eq!(heard(&mut bare).await, None, "the registration lapsed");
}

#[tokio::test]
async fn steps_notify_only_while_a_listener_is_registered() {
    steps_notify_only_while_someone_listens(Flavor::Plain).await;
}

#[tokio::test]
async fn steps_notify_only_while_a_listener_is_registered_in_supabase_mode() {
    steps_notify_only_while_someone_listens(Flavor::Supabase).await;
}
