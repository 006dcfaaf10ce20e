//! The adapter on the real SDK pipeline with in-memory exporters: span parentage from a
//! `TraceContext`, recorded waits, failure status; every instrument with its unit and
//! description; the metric attribute allowlist and dropped negative values; the Prometheus text;
//! log records as sanitized as the JSON lines.

use forge_core::telemetry::{Instrument, InstrumentKind, LogEvent, SpanName, TraceContext, Value};
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
fn spans_take_their_parent_from_the_context_given_and_waits_their_two_timestamps() {
    let (otel, memory) = Otel::in_memory("test", None);
    let t = otel.telemetry();
    let parent = TraceContext::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        .expect("a traceparent");
    let claim = t.tracer.start(
        SpanName::RunClaim,
        Some(&parent),
        vec![
            ("queue.trace_continued", Value::Bool(true)),
            (
                "payload",
                Value::Json(serde_json::json!({"prompt": "secret"})),
            ),
        ],
    );
    let claim_cx = claim.context().expect("a real span has a context");
    assert_eq!(claim_cx.trace_id, parent.trace_id);
    let exec = t
        .tracer
        .start(SpanName::RunExecute, Some(&claim_cx), vec![]);
    exec.fail("retryable");
    exec.end();
    claim.end();
    let start = Timestamp::from_unix_millis(1_700_000_000_000).expect("a time");
    let end = Timestamp::from_unix_millis(1_700_000_090_000).expect("a time");
    t.tracer
        .record(SpanName::ApprovalWait, Some(&claim_cx), start, end, vec![]);
    let root = t.tracer.start(SpanName::HttpRequest, None, vec![]);
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
    let wait = by("approval.wait");
    let took = wait
        .end_time
        .duration_since(wait.start_time)
        .expect("ends after it starts");
    assert_eq!(took.as_secs(), 90);
    assert_eq!(wait.parent_span_id.to_bytes(), claim_cx.span_id);
    let root = by("http.request");
    assert_eq!(root.span_kind, SpanKind::Server);
    assert_ne!(root_cx.trace_id, parent.trace_id, "no parent: a new trace");
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
    let (otel, memory) = Otel::in_memory("test", None);
    let t = otel.telemetry();
    t.logger.log(
        LogEvent::WorkerStoreFailed,
        vec![
            ("worker", Value::from("w1")),
            ("code", Value::from("x".repeat(500))),
            ("prompt", Value::from("tell me the secret")),
            (
                "run_id",
                Value::Json(serde_json::json!({"nested": "secret"})),
            ),
        ],
    );
    let logs = memory.logs.get_emitted_logs().expect("logs");
    assert_eq!(logs.len(), 2, "{logs:?}");
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
}
