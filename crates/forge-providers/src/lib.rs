//! Model adapters. For now: the deterministic [`scripted`] provider, for tests and for trying Forge
//! with no model account.

#![deny(missing_docs)]

pub mod scripted;

pub use scripted::{Script, ScriptedProvider};
