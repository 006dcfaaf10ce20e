//! `forge-bench subscribers`: N concurrent GraphQL subscribers on one server while runs execute.
//!
//! The server (engine, in-process worker, SQLite or memory store) runs in a child process of its
//! own, so its memory is its own. The parent opens N `graphql-transport-ws` connections, each
//! subscribed to the `threadEvents` of one of R threads, waits until all are subscribed, then
//! starts one 4-step run per thread (the tool sleeps `--tool-ms`). Every subscriber must receive
//! every event of its thread's run, in order, once; the command fails otherwise. It reports the
//! delivery latency (an event's `at`, stamped by the worker when produced, to its arrival at the
//! subscriber) p50/p99/max over all deliveries; the same for checkpoint and terminal events alone,
//! which are stamped just before their commit (so: delivery after commit); and the server's RSS.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use forge_core::agent::{AgentDefinition, AgentRef, RunLimits};
use forge_core::ports::store::Store;
use forge_core::ports::tool::ToolError;
use forge_core::scope::Scope;
use forge_engine::{Engine, Worker, WorkerConfig, native_tool};
use forge_providers::{Script, ScriptedProvider};
use forge_server::{Authenticator, BusObserver, EventBus, Server, ServerConfig};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const SECRET: &str = "bench-secret-bench-secret-bench-secret-0";

const SCRIPT: &str = r#"
[[conversation]]
[[conversation.turn]]
text = ["Adding."]
tool_calls = [{ name = "slow_add", input = { a = 1, b = 2 } }]
[[conversation.turn]]
tool_calls = [{ name = "slow_add", input = { a = 3, b = 4 } }]
[[conversation.turn]]
tool_calls = [{ name = "slow_add", input = { a = 5, b = 6 } }]
[[conversation.turn]]
text = ["Done: ", "{{tool_result.sum}}"]
"#;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

/// Options of the benchmark.
#[derive(Debug, clap::Args)]
pub(crate) struct SubscribersArgs {
    /// Concurrent subscribers.
    #[arg(long, default_value_t = 1000)]
    subscribers: usize,
    /// Threads (one run each); subscribers are spread over them.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// sqlite or memory.
    #[arg(long, default_value = "sqlite")]
    store: String,
    /// How long the tool of each step sleeps, in ms.
    #[arg(long, default_value_t = 50)]
    tool_ms: u64,
}

/// The server child's options.
#[derive(Debug, clap::Args)]
pub(crate) struct ServerArgs {
    #[arg(long)]
    store: String,
    #[arg(long)]
    tool_ms: u64,
}

