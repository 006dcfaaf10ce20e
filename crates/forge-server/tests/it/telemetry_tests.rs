//! One trace from an HTTP request through the queue to the model call, on the real
//! OpenTelemetry SDK pipeline with in-memory exporters: two concurrent requests each get their
//! own; a job without a usable traceparent starts its own trace and says so; the instruments
//! arrive with their names and units; `GET /metrics` serves the same numbers.

use std::sync::Arc;
use std::time::Duration;

use forge_core::agent::AgentRef;
use forge_core::part::Part;
use forge_core::ports::store::{NewRun, NewThread, Store};
use forge_core::scope::Scope;
use forge_core::telemetry::{Instrument, SpanKind, TraceContext};
use forge_otel::{Otel, RecordedSpan};
use serde_json::json;

use crate::support::{Opts, Srv, start, token};

async fn start_run_traced(srv: &Srv, token: &str, traceparent: &str) -> String {
    let thread = srv.thread(token).await;
    let res = srv
        .http
        .post(srv.url("/graphql"))
        .bearer_auth(token)
        .header("traceparent", traceparent)
        .json(&json!({
            "query": "mutation($t: ID!) { startRun(input: {threadId: $t, agent: \"greeter\", message: \"hi\"}) { id } }",
            "variables": {"t": thread},
        }))
        .send()
        .await
        .unwrap();
    let body: serde_json::Value = res.json().await.unwrap();
    body["data"]["startRun"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"))
        .to_owned()
}

/// Waits until `memory` holds an ended span named `name` with `run_id` = `run`.
async fn span_of(memory: &forge_otel::Memory, name: &str, run: &str) -> RecordedSpan {
    for _ in 0..200 {
        if let Some(s) = memory
            .spans()
            .into_iter()
            .find(|s| s.name == name && s.attribute("run_id") == Some(run))
        {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no {name} span for run {run}: {:#?}", memory.spans());
}

fn parent_of<'a>(spans: &'a [RecordedSpan], child: &RecordedSpan) -> &'a RecordedSpan {
    spans
        .iter()
        .find(|s| s.span_id == child.parent_span_id)
        .unwrap_or_else(|| panic!("no parent for {child:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_is_one_trace_through_enqueue_claim_and_execution() {
    let (otel, memory) = Otel::in_memory("forge-test", None);
    let scrape = otel.scrape();
    let srv = start(Opts {
        telemetry: Some(otel.telemetry()),
        metrics: Some(Arc::new(move || scrape.render())),
        ..Opts::default()
    })
    .await;
    let alice = token("acme", "alice", &["user"]);
    let callers = [
        "00-11111111111111111111111111111111-aaaaaaaaaaaaaaaa-01",
        "00-22222222222222222222222222222222-bbbbbbbbbbbbbbbb-01",
    ];
    let (a, b) = tokio::join!(
        start_run_traced(&srv, &alice, callers[0]),
        start_run_traced(&srv, &alice, callers[1]),
    );
    for (run, caller) in [(&a, callers[0]), (&b, callers[1])] {
        srv.wait_status(&alice, run, "completed").await;
        let caller = TraceContext::parse(caller).unwrap();
        let execute = span_of(&memory, "run.execute", run).await;
        let spans = memory.spans();
        let claim = parent_of(&spans, &execute);
        assert_eq!(
            (claim.name.as_str(), claim.kind),
            ("run.claim", SpanKind::Consumer)
        );
        assert_eq!(claim.attribute("queue.trace_continued"), Some("true"));
        let enqueue = parent_of(&spans, claim);
        assert_eq!(
            (enqueue.name.as_str(), enqueue.kind),
            ("run.enqueue", SpanKind::Producer)
        );
        assert_eq!(enqueue.attribute("run_id"), Some(run.as_str()));
        let request = parent_of(&spans, enqueue);
        assert_eq!(
            (request.name.as_str(), request.kind),
            ("http.request", SpanKind::Server)
        );
        assert_eq!(
            request.parent_span_id, caller.span_id,
            "the caller's span is the parent"
        );
        for s in [&execute, claim, enqueue, request] {
            assert_eq!(
                s.trace_id, caller.trace_id,
                "{} left its request's trace",
                s.name
            );
        }
        let step = spans
            .iter()
            .find(|s| s.name == "step.execute" && s.parent_span_id == execute.span_id)
            .unwrap_or_else(|| panic!("no step under run.execute: {spans:#?}"));
        let model = spans
            .iter()
            .find(|s| s.name == "model.call" && s.parent_span_id == step.span_id)
            .unwrap_or_else(|| panic!("no model call under the step: {spans:#?}"));
        assert_eq!(model.kind, SpanKind::Client);
        assert_eq!(model.trace_id, caller.trace_id);
        // The run's model calls name that trace (for the console's inspector) and the worker
        // whose execution made them.
        let calls = srv
            .gql(
                &alice,
                "query($id: ID!) { run(id: $id) { modelCalls } }",
                serde_json::json!({"id": run}),
            )
            .await;
        let calls = calls["run"]["modelCalls"].as_array().unwrap().clone();
        assert!(!calls.is_empty());
        let hex: String = caller.trace_id.iter().map(|b| format!("{b:02x}")).collect();
        for call in &calls {
            assert_eq!(call["trace_id"], hex.as_str(), "{call}");
            assert!(
                call["holder"].as_str().is_some_and(|h| !h.is_empty()),
                "{call}"
            );
        }
    }

    otel.flush().unwrap();
    let metrics = memory.metrics();
    for i in [
        Instrument::ModelTokens,
        Instrument::RunSteps,
        Instrument::ModelCallDuration,
        Instrument::TimeToFirstToken,
        Instrument::ClaimLatency,
        Instrument::RunDuration,
        Instrument::StepCommitDuration,
    ] {
        let m = metrics
            .iter()
            .find(|m| m.name == i.name())
            .unwrap_or_else(|| panic!("{} was not recorded: {metrics:#?}", i.name()));
        assert_eq!(m.unit, i.unit());
        for (attrs, _) in &m.points {
            for (k, _) in attrs {
                assert!(
                    forge_core::telemetry::METRIC_ATTRIBUTES.contains(&k.as_str()),
                    "{k}"
                );
            }
        }
    }
    let runs = metrics
        .iter()
        .find(|m| m.name == Instrument::RunDuration.name())
        .unwrap();
    let completed: f64 = runs
        .points
        .iter()
        .filter(|(attrs, _)| {
            attrs
                .iter()
                .any(|(k, v)| k == "outcome" && v == "completed")
        })
        .map(|(_, n)| n)
        .sum();
    assert_eq!(completed, 2.0, "{runs:#?}");

    let text = srv.http.get(srv.url("/metrics")).send().await.unwrap();
    assert_eq!(text.status(), 200);
    let text = text.text().await.unwrap();
    assert!(
        text.lines()
            .any(|l| l == r#"forge_run_duration_ms_count{outcome="completed"} 2"#),
        "{text}"
    );
    srv.stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_without_a_usable_traceparent_starts_its_own_trace_and_says_so() {
    let (otel, memory) = Otel::in_memory("forge-test", None);
    let store: Arc<dyn Store> = Arc::new(forge_store_memory::MemoryStore::default());
    let srv = start(Opts {
        store: store.clone(),
        telemetry: Some(otel.telemetry()),
        ..Opts::default()
    })
    .await;
    let alice = token("acme", "alice", &["user"]);
    let scope = Scope::parse("acme", "alice", &["user"]).unwrap();
    let agent = AgentRef {
        name: "greeter".into(),
        version: "1".into(),
    };
    // Enqueued as a job from before traces (none), a damaged one, and the all-zero ids.
    for traceparent in [
        None,
        Some("00-not-a-trace-01"),
        Some("00-00000000000000000000000000000000-0000000000000000-01"),
    ] {
        let thread = store
            .create_thread(&scope, NewThread::default())
            .await
            .unwrap();
        let mut new = NewRun::new(thread.id, agent.clone(), vec![Part::text("hi")]);
        new.traceparent = traceparent.map(str::to_owned);
        let run = store.create_run(&scope, new).await.unwrap().id.to_string();
        srv.wait_status(&alice, &run, "completed").await;
        let claim = span_of(&memory, "run.claim", &run).await;
        assert_eq!(
            claim.attribute("queue.trace_continued"),
            Some("false"),
            "{traceparent:?}"
        );
        assert_eq!(claim.parent_span_id, [0; 8], "a root: {traceparent:?}");
        assert_ne!(claim.trace_id, [0; 16]);
        let execute = span_of(&memory, "run.execute", &run).await;
        assert_eq!(
            execute.trace_id, claim.trace_id,
            "the run's own trace continues"
        );
    }
    srv.stop.cancel();
}
