//! Forge retrieval: a tenant's documents as sources, cut into chunks with exact byte offsets,
//! searched only among the sources the caller may read, and cited by exact span.
//!
//! - [`model`]: sources, versions (the SHA-256 of the normalized text), chunks.
//! - [`ingest`]: text, Markdown and HTML become normalized text and chunks.
//! - [`ports`]: [`SourceStore`], implemented by `forge-store-memory`, `forge-store-sqlite` and
//!   `forge-store-postgres` and held to one conformance suite (`forge_testkit::sources`).
//! - [`rank`]: BM25 over the allowed chunks.
//! - [`embed`]: the [`Embedder`] port; [`vector`]: normalization, encoding and brute-force
//!   nearest neighbours every adapter shares; [`fuse`]: reciprocal-rank fusion.
//! - [`retrieve`]: [`Retriever`] — authorization before retrieval, citation checks
//!   ([`CitationCheck`](forge_core::ports::citation::CitationCheck)) and resolution.
//! - [`tool`]: the `search_documents` tool.
//! - [`retention`]: per-tenant `max_age`, enforced by a sweep.

#![deny(missing_docs)]

pub mod embed;
pub mod fuse;
pub mod ingest;
pub mod model;
pub mod ports;
pub mod rank;
pub mod retention;
pub mod retrieve;
pub mod tool;
pub mod vector;

pub use embed::{Embedder, Purpose};
pub use model::{
    Candidates, Chunk, Format, IngestedSource, PutOutcome, SearchHit, Source, SourceId, SourceRef,
};
pub use ports::{SOURCE_DELETED, SourceStore};
pub use retention::Retention;
pub use retrieve::{Found, Indexed, Resolved, Retriever};
pub use tool::{SEARCH_DOCUMENTS, SearchDocuments};
