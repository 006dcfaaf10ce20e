//! Provider wire formats: the request body Forge sends and the decoding of what comes back.
//!
//! Each dialect is pure: a [`ModelRequest`] becomes a JSON body, and a response — an event stream
//! fed in arbitrary pieces, or a whole JSON body from a server that ignored `stream: true` — becomes
//! [`ModelChunk`]s. No I/O happens here, so transcripts can be decoded in tests and benchmarks
//! exactly as the HTTP adapter decodes them.

pub mod anthropic;
mod chat_body;
pub mod errors;
pub mod openai_chat;
pub mod openai_responses;

use forge_core::message::{Message, Role};
use forge_core::part::{Part, ToolCallPart, ToolResultPart};
use forge_core::ports::model::{ModelChunk, ModelError, ModelErrorKind, ModelRequest};
use serde_json::Value;

use crate::sse::{SseDecoder, SseEvent};

/// A provider wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// OpenAI Chat Completions (`POST {base}/chat/completions`), also spoken by Ollama, vLLM,
    /// llama.cpp, OpenRouter, Groq and most hosted open-model servers.
    OpenAiChat,
    /// OpenAI Responses (`POST {base}/responses`).
    OpenAiResponses,
    /// Anthropic Messages (`POST {base}/v1/messages`).
    Anthropic,
}

/// Per-deployment choices that change the request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyOptions {
    /// Send the output cap as `max_completion_tokens` (OpenAI's current name) rather than
    /// `max_tokens` (what OpenAI-compatible servers understand).
    pub max_completion_tokens: bool,
    /// Output cap sent when the agent sets none; Anthropic requires one.
    pub default_max_tokens: u32,
}

impl Default for BodyOptions {
    fn default() -> Self {
        Self {
            max_completion_tokens: false,
            default_max_tokens: 4096,
        }
    }
}

impl Dialect {
    /// The request path appended to the provider's base URL.
    pub fn path(self) -> &'static str {
        match self {
            Dialect::OpenAiChat => "/chat/completions",
            Dialect::OpenAiResponses => "/responses",
            Dialect::Anthropic => "/v1/messages",
        }
    }

    /// The path of the model listing used as a health check.
    pub fn models_path(self) -> &'static str {
        match self {
            Dialect::OpenAiChat | Dialect::OpenAiResponses => "/models",
            Dialect::Anthropic => "/v1/models",
        }
    }

    /// The streaming request body for `request`.
    pub fn body(self, request: &ModelRequest, options: &BodyOptions) -> Value {
        match self {
            Dialect::OpenAiChat => openai_chat::body(request, options),
            Dialect::OpenAiResponses => openai_responses::body(request, options),
            Dialect::Anthropic => anthropic::body(request, options),
        }
    }

    /// The streaming request body for `request` as the JSON bytes to send: the bytes of
    /// [`Self::body`]'s `Value`, serialized straight from the request for Chat Completions.
    pub(crate) fn encode(
        self,
        request: &ModelRequest,
        options: &BodyOptions,
    ) -> Result<Vec<u8>, serde_json::Error> {
        match self {
            Dialect::OpenAiChat => chat_body::encode(request, options),
            other => serde_json::to_vec(&other.body(request, options)),
        }
    }

    /// A decoder for one response in this dialect.
    pub fn decoder(self) -> StreamDecoder {
        let dialect: Box<dyn Decode> = match self {
            Dialect::OpenAiChat => Box::<openai_chat::Decoder>::default(),
            Dialect::OpenAiResponses => Box::<openai_responses::Decoder>::default(),
            Dialect::Anthropic => Box::<anthropic::Decoder>::default(),
        };
        StreamDecoder {
            sse: SseDecoder::new(),
            events: Vec::new(),
            dialect,
            done: false,
        }
    }

    /// Decodes a complete response body: an event stream or, for a JSON content type, one JSON
    /// document. Chunks decoded before an error are kept.
    pub fn decode_body(self, body: &[u8], json: bool) -> Decoded {
        let mut decoder = self.decoder();
        let mut chunks = Vec::new();
        let result = if json {
            decoder.whole(body, &mut chunks)
        } else {
            decoder
                .push(body, &mut chunks)
                .and_then(|()| decoder.finish(&mut chunks))
        };
        Decoded {
            chunks,
            error: result.err(),
        }
    }
}

/// A whole response, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// Every chunk decoded, up to the error if there was one.
    pub chunks: Vec<ModelChunk>,
    /// Why the response was incomplete or failed.
    pub error: Option<ModelError>,
}

impl Decoded {
    /// The chunks, or the error.
    pub fn result(self) -> Result<Vec<ModelChunk>, ModelError> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.chunks),
        }
    }
}

