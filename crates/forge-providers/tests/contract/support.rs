//! Shared helpers: run a request through a real adapter against the wire server, and fold the
//! chunks into something easy to assert on.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use forge_core::id::{MessageId, RunId};
use forge_core::message::{Message, Role};
use forge_core::part::Part;
use forge_core::ports::model::{
    FinishReason, ModelChunk, ModelError, ModelErrorKind, ModelProvider, ModelRequest,
    ToolDescriptor,
};
use forge_core::time::Timestamp;
use forge_core::usage::Usage;
use forge_providers::http::{HttpProvider, HttpSettings, Timeouts};
use forge_providers::retry::{RetryPolicy, Retrying};
use forge_providers::{BodyOptions, Dialect, Secret};
use forge_testkit::wire::{RecordedRequest, Reply, WireServer};
use futures_util::StreamExt;
use serde_json::{Value, json};

/// A transcript from `tests/transcripts/`.
pub fn transcript(name: &str) -> Reply {
    let path = format!("{}/tests/transcripts/{name}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    Reply::from_http(&bytes).unwrap_or_else(|| panic!("{path} is not an HTTP transcript"))
}

/// What a response came to.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Summary {
    pub text: String,
    /// (id, name, parsed input) by call index order.
    pub calls: Vec<(String, String, Value)>,
    pub usage: Option<Usage>,
    pub finish: Option<FinishReason>,
    pub request_id: Option<String>,
    /// The model the provider reported answering.
    pub model: Option<String>,
}

pub fn summarize(chunks: &[ModelChunk]) -> Summary {
    let mut s = Summary::default();
    let mut calls: BTreeMap<u32, (String, String, String)> = BTreeMap::new();
    for chunk in chunks {
        match chunk {
            ModelChunk::TextDelta(t) => s.text.push_str(t),
            ModelChunk::ToolCallStart { index, id, name } => {
                assert!(
                    calls
                        .insert(*index, (id.clone(), name.clone(), String::new()))
                        .is_none(),
                    "call {index} started twice"
                );
            }
            ModelChunk::ToolCallDelta { index, json } => {
                calls
                    .get_mut(index)
                    .unwrap_or_else(|| panic!("delta for unstarted call {index}"))
                    .2
                    .push_str(json);
            }
            ModelChunk::Usage(u) => s.usage = Some(*u),
            ModelChunk::RequestId(id) => s.request_id = Some(id.clone()),
            ModelChunk::Model(m) => {
                assert!(s.model.is_none(), "model reported twice");
                s.model = Some(m.clone());
            }
            ModelChunk::Finish(f) => {
                assert!(s.finish.is_none(), "finished twice");
                s.finish = Some(*f);
            }
        }
    }
    s.calls = calls
        .into_values()
        .map(|(id, name, raw)| {
            let input = if raw.is_empty() {
                json!({})
            } else {
                serde_json::from_str(&raw).unwrap_or_else(|e| panic!("input {raw:?}: {e}"))
            };
            (id, name, input)
        })
        .collect();
    s
}

pub struct Outcome {
    pub chunks: Vec<ModelChunk>,
    pub summary: Summary,
    /// The failure's class.
    pub error: Option<ModelErrorKind>,
    /// The whole failure, with its detail.
    pub failure: Option<ModelError>,
    pub requests: Vec<RecordedRequest>,
}

impl Outcome {
    pub fn body(&self) -> Value {
        self.requests.first().expect("a request was sent").json()
    }
}

pub fn settings(dialect: Dialect, base_url: String) -> HttpSettings {
    HttpSettings {
        name: "test".into(),
        dialect,
        base_url: match dialect {
            Dialect::Anthropic => base_url,
            _ => format!("{base_url}/v1"),
        },
        api_key: Some(Secret::new("test-key-123")),
        headers: vec![],
        body: BodyOptions::default(),
        timeouts: Timeouts {
            connect: Duration::from_secs(5),
            response: Duration::from_secs(5),
            idle: Duration::from_secs(5),
        },
    }
}

pub fn fast_retries(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
        max_retry_after: Duration::from_secs(1),
    }
}

