//! The agent loop: exact event sequences for each path through a run.

use std::sync::Arc;

use forge_core::ErrorKind;
use forge_core::agent::RunLimits;
use forge_core::event::{RunEvent, RunEventKind};
use forge_core::message::Role;
use forge_core::part::Part;
use forge_core::ports::store::{NewThread, RunStore, ThreadStore};
use forge_core::run::{FailureCode, RunStatus};
use tokio_util::sync::CancellationToken;

use crate::harness::{Harness, agent, harness, harness_with};
use crate::tools_tests::{calculator, rendezvous};

const TWO_STEP: &str = r#"
[[conversation]]
[[conversation.turn]]
text = ["Let me ", "compute."]
tool_calls = [{ id = "c1", name = "calculate", input = { op = "mul", a = 12, b = 7 } }]
[[conversation.turn]]
tool_calls = [{ id = "c2", name = "calculate", input = { op = "add", a = 84, b = 1 } }]
[[conversation.turn]]
text = ["The answer is ", "{{tool_result.result}}", "."]
"#;

#[tokio::test]
async fn multi_step_tool_loop() {
    let h = harness(TWO_STEP, vec![calculator()], RunLimits::default());
    let f = h.run("what is 12*7+1?").await;
    assert_eq!(f.outcome.status, RunStatus::Completed);
    assert_eq!(
        f.log,
        r#"1 run.started tester@1 scripted:inline
2 step.started 1
3 part.added Assistant[0] text "Let me "
4 part.updated [0] +"compute."
5 part.added Assistant[1] tool_call c1 calculate null
6 part.updated [1] +json {"a":12,"b"
7 part.updated [1] +json :7,"op":"mul"}
8 part.updated [1] = tool_call c1 calculate {"a":12,"b":7,"op":"mul"}
9 usage.updated step 1
10 part.added Tool[0] tool_result c1 {"result":84}
11 run.checkpointed step 1 v1
12 step.started 2
13 part.added Assistant[0] tool_call c2 calculate null
14 part.updated [0] +json {"a":84,"b"
15 part.updated [0] +json :1,"op":"add"}
16 part.updated [0] = tool_call c2 calculate {"a":84,"b":1,"op":"add"}
17 usage.updated step 2
18 part.added Tool[0] tool_result c2 {"result":85}
19 run.checkpointed step 2 v2
20 step.started 3
21 part.added Assistant[0] text "The answer is "
22 part.updated [0] +"85."
23 usage.updated step 3
24 run.completed "The answer is 85.""#
    );
    // History holds the user message, then each step's assistant and tool messages.
    let run = h.store.get_run(&h.scope, f.events[0].run_id).await.unwrap();
    let roles: Vec<Role> = h
        .store
        .list_messages(&h.scope, run.thread_id)
        .await
        .unwrap()
        .iter()
        .map(|m| m.role)
        .collect();
    assert_eq!(
        roles,
        [
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant,
            Role::Tool,
            Role::Assistant
        ]
    );
    assert_eq!(
        (run.version, run.checkpoint.step, run.status),
        (3, 3, RunStatus::Completed)
    );
    // The usage summed over steps is what run.completed reports.
    let RunEventKind::RunCompleted { usage, .. } = &f.events.last().unwrap().kind else {
        panic!()
    };
    assert_eq!(*usage, run.checkpoint.usage);
    assert!(usage.input_tokens > 0 && usage.output_tokens > 0);
}

