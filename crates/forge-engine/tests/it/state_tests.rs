//! Session state a run changes: committed with the step, versioned, never a lost update.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use forge_core::agent::RunLimits;
use forge_core::event::{RunEvent, RunEventKind};
use forge_core::part::Part;
use forge_core::ports::store::{NewThread, RunStore, SESSION_STATE, ThreadStore};
use forge_core::run::RunStatus;
use forge_engine::EngineError;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::harness::{agent, harness_built, harness_with};

/// The outcome and error code of each step commit the engine timed since the last call.
fn commits_timed(metrics: &crate::harness::Metrics) -> Vec<(String, String)> {
    metrics
        .take(forge_core::telemetry::Instrument::StepCommitDuration)
        .iter()
        .map(|r| {
            assert!(r.value >= 0.0, "{r:?}");
            (r.attr("outcome").to_owned(), r.attr("code").to_owned())
        })
        .collect()
}

const SETS_THEN_STALE: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "s1", name = "update_session_state", input = { expected_version = 0, set = { plan = "pro" } } }]
[[conversation.turn]]
tool_calls = [{ id = "s2", name = "update_session_state", input = { expected_version = 0, set = { plan = "free" } } }]
[[conversation.turn]]
text = ["done"]
"#;

fn tool_results(events: &[RunEvent]) -> Vec<Value> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            RunEventKind::PartAdded {
                part: Part::ToolResult(r),
                ..
            } => Some(r.output.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_run_changes_its_threads_state_with_the_step_and_a_stale_version_is_refused() {
    let h = harness_with(
        SETS_THEN_STALE,
        vec![],
        agent(&["update_session_state"], RunLimits::default()),
    );
    let f = h.run("remember my plan").await;
    assert_eq!(f.outcome.status, RunStatus::Completed);
    let changes: Vec<&RunEventKind> = f
        .events
        .iter()
        .map(|e| &e.kind)
        .filter(|k| matches!(k, RunEventKind::StateUpdated { .. }))
        .collect();
    assert_eq!(
        changes,
        [&RunEventKind::StateUpdated {
            version: 1,
            keys: vec!["plan".into()]
        }]
    );
    let results = tool_results(&f.events);
    assert_eq!(results[0], json!({"version": 1, "keys": ["plan"]}));
    assert_eq!(results[1]["code"], "state_conflict", "{results:?}");
    let threads = h.model.requests.lock().unwrap().clone();
    // The second request shows the state the first step committed, with its version.
    assert!(
        threads[1]
            .system
            .contains("Session state (version 1, JSON):\n{\"plan\":\"pro\"}"),
        "{}",
        threads[1].system
    );
    let run = h.store.get_run(&h.scope, f.events[0].run_id).await.unwrap();
    let thread = h.store.get_thread(&h.scope, run.thread_id).await.unwrap();
    assert_eq!(thread.state.version, 1);
    assert_eq!(Value::Object(thread.state.values), json!({"plan": "pro"}));
}

const RUN_AND_HOST: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "s1", name = "update_session_state", input = { expected_version = 0, set = { plan = "run" } } }]
[[conversation.turn]]
tool_calls = [{ id = "s2", name = "update_session_state", input = { expected_version = 1, set = { seen = true } } }]
[[conversation.turn]]
text = ["done"]
"#;

/// Polls a future that never waits (the memory store's), from inside a synchronous observer.
fn now<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the memory store does not wait"),
    }
}

