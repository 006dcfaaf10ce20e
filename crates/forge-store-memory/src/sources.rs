//! Retrieval sources in memory: the executable specification of [`SourceStore`].

use async_trait::async_trait;
use forge_core::Error;
use forge_core::scope::{Scope, TenantId};
use std::collections::BTreeMap;

use forge_rag::model::{
    Candidates, Chunk, IngestedSource, PutOutcome, SearchHit, Source, SourceId, SourceRef,
};
use forge_rag::ports::rules;
use forge_rag::vector::{self, TopK};
use forge_rag::{SourceStore, rank};

use crate::MemoryStore;

/// A stored source: its row, text and chunks.
#[derive(Debug, Clone)]
pub(crate) struct SourceRow {
    source: Source,
    text: String,
    chunks: Vec<Chunk>,
    /// Each chunk's word count.
    words: Vec<u64>,
    /// Per embedding model, one vector per chunk.
    vectors: BTreeMap<String, Vec<Vec<f32>>>,
}

type Key = (TenantId, SourceId);

fn key(scope: &Scope, id: &SourceId) -> Key {
    (scope.tenant_id().clone(), id.clone())
}

#[async_trait]
impl SourceStore for MemoryStore {
    async fn put_source(&self, scope: &Scope, s: &IngestedSource) -> Result<PutOutcome, Error> {
        let now = self.clock.now();
        let mut st = self.lock();
        let k = key(scope, &s.id);
        // As on the SQL adapters, the row is rewritten either way (title, label and metadata may
        // change without the text, and the time is the last ingestion's).
        let outcome = rules::put_outcome(
            st.sources.get(&k).map(|r| r.source.version.as_str()),
            &s.version,
        );
        // The same version keeps its vectors; a new one starts without.
        let vectors = match st.sources.get_mut(&k) {
            Some(old) if outcome == PutOutcome::Unchanged => std::mem::take(&mut old.vectors),
            _ => BTreeMap::new(),
        };
        let row = SourceRow {
            source: Source {
                id: s.id.clone(),
                version: s.version.clone(),
                title: s.title.clone(),
                label: s.label.clone(),
                owner: s.owner.clone(),
                format: s.format,
                metadata: s.metadata.clone(),
                text_bytes: s.text.len() as u64,
                chunks: s.chunks.len() as u32,
                updated_at: now,
            },
            text: s.text.clone(),
            chunks: s.chunks.clone(),
            words: s
                .chunks
                .iter()
                .map(|c| rank::term_counts(&c.text, &[]).1)
                .collect(),
            vectors,
        };
        st.sources.insert(k, row);
        Ok(outcome)
    }

    async fn source(&self, scope: &Scope, id: &SourceId) -> Result<Option<Source>, Error> {
        Ok(self
            .lock()
            .sources
            .get(&key(scope, id))
            .map(|r| r.source.clone()))
    }

    async fn list_sources(&self, scope: &Scope, limit: usize) -> Result<Vec<Source>, Error> {
        Ok(self
            .lock()
            .sources
            .iter()
            .filter(|((t, _), _)| t == scope.tenant_id())
            .map(|(_, r)| r.source.clone())
            .take(limit)
            .collect())
    }

    async fn source_refs(&self, scope: &Scope) -> Result<Vec<SourceRef>, Error> {
        Ok(self
            .lock()
            .sources
            .iter()
            .filter(|((t, _), _)| t == scope.tenant_id())
            .map(|(_, r)| SourceRef {
                id: r.source.id.clone(),
                label: r.source.label.clone(),
                owner: r.source.owner.clone(),
            })
            .collect())
    }

    async fn source_text(
        &self,
        scope: &Scope,
        id: &SourceId,
        version: &str,
    ) -> Result<Option<String>, Error> {
        Ok(self
            .lock()
            .sources
            .get(&key(scope, id))
            .filter(|r| r.source.version == version)
            .map(|r| r.text.clone()))
    }

