//! Golden files for every run-event and part variant, and the committed JSON Schema.
//!
//! `UPDATE_SCHEMA=1 cargo test -p forge-core` rewrites the golden files; without it a renamed or
//! retyped field fails here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use forge_core::agent::AgentRef;
use forge_core::event::{RunEvent, RunEventKind, run_event_schema};
use forge_core::id::{InteractionId, MessageId, RunId, ThreadId, ToolCallId};
use forge_core::message::Role;
use forge_core::part::*;
use forge_core::run::{FailureCode, RunFailure};
use forge_core::time::Timestamp;
use forge_core::usage::Usage;
use serde_json::json;
use uuid::Uuid;

fn uuid(n: u128) -> Uuid {
    Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 | n)
}

fn one_of_each_part() -> Vec<Part> {
    vec![
        Part::Text(TextPart {
            text: "The total is 84.".into(),
        }),
        Part::ToolCall(ToolCallPart {
            tool_call_id: ToolCallId::from("call_1"),
            tool_name: "calculate".into(),
            input: json!({"op": "mul", "a": 12, "b": 7}),
        }),
        Part::ToolResult(ToolResultPart {
            tool_call_id: ToolCallId::from("call_1"),
            tool_name: "calculate".into(),
            output: json!({"result": 84}),
            is_error: false,
            trust: Trust::Untrusted,
            tool_version: None,
        }),
        Part::Approval(ApprovalPart {
            interaction_id: InteractionId(uuid(3)),
            tool_call_id: ToolCallId::from("call_2"),
            tool_name: "send_email".into(),
            input_hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
            status: ApprovalStatus::Pending,
            preview: None,
        }),
        Part::Question(QuestionPart {
            interaction_id: InteractionId(uuid(4)),
            prompt: "Which account?".into(),
            answer_schema: json!({"type": "string", "enum": ["checking", "savings"]}),
            answer: Some(json!("savings")),
        }),
        Part::Citation(CitationPart {
            source_id: "handbook".into(),
            source_version: "3".into(),
            span: Span {
                start: 120,
                end: 164,
            },
            excerpt: "Refunds are issued within 14 days.".into(),
            line: Some(12),
            page: None,
            heading: Some("Refunds".into()),
        }),
        Part::File(FilePart {
            file_id: "file_1".into(),
            name: "invoice.pdf".into(),
            media_type: "application/pdf".into(),
            size_bytes: 48_213,
            trust: Trust::Untrusted,
        }),
        Part::StructuredOutput(StructuredOutputPart {
            value: json!({"answer": 84}),
        }),
        Part::Error(ErrorPart {
            code: "provider_error".into(),
            message: "the model provider failed".into(),
        }),
    ]
}

fn one_of_each_event() -> Vec<RunEventKind> {
    let thread_id = ThreadId(uuid(1));
    let message_id = MessageId(uuid(5));
    let usage = Usage {
        input_tokens: 120,
        output_tokens: 12,
        cache_read_tokens: 64,
        cache_write_tokens: 0,
        reasoning_tokens: 0,
        server_tool_requests: 0,
    };
    vec![
        RunEventKind::RunQueued {
            thread_id,
            behind: RunId(uuid(9)),
        },
        RunEventKind::RunStarted {
            thread_id,
            agent: AgentRef {
                name: "calculator".into(),
                version: "1".into(),
            },
            model: "scripted:calculator.script.toml".into(),
        },
        RunEventKind::StepStarted { step: 1 },
        RunEventKind::PartAdded {
            message_id,
            role: Role::Assistant,
            index: 0,
            part: Part::text("The "),
        },
        RunEventKind::PartUpdated {
            message_id,
            index: 0,
            update: PartUpdate::TextDelta {
                text: "total".into(),
            },
        },
        RunEventKind::UsageUpdated {
            step: 1,
            call: usage,
            total: usage,
        },
        RunEventKind::ApprovalRequested {
            interaction_id: InteractionId(uuid(3)),
            tool_call_id: ToolCallId::from("call_2"),
            tool_name: "send_email".into(),
            input_hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
            preview: Some(
                forge_core::interaction::ApprovalPreview::new("Email the Q3 report to Zoë")
                    .fact("To", "zoe@example.com")
                    .change("", "Hello Zoë, the report is attached."),
            ),
        },
        RunEventKind::QuestionRequested {
            interaction_id: InteractionId(uuid(4)),
            prompt: "Which account?".into(),
            answer_schema: json!({"type": "string"}),
        },
        RunEventKind::RunCheckpointed {
            step: 1,
            version: 1,
        },
        RunEventKind::RunCompleted {
            text: "The total is 84.".into(),
            usage,
        },
        RunEventKind::RunFailed {
            failure: RunFailure {
                code: FailureCode::StepLimitExceeded,
                message: "the run reached its limit of 8 steps".into(),
            },
        },
        RunEventKind::RunCancelled {
            reason: Some("user pressed stop".into()),
        },
        RunEventKind::StateUpdated {
            version: 3,
            keys: vec!["plan".into(), "draft".into()],
        },
        RunEventKind::ThreadCompacted {
            version: 2,
            through: MessageId(uuid(7)),
            covered: 40,
            model: "openai:gpt-4o-mini".into(),
        },
    ]
}

