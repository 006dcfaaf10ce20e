//! The model port: one streaming call to a model provider.

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures_core::Stream;
use serde::{Deserialize, Serialize};

use crate::message::Message;
use crate::usage::Usage;

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDescriptor {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its input.
    pub input_schema: serde_json::Value,
}

/// One model call.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    /// The model's name within its provider (the part after `provider:`).
    pub model: String,
    /// System instructions, session state included.
    pub system: String,
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// Tools the model may call.
    pub tools: Vec<ToolDescriptor>,
    /// Cap on output tokens, if the agent sets one.
    pub max_output_tokens: Option<u32>,
    /// JSON Schema the final answer must satisfy; each dialect asks for it its own way.
    pub output_schema: Option<serde_json::Value>,
    /// Sampling temperature, when the caller pins one (the evaluation judge asks for zero);
    /// `None` leaves the provider's default.
    pub temperature: Option<f32>,
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A final answer.
    Stop,
    /// It wants tools to run.
    ToolCalls,
    /// It hit the output-token cap.
    Length,
    /// The provider filtered the output.
    ContentFilter,
}

/// One piece of a streamed model response.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelChunk {
    /// More answer text.
    TextDelta(String),
    /// A tool call began; `index` tells parallel calls apart.
    ToolCallStart {
        /// The call's position in the response.
        index: u32,
        /// The provider's id for the call.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// More of a tool call's JSON input.
    ToolCallDelta {
        /// The call's position in the response.
        index: u32,
        /// A fragment of JSON text.
        json: String,
    },
    /// Usage so far; a later report replaces an earlier one.
    Usage(Usage),
    /// The provider's request id, for reconciliation and support.
    RequestId(String),
    /// The model the provider reports answering, when it names one (often a dated snapshot of
    /// the model asked for), kept with the metered call.
    Model(String),
    /// The response is complete.
    Finish(FinishReason),
}

/// How a model call failed, in classes that decide retrying.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelErrorKind {
    /// Too many requests; retry after the given delay if the provider said.
    #[error("rate limited by the model provider")]
    RateLimited {
        /// The provider's retry-after.
        retry_after: Option<Duration>,
    },
    /// The provider is overloaded.
    #[error("model provider overloaded")]
    Overloaded,
    /// The prompt does not fit the model's context.
    #[error("context length exceeded")]
    ContextLengthExceeded,
    /// Credentials were refused.
    #[error("model provider refused the credentials")]
    Authentication,
    /// No such model.
    #[error("model not found: {0}")]
    NotFound(String),
    /// The provider refused the request as malformed.
    #[error("model provider refused the request: {0}")]
    BadRequest(String),
    /// The provider failed.
    #[error("model provider server error")]
    Server,
    /// The provider reported an error inside a successful (HTTP 200) stream.
    #[error("model provider reported an error mid-stream: {message}")]
    StreamError {
        /// The provider's error type and message.
        message: String,
        /// Whether the provider's error type says retrying may help (overloaded, rate limited,
        /// server error).
        retryable: bool,
    },
    /// The model wrote a tool call its provider could not parse (an OpenAI-compatible server's
    /// `tool_use_failed`): not the provider failing, the model erring, so the engine gives it
    /// back to the model as that call's error — as it does a call whose input is not JSON —
    /// rather than retrying the same request or failing the run.
    #[error("the model wrote a tool call that could not be parsed: {message}")]
    InvalidToolCall {
        /// The tool it meant to call, when the failed generation names one.
        tool: Option<String>,
        /// The provider's message, with the failed generation when it gave one.
        message: String,
    },
    /// The stream could not be parsed.
    #[error("malformed model stream: {0}")]
    MalformedStream(String),
    /// No response in time.
    #[error("model call timed out")]
    Timeout,
    /// The connection failed.
    #[error("could not reach the model provider")]
    Transport,
}

