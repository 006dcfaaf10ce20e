//! Approval previews: a tool's previewer is asked once as the approval is raised, with the
//! input the call will run with; its answer travels bounded and scrubbed in the interaction,
//! the approval part and the `approval.requested` event; a previewer that fails leaves an
//! approval that says so and still decides the call.

use std::sync::{Arc, Mutex};

use forge_core::agent::RunLimits;
use forge_core::event::RunEventKind;
use forge_core::id::{RunId, SequentialIds, ThreadId};
use forge_core::interaction::{ApprovalPreview, Decision, InteractionRequest, Resolve};
use forge_core::part::Part;
use forge_core::ports::store::{NewThread, RunStore, ThreadStore};
use forge_core::ports::tool::{ApprovalPolicy, ToolClassification, ToolError};
use forge_core::run::{RunStatus, WaitReason};
use forge_core::scope::Scope;
use forge_core::time::ManualClock;
use forge_engine::{Engine, NoopObserver, native_tool, preview_fn};
use forge_providers::{Script, ScriptedProvider};
use forge_store_memory::MemoryStore;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::harness::agent;

const PAY: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "call_pay", name = "pay", input = { amount = 5 } }]
[[conversation.turn]]
text = ["Paid: {{tool_result}}"]
"#;

#[derive(Debug, Deserialize, JsonSchema)]
struct PayInput {
    amount: i64,
}

/// What the previewer was asked: the thread and the amount.
type Asked = Arc<Mutex<Vec<(ThreadId, i64)>>>;

struct Setup {
    store: Arc<MemoryStore>,
    engine: Engine,
    scope: Scope,
    paid: Arc<Mutex<Vec<i64>>>,
}

fn setup(preview: Option<Arc<dyn forge_core::ports::tool::ApprovalPreviewer>>) -> Setup {
    let clock = Arc::new(ManualClock::at_2026());
    let store = Arc::new(MemoryStore::new(
        clock.clone(),
        Arc::new(SequentialIds::new()),
    ));
    let paid = Arc::new(Mutex::new(vec![]));
    let log = paid.clone();
    let pay = native_tool("pay", "pays an amount", move |_ctx, i: PayInput| {
        let log = log.clone();
        async move {
            log.lock().unwrap().push(i.amount);
            Ok::<_, ToolError>(json!({ "paid": i.amount }))
        }
    })
    .classification(ToolClassification::ExternalWrite)
    .approval(ApprovalPolicy::Always);
    let mut builder = Engine::builder()
        .store(store.clone())
        .model(Arc::new(ScriptedProvider::new(
            Script::parse(PAY, "inline").unwrap(),
        )))
        .clock(clock)
        .tool(Arc::new(pay))
        .unwrap()
        .agent(agent(&["pay"], RunLimits::default()));
    if let Some(preview) = preview {
        builder = builder.approval_preview("pay", preview).unwrap();
    }
    Setup {
        store,
        engine: builder.build().unwrap(),
        scope: Scope::parse("acme", "alice", &["member"]).unwrap(),
        paid,
    }
}

impl Setup {
    /// Starts a run and executes it until it parks for the approval.
    async fn park(&self) -> (ThreadId, RunId) {
        let thread = self
            .store
            .create_thread(&self.scope, NewThread::default())
            .await
            .unwrap();
        let def = agent(&["pay"], RunLimits::default());
        let run = self
            .engine
            .start_run(&self.scope, thread.id, &def.agent, vec![Part::text("pay")])
            .await
            .unwrap()
            .id;
        let parked = self.execute(run).await;
        assert_eq!(parked, RunStatus::Waiting(WaitReason::Approval));
        (thread.id, run)
    }

    async fn execute(&self, run: RunId) -> RunStatus {
        self.engine
            .execute(&self.scope, run, &CancellationToken::new(), &NoopObserver)
            .await
            .unwrap()
            .status
    }

