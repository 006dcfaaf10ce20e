//! `forge-bench subscribers`: N concurrent GraphQL subscribers on one server while runs execute.
//!
//! The server (engine, in-process worker, SQLite or memory store) runs in a child process of its
//! own, so its memory is its own. The parent opens N `graphql-transport-ws` connections, each
//! subscribed to the `threadEvents` of one of R threads, waits until all are subscribed, then
//! starts one run per thread. Every subscriber folds its items with the reference reducer
//! (`forge_core::stream::Transcript`, which refuses duplicates and gaps) and must end with exactly
//! its run's committed log; the command fails otherwise. It reports the delivery latency (an
//! event's `at`, stamped by the worker when produced, to its arrival at the subscriber) p50/p99/max
//! over all deliveries; the same for checkpoint and terminal events alone (stamped just before
//! their commit); and the server's RSS.
//!
//! Two workloads: by default a scripted 4-step run whose tool sleeps `--tool-ms`; with `--live`, a
//! model on the OpenAI-compatible mock (in the parent process) that streams `--chunks` text chunks
//! `--chunk-ms` apart, each stamped with the time it left the mock, and the report adds the
//! chunk → subscriber latency. With `--cross-process`, the server child executes nothing: a worker
//! child does, and the live tail reaches the server over Redis (`--redis`), as `forge serve
//! --no-worker` with `forge worker` processes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use forge_core::agent::{AgentDefinition, AgentRef, RunLimits};
use forge_core::ports::live::LiveSink;
use forge_core::ports::store::Store;
use forge_core::ports::tool::ToolError;
use forge_core::scope::Scope;
use forge_engine::LiveObserver;
use forge_engine::{Engine, Worker, WorkerConfig, native_tool};
use forge_providers::http::{HttpProvider, HttpSettings, Timeouts};
use forge_providers::{BodyOptions, Dialect};
use forge_providers::{Script, ScriptedProvider};
use forge_server::{Authenticator, EventBus, LiveTail, Server, ServerConfig};
use forge_testkit::mock_model::{MockModelServer, chunk_stamp, now_micros};
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
    /// Stream text chunks from the mock model and report chunk → subscriber latency.
    #[arg(long)]
    live: bool,
    /// Text chunks per run (with `--live`).
    #[arg(long, default_value_t = 20)]
    chunks: u64,
    /// Milliseconds between chunks (with `--live`).
    #[arg(long, default_value_t = 150)]
    chunk_ms: u64,
    /// Execute runs in a separate worker process, the live tail carried over Redis.
    #[arg(long)]
    cross_process: bool,
    /// Redis URL for `--cross-process`.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
}

/// The children's options (server, or worker).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ServerArgs {
    /// Store URL (`memory`, `sqlite://…`, `postgres://…`).
    #[arg(long)]
    store: String,
    #[arg(long)]
    tool_ms: u64,
    /// The mock model's base URL.
    #[arg(long)]
    mock: Option<String>,
    /// Serve only (a worker child executes).
    #[arg(long)]
    no_worker: bool,
    /// Redis URL carrying the live tail between the children.
    #[arg(long)]
    redis: Option<String>,
    /// Its pub/sub channel.
    #[arg(long, default_value = "forge:live:bench")]
    channel: String,
}

/// The store `url` names: `memory`, `sqlite://…` or `postgres://…` (RLS mode).
async fn open_store(url: &str) -> anyhow::Result<Arc<dyn Store>> {
    Ok(forge::Stores::open(url).await?.store)
}

/// A live-tail publisher to Redis, if configured.
async fn publisher(args: &ServerArgs) -> anyhow::Result<Option<Arc<dyn LiveSink>>> {
    let Some(url) = &args.redis else {
        return Ok(None);
    };
    let (publisher, _task) = forge_store_redis::live::RedisLivePublisher::connect(
        url,
        &args.channel,
        tokio_util::sync::CancellationToken::new(),
    )
    .await?;
    Ok(Some(Arc::new(publisher)))
}

