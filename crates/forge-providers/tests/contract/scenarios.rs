//! One replay test per provider scenario, over real HTTP: what the adapter parsed and what it
//! sent. Transcripts are in `tests/transcripts/`, written from the providers' documented formats.

use std::time::{Duration, Instant};

use forge_core::ports::model::{FinishReason, ModelChunk, ModelErrorKind, ModelProvider};
use forge_core::usage::Usage;
use forge_providers::Dialect;
use forge_providers::http::HttpProvider;
use forge_testkit::mock_model::MockModelServer;
use forge_testkit::wire::WireServer;
use futures_util::StreamExt;
use serde_json::json;

use crate::support::*;

fn weather(id: &str, city: &str) -> (String, String, serde_json::Value) {
    (id.into(), "weather".into(), json!({ "city": city }))
}

#[tokio::test]
async fn chat_parallel_tool_call_deltas_with_cached_tokens() {
    let out = call(
        Dialect::OpenAiChat,
        transcript("openai_chat_parallel_tools_cached.http"),
    )
    .await;
    assert_eq!(out.error, None);
    let s = &out.summary;
    assert_eq!(
        s.calls,
        vec![weather("call_a", "Paris"), weather("call_b", "Oslo")]
    );
    assert_eq!(
        s.usage,
        Some(Usage {
            input_tokens: 2006,
            output_tokens: 40,
            cache_read_tokens: 1920,
            ..Usage::default()
        })
    );
    assert_eq!(s.finish, Some(FinishReason::ToolCalls));
    assert_eq!(s.request_id.as_deref(), Some("req_chat_parallel_1"));

    let sent = &out.requests[0];
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(sent.header("authorization"), Some("Bearer test-key-123"));
    let body = out.body();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["max_tokens"], 256);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You report the weather."},
            {"role": "user", "content": "What is the weather in Paris and Oslo?"},
        ])
    );
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "weather");
    assert_eq!(
        body["tools"][0]["function"]["parameters"]["required"],
        json!(["city"])
    );
}

#[tokio::test]
async fn chat_text_with_reasoning_tokens_and_a_comment_line() {
    let out = call(Dialect::OpenAiChat, transcript("openai_chat_text.http")).await;
    assert_eq!(out.error, None);
    assert_eq!(out.summary.text, "12 × 7 = 84.");
    assert_eq!(out.summary.finish, Some(FinishReason::Stop));
    assert_eq!(
        out.summary.usage,
        Some(Usage {
            input_tokens: 31,
            output_tokens: 9,
            reasoning_tokens: 3,
            ..Usage::default()
        })
    );
}

#[tokio::test]
async fn chat_whole_json_from_a_server_that_ignores_streaming() {
    let out = call(
        Dialect::OpenAiChat,
        transcript("openai_chat_whole_json.http"),
    )
    .await;
    assert_eq!(out.error, None);
    assert_eq!(
        out.summary.calls,
        vec![("call_x".into(), "lookup".into(), json!({"key": "k0"}))]
    );
    assert_eq!(out.summary.finish, Some(FinishReason::ToolCalls));
    assert_eq!(out.summary.usage.map(|u| u.total_tokens()), Some(32));
}

#[tokio::test]
async fn an_error_inside_a_200_stream_keeps_the_output_before_it_and_is_not_retried() {
    let replies = vec![
        transcript("openai_chat_error_in_stream.http"),
        transcript("openai_chat_text.http"),
    ];
    let out = call_with(Dialect::OpenAiChat, replies, weather_request(), 2, |_| {}).await;
    assert_eq!(out.summary.text, "Partial");
    assert_eq!(
        out.error,
        Some(ModelErrorKind::StreamError {
            message: "server_error: The server had an error while processing your request.".into(),
            retryable: true,
        })
    );
    assert_eq!(
        out.requests.len(),
        1,
        "output was already delivered: no retry"
    );
}

