//! The adapter on the real SDK pipeline with in-memory exporters: span parentage from a span or
//! a `TraceContext`, recorded waits, failure status; the span vocabulary enforced on any
//! `tracing` span; every instrument with its unit and
//! description; the metric attribute allowlist and dropped negative values; the Prometheus text;
//! log records as sanitized as the JSON lines.

use forge_core::telemetry::{
    Instrument, InstrumentKind, LogEvent, Parent, SpanName, TARGET, TraceContext, Value,
};
use forge_core::time::Timestamp;
use forge_otel::Otel;
use opentelemetry::trace::{SpanKind, Status};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};

fn metrics(rm: &[ResourceMetrics]) -> Vec<&opentelemetry_sdk::metrics::data::Metric> {
    rm.last()
        .expect("an export")
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .collect()
}

#[test]
fn spans_take_their_parent_from_the_span_or_context_given_and_waits_their_two_timestamps() {
    let (otel, memory) = Otel::in_memory("test", None);
    let t = otel.telemetry();
    let parent = TraceContext::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        .expect("a traceparent");
    let claim = t.span(SpanName::RunClaim, Parent::Remote(Some(&parent)));
    claim.set("queue.trace_continued", Value::Bool(true));
    claim.set(
        "payload",
        Value::Json(serde_json::json!({"prompt": "secret"})),
    );
    let claim_cx = claim.context().expect("a real span has a context");
    assert_eq!(claim_cx.trace_id, parent.trace_id);
    let exec = t.span(SpanName::RunExecute, Parent::Span(&claim));
    exec.fail("retryable");
    let start = Timestamp::from_unix_millis(1_700_000_000_000).expect("a time");
    let end = Timestamp::from_unix_millis(1_700_000_090_000).expect("a time");
    t.record_wait(SpanName::ApprovalWait, &claim, start, end, "r1", "approved");
    exec.end();
    claim.end();
    let root = t.span(SpanName::HttpRequest, Parent::Remote(None));
    let root_cx = root.context().expect("a context");
    root.end();

    let spans = memory.spans.get_finished_spans().expect("spans");
    let by = |name: &str| {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no {name} span in {spans:?}"))
    };
    let claim = by("run.claim");
    assert_eq!(claim.span_kind, SpanKind::Consumer);
    assert_eq!(claim.parent_span_id.to_bytes(), parent.span_id);
    assert!(
        claim
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == "queue.trace_continued")
    );
    assert!(
        !claim
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == "payload"),
        "structured values never become attributes"
    );
    let exec = by("run.execute");
    assert_eq!(exec.parent_span_id.to_bytes(), claim_cx.span_id);
    assert_eq!(exec.span_context.trace_id().to_bytes(), parent.trace_id);
    assert!(matches!(&exec.status, Status::Error { description } if description == "retryable"));
    assert!(
        exec.attributes
            .iter()
            .any(|kv| kv.key.as_str() == "error.type" && kv.value.as_str() == "retryable")
    );
    let wait = by("approval.wait");
    let took = wait
        .end_time
        .duration_since(wait.start_time)
        .expect("ends after it starts");
    assert_eq!(took.as_secs(), 90);
    assert_eq!(wait.parent_span_id.to_bytes(), claim_cx.span_id);
    assert_eq!(wait.span_context.trace_id().to_bytes(), parent.trace_id);
    assert!(
        wait.attributes
            .iter()
            .any(|kv| kv.key.as_str() == "outcome" && kv.value.as_str() == "approved")
    );
    let root = by("http.request");
    assert_eq!(root.span_kind, SpanKind::Server);
    assert_eq!(root.parent_span_id.to_bytes(), [0; 8]);
    assert_ne!(root_cx.trace_id, parent.trace_id, "no parent: a new trace");
}

/// Whoever makes a span — another crate with `tracing`, a careless call — the vocabulary
/// decides what leaves: an unknown name or another target is not exported at all, and a known
/// span exports without the attributes it may not carry.
#[test]
fn a_span_exports_only_the_vocabulary_whoever_made_it() {
    let (otel, memory) = Otel::in_memory("test", None);
    let t = otel.telemetry();
    t.in_scope(|| {
        let model = tracing::info_span!(
            target: TARGET,
            "model.call",
            model = "m1",
            prompt = "tell me the secret",
            http.url = "https://x/?key=sk-secret"
        );
        let long = "é".repeat(500);
        let tool =
            tracing::info_span!(target: TARGET, parent: &model, "tool.call", tool = long.as_str());
        drop(tool);
        drop(model);
        drop(tracing::info_span!(target: TARGET, "prompt.render", text = "secret"));
        drop(tracing::info_span!(target: "sqlx::query", "model.call", db.statement = "secret"));
    });
    let spans = memory.spans.get_finished_spans().expect("spans");
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(names, ["tool.call", "model.call"], "{spans:?}");
    let model = &spans[1];
    let keys: Vec<&str> = model.attributes.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["model"], "{model:?}");
    assert_eq!(model.dropped_attributes_count, 2);
    let tool = spans[0]
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == "tool")
        .map(|kv| kv.value.as_str().into_owned())
        .expect("tool");
    assert!(tool.ends_with(forge_core::telemetry::TRUNCATED), "{tool}");
    assert_eq!(spans[0].parent_span_id, model.span_context.span_id());
}

