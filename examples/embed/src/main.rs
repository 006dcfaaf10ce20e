//! Forge embedded in an application: an order-status agent on the embedded SQLite store, its
//! run enqueued and executed durably by a worker, as a product's back end would do it.
//!
//! The model is Forge's deterministic scripted provider, so the example needs no network and no
//! key; swap in `forge_providers::HttpProvider` for a real model. Run it with
//! `cargo run` (it writes `forge-example.db` into a temporary directory and prints the answer
//! and the committed event log).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use forge_core::agent::{AgentDefinition, AgentRef, RunLimits};
use forge_core::part::Part;
use forge_core::ports::store::{NewRun, NewThread, RunStore, ThreadStore};
use forge_core::scope::Scope;
use forge_engine::{Engine, Worker, WorkerConfig, native_tool};
use forge_providers::{Script, ScriptedProvider};
use forge_store_sqlite::SqliteStore;
use tokio_util::sync::CancellationToken;

/// The tool's input: the engine validates every call against the schema derived from it.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct OrderLookup {
    /// The order number, as the customer gave it.
    order: String,
}

/// What the model does: look the order up, then answer with what the tool returned.
const SCRIPT: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ name = "order_status", input = { order = "A-1042" } }]
[[conversation.turn]]
text = ["Order A-1042: {{tool_result}}"]
"#;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("forge-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = format!("sqlite://{}", dir.join("forge-example.db").display());
    let store = Arc::new(SqliteStore::open(&url).await.context("open the store")?);

    let agent = AgentDefinition {
        agent: AgentRef {
            name: "order-desk".into(),
            version: "1".into(),
        },
        instructions: "Answer questions about orders; look every order up.".into(),
        model: "scripted:orders".into(),
        tools: vec!["order_status".into()],
        skills: vec![],
        output_schema: None,
        limits: RunLimits::default(),
        approvals: Default::default(),
        compaction: None,
    };
    let engine = Arc::new(
        Engine::builder()
            .store(store.clone())
            .model(Arc::new(ScriptedProvider::new(Script::parse(
                SCRIPT, "orders",
            )?)))
            .tool(Arc::new(native_tool(
                "order_status",
                "The shipping status of an order.",
                |_ctx, lookup: OrderLookup| async move {
                    Ok(format!("{} shipped on 2 December", lookup.order))
                },
            )))?
            .agent(agent.clone())
            .build()?,
    );

    // Each request's scope comes from the application's own authentication.
    let scope = Scope::parse("acme", "alice", &["support"])?;
    let thread = store.create_thread(&scope, NewThread::default()).await?;
    let run = engine
        .submit(
            &scope,
            NewRun::new(
                thread.id,
                agent.agent.clone(),
                vec![Part::text("Where is my order A-1042?")],
            ),
        )
        .await?;

    // A worker claims the queued run and executes it; it would resume it after a crash.
    let shutdown = CancellationToken::new();
    let worker = Worker::new(engine.clone(), store.clone(), WorkerConfig::default());
    let working = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { worker.run(shutdown).await }
    });
    let finished = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let now = store.get_run(&scope, run.id).await?;
            if now.status.is_terminal() {
                return anyhow::Ok(now);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .context("the run did not finish within 30 s")??;
    shutdown.cancel();
    working.await?;

    for event in store.read_events(&scope, run.id, 0, 1000).await? {
        println!("{:>3} {}", event.seq, event.kind.type_name());
    }
    let answer = store
        .list_messages(&scope, thread.id)
        .await?
        .last()
        .map(|m| m.text())
        .unwrap_or_default();
    println!("{:?}: {answer}", finished.status);
    std::fs::remove_dir_all(&dir)?;
    // The tool's result reaches the model as JSON, so the script's answer quotes it.
    if answer != r#"Order A-1042: "A-1042 shipped on 2 December""# {
        bail!("unexpected answer: {answer}");
    }
    Ok(())
}