/// Sends `request` through an adapter for `dialect` (with `retries`) against `replies`.
pub async fn call_with(
    dialect: Dialect,
    replies: Vec<Reply>,
    request: ModelRequest,
    retries: u32,
    tweak: impl FnOnce(&mut HttpSettings),
) -> Outcome {
    let server = WireServer::start(replies).await.expect("wire server");
    let mut s = settings(dialect, server.base_url());
    tweak(&mut s);
    let http: Arc<dyn ModelProvider> = Arc::new(HttpProvider::new(s).expect("provider"));
    let provider = Retrying::new(http, fast_retries(retries));
    let mut chunks = Vec::new();
    let mut failure: Option<ModelError> = None;
    match provider.stream(request).await {
        Err(e) => failure = Some(e),
        Ok(mut stream) => {
            while let Some(item) = stream.next().await {
                match item {
                    Ok(c) => chunks.push(c),
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
    }
    let summary = summarize(&chunks);
    Outcome {
        chunks,
        summary,
        error: failure.as_ref().map(|e| e.kind().clone()),
        failure,
        requests: server.requests(),
    }
}

/// One call, no retries, default settings.
pub async fn call(dialect: Dialect, reply: Reply) -> Outcome {
    call_with(dialect, vec![reply], weather_request(), 0, |_| {}).await
}

pub fn message(role: Role, parts: Vec<Part>) -> Message {
    Message {
        id: MessageId(uuid::Uuid::now_v7()),
        run_id: RunId(uuid::Uuid::nil()),
        role,
        parts,
        created_at: Timestamp::from_unix_millis(0).expect("epoch"),
    }
}

/// "What is the weather in Paris and Oslo?" with a `weather` tool.
pub fn weather_request() -> ModelRequest {
    ModelRequest {
        model: "test-model".into(),
        system: "You report the weather.".into(),
        messages: vec![message(
            Role::User,
            vec![Part::text("What is the weather in Paris and Oslo?")],
        )],
        tools: vec![ToolDescriptor {
            name: "weather".into(),
            description: "Current weather for a city.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            }),
        }],
        max_output_tokens: Some(256),
        output_schema: None,
        temperature: None,
    }
}

/// One call of a two-call parallel exchange: its id, input and (text) result.
pub struct Call<'a> {
    pub id: &'a str,
    pub input: Value,
    pub result: &'a str,
}

/// The follow-up request after two parallel calls of `tool`, as Forge stores the conversation:
/// the user's message, the assistant's `text` (if any) and calls, then the tools' results.
pub fn after_tool_results(
    system: &str,
    user: &str,
    text: &str,
    tool: ToolDescriptor,
    calls: [Call<'_>; 2],
) -> ModelRequest {
    use forge_core::id::ToolCallId;
    use forge_core::part::{ToolCallPart, ToolResultPart, Trust};
    let mut assistant = Vec::new();
    if !text.is_empty() {
        assistant.push(Part::text(text));
    }
    for c in &calls {
        assistant.push(Part::ToolCall(ToolCallPart {
            tool_call_id: ToolCallId(c.id.into()),
            tool_name: tool.name.clone(),
            input: c.input.clone(),
        }));
    }
    let results = calls
        .iter()
        .map(|c| {
            Part::ToolResult(ToolResultPart {
                tool_call_id: ToolCallId(c.id.into()),
                tool_name: tool.name.clone(),
                output: json!(c.result),
                is_error: false,
                trust: Trust::Untrusted,
                tool_version: None,
            })
        })
        .collect();
    ModelRequest {
        model: "m".into(),
        system: system.into(),
        messages: vec![
            message(Role::User, vec![Part::text(user)]),
            message(Role::Assistant, assistant),
            message(Role::Tool, results),
        ],
        tools: vec![tool],
        max_output_tokens: None,
        output_schema: None,
        temperature: None,
    }
}

/// `v` without any of `keys`, at any depth.
pub fn strip(mut v: Value, keys: &[&str]) -> Value {
    fn walk(v: &mut Value, keys: &[&str]) {
        match v {
            Value::Object(m) => {
                for k in keys {
                    m.remove(*k);
                }
                m.values_mut().for_each(|v| walk(v, keys));
            }
            Value::Array(a) => a.iter_mut().for_each(|v| walk(v, keys)),
            _ => {}
        }
    }
    walk(&mut v, keys);
    v
}

/// Forge's Anthropic body has the messages of `theirs` (an accepted request body): the same
/// blocks, ids, inputs and results, apart from cache markers and Forge's explicit `is_error`.
/// A user turn given as a plain string counts as one text block (Forge always sends blocks).
pub fn assert_anthropic_messages(ours: &Value, theirs: &Value) {
    let mut theirs = strip(theirs["messages"].clone(), &["cache_control"]);
    for m in theirs.as_array_mut().expect("messages") {
        if let Some(text) = m["content"].as_str() {
            m["content"] = json!([{"type": "text", "text": text}]);
        }
    }
    assert_eq!(strip(ours["messages"].clone(), &["is_error"]), theirs);
}

/// Forge's Chat Completions messages have the roles, call ids, names, parsed arguments and
/// tool results of `theirs`.
pub fn assert_chat_messages(ours: &Value, theirs: &Value) {
    let shape = |messages: &Value| -> Vec<Value> {
        messages
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| {
                json!({
                    "role": m["role"],
                    "tool_call_id": m.get("tool_call_id"),
                    "content": if m["role"] == "assistant" { Value::Null } else { m["content"].clone() },
                    "calls": m.get("tool_calls").map(|c| c.as_array().expect("calls").iter()
                        .map(|c| json!([c["id"], c["type"], c["function"]["name"],
                            serde_json::from_str::<Value>(c["function"]["arguments"].as_str().expect("args")).expect("json")]))
                        .collect::<Vec<_>>()),
                })
            })
            .collect()
    };
    assert_eq!(shape(&ours["messages"]), shape(&theirs["messages"]));
}

/// Forge's Responses input has the items of `theirs` (its instructions aside; item ids and
/// statuses a server echoes are ignored; arguments compared parsed).
pub fn assert_responses_input(ours: &Value, theirs: &Value) {
    let items = |input: &Value| -> Vec<Value> {
        input
            .as_array()
            .expect("input")
            .iter()
            .filter(|i| i["role"] != "developer" && i["role"] != "system")
            .map(|i| {
                let mut i = strip(i.clone(), &["id", "status"]);
                if let Some(args) = i.get("arguments").and_then(Value::as_str) {
                    i["arguments"] = serde_json::from_str(args).expect("json");
                }
                i
            })
            .collect()
    };
    assert_eq!(items(&ours["input"]), items(&theirs["input"]));
}
