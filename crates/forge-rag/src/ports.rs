//! The storage port for sources, their chunks and the index that finds candidate chunks.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::scope::Scope;

use crate::model::{
    Candidates, Chunk, IngestedSource, PutOutcome, SearchHit, Source, SourceId, SourceRef,
};

/// The audit action of a deleted source.
pub const SOURCE_DELETED: &str = "source.deleted";

/// Port: sources of one tenant, their current version's text and chunks, a lexical index, and
/// vectors per chunk under each embedding model. Every call is confined to `scope`'s tenant.
#[async_trait]
pub trait SourceStore: Send + Sync {
    /// Stores a source. A new text replaces the previous version, its text, chunks, index
    /// entries and vectors in one transaction; the same text changes nothing.
    async fn put_source(&self, scope: &Scope, source: &IngestedSource)
    -> Result<PutOutcome, Error>;

    /// A source, or `None`.
    async fn source(&self, scope: &Scope, id: &SourceId) -> Result<Option<Source>, Error>;

    /// The tenant's sources by id, at most `limit`.
    async fn list_sources(&self, scope: &Scope, limit: usize) -> Result<Vec<Source>, Error>;

    /// Every source's id and label: what authorization decides from.
    async fn source_refs(&self, scope: &Scope) -> Result<Vec<SourceRef>, Error>;

    /// The normalized text of `id` at `version`, when that is its current version.
    async fn source_text(
        &self,
        scope: &Scope,
        id: &SourceId,
        version: &str,
    ) -> Result<Option<String>, Error>;

    /// The current version's chunks, in order.
    async fn source_chunks(&self, scope: &Scope, id: &SourceId) -> Result<Vec<Chunk>, Error>;

    /// Deletes a source: its row, text, chunks, index entries and vectors, and every copy of
    /// its text the tenant's runs made — search results and citation excerpts in committed
    /// events and messages, replaced by [`forge_core::forget::SOURCE_REMOVED`] (sequence numbers
    /// and the parts' shape kept) — and appends a [`SOURCE_DELETED`] audit record by `actor`
    /// with the counts, in one transaction. `false` when there was none.
    async fn delete_source(&self, scope: &Scope, id: &SourceId, actor: &str)
    -> Result<bool, Error>;

    /// Deletes every source whose current version was stored before `before`, as
    /// [`Self::delete_source`] does for each (one [`SOURCE_DELETED`] record each, by `actor`);
    /// returns their ids.
    async fn expire_sources(
        &self,
        scope: &Scope,
        before: forge_core::time::Timestamp,
        actor: &str,
    ) -> Result<Vec<SourceId>, Error> {
        let mut expired = Vec::new();
        for source in self.list_sources(scope, i64::MAX as usize).await? {
            if source.updated_at < before && self.delete_source(scope, &source.id, actor).await? {
                expired.push(source.id);
            }
        }
        Ok(expired)
    }

    /// Chunks of the `allowed` sources containing any of `terms` (lower-case words), in storage
    /// order, at most `cap`; with the allowed sources' total chunk and word counts. Nothing of a
    /// source outside `allowed` is read.
    async fn candidates(
        &self,
        scope: &Scope,
        allowed: &[SourceId],
        terms: &[String],
        cap: usize,
    ) -> Result<Candidates, Error>;

    /// Stores `vectors`, one per chunk in order, for `id` at `version` under `model`, replacing
    /// what its chunks had under `model`. `false`, storing nothing, when `version` is no longer
    /// the source's current version (it changed or was deleted meanwhile). Vectors are unit
    /// length ([`crate::embed::checked`]); a count that is not the chunk count is an error.
    async fn put_vectors(
        &self,
        scope: &Scope,
        id: &SourceId,
        version: &str,
        model: &str,
        vectors: &[Vec<f32>],
    ) -> Result<bool, Error>;

    /// Whether `id` at `version` has its vectors under `model`.
    async fn has_vectors(
        &self,
        scope: &Scope,
        id: &SourceId,
        version: &str,
        model: &str,
    ) -> Result<bool, Error>;

    /// The `k` chunks of the `allowed` sources whose vectors under `model` are nearest `query`
    /// (a unit vector), best first, scored by cosine similarity; equal scores in source id and
    /// chunk order. Nothing of a source outside `allowed` is read.
    async fn nearest(
        &self,
        scope: &Scope,
        allowed: &[SourceId],
        model: &str,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<SearchHit>, Error>;
}

/// Row mapping and rules every adapter shares, so the SQL adapters differ only in their SQL.
pub mod rows {
    use forge_core::Error;
    use forge_core::ports::audit::AuditRecord;
    use forge_core::scope::Scope;
    use forge_core::time::Timestamp;

    use crate::model::{Chunk, Format, PutOutcome, Source, SourceId};
    use crate::ports::SOURCE_DELETED;

    /// What storing a version over `existing` (the stored version, if any) does.
    pub fn put_outcome(existing: Option<&str>, version: &str) -> PutOutcome {
        match existing {
            None => PutOutcome::Created,
            Some(v) if v == version => PutOutcome::Unchanged,
            Some(_) => PutOutcome::Replaced,
        }
    }

    /// Checks that `vectors` fit a source version of `chunks` chunks: one each, all one length.
    pub fn check_vectors(chunks: usize, vectors: &[Vec<f32>]) -> Result<(), Error> {
        if vectors.len() != chunks {
            return Err(Error::invalid(format!(
                "{} vectors for {chunks} chunks",
                vectors.len()
            )));
        }
        let dims = vectors.first().map_or(0, Vec::len);
        if vectors.iter().any(|v| v.is_empty() || v.len() != dims) {
            return Err(Error::invalid(
                "vectors must be non-empty and of one length",
            ));
        }
        Ok(())
    }