/// A run started and executed at once (`submit_and_execute`, leased as it is created) is the run
/// `start_run` and `execute` make: the same committed log, seen live, the lease given up at the
/// end. Its job stays queued as `submit` leaves it, and the worker that claims it finds the run
/// ended and completes it without calling the model again.
#[tokio::test]
async fn a_run_submitted_and_executed_at_once_is_the_run_start_and_execute_make() {
    use forge_core::ports::queue::{ClaimFilter, JobQueue};
    use forge_core::scope::SystemScope;

    let apart = harness(TWO_STEP, vec![calculator()], RunLimits::default())
        .run("what is 12*7+1?")
        .await;
    let h = harness(TWO_STEP, vec![calculator()], RunLimits::default());
    let f = h.run_inline("what is 12*7+1?").await;
    assert_eq!(f.outcome.status, RunStatus::Completed);
    assert_eq!(f.log, apart.log);
    let id = f.events[0].run_id;
    let run = h.store.get_run(&h.scope, id).await.unwrap();
    assert_eq!((run.status, run.lease), (RunStatus::Completed, None));
    assert_eq!(
        run.fence, 1,
        "leased once, as it was created, and executed under that lease"
    );
    let calls = h.model.requests.lock().unwrap().len();
    assert_eq!(calls, 3);

    let system = SystemScope::new("loop test");
    let job = h
        .store
        .claim(
            &system,
            "w",
            std::time::Duration::from_secs(30),
            &ClaimFilter::any(),
        )
        .await
        .unwrap()
        .expect("the run's job is still queued");
    assert_eq!(job.run_id, id);
    let control = forge_engine::RunControl {
        job: Some(job.clone()),
        ..Default::default()
    };
    let outcome = h
        .engine
        .execute_job(
            &h.scope.tenant_id().clone(),
            id,
            &control,
            &forge_engine::NoopObserver,
        )
        .await
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(
        h.model.requests.lock().unwrap().len(),
        calls,
        "no model call again"
    );
}

