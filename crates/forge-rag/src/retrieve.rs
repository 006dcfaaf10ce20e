//! Retrieval for a caller: the sources they may read are decided first, then candidates are found
//! among those only and ranked over those only — lexically always, and by vector similarity when
//! an [`Embedder`] is configured, the two fused by rank; citations are checked against the same
//! rule.

use std::sync::Arc;

use async_trait::async_trait;
use forge_core::Error;
use forge_core::part::{CitationPart, Span};
use forge_core::ports::citation::{CitationCheck, CitationRefusal};
use forge_core::ports::policy::{Authorizer, PolicyAction, PolicyRequest, PolicyResource};
use forge_core::scope::Scope;

use crate::embed::{self, Embedder, Purpose};
use crate::model::{IngestedSource, PutOutcome, SearchHit, Source, SourceId, SourceRef};
use crate::ports::SourceStore;
use crate::{fuse, rank};

/// The most candidate chunks ranked per query. Candidates are taken in storage order, never by a
/// score, so which are kept does not depend on documents the caller cannot read.
pub const MAX_CANDIDATES: usize = 5_000;

/// How deep each list (lexical, vector) goes before fusion, at least.
pub const FUSION_DEPTH: usize = 50;

/// Search and citation checks over a [`SourceStore`] for callers under an [`Authorizer`].
#[derive(Clone)]
pub struct Retriever {
    store: Arc<dyn SourceStore>,
    authorizer: Arc<dyn Authorizer>,
    embedder: Option<Arc<dyn Embedder>>,
}

impl std::fmt::Debug for Retriever {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retriever")
            .field("embedder", &self.embedder.as_ref().map(|e| e.model()))
            .finish_non_exhaustive()
    }
}

/// What a search found, and whether its vector half was skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// The hits, best first.
    pub hits: Vec<SearchHit>,
    /// Why vector search was skipped although an embedder is configured (the embedder failed);
    /// the hits are then lexical only.
    pub degraded: Option<String>,
}

/// What [`Retriever::index`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Indexed {
    /// What storing the source did.
    pub outcome: PutOutcome,
    /// How many chunk vectors were computed and stored (0 without an embedder, or when the
    /// version had them already).
    pub vectors: usize,
}

/// A resolved citation: the exact text at its span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The source's title.
    pub title: String,
    /// The text at the span, verbatim.
    pub text: String,
}

impl Retriever {
    /// A retriever over `store`, asking `authorizer`.
    pub fn new(store: Arc<dyn SourceStore>, authorizer: Arc<dyn Authorizer>) -> Self {
        Self {
            store,
            authorizer,
            embedder: None,
        }
    }

