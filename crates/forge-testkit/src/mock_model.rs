//! The deterministic OpenAI-compatible mock model server of the benchmark workload
//! (`shared/bench/WORKLOAD.md`), used by tests and benchmarks.
//!
//! `POST /v1/chat/completions` (streamed or not), `POST /v1/embeddings` (the stand-in vectors of
//! `crate::embedding`), `GET /v1/models`, `GET /stats`. Stateless: with
//! `t` the number of `tool` messages after the last `user` message, it answers a call of the
//! `lookup` tool (`call_<t>`, `{"key":"k<t>"}`) while `t < K`, and otherwise the text
//! `"w0 w1 … w<N-1> "`. `K`, `N`, the delay between text chunks `U` (µs) and a response latency `L`
//! (ms) come from the model name `mock-steps-K[-chunks-N][-cdelayus-U][-latms-L]` or from the
//! headers `x-mock-steps`, `x-mock-chunks`, `x-mock-chunk-delay-us`, `x-mock-latency-ms`; the
//! defaults are K=3, N=8, no delays. Usage: prompt tokens = ⌊characters of all message content / 4⌋
//! + 4 × messages; completion tokens = 12 for a tool call, N for text.
//!
//! With `-stamp-1` in the model name (or `x-mock-stamp: 1`) each streamed text chunk reads
//! `w<i>@<µs> `, where `<µs>` is the Unix time in microseconds at which the server wrote it: what
//! live-streaming latency is measured from ([`chunk_stamp`] reads it back).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// Workload settings for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MockSettings {
    /// Tool steps before the final text (K).
    pub steps: u64,
    /// Text chunks (N).
    pub chunks: u64,
    /// Microseconds between streamed text chunks (U).
    pub chunk_delay_us: u64,
    /// Milliseconds before responding (L).
    pub latency_ms: u64,
    /// Stamp each text chunk with the time it was written.
    pub stamp: bool,
}

impl Default for MockSettings {
    fn default() -> Self {
        Self {
            steps: 3,
            chunks: 8,
            chunk_delay_us: 0,
            latency_ms: 0,
            stamp: false,
        }
    }
}

impl MockSettings {
    /// Settings from a model name and request headers (headers win).
    pub fn resolve(model: &str, headers: &HeaderMap) -> Self {
        let mut s = Self::default();
        if let Some(rest) = model.strip_prefix("mock") {
            let parts: Vec<&str> = rest.split('-').filter(|p| !p.is_empty()).collect();
            for pair in parts.chunks(2) {
                if let [key, value] = pair
                    && let Ok(v) = value.parse::<u64>()
                {
                    match *key {
                        "steps" => s.steps = v,
                        "chunks" => s.chunks = v,
                        "cdelayus" => s.chunk_delay_us = v,
                        "latms" => s.latency_ms = v,
                        "stamp" => s.stamp = v != 0,
                        _ => {}
                    }
                }
            }
        }
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        s.steps = header("x-mock-steps").unwrap_or(s.steps);
        s.chunks = header("x-mock-chunks").unwrap_or(s.chunks);
        s.chunk_delay_us = header("x-mock-chunk-delay-us").unwrap_or(s.chunk_delay_us);
        s.latency_ms = header("x-mock-latency-ms").unwrap_or(s.latency_ms);
        s.stamp = header("x-mock-stamp").map_or(s.stamp, |v| v != 0);
        s
    }
}

/// Request counters, as `GET /stats` reports them.
#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    chat: AtomicU64,
    streamed: AtomicU64,
    tool_calls: AtomicU64,
    texts: AtomicU64,
    models: AtomicU64,
    bad: AtomicU64,
}

#[derive(Debug, Default)]
struct Shared {
    counters: Counters,
    /// Chat request bodies, when recording.
    recorded: Option<Mutex<Vec<Bytes>>>,
}

/// A running mock server.
#[derive(Debug)]
pub struct MockModelServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl MockModelServer {
    /// Starts on a free loopback port.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_on("127.0.0.1:0", false).await
    }

    /// Starts on a free loopback port and keeps every chat request body (see
    /// [`MockModelServer::requests`]).
    pub async fn start_recording() -> std::io::Result<Self> {
        Self::start_on("127.0.0.1:0", true).await
    }

    /// Starts on `addr`.
    pub async fn start_on(addr: &str, record: bool) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            counters: Counters::default(),
            recorded: record.then(|| Mutex::new(Vec::new())),
        });
        let app = router(Arc::clone(&shared));
        // Chunks are small writes: without TCP_NODELAY, Nagle's algorithm would hold one until the
        // previous is acknowledged (a delayed ACK, ~40 ms), as no real provider does.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, shared, task })
    }

    /// The OpenAI-compatible base URL, `http://127.0.0.1:<port>/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The counters, as `GET /stats` returns them.
    pub fn stats(&self) -> Value {
        stats(&self.shared.counters)
    }

    /// Every chat request body received, in order (empty unless started recording).
    pub fn requests(&self) -> Vec<Bytes> {
        self.shared
            .recorded
            .as_ref()
            .map(|r| r.lock().clone())
            .unwrap_or_default()
    }

    /// Serves until the task is dropped; for a standalone process.
    pub async fn wait(&mut self) {
        let _ = (&mut self.task).await;
    }
}

