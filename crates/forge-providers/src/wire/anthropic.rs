//! Anthropic Messages: request body and stream decoding.
//!
//! Streams are typed events: `message_start` (with the input usage), `content_block_start` /
//! `content_block_delta` / `content_block_stop` per block (`text_delta`, `input_json_delta` for a
//! `tool_use` block), `message_delta` (stop reason and the final usage, whose counts replace
//! `message_start`'s where given), `message_stop`, `ping`, and `error` inside a 200 stream.
//!
//! Anthropic's `input_tokens` excludes cached prompt tokens; Forge's [`Usage::input_tokens`]
//! includes them, so input = `input_tokens` + `cache_creation_input_tokens` +
//! `cache_read_input_tokens`, summed over `usage.iterations` when a response sampled more than
//! once (see [`usage`]); a later zero never replaces a count already reported. Server-side tools
//! (`server_tool_use`, run by Anthropic itself) are not calls for Forge to execute and are not
//! surfaced as tool calls.

use std::collections::BTreeSet;

use forge_core::message::Role;
use forge_core::part::Part;
use forge_core::ports::model::{
    FinishReason, ModelChunk, ModelError, ModelErrorKind, ModelRequest,
};
use forge_core::usage::Usage;
use serde_json::{Map, Value, json};

use super::errors::{error_details_json, stream_error};
use super::{BodyOptions, Decode, Flow, is_sendable, output_text, parse_json, text_of};
use crate::sse::SseEvent;

/// The Messages body for `request`. The system prompt and the tool list are marked as a prompt
/// cache breakpoint: they repeat on every step of a run.
pub fn body(request: &ModelRequest, options: &BodyOptions) -> Value {
    let mut messages: Vec<Value> = Vec::with_capacity(request.messages.len());
    for message in request.messages.iter().filter(|m| is_sendable(m)) {
        let (role, content): (&str, Vec<Value>) = match message.role {
            Role::User => (
                "user",
                vec![json!({"type": "text", "text": text_of(message).unwrap_or_default()})],
            ),
            Role::Assistant => (
                "assistant",
                message
                    .parts
                    .iter()
                    .filter_map(|p| match p {
                        Part::Text(t) if !t.text.is_empty() => {
                            Some(json!({"type": "text", "text": t.text}))
                        }
                        Part::ToolCall(c) => Some(json!({
                            "type": "tool_use",
                            "id": c.tool_call_id.0,
                            "name": c.tool_name,
                            "input": if c.input.is_object() { c.input.clone() } else { json!({}) },
                        })),
                        _ => None,
                    })
                    .collect(),
            ),
            Role::Tool => (
                "user",
                message
                    .parts
                    .iter()
                    .filter_map(|p| match p {
                        Part::ToolResult(r) => Some(json!({
                            "type": "tool_result",
                            "tool_use_id": r.tool_call_id.0,
                            "content": output_text(&r.output),
                            "is_error": r.is_error,
                        })),
                        _ => None,
                    })
                    .collect(),
            ),
        };
        // Anthropic wants alternating roles: tool results and a following user message merge.
        match messages.last_mut() {
            Some(last) if last["role"] == role => {
                if let Some(blocks) = last["content"].as_array_mut() {
                    blocks.extend(content);
                }
            }
            _ => messages.push(json!({"role": role, "content": content})),
        }
    }
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_output_tokens.unwrap_or(options.default_max_tokens),
        "messages": messages,
        "stream": true,
    });
    if let Some(t) = request.temperature {
        body["temperature"] = json!(t);
    }
    // The Messages API has no response format that leaves tools free to call, so the schema
    // goes into the instructions; the engine validates the answer and asks once for a repair.
    let system = match &request.output_schema {
        Some(schema) => format!(
            "{}\n\nWhen you give your final answer, reply with only a JSON value (no prose, no \
             code fence) that matches this JSON Schema:\n{schema}",
            request.system
        ),
        None => request.system.clone(),
    };
    if !system.trim().is_empty() {
        body["system"] = json!([{
            "type": "text",
            "text": system.trim_start(),
            "cache_control": {"type": "ephemeral"},
        }]);
    }
    if !request.tools.is_empty() {
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.input_schema,
                })
            })
            .collect();
        if let Some(last) = tools.last_mut() {
            last["cache_control"] = json!({"type": "ephemeral"});
        }
        body["tools"] = Value::Array(tools);
    }
    body
}

/// Decoding state for one Messages stream.
#[derive(Debug, Default)]
pub struct Decoder {
    /// Anthropic's raw usage counters, merged as `message_start` and `message_delta` report them.
    usage: Map<String, Value>,
    /// Content-block indices that are client tool calls.
    tool_blocks: BTreeSet<u32>,
    finish: Option<FinishReason>,
    stopped: bool,
    model_seen: bool,
}

