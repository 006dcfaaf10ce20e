//! Live streaming across processes, as a user deploys it: `forge serve --no-worker` and separate
//! `forge worker` processes on PostgreSQL, the live tail carried by Redis pub/sub (`--live`), and a
//! model that streams 20 text chunks 150 ms apart from a real HTTP mock stamping each chunk with the
//! time it left. A WebSocket client must see each token within a small bound of the mock sending
//! it, and whatever happens — the worker killed with SIGKILL mid-step, the server killed and
//! restarted mid-step — end with exactly the committed history and no duplicated text.

use std::process::{Command, Stdio};
use std::time::Duration;

use forge_core::event::RunEvent;
use forge_core::stream::{StreamItem, Transcript};
use forge_store_postgres::testing::{Flavor, TestDatabase};
use forge_testkit::mock_model::{MockModelServer, chunk_stamp, now_micros};
use forge_testkit::streams::{assert_converged, chunk_text};
use serde_json::json;

use crate::client::StreamClient;
use crate::serve::{Proc, gql, serve_with_env, token};

const CHUNKS: usize = 20;

const AGENT: &str = r#"
name = "streamer"
version = "1"
instructions = "Answer at length."
model = "openai-compatible:mock-steps-0-chunks-20-cdelayus-150000-stamp-1"
"#;

