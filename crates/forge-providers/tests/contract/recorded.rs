//! Every transcript recorded from the real provider APIs by other projects' test suites (the shared
//! folder named by `FORGE_WIRE_FIXTURES`; see its MANIFEST) replayed through the adapters, each
//! parsed to what its MANIFEST row describes. The transcripts are read in place, never copied:
//! without the variable these tests check nothing and say so (see [`fixtures`]).

use std::path::PathBuf;
use std::time::Duration;

use forge_core::ports::model::{FinishReason, ModelErrorKind};
use forge_core::usage::Usage;
use forge_providers::Dialect;
use forge_testkit::wire::Reply;
use serde_json::{Value, json};

use crate::support::*;

/// The shared folder of recorded transcripts, named by `FORGE_WIRE_FIXTURES` (`.ci/run` sets it).
/// The recordings are other projects' test data and stay outside this repository (their
/// MANIFEST says so); without the variable these two tests say so and check nothing, while
/// `scenarios` and `documented_requests` cover the same wire behaviours with transcripts
/// written here from the providers' documented formats.
fn fixtures() -> Option<PathBuf> {
    let Some(dir) = std::env::var_os("FORGE_WIRE_FIXTURES").filter(|v| !v.is_empty()) else {
        eprintln!(
            "skipped: FORGE_WIRE_FIXTURES is not set, so the recorded provider transcripts are not \
             replayed (set it to the shared fixtures/providers folder; .ci/run does)"
        );
        return None;
    };
    let dir = PathBuf::from(dir);
    assert!(
        dir.join("MANIFEST.md").is_file(),
        "FORGE_WIRE_FIXTURES names {}, which holds no recorded transcripts (no MANIFEST.md)",
        dir.display()
    );
    Some(dir)
}

enum Expect {
    Parsed {
        text: &'static str,
        calls: Vec<(&'static str, &'static str, Value)>,
        usage: Usage,
        finish: FinishReason,
    },
    Failed(fn(&ModelErrorKind) -> bool),
}

fn usage(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: cache_read,
        cache_write_tokens: cache_write,
        reasoning_tokens: 0,
        server_tool_requests: 0,
    }
}

fn secret_calls(ids: [&'static str; 2]) -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            ids[0],
            "secret_retrieval_tool",
            json!({"password": "mellon"}),
        ),
        (
            ids[1],
            "secret_retrieval_tool",
            json!({"password": "radiance"}),
        ),
    ]
}

