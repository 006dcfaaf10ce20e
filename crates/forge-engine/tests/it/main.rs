//! Engine tests: each asserts the exact event sequence of a run, numbered from 1 without gaps.

#![allow(clippy::unwrap_used)]

mod compaction_tests;
mod config_audit_tests;
mod harness;
mod hitl_tests;
mod http_tests;
mod loop_tests;
mod preview_tests;
mod redaction_tests;
mod send_sync;
mod skills_tests;
mod state_tests;
mod tools_tests;
mod usage_tests;
mod worker_tests;