/// Usage from Anthropic's counters.
///
/// A response that sampled more than once (server-side compaction summarising the conversation
/// before answering, as a compacting proxy does too) reports each sampling in `usage.iterations`,
/// and its top-level counters are the final iteration's alone: every counter is then the sum
/// over the iterations (never less than the top level says).
pub fn usage(u: &Value) -> Usage {
    let top = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let iterations = u
        .get("iterations")
        .and_then(Value::as_array)
        .filter(|items| !items.is_empty());
    let n = |k: &str| match iterations {
        Some(items) => items
            .iter()
            .filter_map(|i| i.get(k).and_then(Value::as_u64))
            .fold(0u64, u64::saturating_add)
            .max(top(k)),
        None => top(k),
    };
    let cache_write = n("cache_creation_input_tokens");
    let cache_read = n("cache_read_input_tokens");
    Usage {
        input_tokens: n("input_tokens")
            .saturating_add(cache_write)
            .saturating_add(cache_read),
        output_tokens: n("output_tokens"),
        cache_read_tokens: cache_read,
        cache_write_tokens: cache_write,
        reasoning_tokens: u
            .get("output_tokens_details")
            .and_then(|d| d.get("thinking_tokens"))
            .and_then(Value::as_u64)
            .unwrap_or(0),
        // Per-request charges of Anthropic's server tools (`web_search_requests`,
        // `web_fetch_requests`, …), whatever the tool.
        server_tool_requests: u.get("server_tool_use").and_then(Value::as_object).map_or(
            0,
            |tools| {
                tools
                    .values()
                    .filter_map(Value::as_u64)
                    .fold(0u64, u64::saturating_add)
            },
        ),
    }
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        _ => FinishReason::Stop,
    }
}

impl Decoder {
    /// Merges a report into the counters so far: a later report replaces a count, except that a
    /// zero never replaces a count already reported (`message_delta` can repeat
    /// `cache_read_input_tokens: 0` after `message_start` said what was read), nor an empty
    /// list of iterations a reported one.
    fn merge_usage(&mut self, u: &Value, out: &mut Vec<ModelChunk>) {
        if let Some(fields) = u.as_object() {
            for (k, v) in fields {
                let known = self.usage.get(k);
                let keeps = match v {
                    Value::Null => true,
                    Value::Number(n) => {
                        n.as_u64() == Some(0) && known.and_then(Value::as_u64).unwrap_or(0) > 0
                    }
                    Value::Array(items) => items.is_empty() && known.is_some(),
                    _ => false,
                };
                if !keeps {
                    self.usage.insert(k.clone(), v.clone());
                }
            }
            out.push(ModelChunk::Usage(usage(&Value::Object(self.usage.clone()))));
        }
    }

