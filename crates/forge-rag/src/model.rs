//! Sources, their versions and chunks.

use forge_core::Error;
use forge_core::time::Timestamp;
use serde::{Deserialize, Serialize};

/// A source's id within its tenant: 1 to 128 of letters, digits and `._:/-` (a path-like name such
/// as `handbook/leave.md` works).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SourceId(String);

impl SourceId {
    /// Validates `id`.
    pub fn new(id: impl Into<String>) -> Result<Self, Error> {
        let id = id.into();
        let ok = !id.is_empty()
            && id.len() <= 128
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '-'));
        if ok {
            Ok(Self(id))
        } else {
            Err(Error::invalid(format!(
                "source id {id:?} must be 1 to 128 of letters, digits and ._:/-"
            )))
        }
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SourceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The format a source was ingested from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// Plain text.
    Text,
    /// Markdown (stored as written; headings name chunks).
    Markdown,
    /// HTML (its text extracted).
    Html,
}

impl Format {
    /// The format a file name's extension implies (`.md`, `.html`/`.htm`, anything else text).
    pub fn from_name(name: &str) -> Self {
        let lower = name.to_ascii_lowercase();
        if lower.ends_with(".md") || lower.ends_with(".markdown") {
            Format::Markdown
        } else if lower.ends_with(".html") || lower.ends_with(".htm") {
            Format::Html
        } else {
            Format::Text
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Markdown => "markdown",
            Format::Html => "html",
        }
    }

    /// Parses the wire name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "text" => Some(Format::Text),
            "markdown" => Some(Format::Markdown),
            "html" => Some(Format::Html),
            _ => None,
        }
    }
}

/// A source as stored: the current version of one document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// Its id.
    pub id: SourceId,
    /// `sha256:` + hex SHA-256 of the normalized text: changes exactly when the text does.
    pub version: String,
    /// Its title.
    pub title: String,
    /// The access label policies read (`resource.label` on `Forge::Source`).
    pub label: String,
    /// The principal it belongs to, when it is someone's own (`resource.owner` on
    /// `Forge::Source`, absent otherwise): a private note's author, say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// What it was ingested from.
    pub format: Format,
    /// Caller metadata (never read when authorizing).
    pub metadata: serde_json::Value,
    /// Length of the normalized text, in bytes.
    pub text_bytes: u64,
    /// How many chunks it has.
    pub chunks: u32,
    /// When this version was stored.
    pub updated_at: Timestamp,
}

/// A chunk: an exact `[start, end)` byte span of a source version's normalized text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// Its source.
    pub source_id: SourceId,
    /// The source version it belongs to.
    pub version: String,
    /// Its position in the source, from 0.
    pub index: u32,
    /// First byte, inclusive.
    pub start: u64,
    /// Last byte, exclusive.
    pub end: u64,
    /// `text[start..end]`, verbatim.
    pub text: String,
    /// The nearest heading above it (Markdown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heading: Option<String>,
}

/// A source ready to store: normalized text cut into chunks.
#[derive(Debug, Clone, PartialEq)]
pub struct IngestedSource {
    /// Its id.
    pub id: SourceId,
    /// Its title.
    pub title: String,
    /// Its access label.
    pub label: String,
    /// Its owner, when it is someone's own ([`IngestedSource::owned_by`]).
    pub owner: Option<String>,
    /// What it was ingested from.
    pub format: Format,
    /// Caller metadata.
    pub metadata: serde_json::Value,
    /// The normalized text.
    pub text: String,
    /// [`Source::version`] of `text`.
    pub version: String,
    /// The chunks, in order, covering the text.
    pub chunks: Vec<Chunk>,
}

impl IngestedSource {
    /// The source as `owner`'s own: policies read the principal id as `resource.owner` (a
    /// private note's author), rather than a label that some principal's id could equal.
    #[must_use]
    pub fn owned_by(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }
}

/// What [`crate::SourceStore::put_source`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PutOutcome {
    /// The source is new.
    Created,
    /// The text changed: a new version replaced the old one and its chunks.
    Replaced,
    /// The same version was stored already; nothing changed.
    Unchanged,
}

/// A source's id, label and owner: what authorization reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRef {
    /// Its id.
    pub id: SourceId,
    /// Its access label.
    pub label: String,
    /// Its owner, when it has one.
    pub owner: Option<String>,
}

/// Chunks that match a query among allowed sources, with the allowed corpus's size for ranking.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Candidates {
    /// Chunks containing at least one query term, in storage order.
    pub chunks: Vec<Chunk>,
    /// How many chunks the allowed sources have in all.
    pub corpus_chunks: u64,
    /// How many words they have in all.
    pub corpus_words: u64,
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchHit {
    /// The chunk, with its source, version and offsets.
    pub chunk: Chunk,
    /// Its relevance (BM25 over the caller's allowed chunks); higher is better.
    pub score: f32,
}