    /// This retriever, also searching by vector similarity under `embedder` and indexing new
    /// versions' chunks with it.
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
        self
    }

    /// The embedder, if one is configured.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    /// Stores `source` and, with an embedder, the vectors of its chunks unless this version has
    /// them. The text is stored first: when embedding fails, the source is searchable lexically
    /// and the error is returned ([`Self::embed_missing`] completes it later).
    pub async fn index(&self, scope: &Scope, source: &IngestedSource) -> Result<Indexed, Error> {
        let outcome = self.store.put_source(scope, source).await?;
        let vectors = match &self.embedder {
            Some(e) => self.embed_version(scope, e.as_ref(), source).await?,
            None => 0,
        };
        Ok(Indexed { outcome, vectors })
    }

    /// Computes and stores the vectors every current source version of `scope`'s tenant lacks
    /// under the embedder's model; returns how many sources it embedded. Without an embedder,
    /// nothing.
    pub async fn embed_missing(&self, scope: &Scope) -> Result<usize, Error> {
        let Some(e) = &self.embedder else {
            return Ok(0);
        };
        let mut embedded = 0;
        for source in self.store.list_sources(scope, i64::MAX as usize).await? {
            if self
                .store
                .has_vectors(scope, &source.id, &source.version, e.model())
                .await?
            {
                continue;
            }
            let chunks = self.store.source_chunks(scope, &source.id).await?;
            let texts: Vec<String> = chunks.into_iter().map(|c| c.text).collect();
            let vectors = embed::embed_all(e.as_ref(), &texts, Purpose::Document).await?;
            if self
                .store
                .put_vectors(scope, &source.id, &source.version, e.model(), &vectors)
                .await?
            {
                embedded += 1;
            }
        }
        Ok(embedded)
    }

    async fn embed_version(
        &self,
        scope: &Scope,
        e: &dyn Embedder,
        source: &IngestedSource,
    ) -> Result<usize, Error> {
        if source.chunks.is_empty()
            || self
                .store
                .has_vectors(scope, &source.id, &source.version, e.model())
                .await?
        {
            return Ok(0);
        }
        let texts: Vec<String> = source.chunks.iter().map(|c| c.text.clone()).collect();
        let vectors = embed::embed_all(e, &texts, Purpose::Document).await?;
        let stored = self
            .store
            .put_vectors(scope, &source.id, &source.version, e.model(), &vectors)
            .await?;
        Ok(if stored { vectors.len() } else { 0 })
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn SourceStore> {
        &self.store
    }

    /// Whether `scope` may read the source `r`.
    pub fn may_read(&self, scope: &Scope, r: &SourceRef) -> bool {
        self.authorizer
            .decide(&PolicyRequest {
                scope,
                action: PolicyAction::Read,
                resource: PolicyResource::Source {
                    id: r.id.as_str(),
                    label: &r.label,
                    owner: r.owner.as_deref(),
                },
                input: None,
            })
            .is_allowed()
    }

    /// The sources `scope` may read.
    pub async fn readable(&self, scope: &Scope) -> Result<Vec<SourceId>, Error> {
        Ok(self
            .store
            .source_refs(scope)
            .await?
            .into_iter()
            .filter(|r| self.may_read(scope, r))
            .map(|r| r.id)
            .collect())
    }

    /// The best chunks for `query` among the sources `scope` may read, at most `limit`.
    pub async fn search(
        &self,
        scope: &Scope,
        query: &str,
        limit: usize,
    ) -> Result<Vec<SearchHit>, Error> {
        Ok(self.find(scope, query, limit).await?.hits)
    }

    /// [`Self::search`], saying whether vector search was skipped. Without an embedder the hits
    /// are BM25's; with one, BM25's and the nearest vectors' lists (each [`FUSION_DEPTH`] deep)
    /// fused by reciprocal rank. Both lists are computed over the readable sources only.
    pub async fn find(&self, scope: &Scope, query: &str, limit: usize) -> Result<Found, Error> {
        let none = Found {
            hits: vec![],
            degraded: None,
        };
        let terms = rank::query_terms(query);
        if limit == 0 || (terms.is_empty() && (self.embedder.is_none() || query.trim().is_empty()))
        {
            return Ok(none);
        }
        let allowed = self.readable(scope).await?;
        if allowed.is_empty() {
            return Ok(none);
        }
        let Some(e) = &self.embedder else {
            let candidates = self
                .store
                .candidates(scope, &allowed, &terms, MAX_CANDIDATES)
                .await?;
            return Ok(Found {
                hits: rank::rank(candidates, &terms, limit),
                degraded: None,
            });
        };
        let depth = FUSION_DEPTH.max(limit);
        let lexical = if terms.is_empty() {
            vec![]
        } else {
            let candidates = self
                .store
                .candidates(scope, &allowed, &terms, MAX_CANDIDATES)
                .await?;
            rank::rank(candidates, &terms, depth)
        };
        let query_vector = embed::embed_all(e.as_ref(), &[query.to_owned()], Purpose::Query).await;
        let (vector, degraded) = match query_vector.map(|mut v| v.pop()) {
            Ok(Some(q)) => (
                self.store
                    .nearest(scope, &allowed, e.model(), &q, depth)
                    .await?,
                None,
            ),
            Ok(None) => (vec![], None),
            Err(err) => (
                vec![],
                Some(format!(
                    "vector search skipped: embedding the query with {} failed ({:?})",
                    e.model(),
                    err.kind()
                )),
            ),
        };
        Ok(Found {
            hits: fuse::reciprocal_rank(&[lexical, vector], limit),
            degraded,
        })
    }

    /// A source `scope` may read, or `None` (absent, deleted and unreadable look the same).
    pub async fn source(&self, scope: &Scope, id: &str) -> Result<Option<Source>, Error> {
        let Ok(id) = SourceId::new(id) else {
            return Ok(None);
        };
        let Some(source) = self.store.source(scope, &id).await? else {
            return Ok(None);
        };
        let r = SourceRef {
            id: source.id.clone(),
            label: source.label.clone(),
            owner: source.owner.clone(),
        };
        Ok(self.may_read(scope, &r).then_some(source))
    }

    /// The exact text at `span` of `id` at `version`, for `scope`; `None` when the source does not
    /// exist, was deleted, is not readable by `scope`, has another version now, or the span is not
    /// within its text.
    pub async fn resolve(
        &self,
        scope: &Scope,
        id: &str,
        version: &str,
        span: Span,
    ) -> Result<Option<Resolved>, Error> {
        match self.locate(scope, id, version, span).await? {
            Located::Text { title, text } => Ok(Some(Resolved { title, text })),
            _ => Ok(None),
        }
    }

    async fn locate(
        &self,
        scope: &Scope,
        id: &str,
        version: &str,
        span: Span,
    ) -> Result<Located, Error> {
        let Some(source) = self.source(scope, id).await? else {
            return Ok(Located::NoSource);
        };
        if source.version != version {
            return Ok(Located::Stale(source.version));
        }
        let Some(text) = self.store.source_text(scope, &source.id, version).await? else {
            return Ok(Located::NoSource);
        };
        Ok(match span_text(&text, span) {
            Some(quoted) => Located::Text {
                title: source.title,
                text: quoted.to_owned(),
            },
            None => Located::BadSpan,
        })
    }
}