impl ModelErrorKind {
    /// Whether retrying the same call may help.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ModelErrorKind::RateLimited { .. }
                | ModelErrorKind::Overloaded
                | ModelErrorKind::Server
                | ModelErrorKind::Timeout
                | ModelErrorKind::Transport
                | ModelErrorKind::StreamError {
                    retryable: true,
                    ..
                }
        )
    }

    /// A stable code for logs and error parts.
    pub fn code(&self) -> &'static str {
        match self {
            ModelErrorKind::RateLimited { .. } => "rate_limited",
            ModelErrorKind::Overloaded => "overloaded",
            ModelErrorKind::ContextLengthExceeded => "context_length_exceeded",
            ModelErrorKind::Authentication => "authentication",
            ModelErrorKind::NotFound(_) => "not_found",
            ModelErrorKind::BadRequest(_) => "bad_request",
            ModelErrorKind::Server => "server_error",
            ModelErrorKind::StreamError { .. } => "stream_error",
            ModelErrorKind::InvalidToolCall { .. } => "invalid_tool_call",
            ModelErrorKind::MalformedStream(_) => "malformed_stream",
            ModelErrorKind::Timeout => "timeout",
            ModelErrorKind::Transport => "transport",
        }
    }
}

/// A failed model call: its class ([`ModelErrorKind`], which decides retrying) and, when the
/// provider spoke HTTP, what a person needs to see why ([`CallDetail`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelError {
    kind: ModelErrorKind,
    detail: Option<Box<CallDetail>>,
}

impl ModelError {
    /// The class of failure.
    pub fn kind(&self) -> &ModelErrorKind {
        &self.kind
    }

    /// Where and how the call failed, when the provider said.
    pub fn detail(&self) -> Option<&CallDetail> {
        self.detail.as_deref()
    }

    /// This error with `detail` attached (replacing any earlier one).
    #[must_use]
    pub fn with_detail(mut self, detail: CallDetail) -> Self {
        self.detail = Some(Box::new(detail));
        self
    }

    /// This error with the endpoint called named in its detail (see [`CallDetail::endpoint`]).
    #[must_use]
    pub fn at(mut self, method: &str, url: &str) -> Self {
        let named = CallDetail::endpoint(method, url);
        let detail = self.detail.get_or_insert_with(Box::default);
        detail.endpoint = named.endpoint;
        self
    }

    /// Whether retrying the same call may help.
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }

    /// A stable code for logs and error parts.
    pub fn code(&self) -> &'static str {
        self.kind.code()
    }
}

impl From<ModelErrorKind> for ModelError {
    fn from(kind: ModelErrorKind) -> Self {
        ModelError { kind, detail: None }
    }
}

impl std::fmt::Display for ModelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.kind)?;
        match &self.detail {
            Some(detail) => write!(f, " ({detail})"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for ModelError {}

/// Where and how a model call failed, as the provider or the network said it: shown to the
/// person who must fix it (in the CLI, the run's failure and the console), after the engine's
/// redactor has scrubbed it. Never put in telemetry, which carries the class only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallDetail {
    /// The method and URL called, without query string or credentials
    /// (`POST https://api.openai.com/v1/chat/completions`).
    pub endpoint: Option<String>,
    /// The HTTP status the provider answered with.
    pub status: Option<u16>,
    /// The provider's own error message, on one line, cut to [`CallDetail::MAX_MESSAGE`]
    /// characters.
    pub message: Option<String>,
    /// Why the connection failed (the resolver's or the operating system's words).
    pub cause: Option<String>,
}

impl CallDetail {
    /// The most characters of a provider's message kept.
    pub const MAX_MESSAGE: usize = 500;

    /// A detail naming the endpoint called: `method` and `url` with its query string, fragment
    /// and user information removed (a query can carry a key, as Gemini's `?key=` does).
    pub fn endpoint(method: &str, url: &str) -> Self {
        CallDetail {
            endpoint: Some(format!("{method} {}", bare_url(url))),
            ..CallDetail::default()
        }
    }

    /// This detail with the HTTP status.
    #[must_use]
    pub fn status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// This detail with the provider's message on one line, cut to [`CallDetail::MAX_MESSAGE`]
    /// characters and `…` (never inside a character), control and invisible characters
    /// removed; an empty message is left out.
    #[must_use]
    pub fn message(mut self, message: &str) -> Self {
        let message = crate::preview::clean(message.trim(), Self::MAX_MESSAGE, false);
        if !message.trim().is_empty() {
            self.message = Some(message.trim().to_owned());
        }
        self
    }

    /// This detail with the connection's failure.
    #[must_use]
    pub fn cause(mut self, cause: String) -> Self {
        self.cause = Some(cause);
        self
    }
}

impl std::fmt::Display for CallDetail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        parts.extend(self.endpoint.clone());
        parts.extend(self.status.map(|s| format!("HTTP {s}")));
        parts.extend(self.message.clone());
        parts.extend(self.cause.clone());
        f.write_str(&parts.join(": "))
    }
}

