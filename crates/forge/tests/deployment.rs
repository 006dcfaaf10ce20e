//! A deployment assembled by the builder, used as an embedding application would: runs waited
//! for and followed without polling, on SQLite, across two deployments on one file, through an
//! approval, and within one tenant's walls.

#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use forge::core::interaction::{Decision, Resolve};
use forge::live::StreamSettings;
use forge::prelude::*;

/// The tool's input, validated against the schema derived from it.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Lookup {
    /// The order number.
    order: String,
}

const SCRIPT: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ name = "order_status", input = { order = "A-1042" } }]
[[conversation.turn]]
text = ["Order A-1042: ", "{{tool_result}}"]
"#;

/// What a subscriber holds at the end of `items`: committed events, and provisional ones
/// confirmed (discarded ones dropped).
async fn transcript(
    mut items: futures_util::stream::BoxStream<'static, Result<StreamItem, forge::Error>>,
) -> Vec<forge::core::event::RunEvent> {
    let (mut committed, mut pending) = (Vec::new(), Vec::new());
    while let Some(item) = items.next().await {
        match item.unwrap() {
            StreamItem::Committed { event } => committed.push(event),
            StreamItem::Provisional { event } => pending.push(event),
            StreamItem::Confirmed { through_seq, .. } => {
                let (done, rest): (Vec<_>, Vec<_>) =
                    pending.into_iter().partition(|e| e.seq <= through_seq);
                committed.extend(done);
                pending = rest;
            }
            StreamItem::Discarded { after_seq, .. } => pending.retain(|e| e.seq <= after_seq),
        }
    }
    assert!(pending.is_empty(), "provisional events never confirmed");
    committed
}

