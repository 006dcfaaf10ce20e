//! The scripted provider: deterministic model output read from a script file.
//!
//! A script holds conversations; each is a list of turns. The turn played is chosen from the
//! request alone — no hidden state — so a resumed run replays the same output:
//!
//! - the conversation is the first whose `when_user` text occurs (case-insensitively) in the last
//!   user message, or else the first with no `when_user`;
//! - the turn is the number of assistant messages after that user message.
//!
//! ```toml
//! [[conversation]]
//! when_user = "times"
//!
//! [[conversation.turn]]
//! text = ["Let me ", "work that out."]
//! tool_calls = [{ name = "calculate", input = { op = "mul", a = 12, b = 7 } }]
//!
//! [[conversation.turn]]
//! text = ["12 × 7 = ", "{{tool_result.result}}"]
//! ```
//!
//! In text, `{{tool_result}}` is the latest tool result's output as compact JSON and
//! `{{tool_result.FIELD}}` one field of it (strings unquoted). A turn may also inject a failure
//! (`error = { after_chunks = 1, code = "server_error" }`) or give a tool call a raw, possibly
//! invalid, JSON input (`raw_input = "{oops"`) to exercise recovery paths.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use forge_core::message::{Message, Role};
use forge_core::part::Part;
use forge_core::ports::model::{
    FinishReason, ModelChunk, ModelError, ModelErrorKind, ModelProvider, ModelRequest, ModelStream,
};
use forge_core::usage::Usage;
use futures_util::StreamExt;
use serde::Deserialize;

/// Why a script could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// The file could not be read.
    #[error("could not read script {path}")]
    Read {
        /// The script's path.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid script.
    #[error("script {path} is invalid: {message}")]
    Invalid {
        /// The script's path.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// A parsed script.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// The conversations, tried in order.
    #[serde(rename = "conversation", default)]
    pub conversations: Vec<Conversation>,
}

/// One scripted conversation.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conversation {
    /// Played when the last user message contains this text (case-insensitive).
    #[serde(default)]
    pub when_user: Option<String>,
    /// The model's turns, in order.
    #[serde(rename = "turn", default)]
    pub turns: Vec<Turn>,
}

/// One model response.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// Text chunks, streamed one by one.
    #[serde(default)]
    pub text: Vec<String>,
    /// Tool calls, streamed after the text.
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
    /// Pause before each chunk, in milliseconds.
    #[serde(default)]
    pub chunk_delay_ms: u64,
    /// A failure to inject.
    #[serde(default)]
    pub error: Option<ScriptedError>,
}

/// A scripted tool call.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    /// The call id (default `call_<turn>_<n>`).
    #[serde(default)]
    pub id: Option<String>,
    /// The tool's name.
    pub name: String,
    /// The input.
    #[serde(default)]
    pub input: Option<toml::Value>,
    /// The input as raw text, sent as is (it may be invalid JSON on purpose).
    #[serde(default)]
    pub raw_input: Option<String>,
}

/// A failure injected into a turn.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedError {
    /// Chunks sent before the failure; 0 fails the call before the stream starts.
    #[serde(default)]
    pub after_chunks: usize,
    /// The failure: `server_error`, `overloaded`, `rate_limited`, `malformed_stream`, …
    pub code: String,
}

