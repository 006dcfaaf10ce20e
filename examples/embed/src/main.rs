//! Forge embedded in an application: an agent with a tool, its run durable in `forge-example.db`
//! and executed by the deployment's worker. The model is scripted: no network, no key.

use forge::prelude::*;

/// The tool's input: every call is validated against the schema derived from it.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct OrderLookup {
    /// The order number, as the customer gave it.
    order: String,
}

/// What the model does: look the order up, then answer with what the tool returned.
const SCRIPT: &str = include_str!("../orders.toml");

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let forge = Forge::builder()
        .store("sqlite://forge-example.db")
        .agent(
            AgentDefinition::new("order-desk", "scripted:orders")
                .instructions("Answer questions about orders; look every order up.")
                .tool("order_status"),
        )
        .model(ScriptedProvider::new(Script::parse(SCRIPT, "orders")?))
        .tool(native_tool(
            "order_status",
            "The shipping status of an order.",
            |_ctx, lookup: OrderLookup| async move {
                Ok(format!("{} shipped on 2 December", lookup.order))
            },
        ))
        .build()
        .await?;

    // Each request's scope comes from the application's own authentication.
    let scope = Scope::parse("acme", "alice", &["support"])?;
    let run = forge
        .start(&scope, "order-desk", "Where is my order A-1042?")
        .await?;
    let mut events = run.subscribe();
    while let Some(item) = events.next().await {
        if let StreamItem::Committed { event } | StreamItem::Provisional { event } = item? {
            println!("{:>3} {}", event.seq, event.kind.type_name());
        }
    }
    let outcome = run.wait().await?;
    println!("{outcome:?}");
    forge.shutdown().await;
    // The tool's result reaches the model as JSON, so the script's answer quotes it.
    let expected = r#"Order A-1042: "A-1042 shipped on 2 December""#;
    anyhow::ensure!(
        outcome.answer() == Some(expected),
        "unexpected: {outcome:?}"
    );
    Ok(())
}
