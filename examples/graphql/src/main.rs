//! Forge's GraphQL API over an agent with a tool of this program's own. Run it with
//! `FORGE_JWT_SECRET=<32+ bytes> cargo run`, sign a token with `forge token`, and `startRun`.

use forge::prelude::*;
use forge::server::{Authenticator, ServerConfig};

/// A city whose weather the agent looks up.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct City {
    /// The city's name.
    city: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let secret = std::env::var("FORGE_JWT_SECRET")?;
    let listen = std::env::var("FORGE_LISTEN").unwrap_or_else(|_| "127.0.0.1:8080".into());
    let forge = Forge::builder()
        .store("sqlite://forge-graphql.db")
        .agent(concat!(env!("CARGO_MANIFEST_DIR"), "/agents/weather.toml"))
        .tool(native_tool(
            "weather",
            "Today's weather in a city.",
            |_ctx, c: City| async move { Ok(format!("sunny and 21 °C in {}", c.city)) },
        ))
        .build()
        .await?;
    forge.shutdown_on_signal();
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("listening on http://{}/graphql", listener.local_addr()?);
    let auth = Authenticator::hs256(secret.as_bytes())?;
    forge.serve(listener, ServerConfig::new(auth)).await?;
    forge.shutdown().await;
    Ok(())
}
