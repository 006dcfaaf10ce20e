//! OpenAI Chat Completions: request body and stream decoding.
//!
//! Streams are `data:` events of `chat.completion.chunk` objects ending with `data: [DONE]`.
//! Parallel tool calls arrive as `delta.tool_calls[]` fragments told apart by `index`: the first
//! fragment of a call carries its id and name, later ones more argument text. With
//! `stream_options.include_usage`, a last chunk with `choices: []` carries the usage; an error may
//! arrive as a chunk with an `error` object even though the HTTP status was 200.

use std::collections::BTreeSet;

use forge_core::ports::model::{
    FinishReason, ModelChunk, ModelError, ModelErrorKind, ModelRequest,
};
use forge_core::usage::Usage;
use serde::de::{Deserialize, Deserializer, Error as _, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

use super::errors::error_event;
use super::{BodyOptions, Decode, Flow, count, parse_json};
use crate::sse::SseEvent;

/// The Chat Completions body for `request`, as a `Value`: what the HTTP provider sends, in
/// readable form (both are made from the same structs, `wire::chat_body`).
pub fn body(request: &ModelRequest, options: &BodyOptions) -> Value {
    super::chat_body::value(request, options)
}

/// Declares a struct of optional fields read from a JSON object only (never from an array, as a
/// derived `Deserialize` would also accept), skipping the keys it does not name and refusing a
/// repeated one, so that what reads as one says what its `Value` says.
macro_rules! object {
    ($(#[$doc:meta])* $name:ident { $($field:ident: $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Default)]
        struct $name {
            $($field: Option<$ty>,)*
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Fields;
                impl<'de> Visitor<'de> for Fields {
                    type Value = $name;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str(concat!("a ", stringify!($name), " object"))
                    }
                    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<$name, A::Error> {
                        let mut read = $name::default();
                        // A key with escapes is not borrowed: an error, so read as a `Value`.
                        while let Some(key) = map.next_key::<&'de str>()? {
                            match key {
                                $(stringify!($field) => {
                                    if read.$field.is_some() {
                                        return Err(A::Error::duplicate_field(stringify!($field)));
                                    }
                                    // A null reads as absent, as `Value::get` then
                                    // `as_str` and the like see it.
                                    read.$field = map.next_value()?;
                                })*
                                _ => {
                                    map.next_value::<IgnoredAny>()?;
                                }
                            }
                        }
                        Ok(read)
                    }
                }
                deserializer.deserialize_map(Fields)
            }
        }
    };
}

object! {
    /// A `chat.completion.chunk` as nearly every chunk is shaped, read without building a `Value`.
    /// JSON of another shape (a field of an unexpected type, a repeated key, an array where an
    /// object is expected) fails to read as one and is read as a `Value` instead; so is
    /// a chunk with an `error`.
    Chunk { model: String, choices: Vec<Choice>, usage: Value, error: IgnoredAny }
}

object! {
    /// One of a [`Chunk`]'s choices.
    Choice { index: u64, delta: Delta, finish_reason: String }
}

object! {
    /// A choice's delta.
    Delta { content: String, refusal: String, tool_calls: Vec<ToolCall> }
}

object! {
    /// A fragment of a tool call in a delta.
    ToolCall { index: u64, id: String, function: Function }
}

