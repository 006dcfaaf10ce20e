//! Tools used by the engine tests, and tests of tool handling itself.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use forge_core::agent::RunLimits;
use forge_core::id::{IdempotencyKey, ToolCallId};
use forge_core::ports::tool::{Tool, ToolError};
use forge_engine::native_tool;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::harness::harness;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CalcInput {
    /// One of add, sub, mul, div.
    pub op: String,
    pub a: i64,
    pub b: i64,
}

#[derive(Debug, Serialize)]
pub struct CalcOutput {
    pub result: i64,
}

pub fn calculator() -> Arc<dyn Tool> {
    Arc::new(native_tool(
        "calculate",
        "integer arithmetic",
        |_ctx, i: CalcInput| async move {
            let result = match i.op.as_str() {
                "add" => i.a + i.b,
                "sub" => i.a - i.b,
                "mul" => i.a * i.b,
                "div" if i.b == 0 => return Err(ToolError::Failed("division by zero".into())),
                "div" => i.a / i.b,
                other => return Err(ToolError::InvalidInput(format!("unknown op {other}"))),
            };
            Ok(CalcOutput { result })
        },
    ))
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct Wait {
    pub label: String,
}

/// A tool that only returns once `n` calls are in flight at the same time (or times out).
pub fn rendezvous(n: usize) -> Arc<dyn Tool> {
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    Arc::new(native_tool(
        "rendezvous",
        "waits for its siblings",
        move |_ctx, w: Wait| {
            let barrier = barrier.clone();
            async move {
                match tokio::time::timeout(Duration::from_secs(5), barrier.wait()).await {
                    Ok(_) => Ok(format!("met {}", w.label)),
                    Err(_) => Err(ToolError::Failed(
                        "siblings never arrived: calls ran one at a time".into(),
                    )),
                }
            }
        },
    ))
}

/// Like [`rendezvous`], but each call blocks its thread while it waits (as a tool's CPU-bound
/// work would): calls meet only if they execute on different threads at once.
pub fn thread_rendezvous(n: usize) -> Arc<dyn Tool> {
    let arrived = Arc::new((Mutex::new(0usize), std::sync::Condvar::new()));
    Arc::new(native_tool(
        "rendezvous",
        "waits for its siblings, blocking its thread",
        move |_ctx, w: Wait| {
            let arrived = arrived.clone();
            async move {
                let (count, all) = &*arrived;
                let mut count = count.lock().unwrap_or_else(|p| p.into_inner());
                *count += 1;
                all.notify_all();
                let (count, waited) = all
                    .wait_timeout_while(count, Duration::from_secs(5), |c| *c < n)
                    .unwrap_or_else(|p| p.into_inner());
                if waited.timed_out() && *count < n {
                    return Err(ToolError::Failed(
                        "siblings never arrived: calls shared one thread".into(),
                    ));
                }
                Ok(format!("met {}", w.label))
            }
        },
    ))
}

#[tokio::test]
async fn typed_native_tool_schema_comes_from_its_input_type() {
    let tool = calculator();
    let schema = &tool.spec().input_schema;
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], serde_json::json!(["op", "a", "b"]));
    assert_eq!(schema["properties"]["a"]["type"], "integer");
}

/// Each tool call records the version of the tool that ran (issue 17, item 11); a call that ran
/// no tool (unknown here) records none.
#[tokio::test]
async fn each_tool_result_records_the_version_that_ran() {
    let tool: Arc<dyn Tool> = Arc::new(
        native_tool("stamp", "answers ok", |_ctx, _: serde_json::Value| async {
            Ok("ok")
        })
        .version("2.3.0"),
    );
    let h = harness(
        r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "a", name = "stamp" }, { id = "b", name = "missing" }]
[[conversation.turn]]
text = ["done"]
"#,
        vec![tool],
        RunLimits::default(),
    );
    let f = h.run("go").await;
    let versions: Vec<(String, Option<String>)> = f
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            forge_core::event::RunEventKind::PartAdded {
                part: forge_core::part::Part::ToolResult(r),
                ..
            } => Some((r.tool_name.clone(), r.tool_version.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        versions,
        [
            ("stamp".to_owned(), Some("2.3.0".to_owned())),
            ("missing".to_owned(), None)
        ]
    );
}

#[tokio::test]
async fn tool_gets_the_idempotency_key_of_its_run_and_call() {
    #[derive(Deserialize, JsonSchema)]
    struct Nothing {}
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = seen.clone();
    let tool: Arc<dyn Tool> = Arc::new(native_tool(
        "record",
        "records its key",
        move |ctx, _: Nothing| {
            keep.lock().unwrap().push((
                ctx.run_id,
                ctx.idempotency_key.clone(),
                ctx.scope.tenant_id().clone(),
            ));
            async { Ok("ok") }
        },
    ));
    let h = harness(
        r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "call_x", name = "record" }]
[[conversation.turn]]
text = ["done"]
"#,
        vec![tool],
        RunLimits::default(),
    );
    let f = h.run("go").await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    let run_id = f.events[0].run_id;
    assert_eq!(seen[0].0, run_id);
    assert_eq!(
        seen[0].1,
        IdempotencyKey::for_tool_call(run_id, &ToolCallId::from("call_x"))
    );
    assert_eq!(seen[0].2.as_str(), "acme");
}

#[tokio::test]
async fn oversized_tool_output_becomes_a_tool_error() {
    #[derive(Deserialize, JsonSchema)]
    struct Nothing {}
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let tool: Arc<dyn Tool> = Arc::new(native_tool(
        "big",
        "returns a lot",
        move |_ctx, _: Nothing| {
            c.fetch_add(1, Ordering::SeqCst);
            async { Ok("x".repeat(2000)) }
        },
    ));
    let limits = RunLimits {
        max_tool_output_bytes: 1000,
        ..RunLimits::default()
    };
    let h = harness(
        r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "c1", name = "big" }]
