//! Call overhead of an imported MCP tool against a native one: the same `echo` as a native tool
//! and as server-everything's `echo` over stdio, each called through the `Tool` port in a loop
//! (one call in flight). Prints median and p95 microseconds per call.
//!
//! `cargo bench -p forge-mcp --bench call_overhead` (2,000 calls each); under `cargo test` it
//! makes 20, to prove it runs.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use forge_core::id::{IdempotencyKey, RunId, SequentialIds, ThreadId, ToolCallId};
use forge_core::ports::tool::{Tool, ToolContext, ToolError};
use forge_core::scope::Scope;
use forge_mcp::{LockFile, McpConfig, McpRuntime, Pin, Reporter};
use forge_testkit::mcp_servers;
use serde_json::json;

fn ctx() -> ToolContext {
    let ids = SequentialIds::new();
    let run_id = RunId::generate(&ids);
    let call = ToolCallId::from("bench");
    ToolContext {
        scope: Scope::parse("acme", "bench", &[]).unwrap(),
        run_id,
        thread_id: ThreadId::generate(&ids),
        idempotency_key: IdempotencyKey::for_tool_call(run_id, &call),
        tool_call_id: call,
        lease_token: 1,
        timeout: std::time::Duration::from_secs(30),
        max_output_bytes: 1 << 20,
        session: None,
    }
}

async fn measure(tool: &dyn Tool, calls: usize) -> (f64, f64) {
    let ctx = ctx();
    let mut micros = Vec::with_capacity(calls);
    for i in 0..calls {
        let started = Instant::now();
        tool.call(&ctx, json!({"message": format!("hello {i}")}))
            .await
            .unwrap();
        micros.push(started.elapsed().as_secs_f64() * 1e6);
    }
    micros.sort_by(f64::total_cmp);
    (micros[calls / 2], micros[calls * 95 / 100])
}

#[tokio::main]
async fn main() {
    let calls = if std::env::args().any(|a| a == "--bench") {
        2_000
    } else {
        20
    };
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Echo {
        message: String,
    }
    let native = forge_engine::native_tool("echo", "Echoes.", |_ctx, i: Echo| async move {
        Ok::<_, ToolError>(
            json!({"content": [{"type": "text", "text": format!("Echo: {}", i.message)}]}),
        )
    });

    let config = McpConfig::parse(
        &format!(
            "[[servers]]\nname = \"everything\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n[servers.tools.echo]\nclassification = \"read\"\n",
            mcp_servers::everything("2026-8")
        ),
        Path::new("/"),
    )
    .unwrap();
    let defs = forge_mcp::fetch_catalog(
        &config.servers[0],
        Arc::new(config.egress.clone()),
        forge_mcp::process_env(),
    )
    .await
    .unwrap();
    let mut lock = LockFile::default();
    let pins = lock.servers.entry("everything".into()).or_default();
    for d in defs {
        pins.tools.insert(d.name.clone(), Pin::of(d));
    }
    let rt = McpRuntime::start(&config, &lock, forge_mcp::process_env(), Arc::new(Silent))
        .await
        .unwrap();
    let mcp = rt
        .tools()
        .into_iter()
        .find(|t| t.spec().name == "everything__echo")
        .unwrap();
    // Warm both paths.
    measure(&native, calls.min(50)).await;
    measure(mcp.as_ref(), calls.min(50)).await;
    let (n50, n95) = measure(&native, calls).await;
    let (m50, m95) = measure(mcp.as_ref(), calls).await;
    println!("tool call overhead, {calls} sequential calls each (µs per call)");
    println!("| tool | median | p95 |");
    println!("| --- | --- | --- |");
    println!("| native echo | {n50:.1} | {n95:.1} |");
    println!("| MCP echo (server-everything, stdio) | {m50:.1} | {m95:.1} |");
    println!("overhead of MCP over native: {:.1} µs median", m50 - n50);
}

/// The benchmark reports nothing.
struct Silent;

impl Reporter for Silent {
    fn drift(&self, _: &forge_mcp::CatalogDiff) {}
    fn down(&self, _: &str, _: &str) {}
}
