//! OpenAI Chat Completions: request body and stream decoding.
//!
//! Streams are `data:` events of `chat.completion.chunk` objects ending with `data: [DONE]`.
//! Parallel tool calls arrive as `delta.tool_calls[]` fragments told apart by `index`: the first
//! fragment of a call carries its id and name, later ones more argument text. With
//! `stream_options.include_usage`, a last chunk with `choices: []` carries the usage; an error may
//! arrive as a chunk with an `error` object even though the HTTP status was 200.

use std::collections::BTreeSet;

use forge_core::message::Role;
use forge_core::ports::model::{FinishReason, ModelChunk, ModelError, ModelRequest};
use forge_core::usage::Usage;
use serde_json::{Value, json};

use super::errors::{error_details_json, stream_error};
use super::{
    BodyOptions, Decode, Flow, count, is_sendable, output_text, parse_json, text_of, tool_calls,
    tool_results,
};
use crate::sse::SseEvent;

/// The Chat Completions body for `request`.
pub fn body(request: &ModelRequest, options: &BodyOptions) -> Value {
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

/// Decoding state for one Chat Completions response.
#[derive(Debug, Default)]
pub struct Decoder {
    started: BTreeSet<u32>,
    finish: Option<FinishReason>,
    done: bool,
    model_seen: bool,
}

/// Usage from a Chat Completions `usage` object.
pub fn usage(u: &Value) -> Usage {
    Usage {
        input_tokens: count(u, "prompt_tokens"),
        output_tokens: count(u, "completion_tokens"),
        cache_read_tokens: u
            .get("prompt_tokens_details")
            .map_or(0, |d| count(d, "cached_tokens")),
        cache_write_tokens: 0,
        reasoning_tokens: u
            .get("completion_tokens_details")
            .map_or(0, |d| count(d, "reasoning_tokens")),
        server_tool_requests: 0,
    }
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "length" => FinishReason::Length,
        "content_filter" => FinishReason::ContentFilter,
        _ => FinishReason::Stop,
    }
}

impl Decoder {
    fn tool_call(&mut self, position: usize, call: &Value, out: &mut Vec<ModelChunk>) {
        let index = call
            .get("index")
            .and_then(Value::as_u64)
            .map_or(position as u32, |i| i as u32);
        let function = call.get("function");
        if self.started.insert(index) {
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .map_or_else(|| format!("call_{index}"), str::to_owned);
            let name = function
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            out.push(ModelChunk::ToolCallStart { index, id, name });
        }
        // Some compatible servers send the arguments as an object rather than as JSON text.
        let json = match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        if !json.is_empty() {
            out.push(ModelChunk::ToolCallDelta { index, json });
        }
    }

    fn message(&mut self, message: &Value, out: &mut Vec<ModelChunk>) {
        for key in ["content", "refusal"] {
            if let Some(text) = message.get(key).and_then(Value::as_str)
                && !text.is_empty()
            {
                out.push(ModelChunk::TextDelta(text.to_owned()));
            }
        }
        if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
            for (position, call) in calls.iter().enumerate() {
                self.tool_call(position, call, out);
            }
        }
    }

    fn finished(&self) -> FinishReason {
        self.finish.unwrap_or(if self.started.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        })
    }
}