    /// The approval's preview as the interaction, the step's part and the event carry it.
    async fn previews(&self, thread: ThreadId, run: RunId) -> [Option<ApprovalPreview>; 3] {
        let approver = Scope::parse("acme", "bob", &["member"]).unwrap();
        let pending = self.engine.pending_interactions(&approver).await.unwrap();
        let InteractionRequest::Approval { preview, .. } = &pending[0].request else {
            panic!("an approval");
        };
        let messages = self.store.list_messages(&self.scope, thread).await.unwrap();
        let part = messages
            .iter()
            .flat_map(|m| &m.parts)
            .find_map(|p| match p {
                Part::Approval(a) => Some(a.preview.clone()),
                _ => None,
            })
            .expect("the step's approval part");
        let event = self
            .store
            .read_events(&self.scope, run, 0, 1000)
            .await
            .unwrap()
            .into_iter()
            .find_map(|e| match e.kind {
                RunEventKind::ApprovalRequested { preview, .. } => Some(preview),
                _ => None,
            })
            .expect("approval.requested");
        [preview.clone(), part, event]
    }

    async fn approve(&self) {
        let approver = Scope::parse("acme", "bob", &["member"]).unwrap();
        let pending = self.engine.pending_interactions(&approver).await.unwrap();
        self.engine
            .resolve_interaction(
                &approver,
                Resolve {
                    id: pending[0].id,
                    decision: Decision::Approve,
                    actor: "bob".into(),
                    key: "k".into(),
                    input_hash: None,
                },
            )
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn an_approval_carries_its_tools_preview_bounded_and_scrubbed() {
    let asked: Asked = Arc::default();
    let seen = asked.clone();
    let s = setup(Some(preview_fn(move |ctx, input: PayInput| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push((ctx.thread_id, input.amount));
            Ok(
                ApprovalPreview::new(format!("Pay {} € to \u{202E}Zoë", input.amount))
                    .fact("Account key", "sk-proj-abcdefghijklmnopqrstuvwx1234")
                    .change("balance 10 €", "balance 5 €"),
            )
        }
    })));
    let (thread, run) = s.park().await;
    assert_eq!(
        *asked.lock().unwrap(),
        vec![(thread, 5)],
        "asked once, with the call's input"
    );
    let expected = ApprovalPreview::new("Pay 5 € to Zoë")
        .fact("Account key", "[REDACTED]")
        .change("balance 10 €", "balance 5 €");
    for preview in s.previews(thread, run).await {
        assert_eq!(preview.as_ref(), Some(&expected));
    }
    s.approve().await;
    assert_eq!(s.execute(run).await, RunStatus::Completed);
    assert_eq!(*s.paid.lock().unwrap(), vec![5]);
    assert_eq!(asked.lock().unwrap().len(), 1, "the resume asks no preview");
}

#[tokio::test]
async fn a_failing_previewer_leaves_an_approval_that_says_so_and_still_decides() {
    let s = setup(Some(preview_fn(|_ctx, _input: PayInput| async move {
        Err(ToolError::Failed("the ledger said: secret detail".into()))
    })));
    let (thread, run) = s.park().await;
    let expected = ApprovalPreview::new("No preview: the tool's previewer failed (tool_failed).");
    for preview in s.previews(thread, run).await {
        assert_eq!(
            preview.as_ref(),
            Some(&expected),
            "the failure's message is not shown"
        );
    }
    s.approve().await;
    assert_eq!(s.execute(run).await, RunStatus::Completed);
    assert_eq!(*s.paid.lock().unwrap(), vec![5]);
}

#[tokio::test]
async fn a_tool_without_a_previewer_raises_a_plain_approval() {
    let s = setup(None);
    let (thread, run) = s.park().await;
    assert_eq!(s.previews(thread, run).await, [None, None, None]);
}

#[test]
fn a_previewer_names_a_registered_tool() {
    let builder = Engine::builder().approval_preview(
        "pay",
        preview_fn(|_ctx, _input: PayInput| async move { Ok(ApprovalPreview::new("x")) }),
    );
    let Err(e) = builder else {
        panic!("a previewer of an unknown tool is refused");
    };
    assert!(e.to_string().contains("not registered"), "{e}");
}
