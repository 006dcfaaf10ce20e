//! Human in the loop through the engine: approvals park a run and hold no task while it waits;
//! resolutions resume it; approved calls run once with their idempotency key; refusals and
//! expiries reach the model; questions are answered against their schema; a run resumes only with
//! the agent version it parked under.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use forge_core::agent::{AgentDefinition, RunLimits};
use forge_core::id::{RunId, SequentialIds};
use forge_core::interaction::{
    Decision, InteractionRequest, InteractionStatus, Resolve, input_hash,
};
use forge_core::part::Part;
use forge_core::ports::audit::AuditLog;
use forge_core::ports::store::{NewThread, RunStore, ThreadStore};
use forge_core::ports::tool::{
    ApprovalPolicy, ApprovalRule, Tool, ToolClassification, ToolError, ToolSpec,
};
use forge_core::run::{FailureCode, RunStatus, WaitReason};
use forge_core::scope::Scope;
use forge_core::time::ManualClock;
use forge_core::{Error, ErrorKind};
use forge_engine::{Engine, EngineError, NoopObserver, RunOutcome, native_tool};
use forge_providers::{Script, ScriptedProvider};
use forge_store_memory::MemoryStore;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::harness::{agent, line};

#[derive(Debug, Deserialize, JsonSchema)]
struct PayInput {
    amount: i64,
}

/// `pay`: an external write that records every delivery (amount, idempotency key).
fn pay(log: Arc<Mutex<Vec<(i64, String)>>>, policy: ApprovalPolicy) -> Arc<dyn Tool> {
    Arc::new(
        native_tool("pay", "pays an amount", move |ctx, i: PayInput| {
            let log = log.clone();
            async move {
                log.lock()
                    .unwrap()
                    .push((i.amount, ctx.idempotency_key.to_string()));
                Ok::<_, ToolError>(json!({ "paid": i.amount }))
            }
        })
        .classification(ToolClassification::ExternalWrite)
        .approval(policy),
    )
}

fn lookup(count: Arc<AtomicUsize>) -> Arc<dyn Tool> {
    Arc::new(native_tool(
        "lookup",
        "reads",
        move |_ctx, _i: serde_json::Value| {
            let count = count.clone();
            async move {
                count.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(json!("v"))
            }
        },
    ))
}

struct World {
    store: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
    scope: Scope,
    /// Someone other than the run's initiator: approves external writes (separation of duties).
    approver: Scope,
    paid: Arc<Mutex<Vec<(i64, String)>>>,
    looked_up: Arc<AtomicUsize>,
}

impl World {
    fn new() -> Self {
        let clock = Arc::new(ManualClock::at_2026());
        Self {
            store: Arc::new(MemoryStore::new(
                clock.clone(),
                Arc::new(SequentialIds::new()),
            )),
            clock,
            scope: Scope::parse("acme", "alice", &["member"]).unwrap(),
            approver: Scope::parse("acme", "bob", &["member"]).unwrap(),
            paid: Arc::new(Mutex::new(vec![])),
            looked_up: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn engine(
        &self,
        script: &str,
        def: AgentDefinition,
        rule: Option<Arc<dyn ApprovalRule>>,
    ) -> Engine {
        let mut b = Engine::builder()
            .store(self.store.clone())
            .model(Arc::new(ScriptedProvider::new(
                Script::parse(script, "inline").unwrap(),
            )))
            .clock(self.clock.clone())
            .tool(pay(self.paid.clone(), ApprovalPolicy::ExternalWrites))
            .unwrap()
            .tool(lookup(self.looked_up.clone()))
            .unwrap()
            .agent(def);
        if let Some(rule) = rule {
            b = b.approval_rule(rule);
        }
        b.build().unwrap()
    }

    async fn start(&self, engine: &Engine, def: &AgentDefinition, text: &str) -> RunId {
        let thread = self
            .store
            .create_thread(&self.scope, NewThread::default())
            .await
            .unwrap();
        engine
            .start_run(&self.scope, thread.id, &def.agent, vec![Part::text(text)])
            .await
            .unwrap()
            .id
    }

    async fn execute(&self, engine: &Engine, run: RunId) -> RunOutcome {
        engine
            .execute(&self.scope, run, &CancellationToken::new(), &NoopObserver)
            .await
            .unwrap()
    }

    async fn log(&self, run: RunId) -> Vec<String> {
        self.store
            .read_events(&self.scope, run, 0, 1000)
            .await
            .unwrap()
            .iter()
            .map(line)
            .collect()
    }

    async fn approve(
        &self,
        engine: &Engine,
        id: forge_core::id::InteractionId,
        decision: Decision,
    ) {
        engine
            .resolve_interaction(
                &self.approver,
                Resolve {
                    id,
                    decision,
                    actor: "bob".into(),
                    key: format!("key-{id}"),
                    input_hash: None,
                },
            )
            .await
            .unwrap();
    }
}

fn def(tools: &[&str]) -> AgentDefinition {
    agent(tools, RunLimits::default())
}

const PAY_THEN_ANSWER: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "call_pay", name = "pay", input = { amount = 5 } }]
[[conversation.turn]]
text = ["Paid: {{tool_result}}"]
"#;

