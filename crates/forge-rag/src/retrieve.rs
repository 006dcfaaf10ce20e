//! Retrieval for a caller: the sources they may read are decided first, then candidates are found
//! among those only and ranked over those only; citations are checked against the same rule.

use std::sync::Arc;

use async_trait::async_trait;
use forge_core::Error;
use forge_core::part::{CitationPart, Span};
use forge_core::ports::citation::{CitationCheck, CitationRefusal};
use forge_core::ports::policy::{Authorizer, PolicyAction, PolicyRequest, PolicyResource};
use forge_core::scope::Scope;

use crate::model::{SearchHit, Source, SourceId, SourceRef};
use crate::ports::SourceStore;
use crate::rank;

/// The most candidate chunks ranked per query. Candidates are taken in storage order, never by a
/// score, so which are kept does not depend on documents the caller cannot read.
pub const MAX_CANDIDATES: usize = 5_000;

/// Search and citation checks over a [`SourceStore`] for callers under an [`Authorizer`].
#[derive(Clone)]
pub struct Retriever {
    store: Arc<dyn SourceStore>,
    authorizer: Arc<dyn Authorizer>,
}

impl std::fmt::Debug for Retriever {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retriever").finish_non_exhaustive()
    }
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
        Self { store, authorizer }
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
        let terms = rank::query_terms(query);
        if terms.is_empty() || limit == 0 {
            return Ok(vec![]);
        }
        let allowed = self.readable(scope).await?;
        if allowed.is_empty() {
            return Ok(vec![]);
        }
        let candidates = self
            .store
            .candidates(scope, &allowed, &terms, MAX_CANDIDATES)
            .await?;
        Ok(rank::rank(candidates, &terms, limit))
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
        let (start, end) = (span.start as usize, span.end as usize);
        if start >= end
            || end > text.len()
            || !text.is_char_boundary(start)
            || !text.is_char_boundary(end)
        {
            return Ok(Located::BadSpan);
        }
        Ok(Located::Text {
            title: source.title,
            text: text[start..end].to_owned(),
        })
    }
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