/// The refused commit is timed too (`forge.run.step_commit_duration_ms`, by outcome and code),
/// and so is every commit of the execution that follows.
#[tokio::test]
async fn a_host_write_during_a_step_refuses_the_step_and_is_never_lost() {
    let commits = std::sync::Arc::new(crate::harness::Metrics::default());
    let telemetry = forge_core::telemetry::Telemetry {
        meter: commits.clone(),
        ..Default::default()
    };
    let h = harness_built(
        RUN_AND_HOST,
        vec![],
        agent(&["update_session_state"], RunLimits::default()),
        |b| b.telemetry(telemetry),
    );
    let thread = h
        .store
        .create_thread(&h.scope, NewThread::default())
        .await
        .unwrap();
    let run = h
        .engine
        .start_run(&h.scope, thread.id, &h.agent, vec![Part::text("go")])
        .await
        .unwrap();
    // While the first step streams, the host writes the state the step was computed from.
    let wrote = AtomicBool::new(false);
    let host = |e: &RunEvent| {
        if matches!(e.kind, RunEventKind::PartAdded { .. }) && !wrote.swap(true, Ordering::SeqCst) {
            let mut values = serde_json::Map::new();
            values.insert("plan".into(), "host".into());
            now(h.store.put_session_state(&h.scope, thread.id, 0, values)).unwrap();
        }
    };
    let first = h
        .engine
        .execute(&h.scope, run.id, &CancellationToken::new(), &host)
        .await;
    assert!(
        matches!(
            &first,
            Err(EngineError::Store(forge_core::Error::VersionConflict { entity, .. })) if *entity == SESSION_STATE
        ),
        "{first:?}"
    );
    let refused = h.store.get_run(&h.scope, run.id).await.unwrap();
    assert_eq!(
        refused.last_seq, 0,
        "nothing of the refused step was committed"
    );
    assert_eq!(
        commits_timed(&commits),
        vec![("error".to_owned(), "conflict".to_owned())],
        "the refused commit was timed, with its code"
    );

    // Executed again (as the worker does, spending no attempt), the step sees the host's state.
    let outcome = h
        .engine
        .execute(
            &h.scope,
            run.id,
            &CancellationToken::new(),
            &|_: &RunEvent| {},
        )
        .await
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    let ok = ("ok".to_owned(), String::new());
    assert_eq!(
        commits_timed(&commits),
        vec![ok.clone(), ok.clone(), ok],
        "each of the three steps' commits was timed"
    );
    let events = h
        .store
        .read_events(&h.scope, run.id, 0, 1000)
        .await
        .unwrap();
    let results = tool_results(&events);
    assert_eq!(results[0]["code"], "state_conflict", "{results:?}");
    assert_eq!(results[1], json!({"version": 2, "keys": ["seen"]}));
    let state = h.store.get_thread(&h.scope, thread.id).await.unwrap().state;
    assert_eq!(state.version, 2);
    assert_eq!(
        Value::Object(state.values),
        json!({"plan": "host", "seen": true}),
        "the host's write stands and the run's change is on top of it"
    );
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PlanInput {
    plan: String,
}

const HOST_TOOL_THEN_BUILT_IN: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "p1", name = "choose_plan", input = { plan = "pro" } }, { id = "s1", name = "update_session_state", input = { expected_version = 0, set = { seats = 3 } } }]
[[conversation.turn]]
text = ["done"]
"#;

/// The session state is a port of the tool context, not something the engine keeps to its own
/// built-in: a host's tool changes it through `ToolContext::session` the way
/// `update_session_state` does, and both calls of the step land in its one commit.
#[tokio::test]
async fn a_hosts_tool_changes_session_state_through_its_context_like_the_built_in() {
    let choose = forge_engine::native_tool(
        "choose_plan",
        "records the plan the user chose",
        |ctx: forge_core::ports::tool::ToolContext, i: PlanInput| async move {
            let session = ctx.session.ok_or_else(|| {
                forge_core::ports::tool::ToolError::Failed("no session in a step".into())
            })?;
            session
                .0
                .update(&json!({"expected_version": 0, "set": {"plan": i.plan}}))
        },
    );
    let h = harness_with(
        HOST_TOOL_THEN_BUILT_IN,
        vec![std::sync::Arc::new(choose)],
        agent(
            &["choose_plan", "update_session_state"],
            RunLimits::default(),
        ),
    );
    let f = h.run("pro, three seats").await;
    assert_eq!(f.outcome.status, RunStatus::Completed);
    let results = tool_results(&f.events);
    assert_eq!(
        results[0],
        json!({"version": 1, "keys": ["plan"]}),
        "{results:?}"
    );
    assert_eq!(
        results[1],
        json!({"version": 1, "keys": ["plan", "seats"]}),
        "{results:?}"
    );
    let run = h.store.get_run(&h.scope, f.events[0].run_id).await.unwrap();
    let thread = h.store.get_thread(&h.scope, run.thread_id).await.unwrap();
    assert_eq!(thread.state.version, 1);
    assert_eq!(
        Value::Object(thread.state.values),
        json!({"plan": "pro", "seats": 3})
    );
}