#[tokio::test]
async fn parallel_tool_calls_run_concurrently_and_report_in_call_order() {
    let script = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [
  { id = "a", name = "rendezvous", input = { label = "a" } },
  { id = "b", name = "rendezvous", input = { label = "b" } },
  { id = "c", name = "rendezvous", input = { label = "c" } },
]
[[conversation.turn]]
text = ["all met"]
"#;
    // The tool only returns once all three calls are in flight together.
    let h = harness(script, vec![rendezvous(3)], RunLimits::default());
    let f = h.run("go").await;
    assert_eq!(
        f.log,
        r#"1 run.started tester@1 scripted:inline
2 step.started 1
3 part.added Assistant[0] tool_call a rendezvous null
4 part.updated [0] +json {"
5 part.updated [0] +json label":"a"}
6 part.added Assistant[1] tool_call b rendezvous null
7 part.updated [1] +json {"
8 part.updated [1] +json label":"b"}
9 part.added Assistant[2] tool_call c rendezvous null
10 part.updated [2] +json {"
11 part.updated [2] +json label":"c"}
12 part.updated [0] = tool_call a rendezvous {"label":"a"}
13 part.updated [1] = tool_call b rendezvous {"label":"b"}
14 part.updated [2] = tool_call c rendezvous {"label":"c"}
15 usage.updated step 1
16 part.added Tool[0] tool_result a "met a"
17 part.added Tool[1] tool_result b "met b"
18 part.added Tool[2] tool_result c "met c"
19 run.checkpointed step 1 v1
20 step.started 2
21 part.added Assistant[0] text "all "
22 part.updated [0] +"met"
23 usage.updated step 2
24 run.completed "all met""#
    );
}

#[tokio::test]
async fn invalid_tool_input_goes_back_to_the_model_which_recovers() {
    let script = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [
  { id = "bad_schema", name = "calculate", input = { op = "mul", a = "twelve", b = 7 } },
  { id = "bad_json", name = "calculate", raw_input = '{"op": "mul", "a": 12,' },
  { id = "no_such", name = "launch_rockets", input = {} },
]
[[conversation.turn]]
tool_calls = [{ id = "good", name = "calculate", input = { op = "mul", a = 12, b = 7 } }]
[[conversation.turn]]
text = ["{{tool_result.result}}"]
"#;
    let h = harness(script, vec![calculator()], RunLimits::default());
    let f = h.run("12 times 7").await;
    assert_eq!(f.outcome.status, RunStatus::Completed);
    assert_eq!(
        f.log,
        r#"1 run.started tester@1 scripted:inline
2 step.started 1
3 part.added Assistant[0] tool_call bad_schema calculate null
4 part.updated [0] +json {"a":"twelve","
5 part.updated [0] +json b":7,"op":"mul"}
6 part.added Assistant[1] tool_call bad_json calculate null
7 part.updated [1] +json {"op": "
8 part.updated [1] +json mul", "a": 12,
9 part.added Assistant[2] tool_call no_such launch_rockets null
10 part.updated [2] +json {
11 part.updated [2] +json }
12 part.updated [0] = tool_call bad_schema calculate {"a":"twelve","b":7,"op":"mul"}
13 part.updated [2] = tool_call no_such launch_rockets {}
14 usage.updated step 1
15 part.added Tool[0] tool_result bad_schema error {"code":"invalid_input","message":"tool input does not match the schema: /a: \"twelve\" is not of type \"integer\""}
16 part.added Tool[1] tool_result bad_json error {"code":"invalid_json","message":"tool input is not valid JSON"}
17 part.added Tool[2] tool_result no_such error {"code":"forbidden","message":"there is no tool named \"launch_rockets\" available to this run"}
18 run.checkpointed step 1 v1
19 step.started 2
20 part.added Assistant[0] tool_call good calculate null
21 part.updated [0] +json {"a":12,"b"
22 part.updated [0] +json :7,"op":"mul"}
23 part.updated [0] = tool_call good calculate {"a":12,"b":7,"op":"mul"}
24 usage.updated step 2
25 part.added Tool[0] tool_result good {"result":84}
26 run.checkpointed step 2 v2
27 step.started 3
28 part.added Assistant[0] text "84"
29 usage.updated step 3
30 run.completed "84""#
    );
    // The model was shown the errors: the second request carries them in its history.
    let requests = h.model.requests.lock().unwrap();
    let last_tool_msg = requests[1]
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::Tool)
        .unwrap();
    assert_eq!(last_tool_msg.parts.len(), 3);
    assert!(
        last_tool_msg
            .parts
            .iter()
            .all(|p| matches!(p, Part::ToolResult(r) if r.is_error))
    );
}

#[tokio::test]
async fn step_limit_fails_the_run_without_running_the_pending_calls() {
    let script = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "c1", name = "calculate", input = { op = "add", a = 1, b = 1 } }]
[[conversation.turn]]
tool_calls = [{ id = "c2", name = "calculate", input = { op = "add", a = 2, b = 2 } }]
[[conversation.turn]]
text = ["never reached"]
"#;
    let h = harness(
        script,
        vec![calculator()],
        RunLimits {
            max_steps: 2,
            ..RunLimits::default()
        },
    );
    let f = h.run("loop").await;
    assert_eq!(f.outcome.status, RunStatus::Failed);
    assert_eq!(
        f.outcome.failure.as_ref().unwrap().code,
        FailureCode::StepLimitExceeded
    );
    assert_eq!(
        f.log,
        r#"1 run.started tester@1 scripted:inline
2 step.started 1
3 part.added Assistant[0] tool_call c1 calculate null
4 part.updated [0] +json {"a":1,"b"
5 part.updated [0] +json :1,"op":"add"}
6 part.updated [0] = tool_call c1 calculate {"a":1,"b":1,"op":"add"}
7 usage.updated step 1
8 part.added Tool[0] tool_result c1 {"result":2}
9 run.checkpointed step 1 v1
10 step.started 2
11 part.added Assistant[0] tool_call c2 calculate null
12 part.updated [0] +json {"a":2,"b"
13 part.updated [0] +json :2,"op":"add"}
14 part.updated [0] = tool_call c2 calculate {"a":2,"b":2,"op":"add"}
15 usage.updated step 2
16 run.failed StepLimitExceeded: the run reached its limit of 2 steps with tool calls pending"#
    );
    assert!(
        !f.log.contains("tool_result c2"),
        "the pending call must not run"
    );
    let run = h.store.get_run(&h.scope, f.events[0].run_id).await.unwrap();
    assert_eq!(run.failure.unwrap().code, FailureCode::StepLimitExceeded);
}

#[tokio::test]
async fn cancellation_mid_stream_stops_at_once_and_keeps_the_partial_message() {
    let script = r#"
[[conversation]]
[[conversation.turn]]
text = ["one ", "two ", "three ", "four"]
"#;
    let h = harness(script, vec![], RunLimits::default());
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    // Cancel as soon as the second chunk is seen.
    let on = move |e: &RunEvent| {
        if matches!(e.kind, RunEventKind::PartUpdated { .. }) {
            c.cancel();
        }
    };
    let f = h.run_with("count", &cancel, &on).await;
    assert_eq!(f.outcome.status, RunStatus::Cancelled);
    assert_eq!(
        f.log,
        r#"1 run.started tester@1 scripted:inline
2 step.started 1
3 part.added Assistant[0] text "one "
4 part.updated [0] +"two "
5 usage.updated step 1
6 run.cancelled Some("cancelled by request")"#
    );
    let run = h.store.get_run(&h.scope, f.events[0].run_id).await.unwrap();
    let history = h
        .store
        .list_messages(&h.scope, run.thread_id)
        .await
        .unwrap();
    assert_eq!(
        history.last().unwrap().text(),
        "one two ",
        "the partial answer is kept"
    );
    // A cancelled run stays cancelled: executing it again changes nothing.
    let again = h
        .engine
        .execute(
            &h.scope,
            run.id,
            &CancellationToken::new(),
            &forge_engine::NoopObserver,
        )
        .await
        .unwrap();
    assert_eq!((again.status, again.last_seq), (RunStatus::Cancelled, 6));
}

#[tokio::test]
async fn a_failing_tool_is_reported_to_the_model_and_the_run_continues() {
    let script = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "c1", name = "calculate", input = { op = "div", a = 1, b = 0 } }]
[[conversation.turn]]
text = ["Division by zero is undefined."]
"#;
    let h = harness(script, vec![calculator()], RunLimits::default());
    let f = h.run("1/0").await;
    assert_eq!(f.outcome.status, RunStatus::Completed);
    assert_eq!(
        f.log,
        r#"1 run.started tester@1 scripted:inline
2 step.started 1
3 part.added Assistant[0] tool_call c1 calculate null
4 part.updated [0] +json {"a":1,"b"
5 part.updated [0] +json :0,"op":"div"}
6 part.updated [0] = tool_call c1 calculate {"a":1,"b":0,"op":"div"}
7 usage.updated step 1
8 part.added Tool[0] tool_result c1 error {"code":"tool_failed","message":"division by zero"}
9 run.checkpointed step 1 v1
10 step.started 2
11 part.added Assistant[0] text "Division by zero is "
12 part.updated [0] +"undefined."
13 usage.updated step 2
14 run.completed "Division by zero is undefined.""#
    );
}