    fn block(&mut self, index: u32, block: &Value, out: &mut Vec<ModelChunk>) {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(text) = block.get("text").and_then(Value::as_str)
                    && !text.is_empty()
                {
                    out.push(ModelChunk::TextDelta(text.to_owned()));
                }
            }
            Some("tool_use") => {
                let field = |k: &str| {
                    block
                        .get(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                self.tool_blocks.insert(index);
                out.push(ModelChunk::ToolCallStart {
                    index,
                    id: field("id"),
                    name: field("name"),
                });
                // Streamed blocks start with `input: {}` and send the input as deltas; a whole
                // (non-streamed) block carries it here.
                if let Some(input) = block.get("input").and_then(Value::as_object)
                    && !input.is_empty()
                {
                    out.push(ModelChunk::ToolCallDelta {
                        index,
                        json: Value::Object(input.clone()).to_string(),
                    });
                }
            }
            _ => {}
        }
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
        let index = data.get("index").and_then(Value::as_u64).unwrap_or(0) as u32;
        match kind {
            "message_start" => {
                if let Some(message) = data.get("message") {
                    super::report_model(&mut self.model_seen, message, out);
                }
                if let Some(u) = data.get("message").and_then(|m| m.get("usage")) {
                    self.merge_usage(u, out);
                }
            }
            "content_block_start" => {
                if let Some(block) = data.get("content_block") {
                    self.block(index, block, out);
                }
            }
            "content_block_delta" => {
                let delta = data.get("delta").unwrap_or(&Value::Null);
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        if let Some(text) = delta.get("text").and_then(Value::as_str)
                            && !text.is_empty()
                        {
                            out.push(ModelChunk::TextDelta(text.to_owned()));
                        }
                    }
                    Some("input_json_delta") if self.tool_blocks.contains(&index) => {
                        if let Some(json) = delta.get("partial_json").and_then(Value::as_str)
                            && !json.is_empty()
                        {
                            out.push(ModelChunk::ToolCallDelta {
                                index,
                                json: json.to_owned(),
                            });
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = data
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.finish = Some(finish_reason(reason));
                }
                if let Some(u) = data.get("usage") {
                    self.merge_usage(u, out);
                }
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(Flow::Done);
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
        if !self.stopped {
            return Err(ModelErrorKind::MalformedStream(
                "the stream ended before message_stop".into(),
            )
            .into());
        }
        out.push(ModelChunk::Finish(
            self.finish.unwrap_or(FinishReason::Stop),
        ));
        Ok(())
    }

    fn whole(&mut self, body: &Value, out: &mut Vec<ModelChunk>) -> Result<(), ModelError> {
        if body.get("type").and_then(Value::as_str) == Some("error") {
            let (kind, message) = error_details_json(body);
            return Err(stream_error(&kind, &message));
        }
        super::report_model(&mut self.model_seen, body, out);
        for (index, block) in body
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            self.block(index as u32, block, out);
        }
        if let Some(u) = body.get("usage") {
            self.merge_usage(u, out);
        }
        if let Some(reason) = body.get("stop_reason").and_then(Value::as_str) {
            self.finish = Some(finish_reason(reason));
        }
        self.stopped = true;
        self.end(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Dialect;
    use crate::wire::test_support::round_trip;

    #[test]
    fn the_body_alternates_roles_and_marks_cache_breakpoints() {
        let body = body(&round_trip(), &BodyOptions::default());
        assert_eq!(body["max_tokens"], 4096);
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        assert_eq!(body["tools"][0]["cache_control"]["type"], "ephemeral");
        assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "What is 12 times 7?"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Let me check."},
                    {"type": "tool_use", "id": "call_1", "name": "calculate",
                     "input": {"op": "mul", "a": 12, "b": 7}},
                    {"type": "tool_use", "id": "call_2", "name": "calculate",
                     "input": {"op": "div", "a": 1, "b": 0}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1",
                     "content": r#"{"result":84}"#, "is_error": false},
                    {"type": "tool_result", "tool_use_id": "call_2",
                     "content": r#"{"code":"division_by_zero","message":"b is 0"}"#,
                     "is_error": true},
                ]},
            ])
        );
    }

    /// Anthropic's per-request server-tool charges are metered when the usage reports them
    /// (issue 17, item 6), as its API documents them (`usage.server_tool_use`).
    #[test]
    fn server_tool_requests_are_metered() {
        let u = usage(&json!({
            "input_tokens": 10,
            "output_tokens": 5,
            "server_tool_use": {"web_search_requests": 3, "web_fetch_requests": 1}
        }));
        assert_eq!((u.input_tokens, u.server_tool_requests), (10, 4));
        assert_eq!(usage(&json!({"input_tokens": 1})).server_tool_requests, 0);
        let price = forge_core::metering::ModelPrice {
            input: 3_000_000,
            output: 15_000_000,
            server_tool_request: 10_000,
            ..Default::default()
        };
        // 10 × $3/M + 5 × $15/M = 105 micro-dollars, plus 4 searches at 1¢.
        assert_eq!(price.cost(&u), 105 + 40_000);
    }

    #[test]
    fn usage_counts_cached_tokens_as_input_and_message_delta_wins() {
        let body = concat!(
            "event: message_start\n",
            r#"data: {"type":"message_start","message":{"usage":{"input_tokens":10,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":1}}}"#,
            "\n\n",
            "event: message_delta\n",
            r#"data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":12,"output_tokens":7}}"#,
            "\n\n",
            "event: message_stop\n",
            r#"data: {"type":"message_stop"}"#,
            "\n\n",
        );
        let chunks = Dialect::Anthropic
            .decode_body(body.as_bytes(), false)
            .result()
            .unwrap();
        let last_usage = chunks
            .iter()
            .rev()
            .find_map(|c| match c {
                ModelChunk::Usage(u) => Some(*u),
                _ => None,
            })
            .unwrap();
        assert_eq!(
            last_usage,
            Usage {
                input_tokens: 1112,
                output_tokens: 7,
                cache_read_tokens: 1000,
                cache_write_tokens: 100,
                reasoning_tokens: 0,
                server_tool_requests: 0,
            }
        );
        assert_eq!(chunks.last(), Some(&ModelChunk::Finish(FinishReason::Stop)));
    }

    #[test]
    fn an_error_event_then_close_is_an_overloaded_stream_error() {
        let body = concat!(
            "event: message_start\n",
            r#"data: {"type":"message_start","message":{"usage":{"input_tokens":5,"output_tokens":1}}}"#,
            "\n\n",
            "event: error\n",
            r#"data: {"type":"error","error":{"details":null,"type":"overloaded_error","message":"Overloaded"} }"#,
            "\n\n",
        );
        let err = Dialect::Anthropic
            .decode_body(body.as_bytes(), false)
            .result()
            .unwrap_err();
        assert_eq!(
            err,
            ModelErrorKind::StreamError {
                message: "overloaded_error: Overloaded".into(),
                retryable: true
            }
            .into()
        );
    }
}