#[test]
fn every_instrument_is_exported_with_its_unit_and_description() {
    let (otel, memory) = Otel::in_memory("test", None);
    let t = otel.telemetry();
    for i in Instrument::ALL {
        t.meter.record(i, 3.0, &[("outcome", "ok")]);
    }
    otel.flush().expect("flush");
    let exported = memory.metrics.get_finished_metrics().expect("metrics");
    let metrics = metrics(&exported);
    for i in Instrument::ALL {
        let m = metrics
            .iter()
            .find(|m| m.name() == i.name())
            .unwrap_or_else(|| panic!("{} was not exported", i.name()));
        assert_eq!(m.unit(), i.unit(), "{}", i.name());
        assert_eq!(m.description(), i.description(), "{}", i.name());
        let kind = match m.data() {
            AggregatedMetrics::F64(MetricData::Sum(_)) => InstrumentKind::Counter,
            AggregatedMetrics::F64(MetricData::Histogram(_)) => InstrumentKind::Histogram,
            AggregatedMetrics::F64(MetricData::Gauge(_)) => InstrumentKind::Gauge,
            other => panic!("{}: unexpected data {other:?}", i.name()),
        };
        assert_eq!(kind, i.kind(), "{}", i.name());
    }
}

#[test]
fn metrics_keep_only_allowlisted_attributes_and_drop_negative_values() {
    let (otel, memory) = Otel::in_memory("test", None);
    let t = otel.telemetry();
    let attrs = [
        ("outcome", "completed"),
        ("run_id", "0190d5a0-run"),
        ("thread_id", "0190d5a0-thread"),
        ("tenant", "acme"),
        ("user", "alice"),
    ];
    t.meter.record(Instrument::ClaimLatency, 12.0, &attrs);
    t.meter.record(Instrument::ClaimLatency, -40.0, &attrs);
    t.meter.record(Instrument::ClaimLatency, f64::NAN, &attrs);
    otel.flush().expect("flush");
    let exported = memory.metrics.get_finished_metrics().expect("metrics");
    let metrics = metrics(&exported);
    let latency = metrics
        .iter()
        .find(|m| m.name() == Instrument::ClaimLatency.name())
        .expect("claim latency");
    let AggregatedMetrics::F64(MetricData::Histogram(h)) = latency.data() else {
        panic!("a histogram");
    };
    let points: Vec<_> = h.data_points().collect();
    assert_eq!(points.len(), 1, "one series: ids would make one per run");
    let p = points[0];
    assert_eq!(
        p.count(),
        1,
        "the negative and NaN values were dropped, not clamped"
    );
    assert_eq!(p.sum(), 12.0);
    assert_eq!(
        p.min(),
        Some(12.0),
        "a clamped value would have made the minimum 0"
    );
    let keys: Vec<&str> = p.attributes().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["outcome"]);
}