#[tokio::test]
async fn malformed_streams_are_classified() {
    let out = call(
        Dialect::OpenAiChat,
        transcript("openai_chat_truncated.http"),
    )
    .await;
    assert_eq!(out.summary.text, "Cut ");
    assert!(
        matches!(out.error.as_ref(), Some(ModelErrorKind::MalformedStream(_))),
        "{:?}",
        out.error
    );

    let out = call(Dialect::OpenAiChat, transcript("openai_chat_not_json.http")).await;
    assert_eq!(out.summary.text, "ok");
    match out.error {
        Some(ModelErrorKind::MalformedStream(m)) => assert!(m.contains("502 Bad Gateway"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn http_errors_are_classified_for_every_provider() {
    use Dialect::*;
    let cases = [
        (
            OpenAiChat,
            "openai_error_429_retry_after.http",
            ModelErrorKind::RateLimited {
                retry_after: Some(Duration::from_millis(40)),
            },
        ),
        (
            OpenAiChat,
            "openai_error_429_body_delay.http",
            ModelErrorKind::RateLimited {
                retry_after: Some(Duration::from_millis(6500)),
            },
        ),
        (
            OpenAiResponses,
            "openai_error_400_context_length.http",
            ModelErrorKind::ContextLengthExceeded,
        ),
        (
            OpenAiChat,
            "openai_error_401.http",
            ModelErrorKind::Authentication,
        ),
        (OpenAiChat, "openai_error_500.http", ModelErrorKind::Server),
        (
            OpenAiChat,
            "openai_error_503.http",
            ModelErrorKind::Overloaded,
        ),
        (
            Anthropic,
            "anthropic_error_429.http",
            ModelErrorKind::RateLimited {
                retry_after: Some(Duration::from_secs(2)),
            },
        ),
        (
            Anthropic,
            "anthropic_error_529.http",
            ModelErrorKind::Overloaded,
        ),
        (
            Anthropic,
            "anthropic_error_400_too_long.http",
            ModelErrorKind::ContextLengthExceeded,
        ),
        (
            Anthropic,
            "anthropic_error_401.http",
            ModelErrorKind::Authentication,
        ),
        (
            Anthropic,
            "anthropic_error_404.http",
            ModelErrorKind::NotFound("model: claude-nope".into()),
        ),
        (
            Anthropic,
            "anthropic_error_500.http",
            ModelErrorKind::Server,
        ),
    ];
    for (dialect, file, expected) in cases {
        let out = call(dialect, transcript(file)).await;
        assert_eq!(out.error.as_ref(), Some(&expected), "{file}");
        assert!(out.chunks.is_empty(), "{file}");
    }
    let out = call(OpenAiChat, transcript("openai_error_404.http")).await;
    assert!(
        matches!(out.error.as_ref(), Some(ModelErrorKind::NotFound(m)) if m.contains("gpt-nope"))
    );
    let detail = out
        .failure
        .as_ref()
        .and_then(|f| f.detail())
        .expect("a detail");
    let endpoint = detail.endpoint.as_deref().unwrap_or_default();
    assert!(
        endpoint.starts_with("POST http://") && endpoint.ends_with("/v1/chat/completions"),
        "{endpoint}"
    );
    assert_eq!(detail.status, Some(404));
    assert!(
        detail
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("gpt-nope"),
        "{detail:?}"
    );
    let out = call(OpenAiChat, transcript("openai_error_400_bad_request.http")).await;
    assert!(
        matches!(out.error.as_ref(), Some(ModelErrorKind::BadRequest(m)) if m.contains("Invalid schema"))
    );
    let out = call(OpenAiChat, transcript("openai_error_429_too_large.http")).await;
    assert!(
        matches!(out.error.as_ref(), Some(ModelErrorKind::BadRequest(m)) if m.starts_with("Request too large"))
    );
}

#[tokio::test]
async fn a_rate_limited_call_is_retried_after_the_requested_delay() {
    let replies = vec![
        transcript("openai_error_429_retry_after.http"),
        transcript("openai_chat_text.http"),
    ];
    let started = Instant::now();
    let out = call_with(Dialect::OpenAiChat, replies, weather_request(), 2, |_| {}).await;
    assert_eq!(out.error, None);
    assert_eq!(out.summary.text, "12 × 7 = 84.");
    assert_eq!(out.requests.len(), 2);
    assert_eq!(
        out.requests[0].body, out.requests[1].body,
        "the same call is repeated"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(40),
        "retry-after-ms: 40 honoured"
    );
}

#[tokio::test]
async fn only_retryable_errors_are_retried_and_only_within_budget() {
    let text = || transcript("openai_chat_text.http");
    let out = call_with(
        Dialect::OpenAiChat,
        vec![transcript("openai_error_400_bad_request.http"), text()],
        weather_request(),
        2,
        |_| {},
    )
    .await;
    assert!(matches!(
        out.error.as_ref(),
        Some(ModelErrorKind::BadRequest(_))
    ));
    assert_eq!(out.requests.len(), 1);

    let e500 = || transcript("openai_error_500.http");
    let out = call_with(
        Dialect::OpenAiChat,
        vec![e500(), e500(), e500(), text()],
        weather_request(),
        2,
        |_| {},
    )
    .await;
    assert_eq!(out.error, Some(ModelErrorKind::Server));
    assert_eq!(out.requests.len(), 3, "one call and two retries");

    // The provider asks for 6.5 s; more than this policy's 1 s: the error comes back at once.
    let out = call_with(
        Dialect::OpenAiChat,
        vec![transcript("openai_error_429_body_delay.http"), text()],
        weather_request(),
        2,
        |_| {},
    )
    .await;
    assert!(matches!(
        out.error,
        Some(ModelErrorKind::RateLimited { .. })
    ));
    assert_eq!(out.requests.len(), 1);
}

#[tokio::test]
async fn a_stream_error_before_any_output_is_retried() {
    let replies = vec![
        transcript("responses_error_event.http"),
        transcript("responses_text.http"),
    ];
    let out = call_with(
        Dialect::OpenAiResponses,
        replies,
        weather_request(),
        2,
        |_| {},
    )
    .await;
    assert_eq!(out.error, None);
    assert_eq!(out.summary.text, "Paris 18°C, Oslo 9°C.");
    assert_eq!(out.requests.len(), 2);
}

#[tokio::test]
async fn responses_parallel_function_calls() {
    let out = call(
        Dialect::OpenAiResponses,
        transcript("responses_parallel_calls.http"),
    )
    .await;
    assert_eq!(out.error, None);
    assert_eq!(
        out.summary.calls,
        vec![weather("call_r1", "Paris"), weather("call_r2", "Oslo")]
    );
    assert_eq!(
        out.summary.usage,
        Some(Usage {
            input_tokens: 1500,
            output_tokens: 44,
            cache_read_tokens: 1024,
            ..Usage::default()
        })
    );
    assert_eq!(out.summary.finish, Some(FinishReason::ToolCalls));
    assert_eq!(out.requests[0].path, "/v1/responses");
    let body = out.body();
    assert_eq!(body["instructions"], "You report the weather.");
    assert_eq!(
        body["input"],
        json!([{"role": "user", "content": "What is the weather in Paris and Oslo?"}])
    );
    assert_eq!(body["tools"][0]["name"], "weather");
    assert_eq!(body["max_output_tokens"], 256);
    assert_eq!(
        (body["stream"].clone(), body["store"].clone()),
        (json!(true), json!(false))
    );
}

#[tokio::test]
async fn responses_text() {
    let out = call(Dialect::OpenAiResponses, transcript("responses_text.http")).await;
    assert_eq!(out.error, None);
    assert_eq!(out.summary.text, "Paris 18°C, Oslo 9°C.");
    assert_eq!(out.summary.finish, Some(FinishReason::Stop));
    assert_eq!(out.summary.usage.map(|u| u.input_tokens), Some(1620));
}

#[tokio::test]
async fn anthropic_tool_use_with_input_json_deltas_and_cache_tokens() {
    let out = call(
        Dialect::Anthropic,
        transcript("anthropic_tool_use_cached.http"),
    )
    .await;
    assert_eq!(out.error, None);
    let s = &out.summary;
    assert_eq!(s.text, "Checking both cities.");
    assert_eq!(
        s.calls,
        vec![weather("toolu_1", "Paris"), weather("toolu_2", "Oslo")]
    );
    assert_eq!(
        s.usage,
        Some(Usage {
            input_tokens: 25 + 1200 + 3000,
            output_tokens: 88,
            cache_read_tokens: 3000,
            cache_write_tokens: 1200,
            reasoning_tokens: 0,
            server_tool_requests: 0,
        })
    );
    assert_eq!(s.finish, Some(FinishReason::ToolCalls));
    assert_eq!(s.request_id.as_deref(), Some("req_anthropic_1"));

    let sent = &out.requests[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some("test-key-123"));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.header("authorization"), None);
    let body = out.body();
    assert_eq!(body["max_tokens"], 256);
    assert_eq!(body["system"][0]["text"], "You report the weather.");
    assert_eq!(
        body["tools"][0]["input_schema"]["required"],
        json!(["city"])
    );
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "What is the weather in Paris and Oslo?"}
        ]}])
    );
}