#[tokio::test]
async fn a_provider_error_mid_stream_fails_the_run_with_a_classified_error() {
    let script = r#"
[[conversation]]
[[conversation.turn]]
text = ["partial ", "answer ", "lost"]
error = { after_chunks = 2, code = "server_error" }
"#;
    let h = harness(script, vec![], RunLimits::default());
    let f = h.run("hello").await;
    assert_eq!(f.outcome.status, RunStatus::Failed);
    assert_eq!(
        f.log,
        r#"1 run.started tester@1 scripted:inline
2 step.started 1
3 part.added Assistant[0] text "partial "
4 part.updated [0] +"answer "
5 usage.updated step 1
6 part.added Assistant[1] error provider_error "the model call failed (server_error)"
7 run.failed ProviderError: the model call failed (server_error)"#
    );
}

#[tokio::test]
async fn a_provider_error_before_the_stream_fails_the_run() {
    let script = r#"
[[conversation]]
[[conversation.turn]]
error = { code = "overloaded" }
"#;
    let h = harness(script, vec![], RunLimits::default());
    let f = h.run("hello").await;
    assert_eq!(
        f.outcome.failure.unwrap().message,
        "the model call failed (overloaded)"
    );
    assert!(
        f.log
            .ends_with("5 run.failed ProviderError: the model call failed (overloaded)"),
        "{}",
        f.log
    );
}