impl Decode for Decoder {
    fn event(&mut self, event: &SseEvent, out: &mut Vec<ModelChunk>) -> Result<Flow, ModelError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(Flow::Done);
        }
        let chunk = parse_json(data)?;
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            // Usage reported beside the error is still spent: settle it.
            if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
                out.push(ModelChunk::Usage(usage(u)));
            }
            let (kind, message) = error_details_json(&chunk);
            return Err(stream_error(&kind, &message));
        }
        super::report_model(&mut self.model_seen, &chunk, out);
        if let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| {
                c.iter()
                    .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
            })
        {
            if let Some(delta) = choice.get("delta") {
                self.message(delta, out);
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish = Some(finish_reason(reason));
            }
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            out.push(ModelChunk::Usage(usage(u)));
        }
        Ok(Flow::More)
    }

    fn end(&mut self, out: &mut Vec<ModelChunk>) -> Result<(), ModelError> {
        if !self.done && self.finish.is_none() {
            return Err(ModelError::MalformedStream(
                "the stream ended before the response finished".into(),
            ));
        }
        out.push(ModelChunk::Finish(self.finished()));
        Ok(())
    }

    fn whole(&mut self, body: &Value, out: &mut Vec<ModelChunk>) -> Result<(), ModelError> {
        if body.get("error").is_some_and(|e| !e.is_null()) {
            let (kind, message) = error_details_json(body);
            return Err(stream_error(&kind, &message));
        }
        super::report_model(&mut self.model_seen, body, out);
        let choice = body
            .get("choices")
            .and_then(|c| c.get(0))
            .ok_or_else(|| ModelError::MalformedStream("the response has no choices".into()))?;
        if let Some(message) = choice.get("message") {
            self.message(message, out);
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(finish_reason(reason));
        }
        if let Some(u) = body.get("usage").filter(|u| u.is_object()) {
            out.push(ModelChunk::Usage(usage(u)));
        }
        out.push(ModelChunk::Finish(self.finished()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Dialect;
    use crate::wire::test_support::round_trip;

    #[test]
    fn the_body_carries_history_tools_and_usage_request() {
        let mut request = round_trip();
        request.max_output_tokens = Some(100);
        let body = body(&request, &BodyOptions::default());
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is 12 times 7?"},
                {"role": "assistant", "content": "Let me check.", "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "calculate", "arguments": r#"{"op":"mul","a":12,"b":7}"#}},
                    {"id": "call_2", "type": "function",
                     "function": {"name": "calculate", "arguments": r#"{"op":"div","a":1,"b":0}"#}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": r#"{"result":84}"#},
                {"role": "tool", "tool_call_id": "call_2",
                 "content": r#"{"code":"division_by_zero","message":"b is 0"}"#},
            ])
        );
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        assert_eq!(body["tools"][0]["function"]["name"], "calculate");
        assert_eq!(body["max_tokens"], 100);
        let openai = super::body(
            &request,
            &BodyOptions {
                max_completion_tokens: true,
                ..BodyOptions::default()
            },
        );
        assert_eq!(openai["max_completion_tokens"], 100);
        assert!(openai.get("max_tokens").is_none());
    }

    #[test]
    fn a_stream_without_done_or_finish_is_malformed() {
        let body = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";
        let err = Dialect::OpenAiChat
            .decode_body(body, false)
            .result()
            .unwrap_err();
        assert!(matches!(err, ModelError::MalformedStream(_)), "{err:?}");
    }

    #[test]
    fn an_error_chunk_in_a_200_stream_is_a_stream_error() {
        let body = b"data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\n";
        let err = Dialect::OpenAiChat
            .decode_body(body, false)
            .result()
            .unwrap_err();
        assert_eq!(
            err,
            ModelError::StreamError {
                message: "server_error: boom".into(),
                retryable: true
            }
        );
    }

    /// Usage an OpenAI-compatible server reports beside an in-stream error is still spent and
    /// settled, not dropped with the error (issue 17, item 6).
    #[test]
    fn usage_beside_an_in_stream_error_is_kept() {
        let body = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n\
data: {\"error\":{\"message\":\"upstream reset\",\"type\":\"server_error\"},\"usage\":{\"prompt_tokens\":120,\"completion_tokens\":7}}\n\n";
        let decoded = Dialect::OpenAiChat.decode_body(body, false);
        assert!(decoded.error.is_some());
        let usage = decoded.chunks.iter().find_map(|c| match c {
            ModelChunk::Usage(u) => Some(*u),
            _ => None,
        });
        assert_eq!(
            usage.map(|u| (u.input_tokens, u.output_tokens)),
            Some((120, 7))
        );
    }
}