#[tokio::test]
async fn anthropic_final_usage_comes_from_message_delta() {
    let out = call(
        Dialect::Anthropic,
        transcript("anthropic_usage_in_message_delta.http"),
    )
    .await;
    assert_eq!(out.error, None);
    assert_eq!(
        out.summary.usage,
        Some(Usage {
            input_tokens: 57 + 512,
            output_tokens: 4,
            cache_read_tokens: 512,
            ..Usage::default()
        })
    );
    assert_eq!(out.summary.text, "Done.");
}

#[tokio::test]
async fn anthropic_error_event_after_usage_keeps_the_usage() {
    let out = call_with(
        Dialect::Anthropic,
        vec![
            transcript("anthropic_error_event_overloaded.http"),
            transcript("anthropic_usage_in_message_delta.http"),
        ],
        weather_request(),
        2,
        |_| {},
    )
    .await;
    assert_eq!(out.summary.usage.map(|u| u.input_tokens), Some(300));
    assert_eq!(
        out.error,
        Some(ModelErrorKind::StreamError {
            message: "overloaded_error: Overloaded".into(),
            retryable: true
        })
    );
    assert_eq!(out.requests.len(), 1, "usage was reported: not retried");
}

#[tokio::test]
async fn a_slow_response_head_times_out() {
    let slow = transcript("openai_chat_text.http").head_delay(Duration::from_secs(3));
    let out = call_with(Dialect::OpenAiChat, vec![slow], weather_request(), 0, |s| {
        s.timeouts.response = Duration::from_millis(150);
    })
    .await;
    assert_eq!(out.error, Some(ModelErrorKind::Timeout));
}

