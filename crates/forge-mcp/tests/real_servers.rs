//! forge-mcp against real MCP servers, installed by `tests/servers/install.sh` (run here on first
//! use, and by `.ci/run`): the reference server `@modelcontextprotocol/server-everything` from npm
//! (two published versions, for drift) over stdio and streamable HTTP, `mcp-server-time` from
//! PyPI over stdio, and `ledger_server.py`, a server written on the official Python SDK that
//! records what each call carried (its `_meta`), where the reference servers cannot show it.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use forge_core::agent::{AgentDefinition, AgentRef, RunLimits};
use forge_core::id::{IdempotencyKey, RunId, SequentialIds, ThreadId, ToolCallId};
use forge_core::interaction::{Decision, Resolve};
use forge_core::part::Part;
use forge_core::ports::model::{ModelError, ModelProvider, ModelRequest, ModelStream};
use forge_core::ports::store::{NewThread, RunStore, ThreadStore};
use forge_core::ports::tool::{ApprovalPolicy, Tool, ToolClassification, ToolContext, ToolError};
use forge_core::run::{RunStatus, WaitReason};
use forge_core::scope::Scope;
use forge_core::time::ManualClock;
use forge_engine::{Engine, NoopObserver};
use forge_mcp::server::Reporter;
use forge_mcp::{CatalogDiff, LockFile, McpConfig, McpError, McpRuntime, Pin, fetch_catalog};
use forge_providers::{Script, ScriptedProvider};
use forge_store_memory::MemoryStore;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use forge_testkit::mcp_servers;

fn stdio_everything(version: &str, extra: &str) -> String {
    format!(
        "[[servers]]\nname = \"everything\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n{extra}\n",
        mcp_servers::everything(version)
    )
}

fn ledger(file: &Path, extra: &str) -> String {
    format!(
        "[[servers]]\nname = \"ledger\"\ntransport = \"stdio\"\ncommand = {:?}\nargs = [{:?}]\nenv = {{ FORGE_LEDGER = {:?} }}\n{extra}\n",
        mcp_servers::python(),
        mcp_servers::ledger_server(),
        file.display().to_string(),
    )
}

fn config(text: &str) -> McpConfig {
    McpConfig::parse(text, Path::new("/")).expect("a valid configuration")
}

/// Reports into memory, for assertions.
#[derive(Default)]
struct Reports {
    drift: Mutex<Vec<CatalogDiff>>,
    down: Mutex<Vec<String>>,
}

impl Reporter for Reports {
    fn drift(&self, diff: &CatalogDiff) {
        self.drift.lock().unwrap().push(diff.clone());
    }
    fn down(&self, server: &str, message: &str) {
        self.down
            .lock()
            .unwrap()
            .push(format!("{server}: {message}"));
    }
}

/// Pins every server's live catalog, as `forge mcp pin` does.
async fn pin_all(config: &McpConfig) -> LockFile {
    let mut lock = LockFile::default();
    for s in &config.servers {
        let defs = fetch_catalog(s, Arc::new(config.egress.clone()), forge_mcp::process_env())
            .await
            .expect("the catalog");
        let pins = lock.servers.entry(s.name.clone()).or_default();
        for d in defs {
            pins.tools.insert(d.name.clone(), Pin::of(d));
        }
    }
    lock
}

async fn start(config: &McpConfig, lock: &LockFile) -> (McpRuntime, Arc<Reports>) {
    let reports = Arc::new(Reports::default());
    let rt = McpRuntime::start(config, lock, forge_mcp::process_env(), reports.clone())
        .await
        .expect("the runtime starts");
    (rt, reports)
}

fn tool(rt: &McpRuntime, name: &str) -> Arc<dyn Tool> {
    rt.tools()
        .into_iter()
        .find(|t| t.spec().name == name)
        .unwrap_or_else(|| panic!("{name} is imported"))
}

fn ctx(call: &str) -> ToolContext {
    let ids = SequentialIds::new();
    let run_id = RunId::generate(&ids);
    let tool_call_id = ToolCallId::from(call);
    ToolContext {
        scope: Scope::parse("acme", "alice", &["member"]).unwrap(),
        run_id,
        thread_id: ThreadId::generate(&ids),
        idempotency_key: IdempotencyKey::for_tool_call(run_id, &tool_call_id),
        tool_call_id,
        lease_token: 1,
        timeout: std::time::Duration::from_secs(30),
        max_output_bytes: 1 << 20,
        session: None,
    }
}