/// A fresh SQLite URL in a directory of its own.
fn sqlite(name: &str) -> (PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("forge-facade-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("forge.db").display());
    (dir, url)
}

fn builder(url: &str, agent: AgentDefinition) -> forge::ForgeBuilder {
    Forge::builder()
        .store(url)
        .agent(agent)
        .model(ScriptedProvider::new(
            Script::parse(SCRIPT, "orders").unwrap(),
        ))
        .tool(native_tool(
            "order_status",
            "The shipping status of an order.",
            |_ctx, lookup: Lookup| async move { Ok(format!("{} shipped", lookup.order)) },
        ))
}

fn desk() -> AgentDefinition {
    AgentDefinition::new("order-desk", "scripted:orders")
        .instructions("Look every order up.")
        .tool("order_status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_waited_for_and_followed_with_the_committed_log_as_its_transcript() {
    let (dir, url) = sqlite("wait");
    // Streams read the log on wake-ups only: the poll between reads is longer than the test.
    let forge = builder(&url, desk())
        .streams(StreamSettings {
            poll: Duration::from_secs(3_600),
            ..StreamSettings::default()
        })
        .build()
        .await
        .unwrap();
    let scope = Scope::parse("acme", "alice", &[]).unwrap();
    let run = forge
        .start(&scope, "order-desk", "Where is A-1042?")
        .await
        .unwrap();
    // Followed while it runs: the step in flight arrives provisional, then confirmed.
    let following = tokio::spawn(transcript(run.subscribe()));
    let outcome = tokio::time::timeout(Duration::from_secs(60), run.wait())
        .await
        .expect("the run's commits did not wake its waiter")
        .unwrap();
    assert_eq!(outcome.answer(), Some(r#"Order A-1042: "A-1042 shipped""#));

    // What the subscriber holds once its provisional events are confirmed is the stored log,
    // in order, each event once.
    let committed = following.await.unwrap();
    let stored = forge
        .engine()
        .runs()
        .read_events(&scope, run.id(), 0, 1000)
        .await
        .unwrap();
    assert_eq!(committed, stored);
    assert_eq!(
        committed.last().map(|e| e.kind.type_name()),
        Some("run.completed")
    );
    // Following a finished run again replays it from the log, to the same end.
    let again: Vec<_> = forge
        .run(&scope, run.id())
        .await
        .unwrap()
        .subscribe()
        .collect()
        .await;
    assert_eq!(again.len(), stored.len());
    assert!(forge.shutdown().await.finished >= 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_queued_by_a_deployment_without_a_worker_is_executed_by_another_on_the_same_file() {
    let (dir, url) = sqlite("two");
    // Another process's commits reach this one's streams at its poll, not through its tail.
    let front = builder(&url, desk())
        .without_worker()
        .streams(StreamSettings {
            poll: Duration::from_millis(20),
            ..StreamSettings::default()
        })
        .build()
        .await
        .unwrap();
    let scope = Scope::parse("acme", "alice", &[]).unwrap();
    let run = front
        .start(&scope, "order-desk", "Where is A-1042?")
        .await
        .unwrap();
    let back = builder(&url, desk()).build().await.unwrap();
    let outcome = run.wait().await.unwrap();
    assert!(outcome.answer().is_some(), "{outcome:?}");
    assert_eq!(front.shutdown().await.finished, 0, "no worker in front");
    assert_eq!(back.shutdown().await.finished, 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waits_for_another_persons_approval_and_then_ends() {
    let forge = builder(
        "memory",
        desk().approval("order_status", ApprovalPolicy::Always),
    )
    .build()
    .await
    .unwrap();
    let alice = Scope::parse("acme", "alice", &[]).unwrap();
    let run = forge
        .start(&alice, "order-desk", "Where is A-1042?")
        .await
        .unwrap();
    // The approval is asked for in the step in flight, and can be given once it is committed.
    let mut events = run.subscribe();
    let mut pending = Vec::new();
    let interaction = 'asked: loop {
        let Some(item) = events.next().await else {
            panic!("the stream ended before an approval was asked for");
        };
        let committed = match item.unwrap() {
            StreamItem::Committed { event } => vec![event],
            StreamItem::Provisional { event } => {
                pending.push(event);
                continue;
            }
            StreamItem::Confirmed { through_seq, .. } => {
                let (done, rest) = pending.into_iter().partition(|e| e.seq <= through_seq);
                pending = rest;
                done
            }
            StreamItem::Discarded { after_seq, .. } => {
                pending.retain(|e| e.seq <= after_seq);
                continue;
            }
        };
        for event in committed {
            if let forge::core::event::RunEventKind::ApprovalRequested {
                interaction_id,
                input_hash,
                ..
            } = event.kind
            {
                break 'asked (interaction_id, input_hash);
            }
        }
    };
    let waiting = tokio::spawn({
        let run = run.clone();
        async move { run.wait().await }
    });
    let bob = Scope::parse("acme", "bob", &[]).unwrap();
    forge
        .engine()
        .resolve_interaction(
            &bob,
            Resolve {
                id: interaction.0,
                decision: Decision::Approve,
                actor: "bob".into(),
                key: "approve-1".into(),
                input_hash: Some(interaction.1),
            },
        )
        .await
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the approved run's end did not wake its waiter")
        .unwrap()
        .unwrap();
    assert_eq!(outcome.answer(), Some(r#"Order A-1042: "A-1042 shipped""#));
    forge.shutdown().await;
}

#[tokio::test]
async fn another_tenant_cannot_follow_a_run_and_unknown_agents_are_named() {
    let forge = builder("memory", desk())
        .without_worker()
        .build()
        .await
        .unwrap();
    let acme = Scope::parse("acme", "alice", &[]).unwrap();
    let run = forge.start(&acme, "order-desk", "Hello").await.unwrap();
    let other = Scope::parse("globex", "alice", &[]).unwrap();
    let err = forge.run(&other, run.id()).await.unwrap_err();
    assert!(
        matches!(&err, forge::Error::Forge(e) if e.kind() == forge::core::ErrorKind::NotFound),
        "{err:?}"
    );
    let err = forge.start(&acme, "nobody", "Hello").await.unwrap_err();
    assert!(err.to_string().contains("nobody"), "{err}");
    // An agent naming a tool no one registered is refused when the deployment is built.
    let refused = builder("memory", desk().tool("missing")).build().await;
    assert!(refused.is_err());
    forge.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_later_executes_only_the_run_it_was_given() {
    // As `forge run` does: queue first, then a worker for that run alone (another queued run,
    // perhaps of an agent this process does not have, is left for its own worker).
    let mut forge = builder("memory", desk())
        .worker(forge::engine::WorkerConfig {
            id: "later".into(),
            poll_interval: Duration::from_millis(20),
            ..forge::engine::WorkerConfig::default()
        })
        .without_worker()
        .build()
        .await
        .unwrap();
    let scope = Scope::parse("acme", "alice", &[]).unwrap();
    let left = forge.start(&scope, "order-desk", "Not now").await.unwrap();
    let mine = forge
        .start(&scope, "order-desk", "Where is A-1042?")
        .await
        .unwrap();
    forge
        .start_worker(forge::engine::WorkerConfig {
            id: "later".into(),
            only_run: Some(mine.id()),
            ..forge::engine::WorkerConfig::default()
        })
        .unwrap();
    let again = forge.start_worker(forge::engine::WorkerConfig::default());
    assert!(again.is_err(), "a deployment has one worker");
    assert!(mine.wait().await.unwrap().answer().is_some());
    let untouched = forge
        .engine()
        .runs()
        .get_run(&scope, left.id())
        .await
        .unwrap();
    assert_eq!(untouched.status, forge::core::run::RunStatus::Queued);
    assert_eq!(forge.shutdown().await.finished, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_bound_to_the_caller_are_the_callers_whatever_the_model_says() {
    const PIPELINE: &str = r#"
[[conversation]]
when_user = "my pipeline"
[[conversation.turn]]
tool_calls = [{ name = "pipeline", input = { limit = 5 } }]
[[conversation.turn]]
text = ["{{tool_result}}"]

[[conversation]]
when_user = "bob's pipeline"
[[conversation.turn]]
tool_calls = [{ name = "pipeline", input = { owner = "bob", tenant = "globex", limit = 5 } }]
[[conversation.turn]]
text = ["{{tool_result}}"]
"#;
    /// The pipeline tool's input.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Ask {
        /// Whose.
        owner: String,
        /// Where.
        tenant: String,
        /// How many.
        limit: u32,
    }
    let forge = Forge::builder()
        .store("memory")
        .agent(AgentDefinition::new("crm", "scripted:pipeline").tool("pipeline"))
        .model(ScriptedProvider::new(
            Script::parse(PIPELINE, "pipeline").unwrap(),
        ))
        .tool(native_tool(
            "pipeline",
            "Opportunities of an owner.",
            |ctx: forge::core::ports::tool::ToolContext, a: Ask| async move {
                // What executes is what was authorized: the bound input, not the model's.
                assert_eq!(a.tenant, ctx.scope.tenant_id().as_str());
                Ok(format!("{} of {}@{}", a.limit, a.owner, a.tenant))
            },
        ))
        .engine(|engine| {
            Ok(engine
                .tool_argument(
                    "pipeline",
                    "owner",
                    forge::engine::Argument::CallerByDefault,
                )?
                .tool_argument("pipeline", "tenant", forge::engine::Argument::Tenant)?)
        })
        .build()
        .await
        .unwrap();
    for (who, ask, expected) in [
        ("alice", "Show my pipeline", "5 of alice@acme"),
        ("carol", "Show my pipeline", "5 of carol@acme"),
        // A default keeps what the model gave; a forced binding replaces it.
        ("carol", "What is in bob's pipeline?", "5 of bob@acme"),
    ] {
        let scope = Scope::parse("acme", who, &[]).unwrap();
        let run = forge.start(&scope, "crm", ask).await.unwrap();
        let outcome = run.wait().await.unwrap();
        let answer = outcome.answer().unwrap_or_default();
        assert!(answer.contains(expected), "{who}: {answer:?}");
    }
    // Binding an argument the tool does not have is refused when the deployment is built.
    let refused = Forge::builder()
        .store("memory")
        .tool(native_tool("pipeline", "x", |_ctx, _a: Ask| async {
            Ok("x")
        }))
        .engine(|engine| {
            Ok(engine.tool_argument("pipeline", "owners", forge::engine::Argument::Caller)?)
        })
        .build()
        .await;
    assert!(refused.is_err());
    forge.shutdown().await;
}