    /// The hits of `top` (source id and chunk index, with similarity, best first) from `chunks`
    /// (those chunks, in any order); a key whose chunk is missing is dropped.
    pub fn ordered_hits(
        top: Vec<((String, u32), f32)>,
        chunks: Vec<Chunk>,
    ) -> Vec<crate::model::SearchHit> {
        let mut by_key: std::collections::HashMap<(String, u32), Chunk> = chunks
            .into_iter()
            .map(|c| ((c.source_id.as_str().to_owned(), c.index), c))
            .collect();
        top.into_iter()
            .filter_map(|(k, score)| {
                by_key
                    .remove(&k)
                    .map(|chunk| crate::model::SearchHit { chunk, score })
            })
            .collect()
    }

    /// `top`'s keys as one JSON array of `[source_id, index]` pairs, for a single statement.
    pub fn keys_json(top: &[((String, u32), f32)]) -> String {
        serde_json::Value::Array(
            top.iter()
                .map(|((id, idx), _)| serde_json::json!([id, idx]))
                .collect(),
        )
        .to_string()
    }

    /// The words a chunk counts for ranking.
    pub fn chunk_words(text: &str) -> i64 {
        crate::rank::words(text).len() as i64
    }

    /// A source from its columns.
    #[allow(clippy::too_many_arguments)]
    pub fn source(
        id: &str,
        version: String,
        title: String,
        label: String,
        format: &str,
        metadata: &str,
        text_bytes: i64,
        chunks: i64,
        updated_at_millis: i64,
    ) -> Result<Source, Error> {
        Ok(Source {
            id: SourceId::new(id)?,
            version,
            title,
            label,
            format: Format::parse(format)
                .ok_or_else(|| Error::invalid(format!("stored format {format:?} is unknown")))?,
            metadata: serde_json::from_str(metadata)
                .map_err(|e| Error::invalid(format!("stored metadata: {e}")))?,
            text_bytes: text_bytes.max(0) as u64,
            chunks: chunks.max(0) as u32,
            updated_at: Timestamp::from_unix_millis(updated_at_millis)
                .ok_or_else(|| Error::invalid("stored time is out of range"))?,
        })
    }

    /// A chunk from its columns.
    pub fn chunk(
        source_id: &str,
        version: String,
        index: i64,
        start: i64,
        end: i64,
        text: String,
        heading: Option<String>,
    ) -> Result<Chunk, Error> {
        Ok(Chunk {
            source_id: SourceId::new(source_id)?,
            version,
            index: index.max(0) as u32,
            start: start.max(0) as u64,
            end: end.max(0) as u64,
            text,
            heading,
        })
    }

    /// The JSON-quoted id, which every stored event or message quoting the source contains: a
    /// cheap filter before each candidate is parsed and checked by structure.
    pub fn quoted_id(id: &SourceId) -> String {
        serde_json::Value::String(id.as_str().to_owned()).to_string()
    }

    /// `body` (a stored event) with the quotes of `id` removed, when it had any.
    pub fn event_forgetting(body: &str, id: &SourceId) -> Result<Option<String>, Error> {
        let mut event: forge_core::event::RunEvent =
            serde_json::from_str(body).map_err(|e| Error::invalid(e.to_string()))?;
        if !event.forget_source(id.as_str()) {
            return Ok(None);
        }
        serde_json::to_string(&event)
            .map(Some)
            .map_err(|e| Error::invalid(e.to_string()))
    }

    /// `parts` (a stored message's) with the quotes of `id` removed, when they had any.
    pub fn parts_forgetting(parts: &str, id: &SourceId) -> Result<Option<String>, Error> {
        let mut parts: Vec<forge_core::part::Part> =
            serde_json::from_str(parts).map_err(|e| Error::invalid(e.to_string()))?;
        let mut changed = false;
        for part in &mut parts {
            changed |= part.forget_source(id.as_str());
        }
        if !changed {
            return Ok(None);
        }
        serde_json::to_string(&parts)
            .map(Some)
            .map_err(|e| Error::invalid(e.to_string()))
    }

    /// Of stored events keyed by `K` (those whose body contains [`quoted_id`]), the ones that
    /// quote `id`, with their bodies rewritten: what an adapter writes back.
    pub fn events_to_rewrite<K>(
        rows: Vec<(K, String)>,
        id: &SourceId,
    ) -> Result<Vec<(K, String)>, Error> {
        rewrites(rows, |body| event_forgetting(body, id))
    }

    /// [`events_to_rewrite`] for stored messages' parts.
    pub fn messages_to_rewrite<K>(
        rows: Vec<(K, String)>,
        id: &SourceId,
    ) -> Result<Vec<(K, String)>, Error> {
        rewrites(rows, |parts| parts_forgetting(parts, id))
    }

    fn rewrites<K>(
        rows: Vec<(K, String)>,
        rewrite: impl Fn(&str) -> Result<Option<String>, Error>,
    ) -> Result<Vec<(K, String)>, Error> {
        let mut out = Vec::new();
        for (key, text) in rows {
            if let Some(new) = rewrite(&text)? {
                out.push((key, new));
            }
        }
        Ok(out)
    }

    /// The audit record of a deletion that also removed `quotes` copies of the source's text
    /// (events and messages rewritten).
    pub fn deleted(
        scope: &Scope,
        id: &SourceId,
        actor: &str,
        at: Timestamp,
        version: &str,
        chunks: i64,
        quotes: u64,
    ) -> AuditRecord {
        AuditRecord {
            tenant_id: scope.tenant_id().clone(),
            at,
            actor: actor.to_owned(),
            action: SOURCE_DELETED.into(),
            subject: format!("source {id}"),
            detail: serde_json::json!({"version": version, "chunks": chunks, "quotes_removed": quotes}),
        }
    }
}
