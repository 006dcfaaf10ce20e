//! Ports: the traits every adapter implements. Each ships an in-memory implementation in
//! `forge-store-memory` (stores, queue) or `forge-engine` / `forge-providers` (tools, models).

pub mod audit;
pub mod citation;
pub mod erasure;
pub mod files;
pub mod interaction;
pub mod keys;
pub mod lease;
pub mod live;
pub mod model;
pub mod policy;
pub mod queue;
pub mod rules;
pub mod store;
pub mod tool;
pub mod usage;
