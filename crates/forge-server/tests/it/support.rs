//! A server on a free loopback port over the in-memory store (or another), scripted agents, an
//! in-process worker, and clients: GraphQL over HTTP and `graphql-transport-ws`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use forge_core::agent::{AgentDefinition, AgentRef, RunLimits};
use forge_core::ports::store::Store;
use forge_core::ports::tool::{ApprovalPolicy, ToolClassification, ToolError};
use forge_core::scope::Scope;
use forge_engine::LiveObserver;
use forge_engine::{Engine, Worker, WorkerConfig, native_tool};
use forge_providers::{Script, ScriptedProvider};
use forge_server::{
    Authenticator, EventBus, LiveTail, ReadinessCheck, Server, ServerConfig, StreamSettings,
};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_util::sync::CancellationToken;

pub const SECRET: &str = "test-secret-test-secret-test-secret-0123";

const SCRIPT: &str = r#"
[[conversation]]
when_user = "slow"
[[conversation.turn]]
text = ["Adding."]
tool_calls = [{ name = "slow_add", input = { a = 1, b = 2 } }]
[[conversation.turn]]
tool_calls = [{ name = "slow_add", input = { a = 3, b = 4 } }]
[[conversation.turn]]
tool_calls = [{ name = "slow_add", input = { a = 5, b = 6 } }]
[[conversation.turn]]
text = ["Done: ", "{{tool_result.sum}}"]

[[conversation]]
when_user = "email"
[[conversation.turn]]
tool_calls = [{ name = "send_email", input = { to = "a@example.com" } }]
[[conversation.turn]]
text = ["Sent", ": ", "{{tool_result}}"]
chunk_delay_ms = 40

[[conversation]]
when_user = "ask"
[[conversation.turn]]
tool_calls = [{ name = "ask_user", input = { prompt = "Which account?", answer_schema = { type = "object", properties = { account = { type = "string" } }, required = ["account"] } } }]
[[conversation.turn]]
text = ["Using {{tool_result}}"]

[[conversation]]
[[conversation.turn]]
text = ["Hello ", "there."]
"#;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Email {
    to: String,
}

/// How a test server is set up.
pub struct Opts {
    pub store: Arc<dyn Store>,
    /// Run an in-process worker.
    pub worker: bool,
    /// Whether the worker feeds the live tail and wakes subscribers on commit (off: only polling
    /// delivers, committed events only).
    pub wake_on_commit: bool,
    pub poll: Duration,
    pub auth: Option<Authenticator>,
    pub readiness: Vec<ReadinessCheck>,
    pub tool_delay: Duration,
    pub authorizer: Option<Arc<dyn forge_core::ports::policy::Authorizer>>,
    /// More model providers and agents (the scripted ones are always there).
    pub models: Vec<Arc<dyn forge_core::ports::model::ModelProvider>>,
    pub agents: Vec<AgentDefinition>,
    /// Adjusts the server's configuration (limits) before it starts.
    pub tune: Option<fn(&mut ServerConfig)>,
    /// Retrieval sources for citations.
    pub retriever: Option<forge_rag::Retriever>,
    /// Stored files, for the engine and the file endpoints.
    pub files: Option<forge_files::Files>,
    /// Telemetry for the engine, worker and server (none: the no-op default).
    pub telemetry: Option<forge_core::telemetry::Telemetry>,
    /// What `GET /metrics` serves.
    pub metrics: Option<forge_server::MetricsText>,
    /// Where the server listens.
    pub listen: &'static str,
    /// A host application's own routes, served beside Forge's (`Server::serve_with`).
    pub host_routes: Option<axum::Router>,
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            store: Arc::new(forge_store_memory::MemoryStore::default()),
            worker: true,
            wake_on_commit: true,
            poll: Duration::from_secs(30),
            auth: None,
            readiness: Vec::new(),
            tool_delay: Duration::from_millis(100),
            authorizer: None,
            models: Vec::new(),
            agents: Vec::new(),
            tune: None,
            retriever: None,
            files: None,
            telemetry: None,
            metrics: None,
            host_routes: None,
            listen: "127.0.0.1:0",
        }
    }
}

pub struct Srv {
    pub addr: std::net::SocketAddr,
    pub stop: CancellationToken,
    pub emails: Arc<AtomicUsize>,
    pub http: reqwest::Client,
    pub task: tokio::task::JoinHandle<()>,
}

pub fn agent(name: &str, tools: &[&str]) -> AgentDefinition {
    AgentDefinition {
        agent: AgentRef {
            name: name.into(),
            version: "1".into(),
        },
        instructions: "Test agent.".into(),
        model: "scripted:test".into(),
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        skills: vec![],
        output_schema: None,
        limits: RunLimits::default(),
        approvals: Default::default(),
        compaction: None,
    }
}

