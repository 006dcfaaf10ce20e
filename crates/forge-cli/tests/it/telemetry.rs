//! `--otel` as an operator runs it, exporting to a real OTLP receiver (`forge_testkit::otlp`, on
//! the official protobuf definitions): `forge serve --no-worker` and a separate `forge worker` on
//! PostgreSQL produce one trace per request over OTLP/HTTP; `forge serve` exports over gRPC when
//! `OTEL_EXPORTER_OTLP_PROTOCOL=grpc`; and a deployment fed a prompt, a message list, an API key,
//! a bearer token, a signed URL and an error carrying a secret writes none of their bytes to any
//! sink — standard error, the OTLP requests as they arrived, `GET /metrics`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use forge_store_postgres::testing::{Flavor, TestDatabase};
use forge_testkit::mock_model::MockModelServer;
use forge_testkit::otlp::{Receiver, Span};
use serde_json::{Value, json};

use crate::serve::{Proc, gql, token};

const AGENT: &str = r#"
name = "helper"
version = "1"
instructions = "Answer briefly."
model = "openai-compatible:mock-steps-0-chunks-3"
"#;

const SECRET: &str = "cli-test-secret-cli-test-secret-012345";

/// A `forge` process whose standard error goes to a file (every byte it wrote is read back).
struct Forge {
    _proc: Proc,
    stderr: PathBuf,
}

fn spawn(sub: &str, args: &[&str], env: &[(&str, String)], dir: &Path) -> Forge {
    forge_providers::http::install_crypto_provider();
    let stderr = dir.join(format!("{sub}-{}.stderr", uuid::Uuid::new_v4()));
    let file = std::fs::File::create(&stderr).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_forge"));
    cmd.arg(sub);
    if sub == "serve" {
        cmd.args(["--listen", "127.0.0.1:0"]);
    }
    let child = cmd
        .args(args)
        .env("FORGE_JWT_SECRET", SECRET)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::from(file))
        .spawn()
        .unwrap();
    Forge {
        _proc: Proc(child),
        stderr,
    }
}

impl Forge {
    fn stderr(&self) -> Vec<u8> {
        std::fs::read(&self.stderr).unwrap_or_default()
    }