/// Whether the stream goes on after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Read on.
    More,
    /// The response is complete; stop reading.
    Done,
}

/// One dialect's event handling.
pub(crate) trait Decode: Send {
    /// Handles one event.
    fn event(&mut self, event: &SseEvent, out: &mut Vec<ModelChunk>) -> Result<Flow, ModelError>;
    /// The stream ended; a response that did not finish is malformed.
    fn end(&mut self, out: &mut Vec<ModelChunk>) -> Result<(), ModelError>;
    /// Handles a whole, non-streamed JSON response.
    fn whole(&mut self, body: &Value, out: &mut Vec<ModelChunk>) -> Result<(), ModelError>;
}

/// Decodes one response, fed in arbitrary pieces, into model chunks.
pub struct StreamDecoder {
    sse: SseDecoder,
    events: Vec<SseEvent>,
    dialect: Box<dyn Decode>,
    done: bool,
}

impl StreamDecoder {
    /// Feeds the next bytes, appending the chunks they complete to `out`. On an error, the chunks
    /// decoded before it are still in `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<ModelChunk>) -> Result<(), ModelError> {
        if self.done {
            return Ok(());
        }
        self.sse
            .push(bytes, &mut self.events)
            .map_err(|e| ModelErrorKind::MalformedStream(e.to_string()))?;
        self.drain(out)
    }

    /// Whether the response announced its end (later bytes are ignored).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The stream ended: appends the last chunks, or says why the response is incomplete.
    pub fn finish(&mut self, out: &mut Vec<ModelChunk>) -> Result<(), ModelError> {
        if !self.done {
            self.sse
                .finish(&mut self.events)
                .map_err(|e| ModelErrorKind::MalformedStream(e.to_string()))?;
            self.drain(out)?;
        }
        self.dialect.end(out)
    }

    /// Decodes a whole JSON response.
    pub fn whole(&mut self, body: &[u8], out: &mut Vec<ModelChunk>) -> Result<(), ModelError> {
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            ModelErrorKind::MalformedStream(format!("the response body is not JSON: {e}"))
        })?;
        self.done = true;
        self.dialect.whole(&value, out)
    }

    fn drain(&mut self, out: &mut Vec<ModelChunk>) -> Result<(), ModelError> {
        for event in std::mem::take(&mut self.events) {
            if self.done {
                break;
            }
            if self.dialect.event(&event, out)? == Flow::Done {
                self.done = true;
            }
        }
        Ok(())
    }
}

/// Parses an event's JSON payload.
pub(crate) fn parse_json(data: &str) -> Result<Value, ModelError> {
    serde_json::from_str(data).map_err(|e| {
        let shown: String = data.chars().take(120).collect();
        ModelErrorKind::MalformedStream(format!("an event's data is not JSON ({e}): {shown}"))
            .into()
    })
}

