//! Conformance: a step's session-state change commits with the step, or the whole step is
//! refused — never a lost update, never half a commit.

use forge_core::Error;
use forge_core::ports::store::{RunStore, SESSION_STATE, StateUpdate, ThreadStore};
use forge_core::run::RunStatus;
use serde_json::json;

use crate::StoreFactory;
use crate::store::{TTL, fixture};

fn values(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    v.as_object().cloned().unwrap_or_default()
}

/// A step's state change is applied with its events; a step whose state version went stale
/// (a host wrote in between) is refused whole, leaving the host's write and the run as they were.
pub async fn a_step_commits_session_state_with_it_or_not_at_all<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let run = f.run().await;
    let lease = f
        .store
        .acquire_lease(&f.scope, run.id, "w", TTL)
        .await
        .expect("lease");
    let mut first = f.commit(&run, &lease, f.events(run.id, 1, 1), RunStatus::Running);
    first.state = Some(StateUpdate {
        expected_version: 0,
        values: values(json!({"plan": "draft"})),
    });
    let committed = f.store.commit_step(&f.scope, first).await.expect("commit");
    let thread = f
        .store
        .get_thread(&f.scope, run.thread_id)
        .await
        .expect("thread");
    assert_eq!(thread.state.version, 1);
    assert_eq!(thread.state.values, values(json!({"plan": "draft"})));

    // A host writes version 2 while the next step is computed from version 1.
    f.store
        .put_session_state(&f.scope, run.thread_id, 1, values(json!({"plan": "host"})))
        .await
        .expect("host write");
    let run = f.store.get_run(&f.scope, run.id).await.expect("run");
    assert_eq!(run.version, committed.version);
    let mut second = f.commit(&run, &lease, f.events(run.id, 2, 1), RunStatus::Running);
    second.state = Some(StateUpdate {
        expected_version: 1,
        values: values(json!({"plan": "step"})),
    });
    let refused = f.store.commit_step(&f.scope, second).await;
    assert!(
        matches!(
            &refused,
            Err(Error::VersionConflict { entity, expected: 1, actual: 2, .. }) if *entity == SESSION_STATE
        ),
        "{refused:?}"
    );
    let thread = f
        .store
        .get_thread(&f.scope, run.thread_id)
        .await
        .expect("thread");
    assert_eq!(thread.state.version, 2, "the host's write stands");
    assert_eq!(thread.state.values, values(json!({"plan": "host"})));
    let after = f.store.get_run(&f.scope, run.id).await.expect("run");
    assert_eq!(
        (after.version, after.last_seq),
        (committed.version, 1),
        "nothing of the refused step was written"
    );
    let events = f
        .store
        .read_events(&f.scope, run.id, 0, 10)
        .await
        .expect("events");
    assert_eq!(events.len(), 1);

    // Computed again from version 2, the step commits.
    let mut again = f.commit(&after, &lease, f.events(run.id, 2, 1), RunStatus::Running);
    again.state = Some(StateUpdate {
        expected_version: 2,
        values: values(json!({"plan": "host", "step": true})),
    });
    f.store.commit_step(&f.scope, again).await.expect("commit");
    let thread = f
        .store
        .get_thread(&f.scope, run.thread_id)
        .await
        .expect("thread");
    assert_eq!(thread.state.version, 3);
    assert_eq!(
        thread.state.values,
        values(json!({"plan": "host", "step": true}))
    );
}
