//! Model adapters: OpenAI Chat Completions, OpenAI Responses and Anthropic Messages over HTTP, any
//! OpenAI-compatible server by base URL, and the deterministic [`scripted`] provider for tests and
//! for trying Forge with no model account.
//!
//! - [`wire`]: the pure request/response formats of each provider, and error classification;
//! - [`sse`]: incremental event-stream decoding;
//! - [`http`]: the HTTP adapter (timeouts, streaming, health check);
//! - [`retry`]: retries of retryable failures with backoff, jitter and retry-after;
//! - [`config`]: model strings and the providers file; [`secret`]: credential references;
//! - [`embeddings`]: OpenAI-compatible embeddings, the retrieval `Embedder` port's HTTP adapter.

#![deny(missing_docs)]

pub mod config;
pub mod embeddings;
pub mod http;
pub mod retry;
pub mod scripted;
pub mod secret;
pub mod sse;
pub mod wire;

pub use config::{ConfigError, ProviderKind, ProvidersConfig};
pub use embeddings::{EmbeddingSettings, OpenAiEmbeddings};
pub use http::{HttpProvider, HttpSettings, Timeouts};
pub use retry::{RetryPolicy, Retrying};
pub use scripted::{Script, ScriptedProvider};
pub use secret::{Secret, SecretRef};
pub use wire::{BodyOptions, Dialect};
