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

async fn notifies(flavor: Flavor) {
    let clock = Arc::new(ManualClock::at_2026());
    let (store, _, _) = crate::fresh(flavor, clock.clone()).await;
    let (ready_tx, ready) = tokio::sync::oneshot::channel();
    let ready_tx = std::sync::Mutex::new(Some(ready_tx));
    let (tx, mut wakes) = mpsc::unbounded_channel();
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
    let other_thread = store.create_thread(&s, NewThread::default()).await.unwrap();
    let other = store
        .create_run(
            &s,
            NewRun::new(other_thread.id, agent_ref(), vec![Part::text("hi")]),
        )
        .await
        .unwrap();
    let lease = store.acquire_lease(&s, other.id, "w", TTL).await.unwrap();
    store
        .commit_step(&s, step(&other, lease, 0, 1, &clock))
        .await
        .unwrap();
    assert_eq!(
        next_wake(&mut wakes).await,
        (other.id, other_thread.id),
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