fn text_of(output: &serde_json::Value) -> String {
    output["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn ledger_lines(file: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn temp_file(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "forge-mcp-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..200 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn the_reference_server_over_stdio_is_pinned_listed_and_called() {
    let c = config(&stdio_everything(
        "2026-8",
        "[servers.tools.echo]\nclassification = \"read\"",
    ));
    let lock = pin_all(&c).await;
    let pins = &lock.servers["everything"].tools;
    assert!(pins.contains_key("echo"), "{:?}", pins.keys());
    let (rt, reports) = start(&c, &lock).await;
    assert!(reports.drift.lock().unwrap().is_empty());
    assert_eq!(rt.diffs()[0].changed, Vec::<String>::new());

    let echo = tool(&rt, "everything__echo");
    assert!(echo.available());
    let spec = echo.spec();
    assert_eq!(
        (spec.classification, spec.approval, spec.source.kind()),
        (ToolClassification::Read, ApprovalPolicy::Never, "mcp")
    );
    assert_eq!(
        spec.version, pins["echo"].hash,
        "the tool's version is its pin"
    );
    let out = echo
        .call(&ctx("c1"), json!({"message": "hello from forge"}))
        .await
        .unwrap();
    assert!(text_of(&out).contains("hello from forge"), "{out}");

    // A tool the configuration does not classify needs approval on every call.
    let other = rt
        .tools()
        .into_iter()
        .find(|t| t.spec().name != "everything__echo")
        .unwrap();
    assert_eq!(
        (other.spec().classification, other.spec().approval),
        (ToolClassification::ExternalWrite, ApprovalPolicy::Always)
    );
}

/// Starts server-everything's streamable HTTP transport on a free port.
struct HttpServer {
    child: Child,
    port: u16,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn http_everything() -> HttpServer {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("node")
        .arg(mcp_servers::everything("2026-8"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("node starts");
    let server = HttpServer { child, port };
    eventually("the HTTP server to listen", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
    .await;
    server
}

#[tokio::test]
async fn the_reference_server_over_streamable_http_is_called_within_the_egress_policy() {
    let server = http_everything().await;
    let c = config(&format!(
        "[[egress.allow]]\nschemes = [\"http\"]\nhost = \"127.0.0.1\"\nports = [{p}]\naddresses = [\"127.0.0.1\"]\n\
         [[servers]]\nname = \"web\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{p}/mcp\"\n\
         [servers.tools.echo]\nclassification = \"read\"\n",
        p = server.port
    ));
    let lock = pin_all(&c).await;
    let (rt, _) = start(&c, &lock).await;
    let echo = tool(&rt, "web__echo");
    let out = echo
        .call(&ctx("c1"), json!({"message": "over http"}))
        .await
        .unwrap();
    assert!(text_of(&out).contains("over http"), "{out}");
}

#[tokio::test]
async fn egress_refuses_unlisted_endpoints_forbidden_addresses_and_redirects_to_them() {
    // Not in the allowlist: refused when the file is read.
    let e = McpConfig::parse(
        "[[servers]]\nname = \"x\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:9/mcp\"\n",
        Path::new("/"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("no egress rule"), "{e}");

    // A name that resolves to loopback, with a rule that names no loopback range.
    let c = config(
        "[[egress.allow]]\nschemes = [\"http\"]\nhost = \"localhost\"\nports = [9]\n\
         [[servers]]\nname = \"x\"\ntransport = \"http\"\nurl = \"http://localhost:9/mcp\"\n",
    );
    let e = McpRuntime::start(
        &c,
        &LockFile::default(),
        forge_mcp::process_env(),
        Arc::new(Reports::default()),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, McpError::Config(m) if m.contains("loopback") && m.contains("egress rule #1")),
        "{e}"
    );

    // An allowed endpoint that redirects to a name resolving to a forbidden address: the
    // redirect is not followed (the listener sees one request, not two).
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(AtomicUsize::new(0));
    let seen = requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut buf = [0u8; 8192];
            let _ = stream.read(&mut buf);
            seen.fetch_add(1, Ordering::SeqCst);
            let _ = write!(
                stream,
                "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://localhost:{port}/mcp\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    let c = config(&format!(
        "[[egress.allow]]\nschemes = [\"http\"]\nhost = \"127.0.0.1\"\nports = [{port}]\naddresses = [\"127.0.0.1\"]\n\
         [[egress.allow]]\nschemes = [\"http\"]\nhost = \"localhost\"\nports = [{port}]\n\
         [[servers]]\nname = \"x\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{port}/mcp\"\nstartup_timeout_secs = 5\n"
    ));
    let e = fetch_catalog(
        &c.servers[0],
        Arc::new(c.egress.clone()),
        forge_mcp::process_env(),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, McpError::Connect { .. }), "{e}");
    assert_eq!(
        requests.load(Ordering::SeqCst),
        1,
        "the redirect to a forbidden address was not followed"
    );
}

#[tokio::test]
async fn a_changed_catalog_disables_the_changed_tools_and_offers_nothing_changed() {
    // Pinned against one published version, run against another.
    let newer = config(&stdio_everything("2026-8", ""));
    let lock = pin_all(&newer).await;
    let older = config(&stdio_everything("2025-9", ""));
    let (rt, reports) = start(&older, &lock).await;
    let diff = rt.diffs().remove(0);
    assert!(!diff.changed.is_empty(), "{diff:?}");
    let reported = reports.drift.lock().unwrap().clone();
    assert_eq!(
        reported,
        std::slice::from_ref(&diff),
        "the drift is reported, naming the tools"
    );

    let imported = rt.tools();
    for t in &imported {
        let remote = t.spec().name.trim_start_matches("everything__").to_owned();
        let expected = diff.unchanged.contains(&remote);
        assert_eq!(t.available(), expected, "{remote}");
    }
    // Nothing changed reaches the model: the engine neither lists nor offers it.
    let names: Vec<String> = imported.iter().map(|t| t.spec().name.clone()).collect();
    let w = World::new(
        imported,
        &names,
        None,
        "[[conversation]]\n[[conversation.turn]]\ntext = [\"ok\"]\n",
    );
    let listed: Vec<String> = w
        .engine
        .list_tools(&w.scope, Some(&w.agent.agent))
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    for changed in &diff.changed {
        assert!(
            !listed.contains(&format!("everything__{changed}")),
            "{changed}"
        );
    }
    for same in &diff.unchanged {
        assert!(listed.contains(&format!("everything__{same}")), "{same}");
    }
    let run = w.start("hi").await;
    w.execute(run).await;
    let sent = w.model.sent();
    for changed in &diff.changed {
        assert!(
            !sent.contains(&format!("everything__{changed}")),
            "{changed}"
        );
    }
    // A changed tool called anyway (the model invents it) does not run.
    let changed = tool(&rt, &format!("everything__{}", diff.changed[0]));
    let e = changed.call(&ctx("c1"), json!({})).await.unwrap_err();
    assert!(
        matches!(&e, ToolError::Unavailable(m) if m.contains("changed since it was pinned")),
        "{e}"
    );
}

#[tokio::test]
async fn the_python_time_server_answers_over_stdio() {
    let c = config(&format!(
        "[[servers]]\nname = \"time\"\ntransport = \"stdio\"\ncommand = {:?}\nenv = {{ TZ = \"UTC\" }}\n\
         [servers.tools.get_current_time]\nclassification = \"read\"\n",
        mcp_servers::time_server()
    ));
    let lock = pin_all(&c).await;
    assert!(lock.servers["time"].tools.contains_key("convert_time"));
    let (rt, _) = start(&c, &lock).await;
    let now = tool(&rt, "time__get_current_time");
    let out = now
        .call(&ctx("c1"), json!({"timezone": "Europe/London"}))
        .await
        .unwrap();
    assert!(out.to_string().contains("Europe/London"), "{out}");
    let e = now
        .call(&ctx("c2"), json!({"timezone": "Not/AZone"}))
        .await
        .unwrap_err();
    assert!(matches!(e, ToolError::Failed(_)), "{e}");
}

/// Wraps the scripted provider and keeps every request's JSON.
struct Recording {
    inner: ScriptedProvider,
    requests: Mutex<Vec<String>>,
}

impl Recording {
    fn sent(&self) -> String {
        self.requests.lock().unwrap().join("\n")
    }
}

#[async_trait]
impl ModelProvider for Recording {
    fn name(&self) -> &str {
        "scripted"
    }
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let tools: Vec<String> = request
            .tools
            .iter()
            .map(|t| format!("{} {} {}", t.name, t.description, t.input_schema))
            .collect();
        self.requests.lock().unwrap().push(tools.join("\n"));
        self.inner.stream(request).await
    }
}

struct World {
    engine: Engine,
    store: Arc<MemoryStore>,
    scope: Scope,
    approver: Scope,
    agent: AgentDefinition,
    model: Arc<Recording>,
}

impl World {
    fn new(
        tools: Vec<Arc<dyn Tool>>,
        names: &[String],
        policies: Option<&str>,
        script: &str,
    ) -> Self {
        Self::previewing(tools, &[], names, policies, script)
    }

    /// A world whose engine also takes the configuration's `previews`.
    fn previewing(
        tools: Vec<Arc<dyn Tool>>,
        previews: &[(String, Arc<dyn forge_core::ports::tool::ApprovalPreviewer>)],
        names: &[String],
        policies: Option<&str>,
        script: &str,
    ) -> Self {
        let clock = Arc::new(ManualClock::at_2026());
        let store = Arc::new(MemoryStore::new(
            clock.clone(),
            Arc::new(SequentialIds::new()),
        ));
        let agent = AgentDefinition {
            agent: AgentRef {
                name: "tester".into(),
                version: "1".into(),
            },
            instructions: "You are a test agent.".into(),
            model: "scripted:inline".into(),
            tools: names.to_vec(),
            skills: vec![],
            output_schema: None,
            limits: RunLimits::default(),
            approvals: BTreeMap::new().into_iter().collect(),
            compaction: None,
        };
        let model = Arc::new(Recording {
            inner: ScriptedProvider::new(Script::parse(script, "inline").unwrap()),
            requests: Mutex::new(vec![]),
        });
        let mut b = Engine::builder()
            .store(store.clone())
            .model(model.clone())
            .clock(clock)
            .agent(agent.clone());
        for t in tools {
            b = b.tool(t).unwrap();
        }
        for (tool, previewer) in previews {
            b = b.approval_preview(tool, previewer.clone()).unwrap();
        }
        if let Some(p) = policies {
            b = b.authorizer(Arc::new(
                forge_policy::CedarAuthorizer::from_sources([("test.cedar", p)]).unwrap(),
            ));
        }
        Self {
            engine: b.build().unwrap(),
            store,
            scope: Scope::parse("acme", "alice", &["member"]).unwrap(),
            approver: Scope::parse("acme", "bob", &["member"]).unwrap(),
            agent,
            model,
        }
    }

    async fn start(&self, text: &str) -> RunId {
        let thread = self
            .store
            .create_thread(&self.scope, NewThread::default())
            .await
            .unwrap();
        self.engine
            .start_run(
                &self.scope,
                thread.id,
                &self.agent.agent,
                vec![Part::text(text)],
            )
            .await
            .unwrap()
            .id
    }

    async fn execute(&self, run: RunId) -> RunStatus {
        self.engine
            .execute(&self.scope, run, &CancellationToken::new(), &NoopObserver)
            .await
            .unwrap()
            .status
    }

    /// The output of each tool result of the run, by call id.
    async fn results(&self, run: RunId) -> BTreeMap<String, serde_json::Value> {
        self.store
            .read_events(&self.scope, run, 0, 1000)
            .await
            .unwrap()
            .iter()
            .filter_map(|e| serde_json::to_value(e).ok())
            .filter(|v| v["part"]["type"] == "tool_result")
            .map(|v| {
                let call = v["part"]["tool_call_id"].as_str().unwrap().to_owned();
                (call, v["part"]["output"].clone())
            })
            .collect()
    }
}

const RECORD_THEN_ANSWER: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "call_1", name = "ledger__record", input = { note = "ship it" } }]
[[conversation.turn]]
text = ["Done: {{tool_result}}"]
"#;

#[tokio::test]
async fn an_unclassified_tool_parks_the_run_and_runs_once_with_its_idempotency_key() {
    let file = temp_file("ledger.jsonl");
    let c = config(&ledger(&file, ""));
    let lock = pin_all(&c).await;
    let (rt, _) = start(&c, &lock).await;
    let w = World::new(
        rt.tools(),
        &["ledger__record".into()],
        None,
        RECORD_THEN_ANSWER,
    );
    let run = w.start("record it").await;
    assert_eq!(
        w.execute(run).await,
        RunStatus::Waiting(WaitReason::Approval)
    );
    assert!(
        ledger_lines(&file).is_empty(),
        "nothing runs before approval"
    );

    let pending = w.engine.pending_interactions(&w.approver).await.unwrap();
    assert_eq!(pending.len(), 1);
    w.engine
        .resolve_interaction(
            &w.approver,
            Resolve {
                id: pending[0].id,
                decision: Decision::Approve,
                actor: "bob".into(),
                key: "k1".into(),
                input_hash: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(w.execute(run).await, RunStatus::Completed);
    let lines = ledger_lines(&file);
    assert_eq!(lines.len(), 1, "the approved call ran once: {lines:?}");
    let key = IdempotencyKey::for_tool_call(run, &ToolCallId::from("call_1")).to_string();
    assert_eq!(lines[0]["note"], "ship it");
    assert_eq!(lines[0]["meta"]["dev.forge/idempotency-key"], key.as_str());
    assert_eq!(
        lines[0]["meta"]["dev.forge/run-id"],
        run.to_string().as_str()
    );
    assert!(
        lines[0]["meta"]["dev.forge/lease-token"]
            .as_u64()
            .is_some_and(|t| t >= 1),
        "the fencing token: {}",
        lines[0]["meta"]
    );
}

/// A server cannot describe its calls to the person approving them; the configuration can: its
/// `preview` template is filled from the call's input and travels with the approval.
#[tokio::test]
async fn the_configurations_preview_describes_an_imported_tools_approval() {
    let file = temp_file("ledger.jsonl");
    let c = config(&ledger(
        &file,
        "[servers.tools.record]\npreview = { summary = \"Record “{note}” in the ledger\", \
         facts = [{ label = \"Note\", value = \"{note}\" }, { label = \"Tag\", value = \"{tag}\" }] }",
    ));
    let lock = pin_all(&c).await;
    let (rt, _) = start(&c, &lock).await;
    assert_eq!(rt.previews().len(), 1);
    let w = World::previewing(
        rt.tools(),
        rt.previews(),
        &["ledger__record".into()],
        None,
        RECORD_THEN_ANSWER,
    );
    let run = w.start("record it").await;
    assert_eq!(
        w.execute(run).await,
        RunStatus::Waiting(WaitReason::Approval)
    );
    let pending = w.engine.pending_interactions(&w.approver).await.unwrap();
    let forge_core::interaction::InteractionRequest::Approval { preview, .. } = &pending[0].request
    else {
        panic!("an approval");
    };
    assert_eq!(
        preview.clone(),
        Some(
            forge_core::interaction::ApprovalPreview::new("Record “ship it” in the ledger")
                .fact("Note", "ship it")
                .fact("Tag", "—")
        )
    );
}

#[tokio::test]
async fn a_tool_hidden_by_policy_is_absent_and_refused_like_an_invented_one() {
    let file = temp_file("ledger.jsonl");
    let c = config(&ledger(
        &file,
        "[servers.tools.record]\nclassification = \"read\"\n[servers.tools.slow]\nclassification = \"read\"",
    ));
    let lock = pin_all(&c).await;
    let (rt, _) = start(&c, &lock).await;
    // Members may use imported tools, except those of the ledger server.
    let policies = r#"
        permit (principal, action in [Forge::Action::"discover", Forge::Action::"execute"], resource is Forge::Tool);
        forbid (principal in Forge::Role::"member", action, resource is Forge::Tool)
        when { resource.source == "mcp" && resource has server && resource.server == "ledger" && resource.name == "ledger__record" };
    "#;
    let script = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "call_1", name = "ledger__record", input = { note = "sneak" } }, { id = "call_2", name = "ledger__invented", input = { note = "x" } }]
[[conversation.turn]]
text = ["ok"]
"#;
    let names = vec!["ledger__record".to_owned(), "ledger__slow".to_owned()];
    let w = World::new(rt.tools(), &names, Some(policies), script);
    let listed: Vec<String> = w
        .engine
        .list_tools(&w.scope, None)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(listed.contains(&"ledger__slow".to_owned()), "{listed:?}");
    assert!(!listed.contains(&"ledger__record".to_owned()), "{listed:?}");
    let found = w
        .engine
        .search_tools(&w.scope, None, "records a note ledger", 10)
        .unwrap();
    assert!(
        found.iter().all(|h| h.entry.name != "ledger__record"),
        "{found:?}"
    );

    let run = w.start("go").await;
    assert_eq!(w.execute(run).await, RunStatus::Completed);
    let sent = w.model.sent();
    assert!(
        sent.contains("ledger__slow") && !sent.contains("ledger__record"),
        "{sent}"
    );
    assert!(ledger_lines(&file).is_empty(), "the hidden tool never ran");
    let results = w.results(run).await;
    let message = |call: &str, name: &str| results[call].to_string().replace(name, "NAME");
    assert_eq!(results["call_1"]["code"], "forbidden", "{results:?}");
    assert_eq!(
        message("call_1", "ledger__record"),
        message("call_2", "ledger__invented"),
        "a hidden tool and an invented one get the same answer"
    );
}

#[tokio::test]
async fn a_slow_call_times_out_and_is_cancelled_and_a_dead_server_is_restarted() {
    let file = temp_file("ledger.jsonl");
    let c = config(&ledger(&file, "call_timeout_secs = 1\n"));
    let lock = pin_all(&c).await;
    let (rt, reports) = start(&c, &lock).await;
    let slow = tool(&rt, "ledger__slow");
    let e = slow
        .call(&ctx("c1"), json!({"seconds": 30}))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ToolError::Unavailable(m) if m.contains("within 1 s")),
        "{e}"
    );
    eventually("the server to see the cancellation", || {
        ledger_lines(&file)
            .iter()
            .any(|l| l["event"] == "cancelled")
    })
    .await;

    let record = tool(&rt, "ledger__record");
    record
        .call(&ctx("c2"), json!({"note": "before"}))
        .await
        .unwrap();
    let crash = tool(&rt, "ledger__crash");
    assert!(crash.call(&ctx("c3"), json!({})).await.is_err());
    eventually("the restart to be reported", || {
        !reports.down.lock().unwrap().is_empty()
    })
    .await;
    // Meanwhile or once restarted: a call answers `unavailable` or succeeds, never hangs.
    let mut answered = false;
    for _ in 0..100 {
        match record.call(&ctx("c4"), json!({"note": "after"})).await {
            Ok(_) => {
                answered = true;
                break;
            }
            Err(ToolError::Unavailable(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(answered, "the server came back");
    let pids: Vec<i64> = ledger_lines(&file)
        .iter()
        .filter(|l| l["tool"] == "record")
        .map(|l| l["pid"].as_i64().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    assert_ne!(pids[0], pids[1], "a new process answered after the restart");
}

/// The drift server, its listings held back `delay_ms` after a change, with `extra` lines for
/// the server's table.
fn drift(file: &Path, delay_ms: u64, extra: &str) -> String {
    format!(
        "[[servers]]\nname = \"drift\"\ntransport = \"stdio\"\ncommand = {:?}\nargs = [{:?}]\n\
         env = {{ FORGE_LEDGER = {:?}, FORGE_LIST_DELAY_MS = \"{delay_ms}\" }}\n{extra}\n\
         [servers.tools.echo]\nclassification = \"read\"\n\
         [servers.tools.flip]\nclassification = \"read\"\n\
         [servers.tools.touch]\nclassification = \"read\"\n",
        mcp_servers::python(),
        mcp_servers::drift_server(),
        file.display().to_string(),
    )
}

/// The held-out failure: a server announces that its tools changed and changes `echo`; a call
/// to `echo` made before the client's listing came back went out against the new definition.
/// Now the call waits for the listing, which finds `echo` changed, and is refused unsent — every
/// time (five rounds), with the listing held back 400 ms. A change of nothing only delays the call.
#[tokio::test]
async fn a_call_after_an_announced_change_waits_for_the_listing_and_runs_only_as_pinned() {
    for round in 0..5 {
        let ledger = temp_file("drift.jsonl");
        let c = config(&drift(&ledger, 400, ""));
        let lock = pin_all(&c).await;
        let (rt, reports) = start(&c, &lock).await;
        let echo = tool(&rt, "drift__echo");
        // Pinned and unchanged: it runs.
        echo.call(&ctx("c0"), json!({"text": "hi"})).await.unwrap();
        // A change of nothing: the call waits for the listing, then runs.
        tool(&rt, "drift__touch")
            .call(&ctx("c1"), json!({}))
            .await
            .unwrap();
        echo.call(&ctx("c2"), json!({"text": "hi"})).await.unwrap();
        // A change: the call is refused and never reaches the server.
        tool(&rt, "drift__flip")
            .call(&ctx("c3"), json!({}))
            .await
            .unwrap();
        let e = echo
            .call(&ctx("c4"), json!({"text": "hi"}))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, ToolError::Unavailable(m) if m.contains("changed since it was pinned")),
            "round {round}: {e}"
        );
        let calls = ledger_lines(&ledger);
        assert_eq!(calls.len(), 2, "round {round}: {calls:?}");
        assert!(
            calls.iter().all(|c| c["changed"] == false),
            "round {round}: a call ran against the changed definition: {calls:?}"
        );
        assert_eq!(reports.drift.lock().unwrap().len(), 1, "round {round}");
    }
}

/// A listing that does not come within the call timeout fails the call closed: it is not sent.
#[tokio::test]
async fn a_call_fails_closed_while_an_announced_change_is_not_listed() {
    let ledger = temp_file("drift.jsonl");
    let c = config(&drift(&ledger, 3_000, "call_timeout_secs = 1"));
    let lock = pin_all(&c).await;
    let (rt, _) = start(&c, &lock).await;
    tool(&rt, "drift__touch")
        .call(&ctx("c1"), json!({}))
        .await
        .unwrap();
    let e = tool(&rt, "drift__echo")
        .call(&ctx("c2"), json!({"text": "hi"}))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ToolError::Unavailable(m) if m.contains("has not listed them since")),
        "{e}"
    );
    assert!(ledger_lines(&ledger).is_empty(), "the call was not sent");
}

