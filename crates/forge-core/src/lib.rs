//! Forge's domain: ids, scope, agents, threads, runs and their state machine, run events and
//! message parts, usage, errors, and the ports every adapter implements.
//!
//! This crate does no I/O and picks no runtime. Adapters (stores, providers, tools) live in their
//! own crates and implement the traits in [`ports`]; `forge-engine` drives them.

#![deny(missing_docs)]

pub mod agent;
pub mod audit;
pub mod error;
pub mod event;
pub mod forget;
pub mod id;
pub mod input;
pub mod interaction;
pub mod message;
pub mod metering;
pub mod part;
pub mod ports;
pub mod preview;
pub mod redact;
pub mod run;
pub mod scope;
pub mod stream;
pub mod telemetry;
pub mod text;
pub mod thread;
pub mod time;
pub mod usage;

pub use error::{Error, ErrorKind};
