//! The Chat Completions request body: structs that borrow what the request holds, serialized
//! straight to the bytes sent (no tree of maps built and dropped for every model call), or to a
//! `Value` for [`super::openai_chat::body`]. A test holds them to a body built by hand.

use std::borrow::Cow;

use forge_core::message::Role;
use forge_core::ports::model::ModelRequest;
use serde::Serialize;
use serde_json::Value;

use super::{BodyOptions, is_sendable, output_text, text_of, tool_calls, tool_results};

/// The body: the fields `openai_chat::body` sets, in its order; absent options are left out.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Vec<Message<'a>>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<Tool<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<ResponseFormat<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    /// As `f64`, as a `Value` holds an `f32` (so the digits are the same).
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
}

/// `stream_options`: usage in the last chunk.
#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// One message: `tool_call_id` only for a tool result, `tool_calls` only for an assistant
/// message that made calls; `content` always (null when a message has no text).
#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    content: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<Call<'a>>>,
}

/// A call an assistant message made.
#[derive(Serialize)]
struct Call<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: CallFunction<'a>,
}

/// A call's function: its name and its arguments as JSON text.
#[derive(Serialize)]
struct CallFunction<'a> {
    name: &'a str,
    arguments: String,
}

/// A tool offered to the model.
#[derive(Serialize)]
struct Tool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: ToolFunction<'a>,
}

/// A tool's name, description and parameters' schema.
#[derive(Serialize)]
struct ToolFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

/// Structured output: the final answer as JSON matching `schema`.
#[derive(Serialize)]
struct ResponseFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    json_schema: JsonSchema<'a>,
}

/// The schema of [`ResponseFormat`], named.
#[derive(Serialize)]
struct JsonSchema<'a> {
    name: &'static str,
    schema: &'a Value,
}

/// The Chat Completions body for `request`, as the JSON bytes to send.
pub(crate) fn encode(
    request: &ModelRequest,
    options: &BodyOptions,
) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(&of(request, options))
}

/// The Chat Completions body for `request`, as a `Value`.
pub(crate) fn value(request: &ModelRequest, options: &BodyOptions) -> Value {
    // Cannot fail: every map is a struct or a `Value`, whose keys are strings.
    serde_json::to_value(of(request, options)).unwrap_or(Value::Null)
}

/// The body's structs for `request`.
fn of<'a>(request: &'a ModelRequest, options: &BodyOptions) -> Body<'a> {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(Message {
            role: "system",
            tool_call_id: None,
            content: Some(Cow::Borrowed(&request.system)),
            tool_calls: None,
        });
    }
    for message in request.messages.iter().filter(|m| is_sendable(m)) {
        match message.role {
            Role::User => messages.push(Message {
                role: "user",
                tool_call_id: None,
                content: text_of(message).map(Cow::Owned),
                tool_calls: None,
            }),
            Role::Assistant => {
                let calls: Vec<Call<'_>> = tool_calls(message)
                    .map(|c| Call {
                        id: &c.tool_call_id.0,
                        kind: "function",
                        function: CallFunction {
                            name: &c.tool_name,
                            arguments: c.input.to_string(),
                        },
                    })
                    .collect();
                messages.push(Message {
                    role: "assistant",
                    tool_call_id: None,
                    content: text_of(message).map(Cow::Owned),
                    tool_calls: (!calls.is_empty()).then_some(calls),
                });
            }
            Role::Tool => messages.extend(tool_results(message).map(|r| Message {
                role: "tool",
                tool_call_id: Some(&r.tool_call_id.0),
                content: Some(Cow::Owned(output_text(&r.output))),
                tool_calls: None,
            })),
        }
    }
    let tools = (!request.tools.is_empty()).then(|| {
        request
            .tools
            .iter()
            .map(|t| Tool {
                kind: "function",
                function: ToolFunction {
                    name: &t.name,
                    description: &t.description,
                    parameters: &t.input_schema,
                },
            })
            .collect()
    });
    let (max_tokens, max_completion_tokens) = if options.max_completion_tokens {
        (None, request.max_output_tokens)
    } else {
        (request.max_output_tokens, None)
    };
    Body {
        model: &request.model,
        messages,
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
        tools,
        response_format: request.output_schema.as_ref().map(|schema| ResponseFormat {
            kind: "json_schema",
            json_schema: JsonSchema {
                name: "final_answer",
                schema,
            },
        }),
        max_tokens,
        max_completion_tokens,
        temperature: request.temperature.map(f64::from),
    }
}