#[tokio::test]
async fn a_stream_gone_silent_times_out_after_what_it_delivered() {
    let reply = transcript("openai_chat_text.http");
    let cut = find_after(reply.body(), "= 84.");
    let out = call_with(
        Dialect::OpenAiChat,
        vec![reply.stall_after(cut)],
        weather_request(),
        0,
        |s| s.timeouts.idle = Duration::from_millis(150),
    )
    .await;
    assert_eq!(out.summary.text, "12 × 7 = 84.");
    assert_eq!(out.error, Some(ModelErrorKind::Timeout));
}

/// The byte offset just past the event containing `needle`.
fn find_after(body: &[u8], needle: &str) -> usize {
    let text = std::str::from_utf8(body).expect("utf-8");
    let at = text.find(needle).expect("needle");
    at + text[at..].find("\n\n").expect("event end") + 2
}

#[tokio::test]
async fn cancelling_mid_stream_keeps_the_usage_reported_so_far() {
    let reply = transcript("anthropic_tool_use_cached.http");
    let cut = find_after(reply.body(), "Checking both cities.");
    let server = WireServer::start(vec![reply.stall_after(cut)])
        .await
        .unwrap();
    let provider = HttpProvider::new(settings(Dialect::Anthropic, server.base_url())).unwrap();
    let mut stream = provider.stream(weather_request()).await.unwrap();
    let mut seen = Vec::new();
    while let Some(Ok(chunk)) = stream.next().await {
        let text = matches!(chunk, ModelChunk::TextDelta(_));
        seen.push(chunk);
        if text {
            break;
        }
    }
    drop(stream); // the caller cancels: the stream is dropped mid-response
    let s = summarize(&seen);
    assert_eq!(s.text, "Checking both cities.");
    assert_eq!(
        s.usage,
        Some(Usage {
            input_tokens: 4225,
            output_tokens: 1,
            cache_read_tokens: 3000,
            cache_write_tokens: 1200,
            reasoning_tokens: 0,
            server_tool_requests: 0,
        }),
        "message_start's usage was delivered before the cut"
    );
}

