//! Forge for embedders: durable, multi-tenant AI agents in a Rust application, from one crate.
//!
//! [`Forge::builder`] assembles a deployment — a store, agents (from TOML files or defined in
//! code), model providers, tools, Cedar policies and skills — into an engine, a worker that
//! executes queued runs (and resumes them after a crash), and, with the `server` feature, the
//! GraphQL server. A started run is a [`RunHandle`]: [`RunHandle::wait`] for its outcome,
//! [`RunHandle::subscribe`] for the same stream of events the GraphQL subscription serves. No
//! one polls.
//!
//! ```
//! use forge::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), forge::Error> {
//! let script = r#"
//! [[conversation]]
//! [[conversation.turn]]
//! text = ["Hello from Forge."]
//! "#;
//! let forge = Forge::builder()
//!     .store("memory")
//!     .agent(AgentDefinition::new("greeter", "scripted:hello").instructions("Greet."))
//!     .model(ScriptedProvider::new(Script::parse(script, "hello")?))
//!     .build()
//!     .await?;
//! let scope = Scope::parse("acme", "alice", &[])?;
//! let run = forge.start(&scope, "greeter", "Hi!").await?;
//! assert_eq!(run.wait().await?.answer(), Some("Hello from Forge."));
//! forge.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! The crates behind it are re-exported whole ([`core`], [`engine`], [`providers`], …) for
//! anything the builder does not cover. Features: `sqlite` (default) and `postgres` stores,
//! `redis` (leases and the live tail across processes), `server` (GraphQL, the web client),
//! `mcp`, `rag`, `files`, `otel`, `eval`.

#![deny(missing_docs)]

mod agents;
mod builder;
mod deployment;
mod jobs;
mod run;
mod stores;
#[cfg(feature = "testing")]
pub mod testing;

pub use agents::{AgentSource, LoadedAgent, model_providers, redactor};
pub use builder::ForgeBuilder;
pub use deployment::{Forge, shutdown_signal};
pub use jobs::{JOB_MODEL, Job, JobError, Jobs};
pub use run::{Outcome, RunHandle};
#[cfg(feature = "postgres")]
pub use stores::PgMode;
pub use stores::{Stores, redact};

/// Core types and ports: scopes, runs, events, messages, the store and provider traits.
pub use forge_core as core;
/// The engine, its builder, native tools, the worker and skills.
pub use forge_engine as engine;
/// Live run streams: the event bus, the live tail, the log cache.
pub use forge_live as live;
/// Cedar policies.
pub use forge_policy as policy;
/// Model providers: OpenAI, Anthropic, OpenAI-compatible, and the scripted one.
pub use forge_providers as providers;

/// Retrieval with exact citations (feature `rag`).
#[cfg(feature = "rag")]
pub use forge_rag as rag;

/// Stored files: uploads, inspection, scanning, signed downloads (feature `files`).
#[cfg(feature = "files")]
pub use forge_files as files;

/// Evaluation: datasets, graders, the release gate (feature `eval`).
#[cfg(feature = "eval")]
pub use forge_eval as eval;

/// MCP servers' tools, pinned and policed (feature `mcp`).
#[cfg(feature = "mcp")]
pub use forge_mcp as mcp;

/// OpenTelemetry traces, metrics and logs (feature `otel`).
#[cfg(feature = "otel")]
pub use forge_otel as otel;

/// The GraphQL server (feature `server`).
#[cfg(feature = "server")]
pub use forge_server as server;

/// The stores.
pub mod store {
    /// The in-memory store (tests, demos).
    pub use forge_store_memory as memory;
    /// The PostgreSQL store (feature `postgres`).
    #[cfg(feature = "postgres")]
    pub use forge_store_postgres as postgres;
    /// Redis leases and the live tail between processes (feature `redis`).
    #[cfg(feature = "redis")]
    pub use forge_store_redis as redis;
    /// The embedded SQLite store (feature `sqlite`, the default).
    #[cfg(feature = "sqlite")]
    pub use forge_store_sqlite as sqlite;
}

/// What most programs embedding Forge use.
pub mod prelude {
    pub use crate::{Forge, ForgeBuilder, Outcome, RunHandle};
    pub use forge_core::agent::{AgentDefinition, ApprovalPolicy, RunLimits};
    pub use forge_core::part::Part;
    pub use forge_core::scope::Scope;
    pub use forge_core::stream::StreamItem;
    pub use forge_engine::native_tool;
    pub use forge_providers::{Script, ScriptedProvider};
    pub use futures_util::StreamExt as _;
}

/// Why assembling a deployment, or a call through it, failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The store URL is not one this build opens.
    #[error("store URL {url}: {reason}")]
    StoreUrl {
        /// The URL, without a password.
        url: String,
        /// What it should be.
        reason: String,
    },
    /// The store could not be opened or migrated.
    #[error("could not open the store {url}")]
    Open {
        /// The URL, without a password.
        url: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A file the deployment reads (agent, script, policies, skills, providers) is unusable.
    #[error("{what} {path}")]
    File {
        /// What failed, naming the kind of file: `failed to read agent file`.
        what: &'static str,
        /// Its path.
        path: std::path::PathBuf,
        /// What is wrong with it.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A model provider an agent needs cannot be built (a missing credential, say).
    #[error("model provider {prefix} cannot be used")]
    Provider {
        /// The provider's prefix in model strings.
        prefix: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The pieces given do not fit together.
    #[error("{0}")]
    Config(String),
    /// No agent of that name is registered.
    #[error("no agent named {0} is registered")]
    UnknownAgent(String),
    /// The deployment stopped before the run ended.
    #[error("the deployment shut down before the run ended")]
    ShutDown,
    /// The engine refused or failed.
    #[error(transparent)]
    Engine(#[from] forge_engine::EngineError),
    /// A store call or a check failed; its kind says whether to retry.
    #[error(transparent)]
    Forge(#[from] forge_core::Error),
    /// A script could not be parsed.
    #[error(transparent)]
    Script(#[from] forge_providers::scripted::ScriptError),
    /// Listening or serving failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Error {
    /// The store at `url` failed to open for `source`.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    fn open(url: &str, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Open {
            url: redact(url),
            source: Box::new(source),
        }
    }

    /// The file at `path` is unusable for `source`.
    fn file(
        what: &'static str,
        path: &std::path::Path,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::File {
            what,
            path: path.to_owned(),
            source: Box::new(source),
        }
    }
}
