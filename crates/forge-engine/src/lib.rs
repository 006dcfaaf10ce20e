//! Forge's engine: executes runs step by step.
//!
//! One step: assemble the context (instructions, session state, history) → stream one model call,
//! emitting `part.added` / `part.updated` as chunks arrive → validate every tool call's input
//! against its schema (invalid input goes back to the model as a tool error) → run the tools,
//! concurrently when the model asks for several → commit the step's events, messages and
//! checkpoint in one fenced `commit_step`. Repeat until a final answer, the step limit,
//! cancellation or a failure.
//!
//! An engine with one typed tool and the deterministic scripted model, on the memory store:
//!
//! ```
//! use std::sync::Arc;
//!
//! use forge_core::agent::{AgentDefinition, AgentRef, RunLimits};
//! use forge_core::part::Part;
//! use forge_core::ports::store::{NewThread, ThreadStore};
//! use forge_core::run::RunStatus;
//! use forge_core::scope::Scope;
//! use forge_engine::{Engine, NoopObserver, native_tool};
//! use forge_providers::{Script, ScriptedProvider};
//! use tokio_util::sync::CancellationToken;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Multiply {
//!     a: i64,
//!     b: i64,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The model: call the tool, then answer with its result.
//! let script = Script::parse(
//!     r#"
//! [[conversation]]
//! [[conversation.turn]]
//! tool_calls = [{ name = "multiply", input = { a = 12, b = 7 } }]
//! [[conversation.turn]]
//! text = ["12 × 7 = {{tool_result}}"]
//! "#,
//!     "example",
//! )?;
//! let agent = AgentDefinition {
//!     agent: AgentRef { name: "calculator".into(), version: "1".into() },
//!     instructions: "Use the tool for arithmetic.".into(),
//!     model: "scripted:example".into(),
//!     tools: vec!["multiply".into()],
//!     skills: vec![],
//!     output_schema: None,
//!     limits: RunLimits::default(),
//!     approvals: Default::default(),
//!     compaction: None,
//! };
//! let store = Arc::new(forge_store_memory::MemoryStore::default());
//! let engine = Engine::builder()
//!     .store(store.clone())
//!     .model(Arc::new(ScriptedProvider::new(script)))
//!     .tool(Arc::new(native_tool("multiply", "Multiplies two integers.", |_ctx, m: Multiply| async move {
//!         Ok(m.a * m.b)
//!     })))?
//!     .agent(agent.clone())
//!     .build()?;
//!
//! // Every call is scoped to a tenant and a principal.
//! let scope = Scope::parse("acme", "alice", &[])?;
//! let thread = store.create_thread(&scope, NewThread::default()).await?;
//! let run = engine
//!     .start_run(&scope, thread.id, &agent.agent, vec![Part::text("What is 12 times 7?")])
//!     .await?;
//! let outcome = engine
//!     .execute(&scope, run.id, &CancellationToken::new(), &NoopObserver)
//!     .await?;
//!
//! assert_eq!(outcome.status, RunStatus::Completed);
//! let history = store.list_messages(&scope, thread.id).await?;
//! assert_eq!(history.last().map(|m| m.text()), Some("12 × 7 = 84".to_owned()));
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

mod assistant;
mod cancels;
mod cite;
pub mod compaction;
pub mod context;
pub mod discovery;
mod engine;
mod error;
mod execution;
mod executor;
pub mod files;
mod hitl;
mod lease;
mod meter;
mod model_call;
pub mod observer;
mod plan;
pub mod preview;
pub mod skills;
pub mod state;
mod step;
pub mod structured;
pub mod tools;
pub mod worker;

pub use cancels::DEFAULT_CANCEL_POLL;
pub use cite::CITE;
pub use discovery::{SearchSignal, ToolEntry, ToolSearchHit};
pub use engine::{CONFIG_ACTION, DEPLOYMENT_TENANT};
pub use engine::{Engine, EngineBuilder, KeyedRun, MAX_TITLE_CHARS, RunControl, RunOutcome};
pub use error::EngineError;
pub use hitl::ASK_USER;
pub use observer::{Both, Commit, Emitted, LiveObserver, NoopObserver, RunObserver};
pub use preview::{PreviewFn, preview_fn};
pub use skills::{LOAD_SKILL, RUN_SKILL_SCRIPT, Skill, SkillLibrary};
pub use tools::{Argument, NativeTool, ToolRegistry, native_tool};
pub use worker::{JobOutcome, Worker, WorkerConfig, WorkerReport};