/// A run that brings its thread (`NewRun::on_new_thread`) runs on the thread it asked for: its
/// session state is in the model's context and its title is stored. The thread meets the rules
/// `Engine::create_thread` applies: a title with a NUL is refused before anything is written.
#[tokio::test]
async fn a_run_on_a_new_thread_runs_on_the_thread_it_asked_for() {
    use forge_core::id::UuidV7Generator;
    use forge_core::ports::store::NewRun;

    let h = harness(TWO_STEP, vec![calculator()], RunLimits::default());
    let mut state = serde_json::Map::new();
    state.insert("plan".into(), "pro".into());
    let asked = |title: &str| NewThread {
        title: Some(title.into()),
        state: state.clone(),
        id: None,
    };
    let new = |thread| {
        NewRun::on_new_thread(
            &UuidV7Generator,
            thread,
            h.agent.clone(),
            vec![Part::text("what is 12*7+1?")],
        )
    };

    let refused = new(asked("a\0title"));
    let thread = refused.thread_id;
    let error = h
        .engine
        .submit_and_execute(
            &h.scope,
            refused,
            &forge_engine::RunControl::default(),
            &|_: &RunEvent| {},
        )
        .await
        .expect_err("a title with a NUL");
    assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
    assert_eq!(
        h.store
            .get_thread(&h.scope, thread)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound,
        "nothing was written"
    );

    let (run, outcome) = h
        .engine
        .submit_and_execute(
            &h.scope,
            new(asked("sums")),
            &forge_engine::RunControl::default(),
            &|_: &RunEvent| {},
        )
        .await
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    let run = h.store.get_run(&h.scope, run).await.unwrap();
    let thread = h.store.get_thread(&h.scope, run.thread_id).await.unwrap();
    assert_eq!(
        (thread.title.as_deref(), thread.active_run),
        (Some("sums"), None),
        "the thread asked for, idle again once its run ended"
    );
    let requests = h.model.requests.lock().unwrap();
    assert!(
        requests[0]
            .system
            .ends_with("Session state (version 0, JSON):\n{\"plan\":\"pro\"}"),
        "{}",
        requests[0].system
    );
}

#[tokio::test]
async fn context_holds_instructions_session_state_history_and_tools() {
    let h = harness(TWO_STEP, vec![calculator()], RunLimits::default());
    let mut state = serde_json::Map::new();
    state.insert("plan".into(), "pro".into());
    let thread = h
        .store
        .create_thread(
            &h.scope,
            NewThread {
                title: None,
                state,
                id: None,
            },
        )
        .await
        .unwrap();
    h.run_on(
        thread.id,
        "first question",
        &CancellationToken::new(),
        &|_: &RunEvent| {},
    )
    .await;
    let requests = h.model.requests.lock().unwrap();
    assert_eq!(requests.len(), 3);
    let first = &requests[0];
    assert_eq!(
        first.system,
        "You are a test agent.\n\nSession state (version 0, JSON):\n{\"plan\":\"pro\"}"
    );
    assert_eq!(first.model, "inline");
    assert_eq!(
        first
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["calculate"]
    );
    assert_eq!(first.messages.len(), 1);
    assert_eq!(first.messages[0].text(), "first question");
    // Each later step sees the earlier steps' messages.
    assert_eq!(requests[1].messages.len(), 3);
    assert_eq!(requests[2].messages.len(), 5);
}

#[tokio::test]
async fn a_worker_that_lost_its_lease_cannot_commit() {
    let h = harness(TWO_STEP, vec![calculator()], RunLimits::default());
    let store = h.store.clone();
    let clock = h.clock.clone();
    let scope = h.scope.clone();
    let stolen = std::sync::Mutex::new(false);
    // Mid-step, the lease expires and another worker takes the run over.
    let on = move |e: &RunEvent| {
        let mut done = stolen.lock().unwrap();
        if !*done && matches!(e.kind, RunEventKind::UsageUpdated { .. }) {
            *done = true;
            clock.advance(std::time::Duration::from_secs(120));
            let (store, scope, run) = (store.clone(), scope.clone(), e.run_id);
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                rt.block_on(store.acquire_lease(
                    &scope,
                    run,
                    "w2",
                    std::time::Duration::from_secs(60),
                ))
                .unwrap();
            })
            .join()
            .unwrap();
        }
    };
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
    let err = h
        .engine
        .execute(&h.scope, run.id, &CancellationToken::new(), &on)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    let stored = h.store.get_run(&h.scope, run.id).await.unwrap();
    assert_eq!(
        (stored.version, stored.last_seq),
        (0, 0),
        "nothing from the fenced worker was written"
    );
}

/// A worker frozen past its lease wakes to find the run taken over: its step's tools must not run
/// (issue 17, item 9). The lease is lost after the model answered and before the calls start; the
/// call is never made, and the step is abandoned as fenced.
#[tokio::test]
async fn a_worker_that_lost_its_lease_runs_no_tool() {
    const ONE_CALL: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "c1", name = "count", input = {} }]