/// A secret an MCP server's configuration references (`env:`) and a tool echoes back never
/// reaches the model or the store: resolving it registered it with every redactor.
#[tokio::test]
async fn a_servers_referenced_secret_echoed_by_a_tool_is_scrubbed_everywhere() {
    let secret = "mcp-reveal-secret-6d0e91";
    let ledger = temp_file("reveal.jsonl");
    let c = config(&format!(
        "[[servers]]\nname = \"drift\"\ntransport = \"stdio\"\ncommand = {:?}\nargs = [{:?}]\n\
         env = {{ FORGE_LEDGER = {:?}, FORGE_REVEAL = \"env:FORGE_TEST_REVEAL\" }}\n\
         [servers.tools.reveal]\nclassification = \"read\"\n",
        mcp_servers::python(),
        mcp_servers::drift_server(),
        ledger.display().to_string(),
    ));
    let env: forge_mcp::server::Env =
        Arc::new(move |name: &str| (name == "FORGE_TEST_REVEAL").then(|| secret.to_owned()));
    let mut lock = LockFile::default();
    let defs = fetch_catalog(&c.servers[0], Arc::new(c.egress.clone()), env.clone())
        .await
        .unwrap();
    let pins = lock.servers.entry("drift".into()).or_default();
    for d in defs {
        pins.tools.insert(d.name.clone(), Pin::of(d));
    }
    let rt = McpRuntime::start(&c, &lock, env, Arc::new(Reports::default()))
        .await
        .unwrap();
    let w = World::new(
        vec![tool(&rt, "drift__reveal")],
        &["drift__reveal".to_owned()],
        None,
        "[[conversation]]\n[[conversation.turn]]\ntool_calls = [{ id = \"c1\", name = \"drift__reveal\", input = {} }]\n\
         [[conversation.turn]]\ntext = [\"It said: {{tool_result}}\"]\n",
    );
    let run = w.start("what are you configured with?").await;
    assert_eq!(w.execute(run).await, RunStatus::Completed);
    let results = w.results(run).await;
    assert!(
        text_of(&results["c1"]).contains("configured with [REDACTED]"),
        "{results:?}"
    );
    let stored =
        serde_json::to_string(&w.store.read_events(&w.scope, run, 0, 1000).await.unwrap()).unwrap();
    // The log holds the final answer too, which quotes the tool result as the model was given it.
    assert!(
        !stored.contains(secret),
        "the store or the model saw the secret"
    );
}