    async fn source_chunks(&self, scope: &Scope, id: &SourceId) -> Result<Vec<Chunk>, Error> {
        Ok(self
            .lock()
            .sources
            .get(&key(scope, id))
            .map(|r| r.chunks.clone())
            .unwrap_or_default())
    }

    async fn delete_source(
        &self,
        scope: &Scope,
        id: &SourceId,
        actor: &str,
    ) -> Result<bool, Error> {
        let now = self.clock.now();
        let mut st = self.lock();
        let Some(row) = st.sources.remove(&key(scope, id)) else {
            return Ok(false);
        };
        let tenant = scope.tenant_id();
        let mut quotes = 0u64;
        let st = &mut *st;
        for (run, events) in st.events.iter_mut() {
            if st.runs.get(run).is_some_and(|r| &r.tenant_id == tenant) {
                quotes += events
                    .iter_mut()
                    .map(|e| e.forget_source(id.as_str()))
                    .filter(|f| *f)
                    .count() as u64;
            }
        }
        for (thread, messages) in st.messages.iter_mut() {
            if st
                .threads
                .get(thread)
                .is_some_and(|t| &t.tenant_id == tenant)
            {
                quotes += messages
                    .iter_mut()
                    .map(|m| m.forget_source(id.as_str()))
                    .filter(|f| *f)
                    .count() as u64;
            }
        }
        st.audit.push(rules::deleted(
            scope,
            id,
            actor,
            now,
            &row.source.version,
            i64::from(row.source.chunks),
            quotes,
        ));
        Ok(true)
    }

    async fn candidates(
        &self,
        scope: &Scope,
        allowed: &[SourceId],
        terms: &[String],
        cap: usize,
    ) -> Result<Candidates, Error> {
        let st = self.lock();
        let mut out = Candidates::default();
        for id in allowed {
            let Some(row) = st.sources.get(&key(scope, id)) else {
                continue;
            };
            for (c, words) in row.chunks.iter().zip(&row.words) {
                out.corpus_chunks += 1;
                out.corpus_words += words;
                if out.chunks.len() < cap
                    && rank::term_counts(&c.text, terms).0.iter().any(|n| *n > 0)
                {
                    out.chunks.push(c.clone());
                }
            }
        }
        Ok(out)
    }

    async fn put_vectors(
        &self,
        scope: &Scope,
        id: &SourceId,
        version: &str,
        model: &str,
        vectors: &[Vec<f32>],
    ) -> Result<bool, Error> {
        let mut st = self.lock();
        let Some(row) = st
            .sources
            .get_mut(&key(scope, id))
            .filter(|r| r.source.version == version)
        else {
            return Ok(false);
        };
        rules::check_vectors(row.chunks.len(), vectors)?;
        row.vectors.insert(model.to_owned(), vectors.to_vec());
        Ok(true)
    }

    async fn has_vectors(
        &self,
        scope: &Scope,
        id: &SourceId,
        version: &str,
        model: &str,
    ) -> Result<bool, Error> {
        Ok(self
            .lock()
            .sources
            .get(&key(scope, id))
            .is_some_and(|r| r.source.version == version && r.vectors.contains_key(model)))
    }

    async fn nearest(
        &self,
        scope: &Scope,
        allowed: &[SourceId],
        model: &str,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<SearchHit>, Error> {
        let st = self.lock();
        let mut top = TopK::new(k);
        for id in allowed {
            let Some(row) = st.sources.get(&key(scope, id)) else {
                continue;
            };
            for (c, v) in row
                .chunks
                .iter()
                .zip(row.vectors.get(model).into_iter().flatten())
            {
                if let Some(score) = vector::dot(v, query) {
                    top.push((c.source_id.clone(), c.index), score);
                }
            }
        }
        Ok(top
            .into_sorted()
            .into_iter()
            .filter_map(|((id, index), score)| {
                let row = st.sources.get(&key(scope, &id))?;
                Some(SearchHit {
                    chunk: row.chunks.get(index as usize)?.clone(),
                    score,
                })
            })
            .collect())
    }
}