/// A tool's output as the text a provider expects in a tool-result message.
pub(crate) fn output_text(output: &Value) -> String {
    match output {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A `u64` field, zero when absent.
pub(crate) fn count(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// The text of a message, or `None` when it has no text.
pub(crate) fn text_of(message: &Message) -> Option<String> {
    let text = message.text();
    (!text.is_empty()).then_some(text)
}

/// A message's tool calls.
pub(crate) fn tool_calls(message: &Message) -> impl Iterator<Item = &ToolCallPart> {
    message.parts.iter().filter_map(|p| match p {
        Part::ToolCall(c) => Some(c),
        _ => None,
    })
}

/// A message's tool results.
pub(crate) fn tool_results(message: &Message) -> impl Iterator<Item = &ToolResultPart> {
    message.parts.iter().filter_map(|p| match p {
        Part::ToolResult(r) => Some(r),
        _ => None,
    })
}

/// Whether a message is worth sending: assistant messages made only of error parts (a failed
/// call) and empty messages are dropped.
pub(crate) fn is_sendable(message: &Message) -> bool {
    message.parts.iter().any(|p| match message.role {
        Role::User => matches!(p, Part::Text(_)),
        Role::Assistant => matches!(p, Part::Text(_) | Part::ToolCall(_)),
        Role::Tool => matches!(p, Part::ToolResult(_)),
    })
}

/// Emits the model a provider reports (`model` in `value`), once per response.
pub(crate) fn report_model(seen: &mut bool, value: &Value, out: &mut Vec<ModelChunk>) {
    if *seen {
        return;
    }
    if let Some(model) = value.get("model").and_then(Value::as_str)
        && !model.is_empty()
    {
        *seen = true;
        out.push(ModelChunk::Model(model.to_owned()));
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use forge_core::id::{MessageId, RunId, ToolCallId};
    use forge_core::message::{Message, Role};
    use forge_core::part::{Part, ToolCallPart, ToolResultPart, Trust};
    use forge_core::ports::model::{ModelRequest, ToolDescriptor};
    use forge_core::time::Timestamp;
    use serde_json::json;

    fn message(role: Role, parts: Vec<Part>) -> Message {
        Message {
            id: MessageId(uuid::Uuid::nil()),
            run_id: RunId(uuid::Uuid::nil()),
            role,
            parts,
            created_at: Timestamp::from_unix_millis(0).expect("epoch"),
        }
    }

    /// A request with a tool round trip: user, assistant text + call, tool result (one error).
    pub(crate) fn round_trip() -> ModelRequest {
        ModelRequest {
            model: "m".into(),
            system: "Be brief.".into(),
            messages: vec![
                message(Role::User, vec![Part::text("What is 12 times 7?")]),
                message(
                    Role::Assistant,
                    vec![
                        Part::text("Let me check."),
                        Part::ToolCall(ToolCallPart {
                            tool_call_id: ToolCallId("call_1".into()),
                            tool_name: "calculate".into(),
                            input: json!({"op": "mul", "a": 12, "b": 7}),
                        }),
                        Part::ToolCall(ToolCallPart {
                            tool_call_id: ToolCallId("call_2".into()),
                            tool_name: "calculate".into(),
                            input: json!({"op": "div", "a": 1, "b": 0}),
                        }),
                    ],
                ),
                message(
                    Role::Tool,
                    vec![
                        Part::ToolResult(ToolResultPart {
                            tool_call_id: ToolCallId("call_1".into()),
                            tool_name: "calculate".into(),
                            output: json!({"result": 84}),
                            is_error: false,
                            trust: Trust::Untrusted,
                            tool_version: None,
                        }),
                        Part::ToolResult(ToolResultPart {
                            tool_call_id: ToolCallId("call_2".into()),
                            tool_name: "calculate".into(),
                            output: json!({"code": "division_by_zero", "message": "b is 0"}),
                            is_error: true,
                            trust: Trust::Untrusted,
                            tool_version: None,
                        }),
                    ],
                ),
            ],
            tools: vec![ToolDescriptor {
                name: "calculate".into(),
                description: "Arithmetic.".into(),
                input_schema: json!({"type": "object", "properties": {"op": {"type": "string"}}}),
            }],
            max_output_tokens: None,
            output_schema: None,
            temperature: None,
        }
    }
}

#[cfg(test)]
mod structured_tests {
    use serde_json::json;

    use super::*;

    /// Each dialect asks for structured output its own way (issue 17, item 5): a JSON-schema
    /// response format for both OpenAI dialects, the instructions for Anthropic's.
    #[test]
    fn every_dialect_asks_for_the_output_schema() {
        let schema = json!({"type": "object", "required": ["total"]});
        let mut request = test_support::round_trip();
        request.output_schema = Some(schema.clone());
        let options = BodyOptions::default();
        let chat = Dialect::OpenAiChat.body(&request, &options);
        assert_eq!(chat["response_format"]["type"], "json_schema");
        assert_eq!(chat["response_format"]["json_schema"]["schema"], schema);
        let responses = Dialect::OpenAiResponses.body(&request, &options);
        assert_eq!(responses["text"]["format"]["type"], "json_schema");
        assert_eq!(responses["text"]["format"]["schema"], schema);
        let anthropic = Dialect::Anthropic.body(&request, &options);
        let system = anthropic["system"][0]["text"].as_str().unwrap_or_default();
        assert!(
            system.starts_with("Be brief.") && system.contains(r#""required":["total"]"#),
            "{system}"
        );
        request.output_schema = None;
        assert!(
            Dialect::OpenAiChat
                .body(&request, &options)
                .get("response_format")
                .is_none()
        );
        assert!(
            Dialect::OpenAiResponses
                .body(&request, &options)
                .get("text")
                .is_none()
        );
    }

    /// A pinned temperature (the evaluation judge's zero) reaches every dialect; without one
    /// no dialect sends the field, so the provider's default stands.
    #[test]
    fn every_dialect_sends_a_pinned_temperature_and_only_then() {
        let mut request = test_support::round_trip();
        let options = BodyOptions::default();
        let dialects = [
            Dialect::OpenAiChat,
            Dialect::OpenAiResponses,
            Dialect::Anthropic,
        ];
        for d in dialects {
            assert!(d.body(&request, &options).get("temperature").is_none());
        }
        request.temperature = Some(0.0);
        for d in dialects {
            assert_eq!(d.body(&request, &options)["temperature"], json!(0.0));
        }
    }
}