impl Script {
    /// Parses a script from TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ScriptError> {
        let script: Script = toml::from_str(text).map_err(|e| ScriptError::Invalid {
            path: origin.into(),
            message: e.to_string(),
        })?;
        script.check(origin)?;
        Ok(script)
    }

    /// Reads and parses a script file.
    pub fn load(path: &Path) -> Result<Self, ScriptError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    fn check(&self, origin: &str) -> Result<(), ScriptError> {
        let invalid = |message: String| ScriptError::Invalid {
            path: origin.into(),
            message,
        };
        if self.conversations.is_empty() {
            return Err(invalid("it has no [[conversation]]".into()));
        }
        for (c, conv) in self.conversations.iter().enumerate() {
            if conv.turns.is_empty() {
                return Err(invalid(format!("conversation {} has no turns", c + 1)));
            }
            for (t, turn) in conv.turns.iter().enumerate() {
                for call in &turn.tool_calls {
                    if call.input.is_some() && call.raw_input.is_some() {
                        return Err(invalid(format!(
                            "conversation {} turn {}: give input or raw_input, not both",
                            c + 1,
                            t + 1
                        )));
                    }
                }
                if let Some(e) = &turn.error {
                    error_for(&e.code).map_err(|m| {
                        invalid(format!("conversation {} turn {}: {m}", c + 1, t + 1))
                    })?;
                }
            }
        }
        Ok(())
    }

    fn pick(&self, messages: &[Message]) -> Result<(usize, &Turn), ModelError> {
        let last_user = messages.iter().rposition(|m| m.role == Role::User);
        let user_text = last_user
            .map(|i| messages[i].text().to_lowercase())
            .unwrap_or_default();
        let turn_index = messages[last_user.map_or(0, |i| i + 1)..]
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let conversation = self
            .conversations
            .iter()
            .find(|c| {
                c.when_user
                    .as_ref()
                    .is_some_and(|w| user_text.contains(&w.to_lowercase()))
            })
            .or_else(|| self.conversations.iter().find(|c| c.when_user.is_none()))
            .ok_or_else(|| {
                ModelErrorKind::BadRequest(
                    "scripted: no conversation matches the user's message".into(),
                )
            })?;
        let turn = conversation.turns.get(turn_index).ok_or_else(|| {
            ModelErrorKind::BadRequest(format!(
                "scripted: the conversation has no turn {}",
                turn_index + 1
            ))
        })?;
        Ok((turn_index, turn))
    }
}

fn error_for(code: &str) -> Result<ModelError, String> {
    let kind = match code {
        "server_error" => ModelErrorKind::Server,
        "overloaded" => ModelErrorKind::Overloaded,
        "rate_limited" => ModelErrorKind::RateLimited { retry_after: None },
        "malformed_stream" => ModelErrorKind::MalformedStream("scripted".into()),
        "stream_error" => ModelErrorKind::StreamError {
            message: "scripted".into(),
            retryable: false,
        },
        "context_length_exceeded" => ModelErrorKind::ContextLengthExceeded,
        "timeout" => ModelErrorKind::Timeout,
        other => return Err(format!("unknown error code {other:?}")),
    };
    Ok(kind.into())
}

/// The scripted model provider, named `scripted`. It plays the script registered for the request's
/// model name (the part after `scripted:`), or its default script.
#[derive(Debug, Clone)]
pub struct ScriptedProvider {
    default: Option<Script>,
    by_model: std::collections::BTreeMap<String, Script>,
}

impl ScriptedProvider {
    /// A provider that plays `script` for every model name.
    pub fn new(script: Script) -> Self {
        Self {
            default: Some(script),
            by_model: Default::default(),
        }
    }

    /// A provider with no scripts yet; add them with [`ScriptedProvider::with_script`].
    pub fn empty() -> Self {
        Self {
            default: None,
            by_model: Default::default(),
        }
    }

    /// Plays `script` for requests whose model name is `model`.
    pub fn with_script(mut self, model: impl Into<String>, script: Script) -> Self {
        self.by_model.insert(model.into(), script);
        self
    }

    fn script(&self, model: &str) -> Result<&Script, ModelError> {
        self.by_model
            .get(model)
            .or(self.default.as_ref())
            .ok_or_else(|| {
                ModelErrorKind::NotFound(format!("scripted: no script for model {model:?}")).into()
            })
    }
}