[[conversation.turn]]
text = ["done"]
"#;
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count: Arc<dyn forge_core::ports::tool::Tool> = {
        let calls = calls.clone();
        Arc::new(forge_engine::native_tool(
            "count",
            "counts its calls",
            move |_ctx, _i: serde_json::Value| {
                let calls = calls.clone();
                async move {
                    calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    Ok::<_, forge_core::ports::tool::ToolError>(serde_json::json!("counted"))
                }
            },
        ))
    };
    let h = harness(ONE_CALL, vec![count], RunLimits::default());
    let store = h.store.clone();
    let clock = h.clock.clone();
    let scope = h.scope.clone();
    let stolen = std::sync::Mutex::new(false);
    let on = move |e: &RunEvent| {
        let mut done = stolen.lock().unwrap();
        if !*done && matches!(e.kind, RunEventKind::UsageUpdated { .. }) {
            *done = true;
            clock.advance(std::time::Duration::from_secs(120));
            let (store, scope, run) = (store.clone(), scope.clone(), e.run_id);
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                rt.block_on(store.acquire_lease(
                    &scope,
                    run,
                    "w2",
                    std::time::Duration::from_secs(60),
                ))
                .unwrap();
            })
            .join()
            .unwrap();
        }
    };
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
    let err = h
        .engine
        .execute(&h.scope, run.id, &CancellationToken::new(), &on)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the tool ran after the lease was lost"
    );
}

#[tokio::test]
async fn an_unregistered_agent_version_fails_the_run_with_a_clear_error() {
    let h = harness(TWO_STEP, vec![calculator()], RunLimits::default());
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
    // A new deployment registers version 2 only.
    let mut v2 = agent(&["calculate"], RunLimits::default());
    v2.agent.version = "2".into();
    let next = forge_engine::Engine::builder()
        .store(h.store.clone())
        .model(Arc::new(forge_providers::ScriptedProvider::new(
            forge_providers::Script::parse(TWO_STEP, "x").unwrap(),
        )))
        .tool(calculator())
        .unwrap()
        .agent(v2)
        .build()
        .unwrap();
    let out = next
        .execute(
            &h.scope,
            run.id,
            &CancellationToken::new(),
            &forge_engine::NoopObserver,
        )
        .await
        .unwrap();
    assert_eq!(out.status, RunStatus::Failed);
    let failure = out.failure.unwrap();
    assert_eq!(failure.code, FailureCode::AgentVersionUnavailable);
    assert_eq!(
        failure.message,
        "agent tester version 1 is not registered on this worker"
    );
}

#[tokio::test]
async fn building_refuses_an_agent_whose_tool_or_provider_is_missing() {
    let err = forge_engine::Engine::builder()
        .store(Arc::new(forge_store_memory::MemoryStore::default()))
        .agent(agent(&["calculate"], RunLimits::default()))
        .build()
        .unwrap_err();
    // Every problem at once.
    assert_eq!(
        err.to_string(),
        "agent tester is invalid: model provider scripted is not configured; tool calculate is \
         not registered"
    );
    let h = harness_with(
        TWO_STEP,
        vec![calculator()],
        agent(&["calculate"], RunLimits::default()),
    );
    let err = forge_engine::Engine::builder()
        .store(h.store.clone())
        .model(h.model.clone())
        .agent(agent(&["calculate"], RunLimits::default()))
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "agent tester is invalid: tool calculate is not registered"
    );
}

/// Structured output (issue 17, item 5): the request carries the schema, a matching answer
/// completes the run with a structured-output part, a non-matching one gets one repair, and a
/// second miss fails the run with `structured_output_invalid`.
mod structured {
    use super::*;

    fn with_schema(script: &str) -> crate::harness::Harness {
        let mut def = agent(&[], RunLimits::default());
        def.output_schema = Some(serde_json::json!({
            "type": "object",
            "properties": {"total": {"type": "integer"}},
            "required": ["total"],
            "additionalProperties": false
        }));
        harness_with(script, vec![], def)
    }

