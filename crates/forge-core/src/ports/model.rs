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
pub enum ModelError {
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

impl ModelError {
    /// Whether retrying the same call may help.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ModelError::RateLimited { .. }
                | ModelError::Overloaded
                | ModelError::Server
                | ModelError::Timeout
                | ModelError::Transport
                | ModelError::StreamError {
                    retryable: true,
                    ..
                }
        )
    }

    /// A stable code for logs and error parts.
    pub fn code(&self) -> &'static str {
        match self {
            ModelError::RateLimited { .. } => "rate_limited",
            ModelError::Overloaded => "overloaded",
            ModelError::ContextLengthExceeded => "context_length_exceeded",
            ModelError::Authentication => "authentication",
            ModelError::NotFound(_) => "not_found",
            ModelError::BadRequest(_) => "bad_request",
            ModelError::Server => "server_error",
            ModelError::StreamError { .. } => "stream_error",
            ModelError::MalformedStream(_) => "malformed_stream",
            ModelError::Timeout => "timeout",
            ModelError::Transport => "transport",
        }
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