#[test]
fn the_scrape_is_prometheus_text_of_the_same_pipeline() {
    let (otel, _memory) = Otel::in_memory("test", None);
    let t = otel.telemetry();
    t.meter
        .record(Instrument::RunDuration, 30.0, &[("outcome", "completed")]);
    t.meter
        .record(Instrument::RunDuration, 700.0, &[("outcome", "completed")]);
    t.meter.record(
        Instrument::ModelTokens,
        5.0,
        &[("model", "m\"1"), ("token_type", "input")],
    );
    t.meter.record(Instrument::QueueDepth, 4.0, &[]);
    t.meter.record(Instrument::QueueDepth, 2.0, &[]);
    let text = otel.scrape().render();
    let has = |line: &str| {
        assert!(
            text.lines().any(|l| l == line),
            "no line {line:?} in\n{text}"
        );
    };
    has("# TYPE forge_run_duration_ms histogram");
    has(&format!(
        "# HELP forge_run_duration_ms {} Unit: ms.",
        Instrument::RunDuration.description()
    ));
    has(r#"forge_run_duration_ms_bucket{outcome="completed",le="25"} 0"#);
    has(r#"forge_run_duration_ms_bucket{outcome="completed",le="50"} 1"#);
    has(r#"forge_run_duration_ms_bucket{outcome="completed",le="1000"} 2"#);
    has(r#"forge_run_duration_ms_bucket{outcome="completed",le="+Inf"} 2"#);
    has(r#"forge_run_duration_ms_sum{outcome="completed"} 730"#);
    has(r#"forge_run_duration_ms_count{outcome="completed"} 2"#);
    has("# TYPE forge_model_tokens_total counter");
    has(r#"forge_model_tokens_total{model="m\"1",token_type="input"} 5"#);
    has("# TYPE forge_queue_depth_jobs gauge");
    has("forge_queue_depth_jobs 2");
}

#[test]
fn log_records_carry_the_sanitized_fields_and_name_what_was_dropped() {
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let (otel, memory) = Otel::in_memory("test", Some(lines.clone()));
    let t = otel.telemetry();
    let json = serde_json::json!({"nested": "secret"});
    t.in_scope(|| {
        tracing::info!(
            target: TARGET,
            event = LogEvent::WorkerStoreFailed.as_str(),
            worker = "w1",
            code = "x".repeat(500),
            prompt = "tell me the secret",
            run_id = ?json,
        );
        // Not Forge's: a dependency's line, and a line outside the vocabulary.
        tracing::info!(target: "sqlx::query", event = "worker.store_failed", db = "secret");
        tracing::info!(target: TARGET, event = "prompt.logged", text = "secret");
    });
    forge_core::log!(t, WorkerTakenOver, worker = "w2", attempt = 3u32);
    let logs = memory.logs.get_emitted_logs().expect("logs");
    assert_eq!(logs.len(), 3, "{logs:?}");
    let first = &logs[0].record;
    assert_eq!(first.event_name(), Some("worker.store_failed"));
    let keys: Vec<&str> = first.attributes_iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["worker", "code"]);
    let code = first
        .attributes_iter()
        .find(|(k, _)| k.as_str() == "code")
        .map(|(_, v)| format!("{v:?}"))
        .expect("code");
    assert!(code.contains(forge_core::telemetry::TRUNCATED), "{code}");
    let second = &logs[1].record;
    assert_eq!(second.event_name(), Some("telemetry.fields_dropped"));
    let dropped = format!("{:?}", second.attributes_iter().collect::<Vec<_>>());
    assert!(dropped.contains("prompt,run_id"), "{dropped}");
    assert!(!dropped.contains("secret"), "{dropped}");
    assert_eq!(logs[2].record.event_name(), Some("worker.taken_over"));

    // The JSON lines carry the same lines, each saying when it was logged.
    let out = String::from_utf8(lines.lock().expect("lines").clone()).expect("utf-8");
    assert!(!out.contains("secret"), "{out}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0]["event"], "worker.store_failed");
    assert_eq!(lines[0]["worker"], "w1");
    assert_eq!(lines[1]["event"], "telemetry.fields_dropped");
    assert_eq!(lines[2]["attempt"], 3);
    let ts = lines[0]["ts"].as_str().unwrap_or_default();
    assert!(
        chrono::DateTime::parse_from_rfc3339(ts).is_ok() && ts.ends_with('Z'),
        "{out}"
    );
}

/// A dependency's `tracing` output, which a request's code runs beside once the server runs it
/// within Forge's dispatch, is disabled at its callsite: its fields are not even evaluated.
#[test]
fn a_dependencys_events_are_never_built() {
    let (otel, memory) = Otel::in_memory("test", None);
    let t = otel.telemetry();
    let built = std::sync::atomic::AtomicUsize::new(0);
    let count = || built.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    t.in_scope(|| {
        tracing::trace!(target: "h2::codec", frame = count());
        tracing::info!(target: "sqlx::query", summary = count());
        drop(tracing::info_span!(target: "hyper::client", "connect", n = count()));
    });
    assert_eq!(built.load(std::sync::atomic::Ordering::SeqCst), 0);
    forge_core::log!(
        t,
        WorkerTakenOver,
        attempt = u32::try_from(count()).unwrap_or(0)
    );
    assert_eq!(built.load(std::sync::atomic::Ordering::SeqCst), 1);
    let logs = memory.logs.get_emitted_logs().expect("logs");
    assert_eq!(logs.len(), 1, "{logs:?}");
}