    fn structured(f: &crate::harness::Finished) -> Vec<serde_json::Value> {
        f.events
            .iter()
            .filter_map(|e| match &e.kind {
                RunEventKind::PartAdded {
                    part: Part::StructuredOutput(s),
                    ..
                } => Some(s.value.clone()),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn a_matching_answer_is_a_structured_output_part() {
        let h = with_schema(
            "[[conversation]]\n[[conversation.turn]]\ntext = [\"{\\\"total\\\": \", \"84}\"]\n",
        );
        let f = h.run("what is 12 times 7").await;
        assert_eq!(f.outcome.status, RunStatus::Completed);
        assert_eq!(structured(&f), [serde_json::json!({"total": 84})]);
        let requests = h.model.requests.lock().unwrap();
        assert_eq!(
            requests[0]
                .output_schema
                .as_ref()
                .map(|s| s["required"].clone()),
            Some(serde_json::json!(["total"])),
            "the request asks for the schema"
        );
    }

    #[tokio::test]
    async fn a_non_matching_answer_gets_one_repair() {
        let h = with_schema(
            // The repair request is the last user message: the scripted model answers it anew.
            "[[conversation]]\nwhen_user = \"does not match\"\n[[conversation.turn]]\ntext = [\"{\\\"total\\\": 84}\"]\n\n[[conversation]]\n[[conversation.turn]]\ntext = [\"It is 84.\"]\n",
        );
        let f = h.run("what is 12 times 7").await;
        assert_eq!(f.outcome.status, RunStatus::Completed, "{}", f.log);
        assert_eq!(structured(&f), [serde_json::json!({"total": 84})]);
        let requests = h.model.requests.lock().unwrap();
        assert_eq!(requests.len(), 2);
        let asked = requests[1].messages.last().unwrap();
        assert_eq!(asked.role, Role::User);
        assert!(asked.text().contains("not JSON"), "{}", asked.text());
    }

    #[tokio::test]
    async fn a_second_miss_fails_the_run_with_a_clear_code() {
        let h = with_schema(
            "[[conversation]]\nwhen_user = \"does not match\"\n[[conversation.turn]]\ntext = [\"{\\\"total\\\": \\\"84\\\"}\"]\n\n[[conversation]]\n[[conversation.turn]]\ntext = [\"84\"]\n",
        );
        let f = h.run("what is 12 times 7").await;
        assert_eq!(f.outcome.status, RunStatus::Failed);
        let failure = f.outcome.failure.unwrap();
        assert_eq!(failure.code, FailureCode::StructuredOutputInvalid);
        assert!(failure.message.contains("integer"), "{}", failure.message);
        assert_eq!(h.model.requests.lock().unwrap().len(), 2, "one repair only");
    }

    #[test]
    fn an_invalid_schema_is_refused_at_build() {
        let mut def = agent(&[], RunLimits::default());
        def.output_schema = Some(serde_json::json!({"type": 12}));
        let built = forge_engine::Engine::builder()
            .store(Arc::new(forge_store_memory::MemoryStore::default()))
            .model(Arc::new(forge_providers::ScriptedProvider::new(
                forge_providers::Script::parse(
                    "[[conversation]]\n[[conversation.turn]]\ntext = [\"x\"]\n",
                    "x",
                )
                .unwrap(),
            )))
            .agent(def)
            .build();
        assert!(
            built.is_err_and(|e| e.to_string().contains("output_schema")),
            "refused"
        );
    }
}

/// Takes `run`'s lease as another worker would once it lapsed: the engine's clock moved past
/// it (as after a freeze), on a thread of its own (the engine's runtime is frozen meanwhile).
fn take_over(h: &Harness, run: forge_core::id::RunId) {
    h.clock.advance(std::time::Duration::from_secs(120));
    let (store, scope) = (h.store.clone(), h.scope.clone());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(store.acquire_lease(&scope, run, "w2", std::time::Duration::from_secs(60)))
            .unwrap();
    })
    .join()
    .unwrap();
}

/// What a counting tool does while it "runs".
type Hook = Arc<dyn Fn() + Send + Sync>;

/// A counting tool; the first call of the one named `freeze` also lets the run be taken over
/// while it "runs", as a worker frozen mid-tools would find on waking.
fn counting(
    name: &'static str,
    calls: Arc<std::sync::atomic::AtomicUsize>,
    freeze: Option<Hook>,
) -> Arc<dyn forge_core::ports::tool::Tool> {
    Arc::new(forge_engine::native_tool(
        name,
        "counts its calls",
        move |_ctx, _i: serde_json::Value| {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if let Some(freeze) = &freeze {
                freeze();
            }
            async move { Ok::<_, forge_core::ports::tool::ToolError>(serde_json::json!("counted")) }
        },
    ))
}

/// The lease is made sure of immediately before each tool call, not once before a step's calls
/// (issue 62, item 7): a worker frozen while its first call ran, and taken over meanwhile, does
/// not make the second.
#[tokio::test]
async fn a_lease_lost_during_one_call_stops_the_next_call_of_the_step() {
    const TWO_CALLS: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "c1", name = "freeze", input = {} }, { id = "c2", name = "count", input = {} }]