#[cfg(test)]
mod tests {
    use forge_core::ports::model::ToolDescriptor;
    use serde_json::json;

    use super::*;
    use crate::wire::openai_chat;
    use crate::wire::test_support::round_trip;
    use crate::wire::{is_sendable, output_text, text_of, tool_calls, tool_results};

    /// The body built by hand as a `Value`, field by field (how `openai_chat::body` was
    /// written before the structs): the reference both forms are held to.
    fn by_hand(request: &ModelRequest, options: &BodyOptions) -> Value {
        let mut messages = Vec::with_capacity(request.messages.len() + 1);
        if !request.system.is_empty() {
            messages.push(json!({"role": "system", "content": request.system}));
        }
        for message in request.messages.iter().filter(|m| is_sendable(m)) {
            match message.role {
                Role::User => messages.push(json!({"role": "user", "content": text_of(message)})),
                Role::Assistant => {
                    let calls: Vec<Value> = tool_calls(message)
                        .map(|c| {
                            json!({
                                "id": c.tool_call_id.0,
                                "type": "function",
                                "function": {"name": c.tool_name, "arguments": c.input.to_string()},
                            })
                        })
                        .collect();
                    let mut m = json!({"role": "assistant", "content": text_of(message)});
                    if !calls.is_empty() {
                        m["tool_calls"] = Value::Array(calls);
                    }
                    messages.push(m);
                }
                Role::Tool => messages.extend(tool_results(message).map(|r| {
                    json!({
                        "role": "tool",
                        "tool_call_id": r.tool_call_id.0,
                        "content": output_text(&r.output),
                    })
                })),
            }
        }
        let mut body = json!({
            "model": request.model,
            "messages": messages,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": t.name,
                            "description": t.description,
                            "parameters": t.input_schema,
                        },
                    })
                })
                .collect();
        }
        if let Some(schema) = &request.output_schema {
            // Structured output, natively: the final answer is JSON matching the schema.
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": {"name": "final_answer", "schema": schema},
            });
        }
        if let Some(max) = request.max_output_tokens {
            let field = if options.max_completion_tokens {
                "max_completion_tokens"
            } else {
                "max_tokens"
            };
            body[field] = json!(max);
        }
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        body
    }

    /// The bytes `encode` sends, and `openai_chat::body`'s `Value`, are those of the body built
    /// by hand, for requests with and without each optional part.
    #[test]
    fn the_encoded_body_is_the_values_bytes() {
        let full = {
            let mut r = round_trip();
            r.max_output_tokens = Some(100);
            r.temperature = Some(0.7);
            r.output_schema =
                Some(json!({"type": "object", "properties": {"a": {"type": "string"}}}));
            // A user message whose text is empty, an assistant message of calls only, and a
            // tool's output that is a string.
            let mut empty = r.messages[0].clone();
            empty.parts = vec![forge_core::part::Part::text("")];
            let mut calls = r.messages[1].clone();
            calls
                .parts
                .retain(|p| matches!(p, forge_core::part::Part::ToolCall(_)));
            let mut text = r.messages[2].clone();
            if let Some(forge_core::part::Part::ToolResult(result)) = text.parts.first_mut() {
                result.output = json!("plain \"text\"");
            }
            r.messages.extend([empty, calls, text]);
            r.tools.push(ToolDescriptor {
                name: "quote\"d".into(),
                description: "Escapes \\ and \u{e9}.".into(),
                input_schema: json!({"type": "object"}),
            });
            r
        };
        let bare = {
            let mut r = round_trip();
            r.system.clear();
            r.tools.clear();
            r
        };
        let mut cases = 0;
        for request in [round_trip(), full, bare] {
            for max_completion_tokens in [false, true] {
                let options = BodyOptions {
                    max_completion_tokens,
                    ..BodyOptions::default()
                };
                let expected = by_hand(&request, &options);
                let encoded = encode(&request, &options).unwrap();
                assert_eq!(
                    String::from_utf8(encoded).unwrap(),
                    serde_json::to_string(&expected).unwrap(),
                    "max_completion_tokens = {max_completion_tokens}"
                );
                assert_eq!(openai_chat::body(&request, &options), expected);
                cases += 1;
            }
        }
        assert_eq!(cases, 6);
    }
}