/// What each recorded file must parse to, from its MANIFEST row.
fn expectations() -> Vec<(&'static str, Dialect, Expect)> {
    use Dialect::*;
    use Expect::*;
    vec![
        (
            "openai-chat_stream_parallel_tool_calls_include_usage.http",
            OpenAiChat,
            Parsed {
                text: "",
                calls: secret_calls([
                    "call_M26z19sncd7b4LBgzKRRbaUE",
                    "call_KPXe5NX7IcKkaBUhc6dto2QV",
                ]),
                usage: usage(75, 53, 0, 0),
                finish: FinishReason::ToolCalls,
            },
        ),
        (
            "openai-chat_stream_after_tool_results_include_usage.http",
            OpenAiChat,
            Parsed {
                text: "The secrets associated with the passwords are:\n\n- \"mellon\": Welcome to Moria!\n- \"radiance\": Life before Death",
                calls: vec![],
                usage: usage(149, 28, 0, 0),
                finish: FinishReason::Stop,
            },
        ),
        (
            "openai-chat_stream_single_tool_call_include_usage_2026.http",
            OpenAiChat,
            Parsed {
                text: "",
                calls: vec![(
                    "call_ZR5UUuTt3pf61kjwAJIYdVMj",
                    "get_capital",
                    json!({"country": "UK"}),
                )],
                usage: usage(53, 15, 0, 0),
                finish: FinishReason::ToolCalls,
            },
        ),
        (
            "openai-responses_stream_parallel_function_calls.http",
            OpenAiResponses,
            Parsed {
                text: "",
                calls: secret_calls([
                    "call_sKC7OABqf2A2PTLCm0CLeRWV",
                    "call_OdR3s3xop0vtgkDyWRMLafuH",
                ]),
                usage: usage(36, 54, 0, 0),
                finish: FinishReason::ToolCalls,
            },
        ),
        (
            "openai-responses_stream_text_after_function_outputs.http",
            OpenAiResponses,
            Parsed {
                text: "Here are the secrets associated with each password:\n\n- **mellon**: Welcome to Moria!\n- **radiance**: Life before Death",
                calls: vec![],
                usage: usage(136, 32, 0, 0),
                finish: FinishReason::Stop,
            },
        ),
        (
            "anthropic_stream_parallel_tool_use_input_json_delta.http",
            Anthropic,
            Parsed {
                text: "I'll retrieve the secrets for both passwords you provided.",
                calls: secret_calls([
                    "toolu_015cUijgET79LXjgeYQerN2h",
                    "toolu_01XZTimPexA7h3EVKesnKt5T",
                ]),
                usage: usage(416, 109, 0, 0),
                finish: FinishReason::ToolCalls,
            },
        ),
        (
            "anthropic_stream_text_after_tool_results.http",
            Anthropic,
            Parsed {
                text: "Here are the secrets retrieved for each password:\n\n1. **Password \"mellon\"**: \"Welcome to Moria!\"\n2. **Password \"radiance\"**: \"Life before Death\"\n\nBoth secrets have been successfully retrieved!",
                calls: vec![],
                usage: usage(602, 52, 0, 0),
                finish: FinishReason::Stop,
            },
        ),
        // Non-streamed JSON: cache write, then the same prompt read from the cache.
        (
            "anthropic_json_prompt_cache_write.http",
            Anthropic,
            Parsed {
                text: "OK",
                calls: vec![],
                usage: usage(10 + 7351, 4, 0, 7351),
                finish: FinishReason::Stop,
            },
        ),
        (
            "anthropic_json_prompt_cache_read.http",
            Anthropic,
            Parsed {
                text: "OK",
                calls: vec![],
                usage: usage(10 + 7351, 4, 7351, 0),
                finish: FinishReason::Stop,
            },
        ),
        // Server tools (code execution) run at Anthropic: not calls for Forge to run. Final usage
        // from message_delta: 6 + 3337 written + 6289 read.
        (
            "anthropic_stream_code_execution_cache_creation_and_read.chunks.jsonl",
            Anthropic,
            Parsed {
                text: "The sum of the squares of the numbers 1 through 12 is **650**.",
                calls: vec![],
                usage: usage(6 + 3337 + 6289, 198, 6289, 3337),
                finish: FinishReason::Stop,
            },
        ),
        // message_delta's input_tokens (61) replaces message_start's (43).
        (
            "anthropic_stream_message_delta_input_tokens.chunks.jsonl",
            Anthropic,
            Parsed {
                text: "pong",
                calls: vec![],
                usage: usage(61, 2, 0, 0),
                finish: FinishReason::Stop,
            },
        ),
        (
            "anthropic_error_400_prompt_too_long.http",
            Anthropic,
            Failed(|e| *e == ModelErrorKind::ContextLengthExceeded),
        ),
        (
            "anthropic_error_401_authentication_error.http",
            Anthropic,
            Failed(|e| *e == ModelErrorKind::Authentication),
        ),
        (
            "anthropic_error_404_not_found_model.http",
            Anthropic,
            Failed(
                |e| matches!(e, ModelErrorKind::NotFound(m) if m.contains("this-model-does-not-exist-12345")),
            ),
        ),
        (
            "azure-ai_error_429_retry_after.http",
            OpenAiChat,
            Failed(|e| {
                *e == ModelErrorKind::RateLimited {
                    retry_after: Some(Duration::from_secs(1)),
                }
            }),
        ),
        (
            "openrouter_error_429_upstream_rate_limited.http",
            OpenAiChat,
            Failed(|e| *e == ModelErrorKind::RateLimited { retry_after: None }),
        ),
        (
            "openai-chat_error_400_unsupported_parameter.http",
            OpenAiChat,
            Failed(
                |e| matches!(e, ModelErrorKind::BadRequest(m) if m.contains("'stop' is not supported")),
            ),
        ),
        (
            "openai-chat_error_400_max_tokens_unsupported.json",
            OpenAiChat,
            Failed(
                |e| matches!(e, ModelErrorKind::BadRequest(m) if m.contains("max_completion_tokens")),
            ),
        ),
        (
            "openai-chat_error_401_invalid_api_key.http",
            OpenAiChat,
            Failed(|e| *e == ModelErrorKind::Authentication),
        ),
        (
            "openai-chat_error_404_model_not_found.http",
            OpenAiChat,
            Failed(|e| matches!(e, ModelErrorKind::NotFound(m) if m.contains("does not exist"))),
        ),
        (
            "openai-responses_error_400_context_length_exceeded.http",
            OpenAiResponses,
            Failed(|e| *e == ModelErrorKind::ContextLengthExceeded),
        ),
        (
            "openai-responses_error_400_invalid_temperature.http",
            OpenAiResponses,
            Failed(|e| matches!(e, ModelErrorKind::BadRequest(m) if m.contains("temperature"))),
        ),
    ]
}