/// The child: a server with an in-process worker; prints its address, serves until killed.
pub(crate) async fn server(args: ServerArgs) -> anyhow::Result<()> {
    forge_providers::http::install_crypto_provider();
    let store: Arc<dyn Store> = match args.store.as_str() {
        "memory" => Arc::new(forge_store_memory::MemoryStore::default()),
        "sqlite" => {
            let dir = std::env::temp_dir().join(format!("forge-bench-subs-{}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            let url = format!("sqlite://{}", dir.join("forge.db").display());
            Arc::new(forge_store_sqlite::SqliteStore::open(&url).await?)
        }
        other => bail!("--store must be sqlite or memory, not {other}"),
    };
    let delay = Duration::from_millis(args.tool_ms);
    let slow_add = native_tool(
        "slow_add",
        "Adds, slowly.",
        move |_ctx, i: Add| async move {
            tokio::time::sleep(delay).await;
            Ok::<_, ToolError>(json!({"sum": i.a + i.b}))
        },
    );
    let agent = AgentDefinition {
        agent: AgentRef {
            name: "adder".into(),
            version: "1".into(),
        },
        instructions: "Add.".into(),
        model: "scripted:bench".into(),
        tools: vec!["slow_add".into()],
        skills: vec![],
        output_schema: None,
        limits: RunLimits::default(),
        approvals: Default::default(),
    };
    let engine = Arc::new(
        Engine::builder()
            .dyn_store(store.clone())
            .model(Arc::new(
                ScriptedProvider::empty().with_script("bench", Script::parse(SCRIPT, "bench")?),
            ))
            .tool(Arc::new(slow_add))?
            .agent(agent)
            .build()?,
    );
    let bus = EventBus::default();
    let server = Server::new(
        engine.clone(),
        bus.clone(),
        ServerConfig::new(Authenticator::hs256(SECRET.as_bytes())?),
    );
    let worker = Worker::new(
        engine,
        store,
        WorkerConfig {
            id: "bench".into(),
            concurrency: 32,
            poll_interval: Duration::from_millis(5),
            ..WorkerConfig::default()
        },
    )
    .with_observer(Arc::new(BusObserver(bus)));
    let stop = tokio_util::sync::CancellationToken::new();
    let drain = stop.clone();
    tokio::spawn(async move { worker.run(drain).await });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("{}", listener.local_addr()?);
    server.serve(listener, stop).await?;
    Ok(())
}

fn rss_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

async fn gql(
    http: &reqwest::Client,
    addr: &str,
    token: &str,
    query: &str,
    vars: Value,
) -> anyhow::Result<Value> {
    let body: Value = http
        .post(format!("http://{addr}/graphql"))
        .bearer_auth(token)
        .json(&json!({"query": query, "variables": vars}))
        .send()
        .await?
        .json()
        .await?;
    if let Some(e) = body.get("errors") {
        bail!("GraphQL error: {e}");
    }
    Ok(body["data"].clone())
}

/// One subscriber: (thread, received (seq, latency ms) list).
async fn subscriber(
    addr: String,
    token: String,
    thread: String,
    ready: Arc<tokio::sync::Barrier>,
) -> anyhow::Result<Vec<(u64, f64, bool)>> {
    let mut req = format!("ws://{addr}/graphql").into_client_request()?;
    req.headers_mut()
        .insert("sec-websocket-protocol", "graphql-transport-ws".parse()?);
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse()?);
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await?;
    let text = |v: Value| Message::Text(v.to_string().into());
    ws.send(text(json!({"type": "connection_init", "payload": {}})))
        .await?;
    ws.send(text(json!({"id": "1", "type": "subscribe", "payload": {
        "query": "subscription($id: ID!) { threadEvents(threadId: $id) { seq at type } }",
        "variables": {"id": thread}}})))
        .await?;
    // The ack arrives before any event; then the subscription is registered server-side.
    loop {
        let m = ws.next().await.context("closed before the ack")??;
        if let Message::Text(t) = m
            && t.contains("connection_ack")
        {
            break;
        }
    }
    ready.wait().await;
    let mut got = Vec::new();
    loop {
        let m = tokio::time::timeout(Duration::from_secs(120), ws.next())
            .await
            .context("no event within 120 s")?
            .context("closed")??;
        let Message::Text(t) = m else { continue };
        let arrived = chrono::Utc::now();
        let v: Value = serde_json::from_str(&t)?;
        if v["type"] != "next" {
            continue;
        }
        let e = &v["payload"]["data"]["threadEvents"];
        let at: chrono::DateTime<chrono::Utc> =
            serde_json::from_value(e["at"].clone()).context("event time")?;
        let latency = (arrived - at).num_microseconds().unwrap_or(0) as f64 / 1000.0;
        // Checkpoint and terminal events are stamped just before their step's commit: their
        // latency is the delivery alone.
        let at_commit = matches!(
            e["type"].as_str(),
            Some("run.checkpointed" | "run.completed")
        );
        got.push((e["seq"].as_u64().unwrap_or(0), latency, at_commit));
        if e["type"] == "run.completed" {
            return Ok(got);
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The parent: spawns the server, drives subscribers and runs, reports.
pub(crate) async fn run(args: SubscribersArgs) -> anyhow::Result<()> {
    forge_providers::http::install_crypto_provider();
    let exe = std::env::current_exe()?;
    let mut child = tokio::process::Command::new(exe)
        .args(["subscribers-server", "--store", &args.store, "--tool-ms"])
        .arg(args.tool_ms.to_string())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().context("server pid")?;
    let stdout = child.stdout.take().context("server stdout")?;
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let addr = lines
        .next_line()
        .await?
        .context("the server printed no address")?;
    let scope = Scope::parse("bench", "bench", &[])?;
    let now = chrono::Utc::now().timestamp();
    let token = forge_server::auth::sign_hs256(SECRET.as_bytes(), &scope, 3600, now)?;
    let http = reqwest::Client::new();
    let mut threads = Vec::new();
    for _ in 0..args.runs {
        let d = gql(
            &http,
            &addr,
            &token,
            "mutation { createThread { id } }",
            json!({}),
        )
        .await?;
        threads.push(
            d["createThread"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    let rss_idle = rss_mib(pid, "VmRSS:");
    let ready = Arc::new(tokio::sync::Barrier::new(args.subscribers + 1));
    let mut tasks = Vec::new();
    let connecting = Instant::now();
    for i in 0..args.subscribers {
        tasks.push(tokio::spawn(subscriber(
            addr.clone(),
            token.clone(),
            threads[i % args.runs].clone(),
            ready.clone(),
        )));
    }
    ready.wait().await;
    let connect_s = connecting.elapsed().as_secs_f64();
    let rss_connected = rss_mib(pid, "VmRSS:");
    let started = Instant::now();
    let mut runs = Vec::new();
    for thread in &threads {
        let d = gql(
            &http,
            &addr,
            &token,
            "mutation($t: ID!) { startRun(input: {threadId: $t, agent: \"adder\", message: \"add\"}) { id } }",
            json!({"t": thread}),
        )
        .await?;
        runs.push(d["startRun"]["id"].as_str().unwrap_or_default().to_owned());
    }
    let mut latencies = Vec::new();
    let mut commit_latencies = Vec::new();
    let mut complete = 0;
    for (i, task) in tasks.into_iter().enumerate() {
        let got = task.await??;
        let run = &runs[i % args.runs];
        let d = gql(
            &http,
            &addr,
            &token,
            "query($id: ID!) { run(id: $id) { lastSeq } }",
            json!({"id": run}),
        )
        .await?;
        let last = d["run"]["lastSeq"].as_u64().unwrap_or(0);
        let seqs: Vec<u64> = got.iter().map(|(s, _, _)| *s).collect();
        if seqs != (1..=last).collect::<Vec<_>>() {
            bail!("subscriber {i} received {seqs:?}, the log has 1..={last}");
        }
        complete += 1;
        latencies.extend(got.iter().map(|(_, l, _)| *l));
        commit_latencies.extend(got.iter().filter(|(_, _, c)| *c).map(|(_, l, _)| *l));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let peak = rss_mib(pid, "VmHWM:");
    let rss_end = rss_mib(pid, "VmRSS:");
    let _ = child.kill().await;
    latencies.sort_by(f64::total_cmp);
    commit_latencies.sort_by(f64::total_cmp);
    let (c50, c99) = (
        percentile(&commit_latencies, 0.5),
        percentile(&commit_latencies, 0.99),
    );
    let (p50, p99, max) = (
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or(f64::NAN),
    );
    println!(
        "{} subscribers over {} runs ({} store, tool {} ms): all {} received every event ({} deliveries)",
        args.subscribers,
        args.runs,
        args.store,
        args.tool_ms,
        complete,
        latencies.len()
    );
    println!("  connect all: {connect_s:.2} s; runs done in {elapsed:.2} s");
    println!(
        "  delivery latency (produced → received): p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms"
    );
    println!(
        "  server RSS: {rss_idle:.1} MiB idle, {rss_connected:.1} MiB with subscribers, {rss_end:.1} MiB at end, peak {peak:.1} MiB"
    );
    eprintln!(
        "{}",
        json!({"bench": "subscribers", "subscribers": args.subscribers, "runs": args.runs,
               "store": args.store, "deliveries": latencies.len(), "p50_ms": p50, "p99_ms": p99,
               "max_ms": max, "commit_p50_ms": c50, "commit_p99_ms": c99, "rss_idle_mib": rss_idle, "rss_connected_mib": rss_connected,
               "rss_peak_mib": peak, "connect_s": connect_s})
    );
    Ok(())
}