[[conversation.turn]]
text = ["done"]
"#;
    let (frozen, counted) = (
        Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        Arc::new(std::sync::atomic::AtomicUsize::new(0)),
    );
    let hook: Arc<std::sync::Mutex<Option<Hook>>> = Default::default();
    let freeze: Hook = {
        let hook = hook.clone();
        Arc::new(move || {
            if let Some(f) = hook.lock().unwrap().clone() {
                f();
            }
        })
    };
    let h = harness(
        TWO_CALLS,
        vec![
            counting("freeze", frozen.clone(), Some(freeze)),
            counting("count", counted.clone(), None),
        ],
        RunLimits::default(),
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
    let h = Arc::new(h);
    *hook.lock().unwrap() = Some({
        let h = h.clone();
        Arc::new(move || take_over(&h, run.id))
    });
    let err = h
        .engine
        .execute(
            &h.scope,
            run.id,
            &CancellationToken::new(),
            &forge_engine::NoopObserver,
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert_eq!(frozen.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(
        counted.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the second call ran after the lease was lost"
    );
    *hook.lock().unwrap() = None;
}

/// A thawed worker makes sure of its lease before it asks the model for its next step (issue
/// 62, item 7): taken over between two steps, it sends no second model call.
#[tokio::test]
async fn a_worker_that_lost_its_lease_between_steps_asks_the_model_nothing() {
    let h = Arc::new(harness(TWO_STEP, vec![calculator()], RunLimits::default()));
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
    let model_calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let on = {
        let (h, model_calls) = (h.clone(), model_calls.clone());
        move |e: &RunEvent| match e.kind {
            RunEventKind::UsageUpdated { .. } => {
                model_calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            RunEventKind::StepStarted { step: 2 } => take_over(&h, e.run_id),
            _ => {}
        }
    };
    let err = h
        .engine
        .execute(&h.scope, run.id, &CancellationToken::new(), &on)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert_eq!(
        model_calls.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the second step's model call was sent after the lease was lost"
    );
}

/// An application executing a run itself (`submit_and_execute`) beside its own worker: the
/// worker, offered the run's job while the run executes in the same process (one lease holder),
/// leaves it alone until the lease could lapse, instead of leasing it again and fencing the
/// execution in the middle of its tool call.
#[tokio::test]
async fn a_run_executing_in_this_process_is_not_leased_again_by_it() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Nothing {}
    let (started, release) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let hold = {
        let (started, release) = (started.clone(), release.clone());
        forge_engine::native_tool("hold", "holds until released", move |_ctx, _: Nothing| {
            let (started, release) = (started.clone(), release.clone());
            async move {
                started.notify_one();
                release.notified().await;
                Ok::<_, forge_core::ports::tool::ToolError>("released")
            }
        })
    };
    const HOLD: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "c1", name = "hold", input = {} }]
[[conversation.turn]]
text = ["Done."]
"#;
    let h = harness(HOLD, vec![Arc::new(hold)], RunLimits::default());
    let thread = h
        .store
        .create_thread(&h.scope, NewThread::default())
        .await
        .unwrap();
    let new =
        forge_core::ports::store::NewRun::new(thread.id, h.agent.clone(), vec![Part::text("hold")]);
    let control = forge_engine::RunControl::default();
    let inline = h
        .engine
        .submit_and_execute(&h.scope, new, &control, &|_: &RunEvent| {});
    let worker = async {
        started.notified().await;
        let run = h.store.list_runs(&h.scope, thread.id).await.unwrap()[0].id;
        // What this process's worker does with the run's job.
        let taken = h
            .engine
            .execute(&h.scope, run, &CancellationToken::new(), &|_: &RunEvent| {})
            .await;
        release.notify_one();
        taken
    };
    let (inline, taken) = tokio::join!(inline, worker);
    let error = taken.expect_err("the run is executing here");
    assert!(
        matches!(
            error,
            forge_engine::EngineError::Store(forge_core::Error::LeaseHeld { .. })
        ),
        "{error}"
    );
    let (_, outcome) = inline.expect("the execution goes on under its lease");
    assert_eq!(outcome.status, RunStatus::Completed);
}
