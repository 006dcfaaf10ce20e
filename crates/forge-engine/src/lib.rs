//! Forge's engine: executes runs step by step.
//!
//! One step: assemble the context (instructions, session state, history) → stream one model call,
//! emitting `part.added` / `part.updated` as chunks arrive → validate every tool call's input
//! against its schema (invalid input goes back to the model as a tool error) → run the tools,
//! concurrently when the model asks for several → commit the step's events, messages and
//! checkpoint in one fenced `commit_step`. Repeat until a final answer, the step limit,
//! cancellation or a failure.

#![deny(missing_docs)]

mod cite;
pub mod compaction;
mod config_audit;
pub mod context;
pub mod discovery;
mod engine;
mod error;
pub mod files;
mod hitl;
pub mod live;
mod meter;
pub mod observer;
pub mod skills;
pub mod state;
mod step;
pub mod structured;
pub mod tools;
pub mod worker;

pub use cite::CITE;
pub use config_audit::{CONFIG_ACTION, DEPLOYMENT_TENANT};
pub use discovery::{SearchSignal, ToolEntry, ToolSearchHit};
pub use engine::{Engine, EngineBuilder, MAX_TITLE_CHARS, RunControl, RunOutcome};
pub use error::EngineError;
pub use hitl::ASK_USER;
pub use observer::{Both, Commit, Emitted, LiveObserver, NoopObserver, RunObserver};
pub use skills::{LOAD_SKILL, RUN_SKILL_SCRIPT, Skill, SkillLibrary};
pub use tools::{NativeTool, ToolRegistry, native_tool};
pub use worker::{JobOutcome, Worker, WorkerConfig, WorkerReport};