/// `url` without its query string, fragment or user information.
fn bare_url(url: &str) -> String {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    let url = &url[..end];
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let host_start = rest.find('/').unwrap_or(rest.len());
            let authority = &rest[..host_start];
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("{scheme}://{host}{}", &rest[host_start..])
        }
        None => url.to_owned(),
    }
}

/// A streamed model response.
pub type ModelStream = Pin<Box<dyn Stream<Item = Result<ModelChunk, ModelError>> + Send>>;

/// Port: a model provider.
#[async_trait]
pub trait ModelProvider: Send + Sync {
    /// The provider's prefix in model strings, for example `scripted` or `openai`.
    fn name(&self) -> &str;

    /// Starts a streaming call. Dropping the stream cancels it.
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError>;

    /// Checks the provider is reachable and accepts Forge's credentials, without a model call.
    /// Providers with nothing to check (the scripted one) are always healthy.
    async fn health(&self) -> Result<(), ModelError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::strategy::unicode;
    use proptest::prelude::*;

    #[test]
    fn an_endpoint_loses_its_query_fragment_and_credentials() {
        let shown = |url| CallDetail::endpoint("POST", url).endpoint;
        assert_eq!(
            shown("https://user:pw@api.example.com:8443/v1/chat?key=AIzaSecret#frag"),
            Some("POST https://api.example.com:8443/v1/chat".to_owned())
        );
        assert_eq!(
            shown("http://127.0.0.1:9/v1/models"),
            Some("POST http://127.0.0.1:9/v1/models".to_owned())
        );
        // An `@` after the host is a path's, not credentials.
        assert_eq!(
            shown("https://h.example/v1/@scope/x?k=1"),
            Some("POST https://h.example/v1/@scope/x".to_owned())
        );
    }

    #[test]
    fn an_error_says_its_class_then_where_and_why() {
        let e = ModelError::from(ModelErrorKind::Authentication)
            .with_detail(
                CallDetail::default()
                    .status(401)
                    .message("  invalid\nkey  "),
            )
            .at("GET", "https://api.example.com/v1/models?x=1");
        assert_eq!(e.code(), "authentication");
        assert!(!e.is_retryable());
        assert_eq!(
            e.to_string(),
            "model provider refused the credentials (GET https://api.example.com/v1/models: \
             HTTP 401: invalid key)"
        );
        // A message with nothing readable is no message.
        assert_eq!(
            CallDetail::default().message("\u{200b}\u{7} ").message,
            None
        );
        let bare = ModelError::from(ModelErrorKind::Transport);
        assert_eq!(bare.to_string(), "could not reach the model provider");
        assert!(bare.is_retryable() && bare.detail().is_none());
    }

    proptest! {
        /// A provider's message of any text is kept on one line, readable and within its cap.
        #[test]
        fn a_provider_message_is_bounded_and_on_one_line(text in unicode(2_000)) {
            let detail = CallDetail::default().message(&text);
            if let Some(message) = &detail.message {
                // The cap, and `…` where it was cut.
                prop_assert!(message.chars().count() <= CallDetail::MAX_MESSAGE + 1);
                prop_assert!(!message.chars().any(|c| c.is_control()));
                prop_assert!(!message.is_empty());
            }
        }

        /// Whatever the URL, the endpoint shown has no query string or credentials.
        #[test]
        fn an_endpoint_never_shows_a_query(host in "[a-z]{1,8}", path in unicode(40), secret in "[A-Za-z0-9]{8,20}") {
            let url = format!("https://me:{secret}@{host}.example/{path}?key={secret}");
            let shown = CallDetail::endpoint("POST", &url).endpoint.unwrap_or_default();
            prop_assert!(!shown.contains(&format!("key={secret}")), "{}", shown);
            prop_assert!(!shown.contains(&format!("me:{secret}")), "{}", shown);
        }
    }
}