fn latest_tool_output(messages: &[Message]) -> Option<&serde_json::Value> {
    messages
        .iter()
        .rev()
        .filter(|m| m.role == Role::Tool)
        .flat_map(|m| m.parts.iter().rev())
        .find_map(|p| match p {
            Part::ToolResult(r) => Some(&r.output),
            _ => None,
        })
}

fn render(text: &str, messages: &[Message]) -> String {
    if !text.contains("{{tool_result") {
        return text.to_owned();
    }
    let Some(out) = latest_tool_output(messages) else {
        return text.to_owned();
    };
    let show = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut rendered = text.replace("{{tool_result}}", &out.to_string());
    while let Some(start) = rendered.find("{{tool_result.") {
        let Some(len) = rendered[start..].find("}}") else {
            break;
        };
        let field = &rendered[start + "{{tool_result.".len()..start + len];
        let value = out.get(field).map(show).unwrap_or_default();
        rendered.replace_range(start..start + len + 2, &value);
    }
    rendered
}

/// Splits `s` in two at a character boundary near the middle, so inputs stream as two fragments.
fn halves(s: &str) -> (&str, &str) {
    let mut mid = s.len() / 2;
    while !s.is_char_boundary(mid) {
        mid -= 1;
    }
    s.split_at(mid)
}