/// The text at `span` (byte offsets) of `text`: `None` for an empty span, one past the end, or
/// one whose ends fall inside a character (a client's span is never trusted to be whole).
fn span_text(text: &str, span: Span) -> Option<&str> {
    let start = usize::try_from(span.start).ok()?;
    let end = usize::try_from(span.end).ok()?;
    if start >= end {
        return None;
    }
    text.get(start..end)
}

enum Located {
    NoSource,
    Stale(String),
    BadSpan,
    Text { title: String, text: String },
}

#[async_trait]
impl CitationCheck for Retriever {
    async fn check(
        &self,
        scope: &Scope,
        c: &CitationPart,
    ) -> Result<Result<(), CitationRefusal>, Error> {
        let span = c.span;
        Ok(
            match self
                .locate(scope, &c.source_id, &c.source_version, span)
                .await?
            {
                Located::NoSource => Err(CitationRefusal::NoSource(c.source_id.clone())),
                Located::Stale(current) => Err(CitationRefusal::StaleVersion {
                    source_id: c.source_id.clone(),
                    cited: c.source_version.clone(),
                    current,
                }),
                Located::BadSpan => Err(CitationRefusal::BadSpan {
                    start: span.start,
                    end: span.end,
                }),
                Located::Text { text, .. } if text != c.excerpt => {
                    Err(CitationRefusal::ExcerptMismatch {
                        start: span.start,
                        end: span.end,
                    })
                }
                Located::Text { .. } => Ok(()),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forge_core::text::strategy::unicode;
    use proptest::prelude::*;

    proptest! {
        /// Any span of any Unicode text: its text when the span is whole and inside the text,
        /// else `None`, never a panic.
        #[test]
        fn any_span_of_any_unicode_is_quoted_or_refused(
            text in unicode(300),
            start in 0u64..1_400,
            end in 0u64..1_400,
        ) {
            let quoted = span_text(&text, Span { start, end });
            let (s, e) = (start as usize, end as usize);
            let whole = s < e && e <= text.len() && text.is_char_boundary(s) && text.is_char_boundary(e);
            prop_assert_eq!(quoted.is_some(), whole);
            if let Some(q) = quoted {
                prop_assert_eq!(q, &text[s..e]);
            }
        }
    }
}
