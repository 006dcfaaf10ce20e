//! Live streaming in one process: a model on a real HTTP mock streams 20 text chunks 150 ms apart,
//! each stamped with the time it left the mock; a subscriber attached before the run sees each one
//! within a small bound of that time, as provisional events, long before the step commits; a client
//! that reconnects mid-stream converges to the committed history without duplicated text; and
//! `live: false` keeps a subscription on committed events only.

use std::sync::Arc;

use forge_core::stream::{StreamItem, Transcript};
use forge_providers::http::{HttpProvider, HttpSettings, Timeouts};
use forge_providers::{BodyOptions, Dialect};
use forge_testkit::mock_model::{MockModelServer, chunk_stamp, now_micros};
use forge_testkit::streams::{assert_converged, chunk_text};
use serde_json::{Value, json};

use crate::support::{Opts, Srv, Ws, agent, start, token};

const CHUNKS: usize = 20;

async fn streaming_server(live: bool) -> (Srv, MockModelServer) {
    let mock = MockModelServer::start().await.unwrap();
    let provider = HttpProvider::new(HttpSettings {
        name: "mock".into(),
        dialect: Dialect::OpenAiChat,
        base_url: mock.base_url(),
        api_key: None,
        headers: vec![],
        body: BodyOptions::default(),
        timeouts: Timeouts::default(),
    })
    .unwrap();
    let mut streamer = agent("streamer", &[]);
    streamer.model = "mock:mock-steps-0-chunks-20-cdelayus-150000-stamp-1".into();
    let srv = start(Opts {
        models: vec![Arc::new(provider)],
        agents: vec![streamer],
        wake_on_commit: live,
        poll: std::time::Duration::from_millis(if live { 30_000 } else { 50 }),
        ..Opts::default()
    })
    .await;
    (srv, mock)
}

fn item(v: &Value) -> StreamItem {
    serde_json::from_value(v["item"].clone()).unwrap_or_else(|e| panic!("{e}: {v}"))
}

async fn committed_log(srv: &Srv, t: &str, run: &str) -> Vec<forge_core::event::RunEvent> {
    let d = srv
        .gql(
            t,
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

const THREAD_EVENTS: &str = "subscription($id: ID!) { threadEvents(threadId: $id) { kind item } }";
const RUN_EVENTS: &str = "subscription($id: ID!, $after: Int!, $live: Boolean!) { runEvents(runId: $id, afterSeq: $after, live: $live) { kind item } }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_reach_a_subscriber_as_the_model_streams_them_not_at_the_commit() {
    let (srv, _mock) = streaming_server(true).await;
    let t = token("acme", "alice", &[]);
    let thread = srv.thread(&t).await;
    let (mut ws, _) = Ws::connect(&srv, Some(&t)).await;
    ws.subscribe("s", THREAD_EVENTS, json!({"id": thread}))
        .await;
    let run = srv.start_run(&t, &thread, "streamer", "go").await;
    let id = run.parse().unwrap();
    let mut transcript = Transcript::new();
    let mut latencies_ms = Vec::new();
    let mut provisional = 0;
    let mut first_at = None;
    let done_at = loop {
        let (items, _) = ws.collect("s", "threadEvents", Some(1)).await;
        let arrived = now_micros();
        let item = item(&items[0]);
        transcript.apply(&item).unwrap();
        if let Some(text) = chunk_text(&item) {
            // The last chunks may race their step's commit (it follows within a millisecond).
            provisional += usize::from(matches!(item, StreamItem::Provisional { .. }));
            let sent = chunk_stamp(text).expect("a stamped chunk");
            latencies_ms.push(arrived.saturating_sub(sent) as f64 / 1000.0);
            first_at.get_or_insert(arrived);
        }
        if transcript
            .committed(id)
            .last()
            .is_some_and(|e| e.kind.is_terminal())
        {
            break arrived;
        }
    };
    assert_eq!(latencies_ms.len(), CHUNKS, "{latencies_ms:?}");
    assert!(
        provisional >= CHUNKS - 2,
        "tokens arrive before their step commits: {provisional} of {CHUNKS} were provisional"
    );
    assert!(
        latencies_ms[0] < 500.0,
        "the first token arrives within 500 ms of leaving the mock: {latencies_ms:?}"
    );
    assert!(
        done_at - first_at.unwrap() > 2_000_000,
        "the first token arrived while the 3-second step was in flight"
    );
    let log = committed_log(&srv, &t, &run).await;
    assert_converged(&transcript, run.parse().unwrap(), &log, CHUNKS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reconnecting_mid_stream_converges_without_duplicated_text() {
    let (srv, _mock) = streaming_server(true).await;
    let t = token("acme", "alice", &[]);
    let thread = srv.thread(&t).await;
    let run = srv.start_run(&t, &thread, "streamer", "go").await;
    let id = run.parse().unwrap();
    let mut transcript = Transcript::new();
    let mut provisional_seen = 0;
    // Two connections dropped mid-step, each after a few streamed tokens, then one to the end.
    for _ in 0..2 {
        let (mut ws, _) = Ws::connect(&srv, Some(&t)).await;
        transcript.reconnect();
        let after = transcript.committed_seq(id);
        ws.subscribe(
            "s",
            RUN_EVENTS,
            json!({"id": run, "after": after, "live": true}),
        )
        .await;
        let mut tokens = 0;
        while tokens < 4 {
            let (items, completed) = ws.collect("s", "runEvents", Some(1)).await;
            assert!(!completed, "the step is still streaming");
            let item = item(&items[0]);
            transcript.apply(&item).unwrap();
            if chunk_text(&item).is_some() {
                tokens += 1;
                provisional_seen += usize::from(matches!(item, StreamItem::Provisional { .. }));
            }
        }
        drop(ws);
    }
    assert!(provisional_seen >= 8, "the dropped connections were live");
    let (mut ws, _) = Ws::connect(&srv, Some(&t)).await;
    transcript.reconnect();
    let after = transcript.committed_seq(id);
    ws.subscribe(
        "s",
        RUN_EVENTS,
        json!({"id": run, "after": after, "live": true}),
    )
    .await;
    let (rest, completed) = ws.collect("s", "runEvents", None).await;
    assert!(completed);
    for v in &rest {
        transcript.apply(&item(v)).unwrap();
    }
    let log = committed_log(&srv, &t, &run).await;
    assert_converged(&transcript, run.parse().unwrap(), &log, CHUNKS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_false_delivers_committed_events_only() {
    let (srv, _mock) = streaming_server(true).await;
    let t = token("acme", "alice", &[]);
    let thread = srv.thread(&t).await;
    let run = srv.start_run(&t, &thread, "streamer", "go").await;
    let (mut ws, _) = Ws::connect(&srv, Some(&t)).await;
    ws.subscribe(
        "s",
        RUN_EVENTS,
        json!({"id": run, "after": 0, "live": false}),
    )
    .await;
    let (items, completed) = ws.collect("s", "runEvents", None).await;
    assert!(completed);
    assert!(items.iter().all(|v| v["kind"] == "COMMITTED"), "{items:?}");
    let mut transcript = Transcript::new();
    for v in &items {
        transcript.apply(&item(v)).unwrap();
    }
    let log = committed_log(&srv, &t, &run).await;
    assert_converged(&transcript, run.parse().unwrap(), &log, CHUNKS);
}
