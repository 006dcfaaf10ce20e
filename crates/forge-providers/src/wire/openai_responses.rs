//! OpenAI Responses: request body and stream decoding.
//!
//! Streams are typed events (`event:` and a `type` in the data). Function calls are output items
//! (`response.output_item.added` with `type: function_call`) whose arguments stream as
//! `response.function_call_arguments.delta` events keyed by `output_index`; text streams as
//! `response.output_text.delta`; usage arrives in `response.completed` (or `response.incomplete`).
//! Failures arrive as `response.failed` or an `error` event inside the 200 stream.

use std::collections::BTreeMap;

use forge_core::message::Role;
use forge_core::ports::model::{
    FinishReason, ModelChunk, ModelError, ModelErrorKind, ModelRequest,
};
use forge_core::usage::Usage;
use serde_json::{Value, json};

use super::errors::{error_details_json, stream_error};
use super::{
    BodyOptions, Decode, Flow, count, is_sendable, output_text, parse_json, text_of, tool_calls,
    tool_results,
};
use crate::sse::SseEvent;

/// The Responses body for `request`. Nothing is stored at the provider (`store: false`): Forge
/// sends the whole history every time, so a resumed run never depends on provider-side state.
pub fn body(request: &ModelRequest, _options: &BodyOptions) -> Value {
    let mut input = Vec::with_capacity(request.messages.len());
    for message in request.messages.iter().filter(|m| is_sendable(m)) {
        match message.role {
            Role::User => input.push(json!({"role": "user", "content": text_of(message)})),
            Role::Assistant => {
                if let Some(text) = text_of(message) {
                    input.push(json!({"role": "assistant", "content": text}));
                }
                input.extend(tool_calls(message).map(|c| {
                    json!({
                        "type": "function_call",
                        "call_id": c.tool_call_id.0,
                        "name": c.tool_name,
                        "arguments": c.input.to_string(),
                    })
                }));
            }
            Role::Tool => input.extend(tool_results(message).map(|r| {
                json!({
                    "type": "function_call_output",
                    "call_id": r.tool_call_id.0,
                    "output": output_text(&r.output),
                })
            })),
        }
    }
    let mut body = json!({
        "model": request.model,
        "input": input,
        "stream": true,
        "store": false,
    });
    if !request.system.is_empty() {
        body["instructions"] = json!(request.system);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                })
            })
            .collect();
    }
    if let Some(schema) = &request.output_schema {
        // Structured output, natively: the final answer is JSON matching the schema.
        body["text"] = json!({
            "format": {"type": "json_schema", "name": "final_answer", "schema": schema},
        });
    }
    if let Some(max) = request.max_output_tokens {
        body["max_output_tokens"] = json!(max);
    }
    if let Some(t) = request.temperature {
        body["temperature"] = json!(t);
    }
    body
}

/// Decoding state for one Responses stream.
#[derive(Debug, Default)]
pub struct Decoder {
    /// Output index of each function call → whether argument deltas arrived for it.
    calls: BTreeMap<u32, bool>,
    finish: Option<FinishReason>,
    model_seen: bool,
}

/// Usage from a Responses `usage` object.
pub fn usage(u: &Value) -> Usage {
    Usage {
        input_tokens: count(u, "input_tokens"),
        output_tokens: count(u, "output_tokens"),
        cache_read_tokens: u
            .get("input_tokens_details")
            .map_or(0, |d| count(d, "cached_tokens")),
        cache_write_tokens: 0,
        reasoning_tokens: u
            .get("output_tokens_details")
            .map_or(0, |d| count(d, "reasoning_tokens")),
        server_tool_requests: 0,
    }
}

fn index_of(event: &Value) -> u32 {
    event
        .get("output_index")
        .and_then(Value::as_u64)
        .unwrap_or(0) as u32
}

impl Decoder {
    fn item(&mut self, index: u32, item: &Value, out: &mut Vec<ModelChunk>) {
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                if self.calls.contains_key(&index) {
                    return;
                }
                let id = item
                    .get("call_id")
                    .or_else(|| item.get("id"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let name = item
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                out.push(ModelChunk::ToolCallStart { index, id, name });
                let arguments = item
                    .get("arguments")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let has_arguments = !arguments.is_empty();
                if has_arguments {
                    out.push(ModelChunk::ToolCallDelta {
                        index,
                        json: arguments.to_owned(),
                    });
                }
                self.calls.insert(index, has_arguments);
            }
            Some("message") => {
                for content in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let text = content
                        .get("text")
                        .or_else(|| content.get("refusal"))
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if !text.is_empty() {
                        out.push(ModelChunk::TextDelta(text.to_owned()));
                    }
                }
            }
            _ => {}
        }
    }

    fn completed(&mut self, response: &Value, out: &mut Vec<ModelChunk>) {
        if let Some(u) = response.get("usage").filter(|u| u.is_object()) {
            out.push(ModelChunk::Usage(usage(u)));
        }
        let incomplete = response
            .get("incomplete_details")
            .and_then(|d| d.get("reason"))
            .and_then(Value::as_str);
        self.finish = Some(match incomplete {
            Some("max_output_tokens") => FinishReason::Length,
            Some("content_filter") => FinishReason::ContentFilter,
            _ if !self.calls.is_empty() => FinishReason::ToolCalls,
            _ => FinishReason::Stop,
        });
    }
}