pub async fn start(opts: Opts) -> Srv {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let delay = opts.tool_delay;
    let slow_add = native_tool(
        "slow_add",
        "Adds two integers, slowly.",
        move |_ctx, i: Add| async move {
            tokio::time::sleep(delay).await;
            Ok::<_, ToolError>(json!({"sum": i.a + i.b}))
        },
    );
    let emails = Arc::new(AtomicUsize::new(0));
    let sent = emails.clone();
    let send_email = native_tool("send_email", "Sends an email.", move |_ctx, _e: Email| {
        let sent = sent.clone();
        async move {
            sent.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>(json!("sent"))
        }
    })
    .classification(ToolClassification::ExternalWrite)
    .approval(ApprovalPolicy::Always);
    let script = Script::parse(SCRIPT, "test").unwrap();
    let mut builder = Engine::builder();
    if let Some(a) = opts.authorizer {
        builder = builder.authorizer(a);
    }
    for model in opts.models {
        builder = builder.model(model);
    }
    for agent in opts.agents {
        builder = builder.agent(agent);
    }
    if let Some(files) = &opts.files {
        builder = builder.files(Arc::new(files.clone()));
    }
    if let Some(telemetry) = opts.telemetry {
        builder = builder.telemetry(telemetry);
    }
    let engine = builder
        .dyn_store(opts.store.clone())
        .model(Arc::new(
            ScriptedProvider::empty().with_script("test", script),
        ))
        .tool(Arc::new(slow_add))
        .unwrap()
        .tool(Arc::new(send_email))
        .unwrap()
        .agent(agent("assistant", &["slow_add", "send_email", "ask_user"]))
        .agent(agent("greeter", &[]))
        .worker_id("test-worker")
        .build()
        .unwrap();
    let engine = Arc::new(engine);
    let tail = Arc::new(LiveTail::new(EventBus::default()));
    let mut config = ServerConfig::new(
        opts.auth
            .unwrap_or_else(|| Authenticator::hs256(SECRET.as_bytes()).unwrap()),
    );
    config.streams = StreamSettings {
        poll: opts.poll,
        ..StreamSettings::default()
    };
    config.readiness = opts.readiness;
    config.retriever = opts.retriever;
    config.files = opts.files;
    config.metrics = opts.metrics;
    if let Some(tune) = opts.tune {
        tune(&mut config);
    }
    let server = Server::new(engine.clone(), tail.clone(), config);
    let listener = tokio::net::TcpListener::bind(opts.listen).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    if opts.worker {
        let mut worker = Worker::new(
            engine.clone(),
            opts.store.clone(),
            WorkerConfig {
                id: "test-worker".into(),
                concurrency: 16,
                poll_interval: Duration::from_millis(10),
                ..WorkerConfig::default()
            },
        );
        if opts.wake_on_commit {
            worker = worker.with_observer(Arc::new(LiveObserver::default().with(tail.clone())));
        }
        let drain = stop.clone();
        tokio::spawn(async move { worker.run(drain).await });
    }
    let serve_stop = stop.clone();
    let host_routes = opts.host_routes;
    let task = tokio::spawn(async move {
        match host_routes {
            Some(routes) => server
                .serve_with(routes, listener, serve_stop)
                .await
                .unwrap(),
            None => server.serve(listener, serve_stop).await.unwrap(),
        }
    });
    Srv {
        addr,
        stop,
        emails,
        http: reqwest::Client::new(),
        task,
    }
}

/// A store on a fresh SQLite file, and the directory holding it (for the caller to remove).
pub async fn sqlite_store() -> (Arc<dyn Store>, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("forge-test-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = forge_store_sqlite::SqliteStore::open(&format!(
        "sqlite://{}",
        dir.join("forge.db").display()
    ))
    .await
    .unwrap();
    (Arc::new(store), dir)
}

/// A store on a fresh PostgreSQL database in RLS mode (dropped with the store).
pub async fn postgres_store() -> Arc<dyn Store> {
    use forge_store_postgres::testing::{Flavor, TestDatabase};
    let db = TestDatabase::create(Flavor::Plain)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let store =
        forge_store_postgres::PostgresStore::connect(db.url(), forge_store_postgres::Mode::Rls)
            .await
            .unwrap()
            .with_guard(db);
    Arc::new(store)
}

pub fn token(tenant: &str, principal: &str, roles: &[&str]) -> String {
    let scope = Scope::parse(tenant, principal, roles).unwrap();
    let now = chrono_now();
    forge_server::auth::sign_hs256(SECRET.as_bytes(), &scope, 3600, now).unwrap()
}

