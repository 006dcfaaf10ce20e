//! Provider contract tests: wire transcripts replayed through a local HTTP server.

#![allow(clippy::unwrap_used)]

mod documented;
mod embeddings;
mod recorded;
mod robustness;
mod scenarios;
mod sse_reference;
mod support;