fn worker_for(engine: Arc<Engine>, store: Arc<dyn Store>, observer: LiveObserver) -> Worker {
    Worker::new(
        engine,
        store,
        WorkerConfig {
            id: format!("bench-{}", std::process::id()),
            concurrency: 32,
            poll_interval: Duration::from_millis(5),
            ..WorkerConfig::default()
        },
    )
    .with_observer(Arc::new(observer))
}

/// The worker child of `--cross-process`: executes runs, publishing the live tail to Redis.
pub(crate) async fn worker(args: ServerArgs) -> anyhow::Result<()> {
    forge_providers::http::install_crypto_provider();
    let store = open_store(&args.store).await?;
    let engine = Arc::new(engine(store.clone(), &args)?);
    let mut observer = LiveObserver::default();
    if let Some(p) = publisher(&args).await? {
        observer = observer.with(p);
    }
    let worker = worker_for(engine, store, observer);
    println!("ready");
    worker.run(tokio_util::sync::CancellationToken::new()).await;
    Ok(())
}

fn engine(store: Arc<dyn Store>, args: &ServerArgs) -> anyhow::Result<Engine> {
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
        compaction: None,
    };
    let mut builder = Engine::builder()
        .dyn_store(store)
        .model(Arc::new(
            ScriptedProvider::empty().with_script("bench", Script::parse(SCRIPT, "bench")?),
        ))
        .tool(Arc::new(slow_add))?
        .agent(agent);
    if let Some(mock) = &args.mock {
        builder = builder.model(Arc::new(HttpProvider::new(HttpSettings {
            name: "mock".into(),
            dialect: Dialect::OpenAiChat,
            base_url: mock.clone(),
            api_key: None,
            headers: vec![],
            body: BodyOptions::default(),
            timeouts: Timeouts::default(),
        })?));
        builder = builder.agent(AgentDefinition {
            agent: AgentRef {
                name: "streamer".into(),
                version: "1".into(),
            },
            instructions: "Stream.".into(),
            // The parent sets the chunk count and spacing per request header-free, by model name.
            model: format!("mock:{}", streamer_model()),
            tools: vec![],
            skills: vec![],
            output_schema: None,
            limits: RunLimits::default(),
            approvals: Default::default(),
            compaction: None,
        });
    }
    Ok(builder.build()?)
}

/// The mock model name of the streaming agent: its settings come from the environment the parent
/// passes (`FORGE_BENCH_CHUNKS`, `FORGE_BENCH_CHUNK_US`).
fn streamer_model() -> String {
    let var = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    format!(
        "mock-steps-0-chunks-{}-cdelayus-{}-stamp-1",
        var("FORGE_BENCH_CHUNKS", 20),
        var("FORGE_BENCH_CHUNK_US", 150_000)
    )
}