pub fn chrono_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

impl Srv {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// POSTs a GraphQL request; returns (status, body).
    pub async fn post(&self, token: Option<&str>, query: &str, variables: Value) -> (u16, Value) {
        let mut req = self
            .http
            .post(self.url("/graphql"))
            .json(&json!({"query": query, "variables": variables}));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let res = req.send().await.unwrap();
        let status = res.status().as_u16();
        let body = res.json().await.unwrap_or(Value::Null);
        (status, body)
    }

    /// A GraphQL request that must succeed; returns `data`.
    pub async fn gql(&self, token: &str, query: &str, variables: Value) -> Value {
        let (status, body) = self.post(Some(token), query, variables).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.get("errors").is_none(), "{body}");
        body["data"].clone()
    }

    /// A GraphQL request that must fail; returns its first error's `code`.
    pub async fn gql_error(&self, token: &str, query: &str, variables: Value) -> (String, String) {
        let (_, body) = self.post(Some(token), query, variables).await;
        let e = &body["errors"][0];
        assert!(!e.is_null(), "expected an error: {body}");
        (
            e["extensions"]["code"].as_str().unwrap_or("").to_owned(),
            e["message"].as_str().unwrap_or("").to_owned(),
        )
    }

    pub async fn thread(&self, token: &str) -> String {
        let d = self
            .gql(token, "mutation { createThread { id } }", json!({}))
            .await;
        d["createThread"]["id"].as_str().unwrap().to_owned()
    }

    pub async fn start_run(&self, token: &str, thread: &str, agent: &str, message: &str) -> String {
        let d = self
            .gql(
                token,
                "mutation($t: ID!, $a: String!, $m: String!) { startRun(input: {threadId: $t, agent: $a, message: $m}) { id status } }",
                json!({"t": thread, "a": agent, "m": message}),
            )
            .await;
        d["startRun"]["id"].as_str().unwrap().to_owned()
    }

    /// A new thread with a run of `agent` on it that has reached `status`.
    pub async fn run_until(
        &self,
        token: &str,
        agent: &str,
        message: &str,
        status: &str,
    ) -> (String, String) {
        let thread = self.thread(token).await;
        let run = self.start_run(token, &thread, agent, message).await;
        self.wait_status(token, &run, status).await;
        (thread, run)
    }

    /// Polls until the run has the status.
    pub async fn wait_status(&self, token: &str, run: &str, status: &str) -> Value {
        for _ in 0..500 {
            let d = self
                .gql(
                    token,
                    "query($id: ID!) { run(id: $id) { status lastSeq } }",
                    json!({"id": run}),
                )
                .await;
            if d["run"]["status"] == status {
                return d["run"].clone();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let last = self
            .gql(
                token,
                "query($id: ID!) { run(id: $id) { status lastSeq } }",
                json!({"id": run}),
            )
            .await;
        panic!("run {run} never reached {status}: {last}");
    }

    /// The committed log of a run, as `(seq, type)`.
    pub async fn log(&self, token: &str, run: &str) -> Vec<(u64, String)> {
        let d = self
            .gql(
                token,
                "query($id: ID!) { runEvents(runId: $id, limit: 1000) { seq type } }",
                json!({"id": run}),
            )
            .await;
        d["runEvents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["seq"].as_u64().unwrap(),
                    e["type"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }
}

/// A `graphql-transport-ws` client.
pub struct Ws {
    pub socket: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
}

impl Ws {
    /// Connects without initialising.
    pub async fn open(srv: &Srv) -> Self {
        let mut req = format!("ws://{}/graphql", srv.addr)
            .into_client_request()
            .unwrap();
        req.headers_mut().insert(
            "sec-websocket-protocol",
            "graphql-transport-ws".parse().unwrap(),
        );
        let (socket, _) = tokio_tungstenite::connect_async(req).await.unwrap();
        Ws { socket }
    }

    /// Connects and initialises with `token` in the `connection_init` payload; returns the
    /// server's first answer to the init (`connection_ack`, or the close).
    pub async fn connect(srv: &Srv, token: Option<&str>) -> (Self, Message) {
        let mut req = format!("ws://{}/graphql", srv.addr)
            .into_client_request()
            .unwrap();
        req.headers_mut().insert(
            "sec-websocket-protocol",
            "graphql-transport-ws".parse().unwrap(),
        );
        let (socket, _) = tokio_tungstenite::connect_async(req).await.unwrap();
        let mut ws = Ws { socket };
        let payload = match token {
            Some(t) => json!({"authorization": format!("Bearer {t}")}),
            None => json!({}),
        };
        ws.send(json!({"type": "connection_init", "payload": payload}))
            .await;
        let first = ws.next_message().await;
        (ws, first)
    }

    pub async fn send(&mut self, v: Value) {
        self.socket
            .send(Message::Text(v.to_string().into()))
            .await
            .unwrap();
    }

    pub async fn next_message(&mut self) -> Message {
        loop {
            let m = tokio::time::timeout(Duration::from_secs(20), self.socket.next())
                .await
                .expect("no message within 20 s")
                .expect("the socket ended")
                .unwrap_or_else(|e| {
                    Message::Text(format!("{{\"type\":\"socket_error\",\"e\":\"{e}\"}}").into())
                });
            match m {
                Message::Ping(_) | Message::Pong(_) => continue,
                other => return other,
            }
        }
    }

    pub async fn next_json(&mut self) -> Value {
        match self.next_message().await {
            Message::Text(t) => serde_json::from_str(&t).unwrap(),
            other => json!({"type": "non_text", "message": format!("{other:?}")}),
        }
    }

    /// The next message of operation `id`, skipping the others.
    pub async fn next_for(&mut self, id: &str) -> Value {
        loop {
            let m = self.next_json().await;
            if m["id"] == id {
                return m;
            }
        }
    }

    pub async fn subscribe(&mut self, id: &str, query: &str, variables: Value) {
        self.send(json!({"id": id, "type": "subscribe", "payload": {"query": query, "variables": variables}}))
            .await;
    }

    /// Subscribes to `run` and returns the refusal's first error (`{code, message}` in
    /// `extensions` and `message`), whichever form the server sends it in.
    pub async fn subscribe_refused(&mut self, run: &str) -> Value {
        self.subscribe("1", RUN_EVENTS, json!({"id": run, "after": 0}))
            .await;
        let m = self.next_json().await;
        let errors = if m["type"] == "error" {
            &m["payload"]
        } else {
            &m["payload"]["errors"]
        };
        assert!(!errors[0].is_null(), "expected a refusal: {m}");
        errors[0].clone()
    }

    /// Reads `next` messages of subscription `id` until `complete` or `n` events; returns the
    /// events' payload data.
    pub async fn collect(&mut self, id: &str, field: &str, n: Option<usize>) -> (Vec<Value>, bool) {
        let mut out = Vec::new();
        loop {
            if n.is_some_and(|n| out.len() >= n) {
                return (out, false);
            }
            let m = self.next_json().await;
            if m["id"] != id {
                continue;
            }
            match m["type"].as_str() {
                Some("next") => {
                    assert!(m["payload"]["errors"].is_null(), "{m}");
                    out.push(m["payload"]["data"][field].clone());
                }
                Some("complete") => return (out, true),
                _ => panic!("unexpected message {m}"),
            }
        }
    }
}

/// Connects and writes `n` subscribes of `query` (ids `s0`, `s1`, …) without reading any answer.
pub async fn burst(srv: &Srv, token: &str, n: usize, query: &str, variables: &Value) -> Ws {
    let (mut ws, _) = Ws::connect(srv, Some(token)).await;
    for i in 0..n {
        let m = json!({"id": format!("s{i}"), "type": "subscribe",
            "payload": {"query": query, "variables": variables}});
        ws.socket
            .feed(Message::Text(m.to_string().into()))
            .await
            .unwrap();
    }
    ws.socket.flush().await.unwrap();
    ws
}

pub const RUN_EVENTS: &str = "subscription($id: ID!, $after: Int!) { runEvents(runId: $id, afterSeq: $after) { kind runId seq type item } }";

/// Folds stream items (as selected by [`RUN_EVENTS`]) into `transcript`, failing on any item that
/// breaks the protocol (a duplicate, a gap, a marker that matches nothing).
pub fn fold(transcript: &mut forge_core::stream::Transcript, items: &[Value]) {
    for v in items {
        let item: forge_core::stream::StreamItem =
            serde_json::from_value(v["item"].clone()).unwrap_or_else(|e| panic!("{e}: {v}"));
        transcript
            .apply(&item)
            .unwrap_or_else(|e| panic!("protocol broken: {e}"));
    }
}

/// The sequence numbers and types a transcript holds committed for `run`.
pub fn committed(transcript: &forge_core::stream::Transcript, run: &str) -> Vec<(u64, String)> {
    let run: forge_core::id::RunId = run.parse().unwrap();
    transcript
        .committed(run)
        .iter()
        .map(|e| (e.seq, e.kind.type_name().to_owned()))
        .collect()
}