/// A recorded file as the server reply it was.
fn reply(dir: &std::path::Path, name: &str) -> Reply {
    let bytes = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    if name.ends_with(".http") {
        Reply::from_http(&bytes).unwrap_or_else(|| panic!("{name} is not an HTTP transcript"))
    } else if name.ends_with(".chunks.jsonl") {
        // One data payload per line: rebuild the SSE framing, `event:` from each payload's type.
        let mut body = String::new();
        for line in String::from_utf8(bytes).expect("utf-8").lines() {
            if line.trim().is_empty() {
                continue;
            }
            let kind = serde_json::from_str::<Value>(line).expect("a JSON line")["type"]
                .as_str()
                .map(str::to_owned);
            if let Some(kind) = kind {
                body.push_str(&format!("event: {kind}\n"));
            }
            body.push_str(&format!("data: {line}\n\n"));
        }
        Reply::sse(body)
    } else {
        // An error body only: a 400 is what carried it.
        Reply::json(400, bytes)
    }
}

#[tokio::test]
async fn every_recorded_transcript_parses_to_its_manifest_row() {
    let Some(dir) = fixtures() else { return };
    let expectations = expectations();
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .expect("fixtures folder")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "MANIFEST.md")
        .collect();
    on_disk.sort();
    let mut expected: Vec<String> = expectations
        .iter()
        .map(|(n, _, _)| (*n).to_owned())
        .collect();
    expected.sort();
    assert_eq!(
        on_disk, expected,
        "every recorded transcript has an expectation, and only those"
    );

    for (name, dialect, expect) in expectations {
        let out = call_with(
            dialect,
            vec![reply(&dir, name)],
            weather_request(),
            0,
            |_| {},
        )
        .await;
        match expect {
            Expect::Parsed {
                text,
                calls,
                usage,
                finish,
            } => {
                assert_eq!(out.error, None, "{name}");
                let s = &out.summary;
                assert_eq!(s.text, text, "{name}");
                let calls: Vec<(String, String, Value)> = calls
                    .into_iter()
                    .map(|(id, n, input)| (id.to_owned(), n.to_owned(), input))
                    .collect();
                assert_eq!(s.calls, calls, "{name}");
                assert_eq!(s.usage, Some(usage), "{name}");
                assert_eq!(s.finish, Some(finish), "{name}");
                // Issue 17, item 11: the model the provider says answered is kept.
                assert!(
                    s.model.as_deref().is_some_and(|m| !m.is_empty()),
                    "{name}: no reported model"
                );
            }
            Expect::Failed(check) => {
                let error = out
                    .error
                    .unwrap_or_else(|| panic!("{name} parsed as a success"));
                assert!(check(&error), "{name}: {error:?}");
                assert!(out.chunks.is_empty(), "{name}");
            }
        }
    }
}

/// The recorded follow-up requests were accepted by the real APIs: Forge's body for the same
/// conversation has the same shape (roles, call ids, tool results, tools).
#[tokio::test]
async fn forge_sends_what_the_real_apis_accepted() {
    use forge_core::ports::model::ToolDescriptor;
    use forge_providers::BodyOptions;

    let Some(dir) = fixtures() else { return };
    let recorded = |name: &str| -> Value {
        let path = dir.join("requests").join(format!("{name}.request.json"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        serde_json::from_str::<Value>(&text).expect("json")["body"].clone()
    };
    // The conversation of the "after tool results" recordings, as Forge stores it.
    let conversation = |ids: [&str; 2], text: &str| {
        let [a, b] = ids;
        after_tool_results(
            "Use parallel tool calling.",
            "Please retrieve the secrets associated with each of these passwords: mellon,radiance",
            text,
            ToolDescriptor {
                name: "secret_retrieval_tool".into(),
                description: "A tool that requires a password to retrieve a secret.".into(),
                input_schema: json!({"type": "object"}),
            },
            [
                Call {
                    id: a,
                    input: json!({"password": "mellon"}),
                    result: "Welcome to Moria!",
                },
                Call {
                    id: b,
                    input: json!({"password": "radiance"}),
                    result: "Life before Death",
                },
            ],
        )
    };
    let options = BodyOptions::default();
    let request = conversation(
        [
            "toolu_015cUijgET79LXjgeYQerN2h",
            "toolu_01XZTimPexA7h3EVKesnKt5T",
        ],
        "I'll retrieve the secrets for both passwords you provided.",
    );
    assert_anthropic_messages(
        &Dialect::Anthropic.body(&request, &options),
        &recorded("anthropic_stream_text_after_tool_results"),
    );
    let request = conversation(
        [
            "call_M26z19sncd7b4LBgzKRRbaUE",
            "call_KPXe5NX7IcKkaBUhc6dto2QV",
        ],
        "",
    );
    assert_chat_messages(
        &Dialect::OpenAiChat.body(&request, &options),
        &recorded("openai-chat_stream_after_tool_results_include_usage"),
    );
    let request = conversation(
        [
            "call_sKC7OABqf2A2PTLCm0CLeRWV",
            "call_OdR3s3xop0vtgkDyWRMLafuH",
        ],
        "",
    );
    let ours = Dialect::OpenAiResponses.body(&request, &options);
    assert_responses_input(
        &ours,
        &recorded("openai-responses_stream_text_after_function_outputs"),
    );
    assert_eq!(ours["instructions"], "Use parallel tool calling.");
}