impl Decode for Decoder {
    fn event(&mut self, event: &SseEvent, out: &mut Vec<ModelChunk>) -> Result<Flow, ModelError> {
        let data = parse_json(&event.data)?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or_default();
        if let Some(response) = data.get("response") {
            super::report_model(&mut self.model_seen, response, out);
        }
        match kind {
            "response.output_item.added" => {
                if let Some(item) = data.get("item") {
                    // Text items stream their content as deltas; only calls start here.
                    if item.get("type").and_then(Value::as_str) == Some("function_call") {
                        self.item(index_of(&data), item, out);
                    }
                }
            }
            "response.function_call_arguments.delta" => {
                let index = index_of(&data);
                let delta = data
                    .get("delta")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if let Some(seen) = self.calls.get_mut(&index)
                    && !delta.is_empty()
                {
                    *seen = true;
                    out.push(ModelChunk::ToolCallDelta {
                        index,
                        json: delta.to_owned(),
                    });
                }
            }
            "response.function_call_arguments.done" => {
                // A server that sends only the final arguments still gets its call's input.
                let index = index_of(&data);
                if let Some(seen) = self.calls.get_mut(&index)
                    && !*seen
                    && let Some(arguments) = data.get("arguments").and_then(Value::as_str)
                {
                    *seen = true;
                    out.push(ModelChunk::ToolCallDelta {
                        index,
                        json: arguments.to_owned(),
                    });
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(delta) = data.get("delta").and_then(Value::as_str)
                    && !delta.is_empty()
                {
                    out.push(ModelChunk::TextDelta(delta.to_owned()));
                }
            }
            "response.completed" | "response.incomplete" => {
                let response = data.get("response").unwrap_or(&Value::Null);
                self.completed(response, out);
                return Ok(Flow::Done);
            }
            "response.failed" => {
                // What the failed response used is still spent: settle it.
                if let Some(u) = data
                    .get("response")
                    .and_then(|r| r.get("usage"))
                    .filter(|u| u.is_object())
                {
                    out.push(ModelChunk::Usage(usage(u)));
                }
                let error = data
                    .get("response")
                    .and_then(|r| r.get("error"))
                    .cloned()
                    .unwrap_or(Value::Null);
                let (kind, message) = error_details_json(&json!({ "error": error }));
                return Err(stream_error(&kind, &message));
            }
            "error" => {
                let (kind, message) = error_details_json(&data);
                return Err(stream_error(&kind, &message));
            }
            _ => {}
        }
        Ok(Flow::More)
    }

    fn end(&mut self, out: &mut Vec<ModelChunk>) -> Result<(), ModelError> {
        let finish = self.finish.ok_or_else(|| {
            ModelErrorKind::MalformedStream("the stream ended before response.completed".into())
        })?;
        out.push(ModelChunk::Finish(finish));
        Ok(())
    }

    fn whole(&mut self, body: &Value, out: &mut Vec<ModelChunk>) -> Result<(), ModelError> {
        if body.get("error").is_some_and(|e| !e.is_null()) {
            let (kind, message) = error_details_json(body);
            return Err(stream_error(&kind, &message));
        }
        super::report_model(&mut self.model_seen, body, out);
        for (index, item) in body
            .get("output")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            self.item(index as u32, item, out);
        }
        self.completed(body, out);
        self.end(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Dialect;
    use crate::wire::test_support::round_trip;

    #[test]
    fn the_body_flattens_calls_and_outputs_into_input_items() {
        let body = body(&round_trip(), &BodyOptions::default());
        assert_eq!(body["instructions"], "Be brief.");
        assert_eq!(body["store"], false);
        assert_eq!(
            body["input"],
            json!([
                {"role": "user", "content": "What is 12 times 7?"},
                {"role": "assistant", "content": "Let me check."},
                {"type": "function_call", "call_id": "call_1", "name": "calculate",
                 "arguments": r#"{"op":"mul","a":12,"b":7}"#},
                {"type": "function_call", "call_id": "call_2", "name": "calculate",
                 "arguments": r#"{"op":"div","a":1,"b":0}"#},
                {"type": "function_call_output", "call_id": "call_1", "output": r#"{"result":84}"#},
                {"type": "function_call_output", "call_id": "call_2",
                 "output": r#"{"code":"division_by_zero","message":"b is 0"}"#},
            ])
        );
        assert_eq!(body["tools"][0]["name"], "calculate");
    }

    #[test]
    fn a_failed_response_is_a_classified_stream_error() {
        let body = concat!(
            "event: response.failed\n",
            r#"data: {"type":"response.failed","response":{"error":{"code":"server_error","message":"oops"}}}"#,
            "\n\n"
        );
        let err = Dialect::OpenAiResponses
            .decode_body(body.as_bytes(), false)
            .result()
            .unwrap_err();
        assert!(err.is_retryable(), "{err:?}");
    }

    /// A failed response's usage is settled, not dropped with the error (issue 17, item 6).
    #[test]
    fn a_failed_responses_usage_is_kept() {
        let body = b"data: {\"type\":\"response.failed\",\"response\":{\"error\":{\"code\":\"server_error\",\"message\":\"oops\"},\"usage\":{\"input_tokens\":50,\"output_tokens\":3}}}\n\n";
        let decoded = Dialect::OpenAiResponses.decode_body(body, false);
        assert!(decoded.error.is_some());
        assert!(
            decoded
                .chunks
                .iter()
                .any(|c| matches!(c, ModelChunk::Usage(u) if u.input_tokens == 50 && u.output_tokens == 3)),
            "{:?}",
            decoded.chunks
        );
    }
}