object! {
    /// A tool call fragment's function: its name, and its arguments as JSON text (or, from some
    /// compatible servers, as an object).
    Function { name: String, arguments: Value }
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
        self.call_fragment(
            index,
            call.get("id").and_then(Value::as_str),
            function.and_then(|f| f.get("name")).and_then(Value::as_str),
            function.and_then(|f| f.get("arguments")).cloned(),
            out,
        );
    }

    /// One fragment of call `index`, however it was read: the call's start the first time its
    /// index is seen (an id made up when it has none), then its arguments' text, if any.
    fn call_fragment(
        &mut self,
        index: u32,
        id: Option<&str>,
        name: Option<&str>,
        arguments: Option<Value>,
        out: &mut Vec<ModelChunk>,
    ) {
        if self.started.insert(index) {
            let id = id.map_or_else(|| format!("call_{index}"), str::to_owned);
            let name = name.unwrap_or_default().to_owned();
            out.push(ModelChunk::ToolCallStart { index, id, name });
        }
        // Some compatible servers send the arguments as an object rather than as JSON text.
        let json = match arguments {
            Some(Value::String(s)) => s,
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

    /// Decodes a chunk of any shape, read as a `Value`.
    fn value_chunk(
        &mut self,
        chunk: &Value,
        out: &mut Vec<ModelChunk>,
    ) -> Result<Flow, ModelError> {
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            // Usage reported beside the error is still spent: settle it.
            if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
                out.push(ModelChunk::Usage(usage(u)));
            }
            return Err(error_event(chunk));
        }
        super::report_model(&mut self.model_seen, chunk, out);
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

    /// Decodes a chunk read as a [`Chunk`]: what [`Self::value_chunk`] does with the same JSON.
    fn chunk(&mut self, chunk: Chunk, out: &mut Vec<ModelChunk>) {
        if !self.model_seen
            && let Some(model) = chunk.model.filter(|m| !m.is_empty())
        {
            self.model_seen = true;
            out.push(ModelChunk::Model(model));
        }
        if let Some(choice) = chunk
            .choices
            .and_then(|c| c.into_iter().find(|c| c.index.unwrap_or(0) == 0))
        {
            if let Some(delta) = choice.delta {
                for text in [delta.content, delta.refusal].into_iter().flatten() {
                    if !text.is_empty() {
                        out.push(ModelChunk::TextDelta(text));
                    }
                }
                for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
                    let index = call.index.map_or(position as u32, |i| i as u32);
                    let (name, arguments) = call
                        .function
                        .map_or((None, None), |f| (f.name, f.arguments));
                    self.call_fragment(index, call.id.as_deref(), name.as_deref(), arguments, out);
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(finish_reason(&reason));
            }
        }
        if let Some(u) = chunk.usage.filter(Value::is_object) {
            out.push(ModelChunk::Usage(usage(&u)));
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
        // Nearly every chunk reads as a `Chunk`; one that does not (an error, a field of an
        // unexpected type) is read as a `Value`, which takes anything JSON.
        if let Ok(chunk) = serde_json::from_str::<Chunk>(data)
            && chunk.error.is_none()
        {
            self.chunk(chunk, out);
            return Ok(Flow::More);
        }
        self.value_chunk(&parse_json(data)?, out)
    }

    fn end(&mut self, out: &mut Vec<ModelChunk>) -> Result<(), ModelError> {
        if !self.done && self.finish.is_none() {
            return Err(ModelErrorKind::MalformedStream(
                "the stream ended before the response finished".into(),
            )
            .into());
        }
        out.push(ModelChunk::Finish(self.finished()));
        Ok(())
    }

    fn whole(&mut self, body: &Value, out: &mut Vec<ModelChunk>) -> Result<(), ModelError> {
        if body.get("error").is_some_and(|e| !e.is_null()) {
            return Err(error_event(body));
        }
        super::report_model(&mut self.model_seen, body, out);
        let choice = body
            .get("choices")
            .and_then(|c| c.get(0))
            .ok_or_else(|| ModelErrorKind::MalformedStream("the response has no choices".into()))?;
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
    use serde_json::json;

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

    /// The in-repository Chat Completions transcripts' `data:` lines, in order.
    fn transcript_lines() -> Vec<String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/transcripts");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("openai_chat_")
            })
            .collect();
        names.sort();
        names
            .iter()
            .flat_map(|p| {
                std::fs::read_to_string(p)
                    .unwrap()
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:").map(|d| d.trim().to_owned()))
                    .filter(|d| d.starts_with('{'))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Chunks of every shape the typed read must either decode as the `Value` read does or
    /// refuse: nulls, escapes, arguments as objects, missing and odd indexes, repeated keys,
    /// arrays where objects belong, fields of the wrong type.
    const ODD_CHUNKS: &[&str] = &[
        r#"{"id":"c","model":"","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"error":null}"#,
        r#"{"model":"m1","choices":[{"index":0,"delta":{"content":"He said \"hi\"\n\u00e9"}}]}"#,
        r#"{"model":"m2","choices":[{"index":0,"delta":{"refusal":"no"}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"id":"x","function":{"name":"f","arguments":{"a":[1,{"b":null}]}}},{"function":{"arguments":null}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"function":{"name":"g","arguments":"{\"k\":"}},{"index":3,"function":{"arguments":"1}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":4,"function":null,"id":null}]}}]}"#,
        r#"{"choices":[{"index":1,"delta":{"content":"B"}},{"index":0,"delta":{"content":"A"},"finish_reason":"length"}]}"#,
        r#"{"choices":[{"index":2,"delta":{"content":"only two"}}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":1}}}"#,
        r#"{"choices":null,"usage":5}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":null,"content":"after a null"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"before a null","content":null}}]}"#,
        r#"{"model":5,"choices":[{"index":"0","delta":{"content":7}}]}"#,
        r#"{"choices":{"index":0,"delta":{"content":"not an array"}}}"#,
        r#"{"choices":[[0,{"content":"an array"},"stop"]]}"#,
        r#"{"choices":[{"delta":["x"],"finish_reason":"stop"}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[["a","b"]]}}]}"#,
        r#"{"choices":[null,{"index":0,"delta":{"content":"after null"}}]}"#,
        r#"{"choices":[{"index":-1,"delta":{"content":"negative"}}]}"#,
        r#"{"choices":[{"index":1.0,"delta":{"content":"float"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":7}]}"#,
        r#"{"mod\u0065l":"escaped key","choices":[]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c9","function":{"name":"n","arguments":""}}]},"finish_reason":"tool_calls"}]}"#,
        r#"{"error":{"message":"boom","type":"server_error"},"usage":{"prompt_tokens":1}}"#,
    ];

    /// Each decoder's view after a line: what it emitted (or its error) and its state.
    fn view(d: &Decoder, out: Result<Vec<ModelChunk>, ModelError>) -> String {
        format!(
            "{out:?} started={:?} finish={:?} done={} model_seen={}",
            d.started, d.finish, d.done, d.model_seen
        )
    }

    /// A chunk read without a `Value` (the fast path) decodes exactly as its `Value` does, line
    /// after line, for the recorded transcripts and for every odd shape; and the ordinary chunks
    /// do take the fast path.
    #[test]
    fn a_chunk_read_without_a_value_decodes_as_its_value_does() {
        let lines: Vec<String> = transcript_lines()
            .into_iter()
            .chain(ODD_CHUNKS.iter().map(|l| (*l).to_owned()))
            .collect();
        assert!(lines.len() > 40, "{} lines", lines.len());
        // Once line after line (a call's fragments build on each other), once each line from a
        // fresh start (where the model is not seen yet).
        for fresh in [false, true] {
            let (mut fast, mut slow) = (Decoder::default(), Decoder::default());
            for line in &lines {
                if fresh {
                    (fast, slow) = (Decoder::default(), Decoder::default());
                }
                let event = SseEvent {
                    event: None,
                    data: line.clone(),
                };
                let mut fast_out = Vec::new();
                let fast_result = fast.event(&event, &mut fast_out).map(|_| fast_out);
                let mut slow_out = Vec::new();
                let slow_result = parse_json(line)
                    .and_then(|v| slow.value_chunk(&v, &mut slow_out))
                    .map(|_| slow_out);
                assert_eq!(
                    view(&fast, fast_result),
                    view(&slow, slow_result),
                    "decoding {line}"
                );
            }
        }
        let refused = [
            r#"{"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}"#,
            r#"{"choices":[[0,{"content":"an array"},"stop"]]}"#,
            r#"{"mod\u0065l":"escaped key","choices":[]}"#,
            r#"{"model":5,"choices":[]}"#,
        ];
        for line in refused {
            assert!(serde_json::from_str::<Chunk>(line).is_err(), "{line}");
        }
        let ordinary = transcript_lines()
            .into_iter()
            .filter(|l| !l.contains("\"error\"") && parse_json(l).is_ok());
        for line in ordinary {
            assert!(
                serde_json::from_str::<Chunk>(&line).is_ok(),
                "an ordinary chunk missed the fast path: {line}"
            );
        }
    }

    #[test]
    fn a_stream_without_done_or_finish_is_malformed() {
        let body = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";
        let err = Dialect::OpenAiChat
            .decode_body(body, false)
            .result()
            .unwrap_err();
        assert!(
            matches!(err.kind(), ModelErrorKind::MalformedStream(_)),
            "{err:?}"
        );
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
            ModelErrorKind::StreamError {
                message: "server_error: boom".into(),
                retryable: true
            }
            .into()
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