#[tokio::test]
async fn an_external_write_parks_the_run_until_approved_then_runs_once() {
    let w = World::new();
    let d = def(&["pay"]);
    let engine = w.engine(PAY_THEN_ANSWER, d.clone(), None);
    let run = w.start(&engine, &d, "pay five").await;

    let parked = w.execute(&engine, run).await;
    assert_eq!(parked.status, RunStatus::Waiting(WaitReason::Approval));
    assert!(
        w.paid.lock().unwrap().is_empty(),
        "nothing runs before approval"
    );
    let log = w.log(run).await;
    assert!(
        log.iter()
            .any(|l| l.contains("part.added Assistant[1] approval")),
        "{log:#?}"
    );
    assert!(
        log.last().unwrap().contains("approval.requested"),
        "{log:#?}"
    );
    // Executing a parked run again changes nothing.
    let again = w.execute(&engine, run).await;
    assert_eq!(again.status, parked.status);
    assert_eq!(again.last_seq, parked.last_seq);

    let pending = engine.pending_interactions(&w.approver).await.unwrap();
    assert_eq!(pending.len(), 1);
    let InteractionRequest::Approval {
        tool_name,
        input_hash: hash,
        ..
    } = &pending[0].request
    else {
        panic!("an approval");
    };
    assert_eq!(
        (tool_name.as_str(), hash.clone()),
        ("pay", input_hash(&json!({"amount": 5})))
    );
    assert_eq!(pending[0].agent, d.agent, "the agent version is recorded");

    w.approve(&engine, pending[0].id, Decision::Approve).await;
    let done = w.execute(&engine, run).await;
    assert_eq!(done.status, RunStatus::Completed);
    let paid = w.paid.lock().unwrap().clone();
    assert_eq!(paid.len(), 1, "the approved call ran exactly once");
    assert_eq!(paid[0].0, 5);
    let log = w.log(run).await;
    assert!(
        log.iter()
            .any(|l| l.contains(r#"tool_result call_pay {"paid":5}"#)),
        "{log:#?}"
    );
    assert!(
        log.last().unwrap().contains(r#"Paid: {\"paid\":5}"#),
        "{log:#?}"
    );
    let audit: Vec<String> = w
        .store
        .list_audit(&w.scope, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| format!("{} {} {}", r.actor, r.action, r.subject))
        .collect();
    assert!(
        audit
            .iter()
            .any(|a| a.starts_with("bob approval.approved interaction")),
        "{audit:?}"
    );
    assert!(
        audit
            .iter()
            .any(|a| a == "alice tool.external_write tool call call_pay"),
        "{audit:?}"
    );
}

#[tokio::test]
async fn parallel_calls_each_get_their_own_approval_and_refusals_reach_the_model() {
    let script = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [
  { id = "c5", name = "pay", input = { amount = 5 } },
  { id = "c7", name = "pay", input = { amount = 7 } },
  { id = "cl", name = "lookup", input = { key = "k" } },
]
[[conversation.turn]]
text = ["done"]
"#;
    let w = World::new();
    let d = def(&["pay", "lookup"]);
    let engine = w.engine(script, d.clone(), None);
    let run = w.start(&engine, &d, "pay twice").await;
    assert_eq!(
        w.execute(&engine, run).await.status,
        RunStatus::Waiting(WaitReason::Approval)
    );
    assert_eq!(
        w.looked_up.load(Ordering::SeqCst),
        0,
        "no call of a parked step runs"
    );
    let pending = engine.pending_interactions(&w.approver).await.unwrap();
    assert_eq!(
        pending.len(),
        2,
        "one approval per external write, none for the read"
    );
    let by_call = |id: &str| {
        pending
            .iter()
            .find(|i| i.request.tool_call_id().0 == id)
            .unwrap()
            .id
    };
    w.approve(&engine, by_call("c5"), Decision::Approve).await;
    let half = w.execute(&engine, run).await;
    assert_eq!(
        half.status,
        RunStatus::Waiting(WaitReason::Approval),
        "one still pending"
    );
    assert!(w.paid.lock().unwrap().is_empty());
    w.approve(
        &engine,
        by_call("c7"),
        Decision::Reject {
            reason: Some("too much".into()),
        },
    )
    .await;
    assert_eq!(w.execute(&engine, run).await.status, RunStatus::Completed);
    let paid: Vec<i64> = w.paid.lock().unwrap().iter().map(|p| p.0).collect();
    assert_eq!(
        paid,
        vec![5],
        "the approved call ran, the refused one did not"
    );
    assert_eq!(w.looked_up.load(Ordering::SeqCst), 1);
    let log = w.log(run).await.join("\n");
    assert!(log.contains(r#"tool_result c5 {"paid":5}"#), "{log}");
    assert!(
        log.contains(r#"tool_result c7 error {"code":"rejected","message":"a person refused this call: too much"}"#),
        "{log}"
    );
    assert!(log.contains(r#"tool_result cl "v""#), "{log}");
}

#[tokio::test]
async fn a_question_is_answered_against_its_schema() {
    let script = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "q1", name = "ask_user", input = { prompt = "Which account?", answer_schema = { type = "object", properties = { account = { type = "string" } }, required = ["account"] } } }]
[[conversation.turn]]
text = ["Using {{tool_result.answer}}"]
"#;
    let w = World::new();
    let d = def(&["ask_user"]);
    let engine = w.engine(script, d.clone(), None);
    let run = w.start(&engine, &d, "move money").await;
    assert_eq!(
        w.execute(&engine, run).await.status,
        RunStatus::Waiting(WaitReason::Question)
    );
    let log = w.log(run).await.join("\n");
    assert!(log.contains("question.requested"), "{log}");
    let q = engine
        .pending_interactions(&w.approver)
        .await
        .unwrap()
        .remove(0);
    let bad = engine
        .resolve_interaction(
            &w.scope,
            Resolve {
                id: q.id,
                decision: Decision::Answer {
                    answer: json!({"acct": 1}),
                },
                actor: "alice".into(),
                key: "a1".into(),
                input_hash: None,
            },
        )
        .await;
    match bad {
        Err(EngineError::Store(e)) => {
            assert_eq!(e.kind(), ErrorKind::Invalid);
            assert!(e.to_string().contains("schema"), "{e}");
        }
        other => panic!("an invalid answer is refused: {other:?}"),
    }
    assert_eq!(
        engine
            .pending_interactions(&w.approver)
            .await
            .unwrap()
            .len(),
        1,
        "a refused answer stores nothing"
    );
    w.approve(
        &engine,
        q.id,
        Decision::Answer {
            answer: json!({"account": "savings"}),
        },
    )
    .await;
    let done = w.execute(&engine, run).await;
    assert_eq!(done.status, RunStatus::Completed);
    let log = w.log(run).await.join("\n");
    assert!(
        log.contains(r#"tool_result q1 {"answer":{"account":"savings"}}"#),
        "{log}"
    );
    assert!(log.contains(r#"Using {\"account\":\"savings\"}"#), "{log}");
}

#[tokio::test]
async fn an_approval_given_for_another_input_is_refused() {
    let w = World::new();
    let d = def(&["pay"]);
    let engine = w.engine(PAY_THEN_ANSWER, d.clone(), None);
    let run = w.start(&engine, &d, "pay").await;
    w.execute(&engine, run).await;
    let i = engine
        .pending_interactions(&w.approver)
        .await
        .unwrap()
        .remove(0);
    let replayed = engine
        .resolve_interaction(
            &w.approver,
            Resolve {
                id: i.id,
                decision: Decision::Approve,
                actor: "bob".into(),
                key: "k".into(),
                input_hash: Some(input_hash(&json!({"amount": 5000}))),
            },
        )
        .await;
    assert!(
        matches!(replayed, Err(EngineError::Store(Error::Invalid(_)))),
        "{replayed:?}"
    );
    assert_eq!(
        engine.run_interactions(&w.scope, run).await.unwrap()[0].status,
        InteractionStatus::Pending
    );
}

#[tokio::test]
async fn an_expired_approval_is_a_clear_error_and_the_run_goes_on_without_the_call() {
    let w = World::new();
    let mut d = def(&["pay"]);
    d.limits.interaction_ttl_secs = 60;
    let engine = w.engine(PAY_THEN_ANSWER, d.clone(), None);
    let run = w.start(&engine, &d, "pay").await;
    w.execute(&engine, run).await;
    let i = engine
        .pending_interactions(&w.approver)
        .await
        .unwrap()
        .remove(0);
    w.clock.advance(Duration::from_secs(61));
    let late = engine
        .resolve_interaction(
            &w.approver,
            Resolve {
                id: i.id,
                decision: Decision::Approve,
                actor: "bob".into(),
                key: "k".into(),
                input_hash: None,
            },
        )
        .await;
    match late {
        Err(EngineError::Store(e @ Error::Expired { .. })) => {
            assert!(e.to_string().contains("expired"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(w.execute(&engine, run).await.status, RunStatus::Completed);
    assert!(
        w.paid.lock().unwrap().is_empty(),
        "an expired approval runs nothing"
    );
    let log = w.log(run).await.join("\n");
    assert!(log.contains(r#""code":"approval_expired""#), "{log}");
}

struct OverLimit(i64);

#[async_trait]
impl ApprovalRule for OverLimit {
    async fn requires_approval(
        &self,
        _scope: &Scope,
        _tool: &ToolSpec,
        input: &serde_json::Value,
    ) -> Result<bool, Error> {
        Ok(input["amount"].as_i64().unwrap_or(i64::MAX) > self.0)
    }
}

#[tokio::test]
async fn the_policy_port_decides_per_call() {
    let script = |amount: i64| {
        format!(
            r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{{ id = "c", name = "pay", input = {{ amount = {amount} }} }}]
[[conversation.turn]]
text = ["ok"]
"#
        )
    };
    for (amount, parks) in [(5, false), (500, true)] {
        let w = World::new();
        let mut d = def(&["pay"]);
        d.approvals.insert("pay".into(), ApprovalPolicy::Policy);
        let engine = w.engine(&script(amount), d.clone(), Some(Arc::new(OverLimit(100))));
        let run = w.start(&engine, &d, "pay").await;
        let status = w.execute(&engine, run).await.status;
        assert_eq!(
            matches!(status, RunStatus::Waiting(_)),
            parks,
            "amount {amount}: {status:?}"
        );
        assert_eq!(w.paid.lock().unwrap().len(), usize::from(!parks));
    }
    // Without a rule, a policy-decided tool always asks.
    let w = World::new();
    let mut d = def(&["pay"]);
    d.approvals.insert("pay".into(), ApprovalPolicy::Policy);
    let engine = w.engine(&script(5), d.clone(), None);
    let run = w.start(&engine, &d, "pay").await;
    assert!(matches!(
        w.execute(&engine, run).await.status,
        RunStatus::Waiting(_)
    ));
    // And `never` lets an external write through.
    let w = World::new();
    let mut d = def(&["pay"]);
    d.approvals.insert("pay".into(), ApprovalPolicy::Never);
    let engine = w.engine(&script(5), d.clone(), None);
    let run = w.start(&engine, &d, "pay").await;
    assert_eq!(w.execute(&engine, run).await.status, RunStatus::Completed);
}

#[tokio::test]
async fn a_run_resumes_only_with_the_agent_version_it_parked_under() {
    let w = World::new();
    let v1 = def(&["pay"]);
    let engine_v1 = w.engine(PAY_THEN_ANSWER, v1.clone(), None);
    let run = w.start(&engine_v1, &v1, "pay").await;
    w.execute(&engine_v1, run).await;
    let i = engine_v1
        .pending_interactions(&w.approver)
        .await
        .unwrap()
        .remove(0);
    w.approve(&engine_v1, i.id, Decision::Approve).await;

    // A deploy: this engine only has version 2.
    let mut v2 = v1.clone();
    v2.agent.version = "2".into();
    let engine_v2 = w.engine(PAY_THEN_ANSWER, v2, None);
    let tenant = w.scope.tenant_id().clone();
    let as_worker = engine_v2
        .execute_job(&tenant, run, &Default::default(), &NoopObserver)
        .await;
    assert!(
        matches!(as_worker, Err(EngineError::UnknownAgent { .. })),
        "a worker without the version leaves the run alone: {as_worker:?}"
    );
    assert!(w.paid.lock().unwrap().is_empty());
    assert!(matches!(
        w.store.get_run(&w.scope, run).await.unwrap().status,
        RunStatus::Waiting(_)
    ));
    // The version that raised it resumes it.
    assert_eq!(
        w.execute(&engine_v1, run).await.status,
        RunStatus::Completed
    );
    assert_eq!(w.paid.lock().unwrap().len(), 1);

    // Called directly, an engine without the version fails the run clearly; never switches.
    let run2 = w.start(&engine_v1, &v1, "pay").await;
    w.execute(&engine_v1, run2).await;
    let i = engine_v1
        .pending_interactions(&w.approver)
        .await
        .unwrap()
        .remove(0);
    w.approve(&engine_v1, i.id, Decision::Approve).await;
    let failed = w.execute(&engine_v2, run2).await;
    assert_eq!(failed.status, RunStatus::Failed);
    let failure = failed.failure.unwrap();
    assert_eq!(failure.code, FailureCode::AgentVersionUnavailable);
    assert!(failure.message.contains("version 1"), "{}", failure.message);
    assert_eq!(w.paid.lock().unwrap().len(), 1, "the v2 engine ran nothing");
}

#[tokio::test]
async fn a_waiting_run_can_be_cancelled() {
    let w = World::new();
    let d = def(&["pay"]);
    let engine = w.engine(PAY_THEN_ANSWER, d.clone(), None);
    let run = w.start(&engine, &d, "pay").await;
    assert!(matches!(
        w.execute(&engine, run).await.status,
        RunStatus::Waiting(_)
    ));
    assert!(w.store.request_cancel(&w.scope, run).await.unwrap());
    assert_eq!(w.execute(&engine, run).await.status, RunStatus::Cancelled);
    assert!(w.paid.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_cancel_requested_while_the_step_parks_cancels_the_run() {
    let w = World::new();
    let d = def(&["pay"]);
    let engine = w.engine(PAY_THEN_ANSWER, d.clone(), None);
    let run = w.start(&engine, &d, "pay").await;
    // The request arrives while the parking step is in flight (the run is still running).
    let store = w.store.clone();
    let scope = w.scope.clone();
    let asked = std::sync::atomic::AtomicBool::new(false);
    let observer = move |e: &forge_core::event::RunEvent| {
        if matches!(
            e.kind,
            forge_core::event::RunEventKind::ApprovalRequested { .. }
        ) && !asked.swap(true, Ordering::SeqCst)
        {
            let (store, scope) = (store.clone(), scope.clone());
            std::thread::spawn(move || {
                tokio::runtime::Runtime::new()
                    .unwrap()
                    .block_on(store.request_cancel(&scope, run))
                    .unwrap()
            })
            .join()
            .unwrap();
        }
    };
    let outcome = engine
        .execute(&w.scope, run, &CancellationToken::new(), &observer)
        .await
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Cancelled, "not left waiting");
    assert!(w.paid.lock().unwrap().is_empty());
    assert!(
        engine
            .pending_interactions(&w.approver)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Separation of duties (issue 16, item 4): the person who started a run may not approve its
/// external write, sees no such approval among what they may approve, and may still reject it;
/// a deployment can allow it.
#[tokio::test]
async fn the_initiator_may_not_approve_their_own_external_write_unless_allowed() {
    let w = World::new();
    let d = def(&["pay"]);
    let engine = w.engine(PAY_THEN_ANSWER, d.clone(), None);
    let run = w.start(&engine, &d, "pay five").await;
    w.execute(&engine, run).await;
    assert!(
        engine
            .pending_interactions(&w.scope)
            .await
            .unwrap()
            .is_empty(),
        "not the initiator's to approve"
    );
    let i = engine
        .pending_interactions(&w.approver)
        .await
        .unwrap()
        .remove(0);
    let own = engine
        .resolve_interaction(
            &w.scope,
            Resolve {
                id: i.id,
                decision: Decision::Approve,
                actor: "alice".into(),
                key: "self".into(),
                input_hash: None,
            },
        )
        .await;
    match own {
        Err(EngineError::Store(Error::Forbidden(why))) => {
            assert!(why.contains("run they started"), "{why}")
        }
        other => panic!("expected forbidden, got {other:?}"),
    }
    assert!(w.paid.lock().unwrap().is_empty());
    assert_eq!(
        engine.run_interactions(&w.scope, run).await.unwrap()[0].status,
        InteractionStatus::Pending
    );

    // A deployment that allows it.
    let lenient = Engine::builder()
        .store(w.store.clone())
        .model(Arc::new(ScriptedProvider::new(
            Script::parse(PAY_THEN_ANSWER, "inline").unwrap(),
        )))
        .clock(w.clock.clone())
        .tool(pay(w.paid.clone(), ApprovalPolicy::ExternalWrites))
        .unwrap()
        .agent(d.clone())
        .allow_self_approval(true)
        .build()
        .unwrap();
    assert_eq!(
        lenient.pending_interactions(&w.scope).await.unwrap().len(),
        1
    );
    lenient
        .resolve_interaction(
            &w.scope,
            Resolve {
                id: i.id,
                decision: Decision::Approve,
                actor: "alice".into(),
                key: "self".into(),
                input_hash: None,
            },
        )
        .await
        .unwrap();
}

const PAY_OR_BLOCK: &str = r#"
[[conversation]]
when_user = "pay"
[[conversation.turn]]
tool_calls = [{ id = "call_pay", name = "pay", input = { amount = 5 } }]
[[conversation.turn]]
text = ["Paid: {{tool_result}}"]

[[conversation]]
when_user = "block"
[[conversation.turn]]
tool_calls = [{ id = "call_block", name = "block", input = {} }]
[[conversation.turn]]
text = ["unblocked"]
"#;

/// Overdue approvals expire on the worker's own schedule, not only when a claim loop is idle
/// (issue 17, item 3): here the only claim loop is held by a run whose tool blocks, and the
/// approval of another run still expires.
#[tokio::test]
async fn overdue_approvals_expire_while_every_claim_loop_is_busy() {
    let w = World::new();
    let entered = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let block = {
        let (entered, release) = (entered.clone(), release.clone());
        Arc::new(native_tool(
            "block",
            "waits to be released",
            move |_ctx, _i: serde_json::Value| {
                let (entered, release) = (entered.clone(), release.clone());
                async move {
                    entered.notify_one();
                    release.notified().await;
                    Ok::<_, ToolError>(json!("ok"))
                }
            },
        )) as Arc<dyn Tool>
    };
    let mut d = def(&["pay", "block"]);
    d.limits.interaction_ttl_secs = 60;
    let engine = Arc::new(
        Engine::builder()
            .store(w.store.clone())
            .model(Arc::new(ScriptedProvider::new(
                Script::parse(PAY_OR_BLOCK, "inline").unwrap(),
            )))
            .clock(w.clock.clone())
            .tool(pay(w.paid.clone(), ApprovalPolicy::ExternalWrites))
            .unwrap()
            .tool(block)
            .unwrap()
            .agent(d.clone())
            .build()
            .unwrap(),
    );
    let worker = Arc::new(forge_engine::Worker::new(
        engine.clone(),
        w.store.clone(),
        forge_engine::WorkerConfig {
            concurrency: 1,
            poll_interval: Duration::from_millis(5),
            sweep_interval: Duration::from_millis(20),
            ..forge_engine::WorkerConfig::default()
        },
    ));
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let (worker, shutdown) = (worker.clone(), shutdown.clone());
        async move { worker.run(shutdown).await }
    });
    let parked = w.start(&engine, &d, "pay").await;
    let pending = loop {
        let found = engine.run_interactions(&w.scope, parked).await.unwrap();
        if let Some(i) = found.into_iter().next() {
            break i;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    w.start(&engine, &d, "block").await;
    entered.notified().await;
    // The only claim loop is now busy; the approval's deadline passes.
    w.clock.advance(Duration::from_secs(61));
    let expired = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let now = engine.run_interactions(&w.scope, parked).await.unwrap();
            if now[0].status != InteractionStatus::Pending {
                break now[0].status;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    release.notify_one();
    shutdown.cancel();
    running.await.unwrap();
    assert_eq!(
        expired.map_err(|_| "still pending after 5 s of a busy worker"),
        Ok(InteractionStatus::Expired),
        "{pending:?}"
    );
}

/// An idle worker in the process that queued the work claims it at once: a submitted run, and a
/// run an approval resumed, start long before the worker's next poll (an hour away here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_claims_work_this_process_queued_without_waiting_for_its_poll() {
    let w = World::new();
    let d = def(&["pay"]);
    let engine = Arc::new(w.engine(PAY_THEN_ANSWER, d.clone(), None));
    let worker = forge_engine::Worker::new(
        engine.clone(),
        w.store.clone(),
        forge_engine::WorkerConfig {
            id: "idle-worker".into(),
            poll_interval: Duration::from_secs(3600),
            concurrency: 2,
            ..forge_engine::WorkerConfig::default()
        },
    );
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let stop = stop.clone();
        async move { worker.run(stop).await }
    });
    // Both claim loops find nothing and go idle.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let run = w.start(&engine, &d, "pay five").await;
    let status = |want: RunStatus| {
        let (store, scope) = (w.store.clone(), w.scope.clone());
        async move {
            tokio::time::timeout(Duration::from_secs(20), async {
                while store.get_run(&scope, run).await.unwrap().status != want {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await
            .is_ok()
        }
    };
    assert!(
        status(RunStatus::Waiting(WaitReason::Approval)).await,
        "the submitted run was not claimed before the poll"
    );
    // Idle again; the approval queues the run's resumption.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pending = engine.pending_interactions(&w.approver).await.unwrap();
    w.approve(&engine, pending[0].id, Decision::Approve).await;
    assert!(
        status(RunStatus::Completed).await,
        "the resumed run was not claimed before the poll"
    );
    stop.cancel();
    running.await.unwrap();
    assert_eq!(w.paid.lock().unwrap().len(), 1);
}