    /// The address `forge serve` listens on, once it says.
    fn listening(&self) -> String {
        let deadline = Instant::now() + crate::patience(Duration::from_secs(60));
        loop {
            let text = String::from_utf8_lossy(&self.stderr()).into_owned();
            if let Some(rest) = text.split("listening on http://").nth(1) {
                return rest.split('/').next().unwrap().to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "forge serve did not listen: {text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn otel_env(endpoint: &str, protocol: &str, mock: &MockModelServer) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.to_owned()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.to_owned()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ("OTEL_BLRP_SCHEDULE_DELAY", "100".to_owned()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "300".to_owned()),
        ("FORGE_OPENAI_COMPATIBLE_BASE_URL", mock.base_url()),
    ]
}

fn workdir(agents: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("forge-otel-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in agents {
        std::fs::write(dir.join(name), text).unwrap();
    }
    dir
}

/// Starts a run of `agent` with the caller's `traceparent`; returns its id.
async fn start_traced(
    addr: &str,
    t: &str,
    agent: &str,
    message: &str,
    traceparent: &str,
) -> String {
    let thread = gql(addr, t, "mutation { createThread { id } }", json!({})).await;
    let thread = thread["createThread"]["id"].as_str().unwrap().to_owned();
    run_on(addr, t, &thread, agent, message, traceparent).await
}

async fn run_on(
    addr: &str,
    t: &str,
    thread: &str,
    agent: &str,
    message: &str,
    traceparent: &str,
) -> String {
    let body: Value = reqwest::Client::new()
        .post(format!("http://{addr}/graphql"))
        .bearer_auth(t)
        .header("traceparent", traceparent)
        .json(&json!({
            "query": "mutation($t: ID!, $a: String!, $m: String!) { startRun(input: {threadId: $t, agent: $a, message: $m}) { id } }",
            "variables": {"t": thread, "a": agent, "m": message},
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["data"]["startRun"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"))
        .to_owned()
}

async fn wait_ended(addr: &str, t: &str, run: &str) -> String {
    for _ in 0..600 {
        let d = gql(
            addr,
            t,
            "query($id: ID!) { run(id: $id) { status } }",
            json!({"id": run}),
        )
        .await;
        let status = d["run"]["status"].as_str().unwrap_or_default().to_owned();
        if matches!(status.as_str(), "completed" | "failed" | "cancelled") {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("run {run} did not end");
}

fn named<'a>(spans: &'a [Span], trace: &str, name: &str) -> Option<&'a Span> {
    spans.iter().find(|s| s.trace_id == trace && s.name == name)
}

/// The chain request → enqueue → claim → execute → step → model call, all in `trace`.
fn chain(spans: &[Span], trace: &str) -> Option<Vec<Span>> {
    let names = [
        "http.request",
        "run.enqueue",
        "run.claim",
        "run.execute",
        "step.execute",
        "model.call",
    ];
    let found: Vec<Span> = names
        .iter()
        .map(|n| named(spans, trace, n).cloned())
        .collect::<Option<_>>()?;
    Some(found)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_and_a_separate_worker_on_postgres_export_one_trace_over_otlp_http() {
    let db = TestDatabase::create(Flavor::Plain)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let receiver = Receiver::start();
    let mock = MockModelServer::start().await.unwrap();
    let dir = workdir(&[("helper.toml", AGENT)]);
    let env = otel_env(&receiver.http_endpoint(), "http/protobuf", &mock);
    let args = ["--store", db.url(), "--agent", "helper.toml", "--otel"];
    let server = spawn("serve", &[&args[..], &["--no-worker"]].concat(), &env, &dir);
    let _worker = spawn(
        "worker",
        &[&args[..], &["--poll-ms", "20"]].concat(),
        &env,
        &dir,
    );
    let addr = server.listening();
    let t = token("acme");
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let run = start_traced(
        &addr,
        &t,
        "helper",
        "hello",
        &format!("00-{caller_trace}-{caller_span}-01"),
    )
    .await;
    assert_eq!(wait_ended(&addr, &t, &run).await, "completed");

    let spans = receiver.wait_for(crate::patience(Duration::from_secs(30)), |r| {
        chain(&r.spans(), caller_trace)
    });
    let [request, enqueue, claim, execute, step, model] = &spans[..] else {
        unreachable!()
    };
    assert_eq!(request.parent_span_id, caller_span);
    assert_eq!(request.kind, "SPAN_KIND_SERVER");
    assert_eq!(enqueue.parent_span_id, request.span_id);
    assert_eq!(enqueue.kind, "SPAN_KIND_PRODUCER");
    assert_eq!(enqueue.attribute("run_id"), Some(run.as_str()));
    assert_eq!(
        claim.parent_span_id, enqueue.span_id,
        "the job carried the trace across"
    );
    assert_eq!(claim.kind, "SPAN_KIND_CONSUMER");
    assert_eq!(claim.attribute("queue.trace_continued"), Some("true"));
    assert_eq!(execute.parent_span_id, claim.span_id);
    assert_eq!(step.parent_span_id, execute.span_id);
    assert_eq!(model.parent_span_id, step.span_id);
    assert_eq!(model.kind, "SPAN_KIND_CLIENT");
    for s in [request, enqueue] {
        assert_eq!(s.service, "forge-serve", "{}", s.name);
    }
    for s in [claim, execute, step, model] {
        assert_eq!(s.service, "forge-worker", "{}", s.name);
    }
    let metrics = receiver.wait_for(crate::patience(Duration::from_secs(30)), |r| {
        let m = r.metrics();
        m.iter()
            .any(|(svc, name, _)| svc == "forge-worker" && name == "forge.run.duration_ms")
            .then_some(m)
    });
    for (name, unit) in [
        ("forge.run.duration_ms", "ms"),
        ("forge.queue.claim_latency_ms", "ms"),
        ("forge.model.tokens_total", "{token}"),
        ("forge.run.steps_total", "{step}"),
    ] {
        assert!(
            metrics.iter().any(|(_, n, u)| n == name && u == unit),
            "{name} [{unit}] not exported: {metrics:?}"
        );
    }
    assert!(
        receiver.exports().iter().all(|e| e.transport == "http"),
        "everything came over OTLP/HTTP"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_exports_over_grpc_when_the_protocol_says_so() {
    let receiver = Receiver::start();
    let mock = MockModelServer::start().await.unwrap();
    let dir = workdir(&[("helper.toml", AGENT)]);
    let env = otel_env(&receiver.grpc_endpoint(), "grpc", &mock);
    let server = spawn("serve", &["--agent", "helper.toml", "--otel"], &env, &dir);
    let addr = server.listening();
    let t = token("acme");
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let run = start_traced(
        &addr,
        &t,
        "helper",
        "hello",
        &format!("00-{trace}-b7ad6b7169203331-01"),
    )
    .await;
    assert_eq!(wait_ended(&addr, &t, &run).await, "completed");
    let spans = receiver.wait_for(crate::patience(Duration::from_secs(30)), |r| {
        chain(&r.spans(), trace)
    });
    assert!(spans.iter().all(|s| s.service == "forge-serve"));
    let exports = receiver.exports();
    assert!(exports.iter().any(|e| e.signal == "traces"));
    assert!(
        exports.iter().all(|e| e.transport == "grpc"),
        "everything came over gRPC"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unsupported_otlp_protocol_is_refused_at_start() {
    let out = crate::forge_with_env(
        &[
            "serve",
            "--agent",
            "examples/agents/calculator.toml",
            "--otel",
        ],
        &[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("FORGE_JWT_SECRET", "an-hs256-secret-of-thirty-two-bytes!!"),
        ],
    );
    assert!(!out.status.success());
    let err = crate::text(&out.stderr);
    assert!(
        err.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && err.contains("grpc"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_sink_carries_prompts_keys_tokens_signed_urls_or_error_text() {
    let receiver = Receiver::start();
    let mock = MockModelServer::start().await.unwrap();
    let prompt = "PROMPT-7f3a the merger closes on the 14th";
    let history = ["HISTORY-91c2 first message", "HISTORY-4d0e second message"];
    let api_key = "sk-live-KEY-0c4e9b2a71d8";
    let url_secret = "URLSECRET-5b8e2f";
    let broken = r#"
name = "broken"
version = "1"
instructions = "Answer."
model = "broken:mock-steps-0"
"#;
    let providers = format!(
        "[providers.broken]\nkind = \"openai-compatible\"\nbase_url = \"{}/{url_secret}/v1\"\napi_key = \"env:BROKEN_KEY\"\n",
        mock.base_url().trim_end_matches("/v1")
    );
    let dir = workdir(&[
        ("helper.toml", AGENT),
        ("broken.toml", broken),
        ("providers.toml", &providers),
    ]);
    let mut env = otel_env(&receiver.http_endpoint(), "http/protobuf", &mock);
    env.push(("OPENAI_COMPATIBLE_API_KEY", api_key.to_owned()));
    env.push(("BROKEN_KEY", api_key.to_owned()));
    let common = [
        "--agent",
        "helper.toml",
        "--agent",
        "broken.toml",
        "--providers",
        "providers.toml",
        "--otel",
    ];
    let server = spawn("serve", &common, &env, &dir);
    // A second deployment whose virus scanner cannot be reached: uploads are refused and logged.
    let mut scanless_env = env.clone();
    scanless_env.push((
        "FORGE_FILES_DIR",
        dir.join("other-files").display().to_string(),
    ));
    let scanless = spawn(
        "serve",
        &[
            &common[..],
            &["--clamd", "tcp:127.0.0.1:9", "--store", "sqlite://other.db"],
        ]
        .concat(),
        &scanless_env,
        &dir,
    );
    let addr = server.listening();
    let other = scanless.listening();
    let t = token("acme");
    let http = reqwest::Client::new();

    // A thread with a message list, then the prompt; a run whose model call fails with the secret
    // in its URL (and the provider's answer in its error chain).
    let thread = gql(&addr, &t, "mutation { createThread { id } }", json!({})).await;
    let thread = thread["createThread"]["id"].as_str().unwrap().to_owned();
    let tp = "00-5a1e0c3f9d2b4e6a8c7d1f0e3b2a4c6d-1a2b3c4d5e6f7081-01";
    for message in history.iter().chain([&prompt]) {
        let run = run_on(&addr, &t, &thread, "helper", message, tp).await;
        assert_eq!(wait_ended(&addr, &t, &run).await, "completed");
    }
    let failing = start_traced(&addr, &t, "broken", prompt, tp).await;
    assert_eq!(wait_ended(&addr, &t, &failing).await, "failed");

    // A bearer token that does not verify, and the one that does, both sent.
    let forged = format!("{t}x");
    let res = http
        .post(format!("http://{addr}/graphql"))
        .bearer_auth(&forged)
        .json(&json!({"query": "{ runs { id } }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);

    // A file, its signed reference fetched, and a tampered one refused.
    let up: Value = http
        .post(format!("http://{addr}/files?name=notes-{url_secret}.txt"))
        .bearer_auth(&t)
        .header("content-type", "text/plain")
        .body(format!("FILEBODY-e1d2 {prompt}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let reference = up["reference"]
        .as_str()
        .unwrap_or_else(|| panic!("{up}"))
        .to_owned();
    let got = http
        .get(format!("http://{addr}/files/{reference}"))
        .bearer_auth(&t)
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 200);
    let tampered = format!("{reference}0");
    let refused = http
        .get(format!("http://{addr}/files/{tampered}"))
        .bearer_auth(&t)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 404);
    // The unscanned upload, refused.
    let res = http
        .post(format!("http://{other}/files?name=notes.txt"))
        .bearer_auth(&t)
        .header("content-type", "text/plain")
        .body(format!("FILEBODY-e1d2 {prompt}"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 503);

    let scrape = http
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // Everything reached the receiver: the failed run's model call, and the refusal's log line.
    let failed_trace = &tp[3..35];
    receiver.wait_for(crate::patience(Duration::from_secs(30)), |r| {
        let spans = r.spans();
        let failed_call = spans.iter().any(|s| {
            s.trace_id == failed_trace
                && s.name == "model.call"
                && s.attribute("error.type").is_some()
        });
        let logged = r
            .logs()
            .iter()
            .any(|(event, _)| event == "file.scan_unavailable");
        (failed_call && logged).then_some(())
    });
    assert!(scrape.contains("forge_run_duration_ms_count"), "{scrape}");

    let mut sinks: Vec<(String, Vec<u8>)> = vec![
        ("forge serve stderr".into(), server.stderr()),
        ("the second forge serve's stderr".into(), scanless.stderr()),
        ("GET /metrics".into(), scrape.into_bytes()),
    ];
    for e in receiver.exports() {
        sinks.push((format!("OTLP {} request", e.signal), e.raw));
    }
    let secrets: Vec<(&str, String)> = vec![
        ("the prompt", "PROMPT-7f3a".into()),
        ("the prompt's words", "merger closes".into()),
        ("a message of the list", history[0][..12].into()),
        ("another message of the list", history[1][..12].into()),
        ("the API key", api_key.into()),
        ("the bearer token", t.clone()),
        (
            "the bearer token's signature",
            t.rsplit('.').next().unwrap().into(),
        ),
        ("the forged bearer token", forged.clone()),
        ("the signed reference", reference.clone()),
        (
            "the signed reference's signature",
            reference.rsplit('.').next().unwrap().into(),
        ),
        ("the tampered reference", tampered.clone()),
        (
            "the secret in the failing URL (and error chain)",
            url_secret.into(),
        ),
        ("the file's bytes", "FILEBODY-e1d2".into()),
    ];
    for (sink, bytes) in &sinks {
        for (what, secret) in &secrets {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{what} ({secret:?}) appears in {sink}:\n{}",
                String::from_utf8_lossy(bytes)
            );
        }
    }
    let otlp_bytes: usize = sinks
        .iter()
        .filter(|(s, _)| s.starts_with("OTLP"))
        .map(|(_, b)| b.len())
        .sum();
    assert!(
        otlp_bytes > 1000,
        "the OTLP sinks were checked with something in them"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