/// The server child: prints its address, serves until killed; executes runs unless `--no-worker`.
pub(crate) async fn server(args: ServerArgs) -> anyhow::Result<()> {
    forge_providers::http::install_crypto_provider();
    let store = open_store(&args.store).await?;
    let engine = Arc::new(engine(store.clone(), &args)?);
    let tail = Arc::new(LiveTail::new(EventBus::default()));
    let server = Server::new(
        engine.clone(),
        tail.clone(),
        ServerConfig::new(Authenticator::hs256(SECRET.as_bytes())?),
    );
    let stop = tokio_util::sync::CancellationToken::new();
    if let Some(url) = &args.redis {
        let tail = tail.clone();
        forge_store_redis::live::subscribe(
            url,
            &args.channel,
            stop.clone(),
            move |feed| match feed {
                forge_store_redis::live::LiveFeed::Message(m) => tail.send(&m),
                forge_store_redis::live::LiveFeed::Resubscribed => {
                    tail.bus().publish(forge_server::Wake::All)
                }
            },
        )
        .await?;
    }
    if !args.no_worker {
        let worker = worker_for(engine, store, LiveObserver::default().with(tail));
        let drain = stop.clone();
        tokio::spawn(async move { worker.run(drain).await });
    }
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

/// What one subscriber received.
struct Received {
    /// Every event delivered (committed or provisional): (seq, produced → received ms, whether
    /// stamped at its commit).
    deliveries: Vec<(u64, f64, bool)>,
    /// Chunk (left the mock) → received, ms, for stamped text chunks.
    chunks: Vec<f64>,
    /// The reducer's state at the end.
    transcript: forge_core::stream::Transcript,
}

/// One subscriber of `thread`; returns when its run's terminal event is committed.
async fn subscriber(
    addr: String,
    token: String,
    thread: String,
    ready: Arc<tokio::sync::Barrier>,
) -> anyhow::Result<Received> {
    use forge_core::event::RunEventKind;
    use forge_core::part::{Part, PartUpdate, TextPart};
    use forge_core::stream::StreamItem;

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
        "query": "subscription($id: ID!) { threadEvents(threadId: $id) { item } }",
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
    let mut got = Received {
        deliveries: Vec::new(),
        chunks: Vec::new(),
        transcript: forge_core::stream::Transcript::new(),
    };
    loop {
        let m = tokio::time::timeout(Duration::from_secs(120), ws.next())
            .await
            .context("no event within 120 s")?
            .context("closed")??;
        let Message::Text(t) = m else { continue };
        let arrived_us = now_micros();
        let arrived = chrono::Utc::now();
        let v: Value = serde_json::from_str(&t)?;
        if v["type"] != "next" {
            continue;
        }
        let item: StreamItem =
            serde_json::from_value(v["payload"]["data"]["threadEvents"]["item"].clone())
                .context("a stream item")?;
        got.transcript
            .apply(&item)
            .map_err(|e| anyhow::anyhow!("protocol broken: {e}"))?;
        let ended = got
            .transcript
            .committed(item.run_id())
            .last()
            .is_some_and(|e| e.kind.is_terminal());
        let Some(e) = item.event() else {
            if ended {
                return Ok(got);
            }
            continue;
        };
        let latency = (arrived - e.at.0).num_microseconds().unwrap_or(0) as f64 / 1000.0;
        // Checkpoint and terminal events are stamped just before their step's commit.
        let at_commit = matches!(
            e.kind,
            RunEventKind::RunCheckpointed { .. } | RunEventKind::RunCompleted { .. }
        );
        got.deliveries.push((e.seq, latency, at_commit));
        let chunk = match &e.kind {
            RunEventKind::PartUpdated {
                update: PartUpdate::TextDelta { text },
                ..
            }
            | RunEventKind::PartAdded {
                part: Part::Text(TextPart { text }),
                ..
            } => chunk_stamp(text),
            _ => None,
        };
        if let Some(sent) = chunk {
            got.chunks
                .push(arrived_us.saturating_sub(sent) as f64 / 1000.0);
        }
        if ended {
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

/// Spawns a child of this benchmark (`role`: `subscribers-server` or `subscribers-worker`) and
/// returns it with the first line it prints.
async fn child(
    role: &str,
    store: &str,
    args: &SubscribersArgs,
    mock: Option<&str>,
    extra: &[&str],
) -> anyhow::Result<(tokio::process::Child, String)> {
    let exe = std::env::current_exe()?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args([role, "--store", store, "--tool-ms"])
        .arg(args.tool_ms.to_string())
        .args(extra)
        .env("FORGE_BENCH_CHUNKS", args.chunks.to_string())
        .env("FORGE_BENCH_CHUNK_US", (args.chunk_ms * 1000).to_string())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    if let Some(mock) = mock {
        cmd.args(["--mock", mock]);
    }
    let mut child = cmd.spawn()?;
    let stdout = child.stdout.take().context("child stdout")?;
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let first = lines
        .next_line()
        .await?
        .with_context(|| format!("{role} printed nothing"))?;
    Ok((child, first))
}

/// The parent: spawns the server (and worker), drives subscribers and runs, reports.
pub(crate) async fn run(args: SubscribersArgs) -> anyhow::Result<()> {
    forge_providers::http::install_crypto_provider();
    let dir = std::env::temp_dir().join(format!("forge-bench-subs-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let store = match args.store.as_str() {
        "sqlite" => format!("sqlite://{}", dir.join("forge.db").display()),
        "memory" if args.cross_process => bail!("--cross-process needs a shared store"),
        other => other.to_owned(),
    };
    let mock = if args.live {
        Some(MockModelServer::start().await?)
    } else {
        None
    };
    let mock_url = mock.as_ref().map(MockModelServer::base_url);
    let channel = format!("forge:live:bench:{}", std::process::id());
    let mut cross = vec!["--channel", &channel];
    if args.cross_process {
        cross.extend(["--redis", &args.redis]);
    }
    let mut server_extra = cross.clone();
    if args.cross_process {
        server_extra.push("--no-worker");
    }
    let (mut server, addr) = child(
        "subscribers-server",
        &store,
        &args,
        mock_url.as_deref(),
        &server_extra,
    )
    .await?;
    let pid = server.id().context("server pid")?;
    let mut worker = None;
    if args.cross_process {
        let (w, _) = child(
            "subscribers-worker",
            &store,
            &args,
            mock_url.as_deref(),
            &cross,
        )
        .await?;
        worker = Some(w);
    }
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
    let agent = if args.live { "streamer" } else { "adder" };
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
            "mutation($t: ID!, $a: String!) { startRun(input: {threadId: $t, agent: $a, message: \"add\"}) { id } }",
            json!({"t": thread, "a": agent}),
        )
        .await?;
        runs.push(d["startRun"]["id"].as_str().unwrap_or_default().to_owned());
    }
    let mut latencies = Vec::new();
    let mut commit_latencies = Vec::new();
    let mut chunk_latencies = Vec::new();
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
        let id: forge_core::id::RunId = run.parse()?;
        let seqs: Vec<u64> = got.transcript.committed(id).iter().map(|e| e.seq).collect();
        if seqs != (1..=last).collect::<Vec<_>>() || got.transcript.events(id).len() != seqs.len() {
            bail!("subscriber {i} ended with {seqs:?}, the log has 1..={last}");
        }
        complete += 1;
        latencies.extend(got.deliveries.iter().map(|(_, l, _)| *l));
        commit_latencies.extend(
            got.deliveries
                .iter()
                .filter(|(_, _, c)| *c)
                .map(|(_, l, _)| *l),
        );
        chunk_latencies.extend(got.chunks);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let peak = rss_mib(pid, "VmHWM:");
    let rss_end = rss_mib(pid, "VmRSS:");
    let _ = server.kill().await;
    if let Some(mut w) = worker {
        let _ = w.kill().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    latencies.sort_by(f64::total_cmp);
    chunk_latencies.sort_by(f64::total_cmp);
    let (k50, k99) = (
        percentile(&chunk_latencies, 0.5),
        percentile(&chunk_latencies, 0.99),
    );
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
    if args.live {
        println!(
            "  chunk → subscriber latency (left the mock → received, {}): p50 {k50:.2} ms, p99 {k99:.2} ms over {} chunks",
            if args.cross_process {
                "across processes via Redis"
            } else {
                "in process"
            },
            chunk_latencies.len()
        );
    }
    println!(
        "  server RSS: {rss_idle:.1} MiB idle, {rss_connected:.1} MiB with subscribers, {rss_end:.1} MiB at end, peak {peak:.1} MiB"
    );
    eprintln!(
        "{}",
        json!({"bench": "subscribers", "subscribers": args.subscribers, "runs": args.runs,
               "store": args.store, "live": args.live, "cross_process": args.cross_process,
               "chunk_p50_ms": k50, "chunk_p99_ms": k99, "deliveries": latencies.len(), "p50_ms": p50, "p99_ms": p99,
               "max_ms": max, "commit_p50_ms": c50, "commit_p99_ms": c99, "rss_idle_mib": rss_idle, "rss_connected_mib": rss_connected,
               "rss_peak_mib": peak, "connect_s": connect_s})
    );
    Ok(())
}