[[conversation.turn]]
text = ["ok"]
"#,
        vec![tool],
        limits,
    );
    let f = h.run("go").await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(
        f.log.contains(r#"tool_result c1 error {"code":"output_too_large","message":"tool output is 2002 bytes; the limit is 1000"}"#),
        "{}",
        f.log
    );
}

/// The two refusals no test exercised (issue 62, item 12): calls past the step's limit, and an
/// input larger than the agent allows, are refused unrun with their codes while the calls
/// within the limits run.
#[tokio::test]
async fn calls_past_the_step_limit_and_oversized_inputs_are_refused_unrun() {
    let limits = RunLimits {
        max_tool_calls_per_step: 2,
        max_tool_input_bytes: 40,
        ..RunLimits::default()
    };
    let h = harness(
        r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [
  { id = "c1", name = "calculate", input = { op = "add", a = 1, b = 2 } },
  { id = "c2", name = "calculate", input = { op = "add", a = 123456789, b = 987654321, pad = "xxxxxxxxxxxxxxxx" } },
  { id = "c3", name = "calculate", input = { op = "add", a = 3, b = 4 } },
]
[[conversation.turn]]
text = ["ok"]
"#,
        vec![calculator()],
        limits,
    );
    let f = h.run("go").await;
    assert!(
        f.log.contains(r#"tool_result c1 {"result":3}"#),
        "{}",
        f.log
    );
    assert!(
        f.log
            .contains(r#"tool_result c2 error {"code":"input_too_large""#),
        "{}",
        f.log
    );
    assert!(
        f.log.contains(r#"tool_result c3 error {"code":"too_many_tool_calls","message":"at most 2 tool calls run per step"}"#),
        "{}",
        f.log
    );
}

#[test]
fn registry_refuses_bad_names_and_duplicates() {
    let mut r = forge_engine::ToolRegistry::new();
    r.register(calculator()).unwrap();
    let dup = r.register(calculator()).unwrap_err();
    assert_eq!(
        dup.to_string(),
        "tool calculate is invalid: registered twice"
    );
    #[derive(Deserialize, JsonSchema)]
    struct Nothing {}
    let bad: Arc<dyn Tool> = Arc::new(native_tool("has space", "x", |_ctx, _: Nothing| async {
        Ok(1)
    }));
    assert!(
        r.register(bad)
            .unwrap_err()
            .to_string()
            .contains("must be 1 to 64 characters")
    );
}

/// A citation check that accepts every citation whose excerpt is not `wrong`.
struct ExcerptCheck;

#[async_trait::async_trait]
impl forge_core::ports::citation::CitationCheck for ExcerptCheck {
    async fn check(
        &self,
        _: &forge_core::scope::Scope,
        citation: &forge_core::part::CitationPart,
    ) -> Result<Result<(), forge_core::ports::citation::CitationRefusal>, forge_core::Error> {
        Ok(if citation.excerpt == "wrong" {
            Err(forge_core::ports::citation::CitationRefusal::NoSource(
                citation.source_id.clone(),
            ))
        } else {
            Ok(())
        })
    }
}

const CITES: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "c1", name = "cite", input = { source_id = "pay.md", version = "v1", start = 0, end = 5, excerpt = "Pay." } }, { id = "c2", name = "cite", input = { source_id = "pay.md", version = "v1", start = 0, end = 5, excerpt = "wrong" } }]
[[conversation.turn]]
text = ["done"]
"#;

/// `cite` is a tool like any other, called through the registry: a citation its check passes is
/// kept beside the result, one it refuses is an error result and no citation.
#[tokio::test]
async fn the_built_in_cite_is_called_like_any_tool_and_keeps_only_a_passed_citation() {
    let h = crate::harness::harness_built(
        CITES,
        vec![],
        crate::harness::agent(&["cite"], RunLimits::default()),
        |b| b.citations(Arc::new(ExcerptCheck)),
    );
    let f = h.run("cite it").await;
    let parts: Vec<&forge_core::part::Part> = f
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            forge_core::event::RunEventKind::PartAdded { part, .. } => Some(part),
            _ => None,
        })
        .collect();
    let citations: Vec<_> = parts
        .iter()
        .filter_map(|p| match p {
            forge_core::part::Part::Citation(c) => Some(c.excerpt.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(citations, ["Pay."], "{parts:?}");
    let refused = parts.iter().any(|p| {
        matches!(p, forge_core::part::Part::ToolResult(r)
            if r.is_error && r.output["code"] == "invalid_citation")
    });
    assert!(refused, "{parts:?}");
}

/// With citations checked, `cite` is the engine's: a host tool of that name is refused at build
/// rather than having its results turned into citations nobody checked.
#[test]
fn a_hosts_tool_named_cite_is_refused_when_citations_are_checked() {
    let store = Arc::new(forge_store_memory::MemoryStore::new(
        Arc::new(forge_core::time::SystemClock),
        Arc::new(forge_core::id::UuidV7Generator),
    ));
    let cite = native_tool(
        "cite",
        "a host's own cite",
        |_ctx, _i: CalcInput| async move { Ok(serde_json::json!({"cited": true})) },
    );
    let built = forge_engine::Engine::builder()
        .store(store)
        .citations(Arc::new(ExcerptCheck))
        .tool(Arc::new(cite))
        .and_then(|b| b.build());
    assert!(
        matches!(&built, Err(forge_engine::EngineError::InvalidTool { name, reason })
            if name == "cite" && reason.contains("citation")),
        "{:?}",
        built.err()
    );
}
