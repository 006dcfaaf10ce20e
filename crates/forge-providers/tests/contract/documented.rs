//! The wire behaviours the shared recordings show (`recorded`), held here with transcripts and
//! request bodies written from the providers' documented formats (`tests/transcripts/`,
//! `tests/transcripts/requests/`), so a fresh clone checks them with nothing from outside:
//! Anthropic's whole-JSON answer with cache tokens and its server tools, Chat Completions'
//! 2026 chunk shape, rate limits that give their delay in seconds, in milliseconds, in a body
//! detail or not at all, an unsupported parameter, and the follow-up requests after parallel
//! tool calls in each dialect.

use std::time::Duration;

use forge_core::ports::model::{FinishReason, ModelErrorKind};
use forge_core::usage::Usage;
use forge_providers::{BodyOptions, Dialect};
use serde_json::{Value, json};

use crate::support::*;

fn request_golden(name: &str) -> Value {
    let path = format!(
        "{}/tests/transcripts/requests/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str::<Value>(&text).expect("json")["body"].clone()
}

#[tokio::test]
async fn anthropic_whole_json_answer_with_cache_writes_and_reads() {
    let out = call(
        Dialect::Anthropic,
        transcript("anthropic_whole_json_cached.http"),
    )
    .await;
    assert_eq!(out.error, None);
    assert_eq!(out.summary.text, "Noted.");
    assert!(out.summary.calls.is_empty());
    assert_eq!(out.summary.finish, Some(FinishReason::Stop));
    assert_eq!(
        out.summary.usage,
        Some(Usage {
            // Anthropic's input tokens exclude the cache; Forge's include what was read and written.
            input_tokens: 12 + 2048 + 1024,
            output_tokens: 3,
            cache_read_tokens: 1024,
            cache_write_tokens: 2048,
            ..Usage::default()
        })
    );
    assert_eq!(
        out.summary.model.as_deref(),
        Some("claude-haiku-4-5-20251001")
    );
}

/// A response that sampled twice — a compaction summarising the conversation, then the answer —
/// reports each sampling in `usage.iterations`, its top level the answer's alone (Anthropic's
/// compaction documentation; a compacting proxy answers the same way): all of it is metered
/// (issue 68, item 11), and the compaction block is not answer text.
#[tokio::test]
async fn anthropic_usage_iterations_are_all_metered() {
    let out = call(
        Dialect::Anthropic,
        transcript("anthropic_compaction_iterations.http"),
    )
    .await;
    assert_eq!(out.error, None);
    assert_eq!(
        out.summary.text,
        "Based on our conversation so far, revenue grew 12%."
    );
    assert_eq!(
        out.summary.usage,
        Some(Usage {
            input_tokens: 180_000 + 23_000,
            output_tokens: 3_500 + 1_000,
            ..Usage::default()
        })
    );
}

/// `message_start` says what the prompt cache gave; a `message_delta` repeating
/// `cache_read_input_tokens: 0` does not take it back (issue 68, item 11).
#[tokio::test]
async fn anthropic_a_later_zero_never_overwrites_a_reported_cache_read() {
    let out = call(
        Dialect::Anthropic,
        transcript("anthropic_cache_read_then_zero.http"),
    )
    .await;
    assert_eq!(out.error, None);
    assert_eq!(
        out.summary.usage,
        Some(Usage {
            input_tokens: 20 + 4096,
            output_tokens: 15,
            cache_read_tokens: 4096,
            ..Usage::default()
        })
    );
}

#[tokio::test]
async fn anthropic_server_tools_are_not_calls_but_are_charged() {
    let out = call(
        Dialect::Anthropic,
        transcript("anthropic_server_tool_stream.http"),
    )
    .await;
    assert_eq!(out.error, None);
    assert_eq!(out.summary.text, "Let me look that up. It is 4°C in Oslo.");
    assert!(
        out.summary.calls.is_empty(),
        "Anthropic ran the search itself: {:?}",
        out.summary.calls
    );
    assert_eq!(out.summary.finish, Some(FinishReason::Stop));
    assert_eq!(
        out.summary.usage,
        Some(Usage {
            input_tokens: 9 + 500 + 1500,
            output_tokens: 41,
            cache_read_tokens: 1500,
            cache_write_tokens: 500,
            reasoning_tokens: 0,
            server_tool_requests: 1,
        }),
        "message_delta's counts replace message_start's"
    );
}

#[tokio::test]
async fn chat_chunks_with_obfuscation_padding_and_service_tier() {
    let out = call(
        Dialect::OpenAiChat,
        transcript("openai_chat_obfuscated_tool_call.http"),
    )
    .await;
    assert_eq!(out.error, None);
    assert_eq!(
        out.summary.calls,
        vec![(
            "call_ob_1".to_owned(),
            "weather".to_owned(),
            json!({"city": "Oslo"})
        )]
    );
    assert_eq!(out.summary.finish, Some(FinishReason::ToolCalls));
    assert_eq!(
        out.summary.usage,
        Some(Usage {
            input_tokens: 61,
            output_tokens: 14,
            ..Usage::default()
        })
    );
    assert_eq!(out.summary.model.as_deref(), Some("gpt-4o-mini-2024-07-18"));
}

#[tokio::test]
async fn rate_limits_give_their_delay_every_documented_way() {
    let cases = [
        (
            Dialect::OpenAiChat,
            "openai_error_429_retry_after_seconds.http",
            Some(Duration::from_secs(1)),
        ),
        (Dialect::OpenAiChat, "openai_error_429_upstream.http", None),
        (
            Dialect::OpenAiChat,
            "google_error_429_retry_info.http",
            Some(Duration::from_secs(7)),
        ),
    ];
    for (dialect, file, retry_after) in cases {
        let out = call(dialect, transcript(file)).await;
        assert_eq!(
            out.error,
            Some(ModelErrorKind::RateLimited { retry_after }),
            "{file}"
        );
        assert!(out.chunks.is_empty(), "{file}");
    }
}

#[tokio::test]
async fn an_unsupported_parameter_is_a_bad_request_and_not_retried() {
    let out = call_with(
        Dialect::OpenAiChat,
        vec![
            transcript("openai_error_400_unsupported_parameter.http"),
            transcript("openai_chat_text.http"),
        ],
        weather_request(),
        2,
        |_| {},
    )
    .await;
    assert!(
        matches!(out.error.as_ref(), Some(ModelErrorKind::BadRequest(m)) if m.contains("max_completion_tokens")),
        "{:?}",
        out.error
    );
    assert_eq!(out.requests.len(), 1, "a bad request is not repeated");
}

/// Forge's follow-up request after two parallel calls has, in each dialect, the shape the
/// provider documents (`tests/transcripts/requests/`).
#[test]
fn requests_after_tool_results_have_the_documented_shape() {
    let tool = || weather_request().tools.remove(0);
    let conversation = |ids: [&'static str; 2], text: &str| {
        let [paris, oslo] = ids;
        after_tool_results(
            "Answer with the tools.",
            "What is the weather in Paris and Oslo?",
            text,
            tool(),
            [
                Call {
                    id: paris,
                    input: json!({"city": "Paris"}),
                    result: "18°C and sunny",
                },
                Call {
                    id: oslo,
                    input: json!({"city": "Oslo"}),
                    result: "4°C and rain",
                },
            ],
        )
    };
    let options = BodyOptions::default();

    let request = conversation(["toolu_paris", "toolu_oslo"], "Checking both cities.");
    let ours = Dialect::Anthropic.body(&request, &options);
    let theirs = request_golden("anthropic_after_tool_results");
    assert_anthropic_messages(&ours, &theirs);
    assert_eq!(
        ours["tools"][0]["input_schema"],
        theirs["tools"][0]["input_schema"]
    );
    assert_eq!(ours["tools"][0]["name"], "weather");

    let request = conversation(["call_paris", "call_oslo"], "");
    let ours = Dialect::OpenAiChat.body(&request, &options);
    let theirs = request_golden("openai_chat_after_tool_results");
    assert_chat_messages(&ours, &theirs);
    assert_eq!(
        ours["messages"][0], theirs["messages"][0],
        "the system message"
    );
    assert_eq!(
        ours["tools"][0]["function"]["parameters"],
        theirs["tools"][0]["function"]["parameters"]
    );
    assert_eq!(ours["stream_options"], theirs["stream_options"]);

    let ours = Dialect::OpenAiResponses.body(&request, &options);
    let theirs = request_golden("openai_responses_after_tool_results");
    assert_responses_input(&ours, &theirs);
    assert_eq!(ours["instructions"], theirs["instructions"]);
    assert_eq!(
        strip(ours["tools"].clone(), &["strict"]),
        strip(theirs["tools"].clone(), &["strict"])
    );
}

/// Groq's documented `tool_use_failed`, inside a stream: the model's error, classified to go
/// back to the model (issue 68, item 11) — not retried, not a provider failure.
#[tokio::test]
async fn groq_tool_use_failed_in_a_stream_is_an_invalid_tool_call() {
    let out = call_with(
        Dialect::OpenAiChat,
        vec![transcript("groq_tool_use_failed_in_stream.http")],
        weather_request(),
        2,
        |_| {},
    )
    .await;
    let Some(ModelErrorKind::InvalidToolCall { tool, message }) = &out.error else {
        panic!("{:?}", out.error);
    };
    assert_eq!(tool.as_deref(), Some("lookup"));
    assert!(
        message.contains(r#"<function=lookup>{"key": k0}</function>"#),
        "{message}"
    );
    assert_eq!(out.requests.len(), 1, "the same request is not sent again");
}