#[async_trait]
impl ModelProvider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let (turn_index, turn) = self.script(&request.model)?.pick(&request.messages)?;
        let mut chunks: Vec<Result<ModelChunk, ModelError>> =
            vec![Ok(ModelChunk::RequestId(format!("scripted-{turn_index}")))];
        let mut output_chars = 0;
        for t in &turn.text {
            let t = render(t, &request.messages);
            output_chars += t.chars().count();
            chunks.push(Ok(ModelChunk::TextDelta(t)));
        }
        for (n, call) in turn.tool_calls.iter().enumerate() {
            let id = call
                .id
                .clone()
                .unwrap_or_else(|| format!("call_{turn_index}_{n}"));
            let input = match (&call.raw_input, &call.input) {
                (Some(raw), _) => raw.clone(),
                (None, Some(v)) => serde_json::to_string(v)
                    .map_err(|e| ModelErrorKind::BadRequest(e.to_string()))?,
                (None, None) => "{}".into(),
            };
            chunks.push(Ok(ModelChunk::ToolCallStart {
                index: n as u32,
                id,
                name: call.name.clone(),
            }));
            let (a, b) = halves(&input);
            for part in [a, b].into_iter().filter(|p| !p.is_empty()) {
                chunks.push(Ok(ModelChunk::ToolCallDelta {
                    index: n as u32,
                    json: part.to_owned(),
                }));
            }
            output_chars += input.len();
        }
        let finish = if turn.tool_calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        };
        chunks.push(Ok(ModelChunk::Finish(finish)));
        let input_chars: usize = request.system.len()
            + request
                .messages
                .iter()
                .map(|m| serde_json::to_string(&m.parts).map_or(0, |s| s.len()))
                .sum::<usize>();
        let usage = Usage {
            input_tokens: (input_chars / 4) as u64,
            output_tokens: (output_chars / 4 + 1) as u64,
            ..Usage::default()
        };
        chunks.push(Ok(ModelChunk::Usage(usage)));
        if let Some(e) = &turn.error {
            let err = error_for(&e.code).map_err(ModelErrorKind::BadRequest)?;
            if e.after_chunks == 0 {
                return Err(err);
            }
            // Keep the request id and the first `after_chunks` content chunks, then fail.
            chunks.truncate(1 + e.after_chunks);
            chunks.push(Err(err));
        }
        let delay = Duration::from_millis(turn.chunk_delay_ms);
        let stream = futures_util::stream::iter(chunks).then(move |c| async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            c
        });
        Ok(Box::pin(stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forge_core::id::{MessageId, RunId};
    use forge_core::part::{ToolResultPart, Trust};
    use forge_core::time::Timestamp;

    const SCRIPT: &str = r#"
[[conversation]]
when_user = "Weather"
[[conversation.turn]]
tool_calls = [{ name = "forecast", input = { city = "Paris" } }]
[[conversation.turn]]
text = ["It is ", "{{tool_result.sky}}", " in Paris (", "{{tool_result}}", ")."]

[[conversation]]
[[conversation.turn]]
text = ["fallback"]
"#;

    fn msg(role: Role, parts: Vec<Part>) -> Message {
        Message {
            id: MessageId(uuid::Uuid::nil()),
            run_id: RunId(uuid::Uuid::nil()),
            role,
            parts,
            created_at: Timestamp::from_unix_millis(0).unwrap(),
        }
    }

    fn request(messages: Vec<Message>) -> ModelRequest {
        ModelRequest {
            model: "x".into(),
            system: String::new(),
            messages,
            tools: vec![],
            max_output_tokens: None,
            output_schema: None,
            temperature: None,
        }
    }

    async fn play(messages: Vec<Message>) -> Vec<Result<ModelChunk, ModelError>> {
        let p = ScriptedProvider::new(Script::parse(SCRIPT, "test").unwrap());
        p.stream(request(messages)).await.unwrap().collect().await
    }

    #[tokio::test]
    async fn conversation_is_chosen_by_user_text_and_turn_by_assistant_count() {
        let first = play(vec![msg(
            Role::User,
            vec![Part::text("what's the weather?")],
        )])
        .await;
        assert!(first.contains(&Ok(ModelChunk::ToolCallStart {
            index: 0,
            id: "call_0_0".into(),
            name: "forecast".into()
        })));
        assert!(first.contains(&Ok(ModelChunk::Finish(FinishReason::ToolCalls))));
        let second = play(vec![
            msg(Role::User, vec![Part::text("WEATHER please")]),
            msg(Role::Assistant, vec![]),
            msg(
                Role::Tool,
                vec![Part::ToolResult(ToolResultPart {
                    tool_call_id: "call_0_0".into(),
                    tool_name: "forecast".into(),
                    output: serde_json::json!({"sky": "sunny"}),
                    is_error: false,
                    trust: Trust::Untrusted,
                    tool_version: None,
                })],
            ),
        ])
        .await;
        let text: String = second
            .iter()
            .filter_map(|c| match c {
                Ok(ModelChunk::TextDelta(t)) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, r#"It is sunny in Paris ({"sky":"sunny"})."#);
        let other = play(vec![msg(Role::User, vec![Part::text("hello")])]).await;
        assert!(other.contains(&Ok(ModelChunk::TextDelta("fallback".into()))));
    }

    #[tokio::test]
    async fn running_out_of_turns_is_a_clear_error() {
        let p = ScriptedProvider::new(Script::parse(SCRIPT, "test").unwrap());
        let messages = vec![
            msg(Role::User, vec![Part::text("hi")]),
            msg(Role::Assistant, vec![]),
        ];
        let err = p.stream(request(messages)).await.map(|_| ()).unwrap_err();
        assert_eq!(
            err,
            ModelErrorKind::BadRequest("scripted: the conversation has no turn 2".into()).into()
        );
    }

    #[test]
    fn bad_scripts_are_refused_with_the_reason() {
        let cases = [
            ("", "it has no [[conversation]]"),
            ("[[conversation]]\n", "conversation 1 has no turns"),
            (
                "[[conversation]]\n[[conversation.turn]]\nerror = { code = \"nope\" }\n",
                "unknown error code \"nope\"",
            ),
            (
                "[[conversation]]\n[[conversation.turn]]\ntxt = [\"typo\"]\n",
                "unknown field `txt`",
            ),
        ];
        for (text, want) in cases {
            let err = Script::parse(text, "s.toml").unwrap_err().to_string();
            assert!(
                err.starts_with("script s.toml is invalid: ") && err.contains(want),
                "{err}"
            );
        }
    }
}