impl Drop for MockModelServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/v1/embeddings", post(embeddings))
        .route("/stats", get(stats_handler))
        .fallback(no_route)
        .with_state(shared)
}

/// Any other path: 404 with an OpenAI-shaped error naming the path, as real gateways do (so a
/// client's error carries what it asked for, and tests can check where that text ends up).
async fn no_route(uri: axum::http::Uri) -> Response {
    let body = json!({"error": {"message": format!("no route for {}", uri.path()),
        "type": "invalid_request_error"}});
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn stats(c: &Counters) -> Value {
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    json!({
        "requests": n(&c.requests),
        "chat": n(&c.chat),
        "streamed": n(&c.streamed),
        "tool_calls": n(&c.tool_calls),
        "texts": n(&c.texts),
        "models": n(&c.models),
        "bad_requests": n(&c.bad),
    })
}

async fn stats_handler(State(shared): State<Arc<Shared>>) -> Response {
    json_response(StatusCode::OK, &stats(&shared.counters))
}

async fn models(State(shared): State<Arc<Shared>>) -> Response {
    shared.counters.requests.fetch_add(1, Ordering::Relaxed);
    shared.counters.models.fetch_add(1, Ordering::Relaxed);
    json_response(
        StatusCode::OK,
        &json!({"object": "list", "data": [{"id": "mock", "object": "model", "owned_by": "forge"}]}),
    )
}

/// `POST /v1/embeddings`: [`crate::embedding::hashed`] vectors of each input, in input order —
/// reversed for the model `mock-embed-reversed` (servers may reorder; `index` says which is
/// which); the model `mock-embed-unauthorized` is refused with a 401, `mock-embed-limited` with a
/// 429 and `retry-after: 1`.
async fn embeddings(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    shared.counters.requests.fetch_add(1, Ordering::Relaxed);
    if let Some(recorded) = &shared.recorded {
        recorded.lock().push(body.clone());
    }
    let request = serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null);
    let inputs: Option<Vec<&str>> = match request.get("input") {
        Some(Value::String(s)) => Some(vec![s.as_str()]),
        Some(Value::Array(items)) => items.iter().map(Value::as_str).collect(),
        _ => None,
    };
    let Some(inputs) = inputs else {
        shared.counters.bad.fetch_add(1, Ordering::Relaxed);
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": {"message": "input must be a string or an array of strings", "type": "invalid_request_error"}}),
        );
    };
    let model = request.get("model").and_then(Value::as_str).unwrap_or("");
    match model {
        "mock-embed-unauthorized" => {
            return json_response(
                StatusCode::UNAUTHORIZED,
                &json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}}),
            );
        }
        "mock-embed-limited" => {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, "1")],
                json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}).to_string(),
            )
                .into_response();
        }
        _ => {}
    }
    let mut data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, text)| json!({"object": "embedding", "index": i, "embedding": crate::embedding::hashed(text)}))
        .collect();
    if model == "mock-embed-reversed" {
        data.reverse();
    }
    json_response(
        StatusCode::OK,
        &json!({"object": "list", "model": model, "data": data, "usage": {"prompt_tokens": 0, "total_tokens": 0}}),
    )
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// What the model says this turn.
enum Turn {
    Call(u64),
    Text,
}