pub(crate) fn redis_url() -> String {
    std::env::var("FORGE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// Fails (never skips) when Redis is not there, saying how to start it.
pub(crate) fn require_redis() {
    let url = redis_url();
    let addr = url.trim_start_matches("redis://").trim_end_matches('/');
    if std::net::TcpStream::connect_timeout(
        &addr.parse().unwrap_or_else(|e| panic!("{addr}: {e}")),
        Duration::from_secs(2),
    )
    .is_err()
    {
        panic!(
            "Redis is not reachable at {url}: run `scripts/test-services.sh` (it starts Redis, or names \
             the package to install) or point FORGE_TEST_REDIS_URL at a server"
        );
    }
}

struct Deployment {
    db: TestDatabase,
    dir: std::path::PathBuf,
    mock: MockModelServer,
    channel: String,
}

impl Deployment {
    async fn new() -> Self {
        require_redis();
        let db = TestDatabase::create(Flavor::Plain)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let dir = std::env::temp_dir().join(format!("forge-live-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("streamer.toml"), AGENT).unwrap();
        let mock = MockModelServer::start().await.unwrap();
        Self {
            db,
            dir,
            mock,
            channel: format!("forge:live:test:{}", uuid::Uuid::new_v4()),
        }
    }

    fn live_args(&self) -> Vec<String> {
        vec![
            "--store".into(),
            self.db.url().into(),
            "--agent".into(),
            "streamer.toml".into(),
            "--live".into(),
            redis_url(),
            "--live-channel".into(),
            self.channel.clone(),
        ]
    }

    fn server(&self) -> (Proc, String) {
        let mut args = self.live_args();
        args.push("--no-worker".into());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        serve_with_env(
            &args,
            &self.dir,
            &[("FORGE_OPENAI_COMPATIBLE_BASE_URL", &self.mock.base_url())],
        )
    }

    fn worker(&self) -> Proc {
        let child = Command::new(env!("CARGO_BIN_EXE_forge"))
            .arg("worker")
            .args(self.live_args())
            .args(["--lease-ttl-ms", "1500", "--poll-ms", "20"])
            .env("FORGE_OPENAI_COMPATIBLE_BASE_URL", self.mock.base_url())
            .current_dir(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Proc(child)
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn kill9(process: &mut Proc) {
    let _ = Command::new("kill")
        .args(["-KILL", &process.0.id().to_string()])
        .status();
    let _ = process.0.wait();
}

async fn start_run(addr: &str, token: &str, thread: &str) -> String {
    let run = gql(
        addr,
        token,
        "mutation($t: ID!) { startRun(input: {threadId: $t, agent: \"streamer\", message: \"go\"}) { id } }",
        json!({"t": thread}),
    )
    .await;
    run["startRun"]["id"].as_str().unwrap().to_owned()
}

/// Starts a run on a new thread and subscribes to it from its first event.
async fn run_and_follow(addr: &str, t: &str) -> (String, StreamClient) {
    let thread = gql(addr, t, "mutation { createThread { id } }", json!({})).await;
    let thread = thread["createThread"]["id"].as_str().unwrap().to_owned();
    let run = start_run(addr, t, &thread).await;
    let client = StreamClient::run(addr, t, &run, 0).await;
    (run, client)
}

async fn committed_log(addr: &str, token: &str, run: &str) -> Vec<RunEvent> {
    let d = gql(
        addr,
        token,
        "query($id: ID!) { runEvents(runId: $id, limit: 1000) { event } }",
        json!({"id": run}),
    )
    .await;
    d["runEvents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| serde_json::from_value(e["event"].clone()).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_reaches_a_subscriber_of_another_process_as_the_mock_sends_it() {
    let d = Deployment::new().await;
    let (_server, addr) = d.server();
    let mut worker = d.worker();
    let t = token("acme");
    let thread = gql(&addr, &t, "mutation { createThread { id } }", json!({})).await;
    let thread = thread["createThread"]["id"].as_str().unwrap().to_owned();
    // Subscribed before the run exists, as a chat page is.
    let mut client = StreamClient::thread(&addr, &t, &thread).await;
    let run = start_run(&addr, &t, &thread).await;
    let mut transcript = Transcript::new();
    let mut latencies_ms = Vec::new();
    let mut provisional = 0;
    let mut first_delta_at = None;
    let ended_at = loop {
        let item = client.next().await.expect("the thread stream stays open");
        let arrived = now_micros();
        transcript.apply(&item).unwrap();
        if let Some(text) = chunk_text(&item) {
            // The last chunks may race their step's commit (it follows within a millisecond).
            provisional += usize::from(matches!(item, StreamItem::Provisional { .. }));
            let sent = chunk_stamp(text).expect("stamped chunk");
            latencies_ms.push(arrived.saturating_sub(sent) as f64 / 1000.0);
            first_delta_at.get_or_insert(arrived);
        }
        let committed = transcript.committed(run.parse().unwrap());
        if committed.last().is_some_and(|e| e.kind.is_terminal()) {
            break arrived;
        }
    };
    kill9(&mut worker);
    eprintln!("chunk → subscriber latency, ms: {latencies_ms:?}");
    assert_eq!(latencies_ms.len(), CHUNKS, "every chunk streamed live");
    assert!(
        provisional >= CHUNKS - 2,
        "tokens arrive before their step commits: {provisional} of {CHUNKS} were provisional"
    );
    assert!(
        latencies_ms[0] < 500.0,
        "the first token reaches the subscriber within 500 ms of leaving the mock, not at the \
         step's commit: {latencies_ms:?}"
    );
    let first = first_delta_at.unwrap();
    assert!(
        ended_at - first > 2_000_000,
        "the first token arrived while the 3-second step was in flight"
    );
    let log = committed_log(&addr, &t, &run).await;
    assert_converged(&transcript, run.parse().unwrap(), &log, CHUNKS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_stream_is_announced_and_the_client_converges() {
    let d = Deployment::new().await;
    let (_server, addr) = d.server();
    let mut worker = d.worker();
    let t = token("acme");
    let (run, mut client) = run_and_follow(&addr, &t).await;
    let mut transcript = Transcript::new();
    let mut deltas = 0;
    let mut replacement = None;
    let mut discarded = false;
    while let Some(item) = client.next().await {
        transcript.apply(&item).unwrap();
        if chunk_text(&item).is_some() {
            deltas += 1;
        }
        if deltas == 6 && replacement.is_none() {
            // Mid-step: the tokens shown so far will never be committed.
            kill9(&mut worker);
            replacement = Some(d.worker());
        }
        discarded |= matches!(item, StreamItem::Discarded { .. });
    }
    let mut replacement = replacement.expect("the worker was killed mid-stream");
    kill9(&mut replacement);
    assert!(
        discarded,
        "the re-executed step was announced, so the client dropped what it had shown"
    );
    let log = committed_log(&addr, &t, &run).await;
    assert!(log.last().unwrap().kind.is_terminal());
    assert_converged(&transcript, run.parse().unwrap(), &log, CHUNKS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_mid_stream_resumes_the_client_without_duplicated_text() {
    let d = Deployment::new().await;
    let (server, addr) = d.server();
    let mut worker = d.worker();
    let t = token("acme");
    let (run, mut client) = run_and_follow(&addr, &t).await;
    let mut transcript = Transcript::new();
    let mut deltas = 0;
    let mut server = Some(server);
    while deltas < 6 {
        let item = client.next().await.expect("streaming");
        transcript.apply(&item).unwrap();
        if chunk_text(&item).is_some() {
            deltas += 1;
        }
    }
    // The server dies mid-step (the worker goes on); its client's socket closes.
    let mut dead = server.take().unwrap();
    kill9(&mut dead);
    while client.next().await.is_some() {}
    let (_server, addr) = d.server();
    let cursor = transcript.reconnect();
    let id: forge_core::id::RunId = run.parse().unwrap();
    let after = cursor.iter().find(|(r, _)| *r == id).map_or(0, |(_, s)| *s);
    let mut client = StreamClient::run(&addr, &t, &run, after).await;
    while let Some(item) = client.next().await {
        transcript.apply(&item).unwrap();
    }
    kill9(&mut worker);
    let log = committed_log(&addr, &t, &run).await;
    assert!(log.last().unwrap().kind.is_terminal());
    assert_converged(&transcript, run.parse().unwrap(), &log, CHUNKS);
}

/// A cancel asked of a server without a worker stops the answer a worker process is streaming:
/// the run ends `cancelled` with far fewer chunks than the model would have sent (before, all of
/// them streamed and the run completed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_through_a_server_stops_the_stream_of_another_processs_worker() {
    let d = Deployment::new().await;
    std::fs::write(
        d.dir.join("streamer.toml"),
        AGENT.replace("chunks-20-cdelayus-150000", "chunks-50-cdelayus-100000"),
    )
    .unwrap();
    let (_server, addr) = d.server();
    let mut worker = d.worker();
    let t = token("acme");
    let (run, mut client) = run_and_follow(&addr, &t).await;
    let mut transcript = Transcript::new();
    let (mut chunks, mut asked) = (0, None);
    loop {
        let item = client.next().await.expect("the run stream stays open");
        transcript.apply(&item).unwrap();
        if chunk_text(&item).is_some() {
            chunks += 1;
            if asked.is_none() {
                let d = gql(
                    &addr,
                    &t,
                    "mutation($id: ID!) { cancelRun(runId: $id) }",
                    json!({"id": run}),
                )
                .await;
                assert_eq!(d["cancelRun"], true);
                asked = Some(std::time::Instant::now());
            }
        }
        let committed = transcript.committed(run.parse().unwrap());
        if committed.last().is_some_and(|e| e.kind.is_terminal()) {
            break;
        }
    }
    if let Some(at) = asked {
        eprintln!(
            "cancel → run.cancelled across processes: {:?}",
            at.elapsed()
        );
    }
    kill9(&mut worker);
    let log = committed_log(&addr, &t, &run).await;
    assert_eq!(
        log.last().unwrap().kind.type_name(),
        "run.cancelled",
        "{log:?}"
    );
    assert!(
        chunks < 25,
        "{chunks} of 50 chunks streamed after the cancel"
    );
}