#[tokio::test]
async fn health_checks_list_models_with_credentials() {
    let mock = MockModelServer::start().await.unwrap();
    let mut s = settings(Dialect::OpenAiChat, String::new());
    s.base_url = mock.base_url();
    let provider = HttpProvider::new(s).unwrap();
    provider.health().await.unwrap();
    assert_eq!(mock.stats()["models"], 1);

    let server = WireServer::start(vec![transcript("anthropic_error_401.http")])
        .await
        .unwrap();
    let provider = HttpProvider::new(settings(Dialect::Anthropic, server.base_url())).unwrap();
    let refused = provider.health().await.unwrap_err();
    assert_eq!(refused.kind(), &ModelErrorKind::Authentication);
    // What the person fixing the key needs: where, the status, the provider's words.
    let detail = refused.detail().expect("a refused call says where and why");
    assert_eq!(
        detail.endpoint.as_deref(),
        Some(format!("GET {}/v1/models", server.base_url()).as_str())
    );
    assert_eq!(detail.status, Some(401));
    assert_eq!(detail.message.as_deref(), Some("invalid x-api-key"));
    let sent = &server.requests()[0];
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("GET", "/v1/models")
    );
    assert_eq!(sent.header("x-api-key"), Some("test-key-123"));

    let unreachable =
        HttpProvider::new(settings(Dialect::OpenAiChat, "http://127.0.0.1:9".into())).unwrap();
    let unreached = unreachable.health().await.unwrap_err();
    assert_eq!(unreached.kind(), &ModelErrorKind::Transport);
    let detail = unreached.detail().expect("a failed connection says why");
    assert_eq!(
        detail.endpoint.as_deref(),
        Some("GET http://127.0.0.1:9/v1/models")
    );
    let cause = detail.cause.as_deref().unwrap_or_default();
    assert!(
        cause.contains("os error 111") || cause.to_lowercase().contains("refused"),
        "{cause}"
    );
}

#[tokio::test]
async fn configured_headers_are_sent_and_keys_never_printed() {
    let out = call_with(
        Dialect::OpenAiChat,
        vec![transcript("openai_chat_text.http")],
        weather_request(),
        0,
        |s| {
            s.headers = vec![
                ("x-team".into(), forge_providers::Secret::new("search")),
                (
                    "OpenAI-Project".into(),
                    forge_providers::Secret::new("proj_1"),
                ),
            ]
        },
    )
    .await;
    let sent = &out.requests[0];
    assert_eq!(sent.header("x-team"), Some("search"));
    assert_eq!(sent.header("openai-project"), Some("proj_1"));
    let provider = HttpProvider::new(settings(Dialect::OpenAiChat, "http://x".into())).unwrap();
    assert!(!format!("{provider:?}").contains("test-key-123"));
}

#[tokio::test]
async fn a_reply_in_one_byte_pieces_parses_the_same() {
    let whole = call(
        Dialect::Anthropic,
        transcript("anthropic_tool_use_cached.http"),
    )
    .await;
    let pieces = call(
        Dialect::Anthropic,
        transcript("anthropic_tool_use_cached.http").in_pieces(7, Duration::ZERO),
    )
    .await;
    assert_eq!(pieces.error, None);
    assert_eq!(pieces.summary, whole.summary);
}

#[tokio::test]
async fn the_mock_model_server_plays_the_workload() {
    let mock = MockModelServer::start().await.unwrap();
    let mut s = settings(Dialect::OpenAiChat, String::new());
    s.base_url = mock.base_url();
    let provider = HttpProvider::new(s).unwrap();
    let mut request = weather_request();
    request.model = "mock-steps-1-chunks-3".into();
    let chunks: Vec<ModelChunk> = provider
        .stream(request.clone())
        .await
        .unwrap()
        .map(|c| c.unwrap())
        .collect()
        .await;
    let first = summarize(&chunks);
    assert_eq!(
        first.calls,
        vec![("call_0".into(), "lookup".into(), json!({"key": "k0"}))]
    );
    assert_eq!(first.usage.map(|u| u.output_tokens), Some(12));
    // Feed a tool result back: t = 1 = K, so the text comes.
    request.messages.push(message(
        forge_core::message::Role::Tool,
        vec![forge_core::part::Part::ToolResult(
            forge_core::part::ToolResultPart {
                tool_call_id: forge_core::id::ToolCallId("call_0".into()),
                tool_name: "lookup".into(),
                output: json!("v"),
                is_error: false,
                trust: forge_core::part::Trust::Untrusted,
                tool_version: None,
            },
        )],
    ));
    let chunks: Vec<ModelChunk> = provider
        .stream(request)
        .await
        .unwrap()
        .map(|c| c.unwrap())
        .collect()
        .await;
    let second = summarize(&chunks);
    assert_eq!(second.text, "w0 w1 w2 ");
    assert_eq!(second.finish, Some(FinishReason::Stop));
    assert_eq!(mock.stats()["chat"], 2);
}
