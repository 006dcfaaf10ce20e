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

/// The rules every adapter applies (memory and SQL alike), written once; the SQL stores' row
/// mapping is `forge_sql::rag`'s.
pub mod rules {
    use forge_core::Error;
    use forge_core::ports::audit::AuditRecord;
    use forge_core::scope::Scope;
    use forge_core::time::Timestamp;

    use crate::model::{PutOutcome, SourceId};
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