async fn chat(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let c = &shared.counters;
    c.requests.fetch_add(1, Ordering::Relaxed);
    c.chat.fetch_add(1, Ordering::Relaxed);
    if let Some(recorded) = &shared.recorded {
        recorded.lock().push(body.clone());
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        c.bad.fetch_add(1, Ordering::Relaxed);
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": {"message": "the body is not JSON", "type": "invalid_request_error"}}),
        );
    };
    let Some(messages) = request.get("messages").and_then(Value::as_array) else {
        c.bad.fetch_add(1, Ordering::Relaxed);
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": {"message": "messages is required", "type": "invalid_request_error"}}),
        );
    };
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("mock");
    let settings = MockSettings::resolve(model, &headers);
    let last_user = messages
        .iter()
        .rposition(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map_or(0, |i| i + 1);
    let tools = messages[last_user..]
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
        .count() as u64;
    let characters: usize = messages
        .iter()
        .filter_map(|m| m.get("content").and_then(Value::as_str))
        .map(|s| s.chars().count())
        .sum();
    let prompt_tokens = (characters / 4) as u64 + 4 * messages.len() as u64;
    let turn = if tools < settings.steps {
        c.tool_calls.fetch_add(1, Ordering::Relaxed);
        Turn::Call(tools)
    } else {
        c.texts.fetch_add(1, Ordering::Relaxed);
        Turn::Text
    };
    let completion_tokens = match turn {
        Turn::Call(_) => 12,
        Turn::Text => settings.chunks,
    };
    let usage = json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    });
    if settings.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(settings.latency_ms)).await;
    }
    let stream = request.get("stream").and_then(Value::as_bool) == Some(true);
    if !stream {
        let message = match turn {
            Turn::Call(t) => json!({"role": "assistant", "content": null, "tool_calls": [call(t)]}),
            Turn::Text => json!({"role": "assistant", "content": text(settings.chunks)}),
        };
        let finish = match turn {
            Turn::Call(_) => "tool_calls",
            Turn::Text => "stop",
        };
        return json_response(
            StatusCode::OK,
            &json!({
                "id": "chatcmpl-mock",
                "object": "chat.completion",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }),
        );
    }
    c.streamed.fetch_add(1, Ordering::Relaxed);
    let include_usage = request
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        == Some(true);
    let model_name = model.to_owned();
    let chunk = move |delta: Value, finish: Value| {
        json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model_name,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    };
    // Events before the text (or the whole call), the text chunks, and the events after them.
    let mut head = Vec::new();
    let mut words = Vec::new();
    match turn {
        Turn::Call(t) => {
            let full = call(t);
            head.push(chunk(
                json!({"role": "assistant", "content": null, "tool_calls": [{
                    "index": 0, "id": full["id"], "type": "function",
                    "function": {"name": "lookup", "arguments": ""},
                }]}),
                Value::Null,
            ));
            head.push(chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": full["function"]["arguments"]}}]}),
                Value::Null,
            ));
            head.push(chunk(json!({}), json!("tool_calls")));
        }
        Turn::Text => {
            head.push(chunk(
                json!({"role": "assistant", "content": ""}),
                Value::Null,
            ));
            for i in 0..settings.chunks {
                words.push(chunk(json!({"content": format!("w{i} ")}), Value::Null));
            }
        }
    }
    let mut tail = Vec::new();
    if matches!(turn, Turn::Text) {
        tail.push(chunk(json!({}), json!("stop")));
    }
    if include_usage {
        tail.push(json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [],
            "usage": usage,
        }));
    }
    let frame = |v: &Value| format!("data: {v}\n\n");
    let body = if (settings.chunk_delay_us == 0 && !settings.stamp) || words.is_empty() {
        let mut all = String::new();
        for v in head.iter().chain(&words).chain(&tail) {
            all.push_str(&frame(v));
        }
        all.push_str("data: [DONE]\n\n");
        Body::from(all)
    } else {
        enum Piece {
            Ready(String),
            /// Text chunk `i`, written (and stamped) when its turn comes.
            Word(u64),
        }
        let delay = Duration::from_micros(settings.chunk_delay_us);
        let mut pieces: Vec<(Duration, Piece)> = Vec::new();
        pieces.push((
            Duration::ZERO,
            Piece::Ready(head.iter().map(frame).collect()),
        ));
        for i in 0..settings.chunks {
            let wait = if i == 0 { Duration::ZERO } else { delay };
            pieces.push((wait, Piece::Word(i)));
        }
        let mut end: String = tail.iter().map(frame).collect();
        end.push_str("data: [DONE]\n\n");
        pieces.push((Duration::ZERO, Piece::Ready(end)));
        let stamp = settings.stamp;
        let stream = futures_util::stream::unfold(pieces.into_iter(), move |mut it| {
            let chunk = chunk.clone();
            async move {
                let (wait, piece) = it.next()?;
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
                let text = match piece {
                    Piece::Ready(text) => text,
                    Piece::Word(i) => {
                        let content = if stamp {
                            format!("w{i}@{} ", unix_micros())
                        } else {
                            format!("w{i} ")
                        };
                        format!(
                            "data: {}\n\n",
                            chunk(json!({"content": content}), Value::Null)
                        )
                    }
                };
                Some((Ok::<_, Infallible>(Bytes::from(text)), it))
            }
        });
        Body::from_stream(stream)
    };
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

fn call(t: u64) -> Value {
    json!({
        "id": format!("call_{t}"),
        "type": "function",
        "function": {"name": "lookup", "arguments": format!(r#"{{"key":"k{t}"}}"#)},
    })
}

fn text(chunks: u64) -> String {
    (0..chunks).map(|i| format!("w{i} ")).collect()
}

fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The send times stamped in `text` (`w<i>@<µs>` words, see the module docs), in order.
pub fn chunk_stamps(text: &str) -> Vec<u64> {
    text.split_whitespace()
        .filter_map(|w| w.split_once('@'))
        .filter_map(|(_, us)| us.parse().ok())
        .collect()
}

/// The send time stamped in one text chunk, if it carries one.
pub fn chunk_stamp(text: &str) -> Option<u64> {
    chunk_stamps(text).into_iter().next()
}

/// The Unix time now in microseconds, on the clock the stamps use.
pub fn now_micros() -> u64 {
    unix_micros()
}