fn update_updates() -> Vec<PartUpdate> {
    vec![
        PartUpdate::TextDelta {
            text: " more".into(),
        },
        PartUpdate::InputDelta {
            json: "{\"op\":".into(),
        },
        PartUpdate::Replaced {
            part: Part::ToolCall(ToolCallPart {
                tool_call_id: ToolCallId::from("call_1"),
                tool_name: "calculate".into(),
                input: json!({"op": "add", "a": 1, "b": 2}),
            }),
        },
    ]
}

fn golden_dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(kind)
}

/// Compares `value` with the golden file, or rewrites it under `UPDATE_SCHEMA=1`.
fn check_golden(path: &Path, value: &serde_json::Value) {
    let text = serde_json::to_string_pretty(value).unwrap() + "\n";
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, &text).unwrap();
        return;
    }
    let golden = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "missing golden file {} ({e}); run with UPDATE_SCHEMA=1",
            path.display()
        )
    });
    if golden != text {
        let (old, new): (Vec<&str>, Vec<&str>) = (golden.lines().collect(), text.lines().collect());
        let at = old
            .iter()
            .zip(&new)
            .position(|(a, b)| a != b)
            .unwrap_or(old.len().min(new.len()));
        panic!(
            "{} changed at line {}:\n  golden: {}\n  now:    {}\nif intended, rerun with UPDATE_SCHEMA=1",
            path.display(),
            at + 1,
            old.get(at).unwrap_or(&"<end of file>"),
            new.get(at).unwrap_or(&"<end of file>"),
        );
    }
}

fn event(seq: u64, kind: RunEventKind) -> RunEvent {
    RunEvent {
        run_id: RunId(uuid(2)),
        seq,
        at: Timestamp::from_unix_millis(1_767_225_600_000 + seq as i64).unwrap(),
        kind,
    }
}

#[test]
fn every_event_variant_matches_its_golden_file_and_round_trips() {
    for (i, kind) in one_of_each_event().into_iter().enumerate() {
        let name = kind.type_name();
        let e = event(i as u64 + 1, kind);
        let value = serde_json::to_value(&e).unwrap();
        assert_eq!(value["type"], name);
        check_golden(&golden_dir("events").join(format!("{name}.json")), &value);
        // The golden file, read back, is the same typed event: a retyped field fails here.
        let text =
            std::fs::read_to_string(golden_dir("events").join(format!("{name}.json"))).unwrap();
        let back: RunEvent = serde_json::from_str(&text).unwrap();
        assert_eq!(back, e);
    }
}

#[test]
fn every_part_variant_matches_its_golden_file_and_round_trips() {
    for part in one_of_each_part() {
        let name = part.type_name();
        let value = serde_json::to_value(&part).unwrap();
        assert_eq!(value["type"], name);
        check_golden(&golden_dir("parts").join(format!("{name}.json")), &value);
        let text =
            std::fs::read_to_string(golden_dir("parts").join(format!("{name}.json"))).unwrap();
        assert_eq!(serde_json::from_str::<Part>(&text).unwrap(), part);
    }
    for update in update_updates() {
        let value = serde_json::to_value(&update).unwrap();
        let name = value["type"].as_str().unwrap().to_owned();
        check_golden(
            &golden_dir("part-updates").join(format!("{name}.json")),
            &value,
        );
        assert_eq!(serde_json::from_value::<PartUpdate>(value).unwrap(), update);
    }
}

/// Collects every `"const"` value of a `type` property anywhere in a schema.
fn type_consts(schema: &serde_json::Value, out: &mut BTreeSet<String>) {
    match schema {
        serde_json::Value::Object(map) => {
            if let Some(c) = map
                .get("properties")
                .and_then(|p| p.get("type"))
                .and_then(|t| t.get("const"))
            {
                out.insert(c.as_str().unwrap().to_owned());
            }
            map.values().for_each(|v| type_consts(v, out));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| type_consts(v, out)),
        _ => {}
    }
}

#[test]
fn fixtures_cover_every_variant_the_schema_declares() {
    // The schema is derived from the types, so it lists every variant; the fixtures must too.
    let schema = run_event_schema();
    let mut declared = BTreeSet::new();
    type_consts(&schema, &mut declared);
    let mut covered: BTreeSet<String> = one_of_each_event()
        .iter()
        .map(|e| e.type_name().to_owned())
        .collect();
    covered.extend(one_of_each_part().iter().map(|p| p.type_name().to_owned()));
    covered.extend(update_updates().iter().map(|u| {
        serde_json::to_value(u).unwrap()["type"]
            .as_str()
            .unwrap()
            .to_owned()
    }));
    assert_eq!(
        declared, covered,
        "a variant has no golden fixture (or a fixture no variant)"
    );
    assert!(declared.contains("run.checkpointed") && declared.contains("citation"));
}

#[test]
fn committed_json_schema_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas/run-event.schema.json");
    check_golden(&path, &run_event_schema());
}

#[test]
fn committed_stream_schema_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas/run-stream.schema.json");
    check_golden(&path, &forge_core::stream::run_stream_schema());
}

#[test]
fn unknown_event_type_is_a_clear_error() {
    let text = r#"{"run_id":"01900000-0000-7000-8000-000000000002","seq":1,"at":"2026-01-01T00:00:00.001Z","type":"run.exploded"}"#;
    let err = serde_json::from_str::<RunEvent>(text)
        .unwrap_err()
        .to_string();
    assert!(err.contains("run.exploded"), "{err}");
}
