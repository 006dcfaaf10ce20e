//! Retrieval sources on SQLite: rows, chunks, an FTS5 index (`unicode61`, diacritics kept, so
//! it finds exactly the words ranking compares) and chunk vectors searched by brute force.
//! Ranking itself is `forge_rag::rank`'s.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::scope::Scope;
use forge_rag::SourceStore;
use forge_rag::model::{
    Candidates, Chunk, IngestedSource, PutOutcome, SearchHit, Source, SourceId, SourceRef,
};
use forge_rag::ports::rules;
use forge_rag::vector::{self, TopK};
use forge_sql::rag;
use futures_util::TryStreamExt;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use crate::SqliteStore;
use crate::rows::db_error;

/// The columns [`source_of`] reads.
macro_rules! source_columns {
    () => {
        "id, version, title, label, format, metadata, length(CAST(text AS BLOB)) AS text_bytes, chunks, updated_at"
    };
}

fn source_of(r: &SqliteRow) -> Result<Source, Error> {
    forge_sql::rows::source(&crate::rows::Row(r))
}

fn chunk_of(r: &SqliteRow) -> Result<Chunk, Error> {
    forge_sql::rows::chunk(&crate::rows::Row(r))
}

#[async_trait]
impl SourceStore for SqliteStore {
    async fn put_source(&self, scope: &Scope, s: &IngestedSource) -> Result<PutOutcome, Error> {
        let tenant = scope.tenant_id().as_str();
        let (_gate, mut tx) = self.write_tx().await?;
        let existing: Option<String> = sqlx::query_scalar(
            "SELECT version FROM forge_sources WHERE tenant_id = $1 AND id = $2",
        )
        .bind(tenant)
        .bind(s.id.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        let outcome = rules::put_outcome(existing.as_deref(), &s.version);
        sqlx::query(
            "INSERT INTO forge_sources (tenant_id, id, version, title, label, format, metadata, text, chunks, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
             ON CONFLICT (tenant_id, id) DO UPDATE SET version = excluded.version, title = excluded.title,
                 label = excluded.label, format = excluded.format, metadata = excluded.metadata,
                 text = excluded.text, chunks = excluded.chunks, updated_at = excluded.updated_at",
        )
        .bind(tenant)
        .bind(s.id.as_str())
        .bind(&s.version)
        .bind(&s.title)
        .bind(&s.label)
        .bind(s.format.as_str())
        .bind(s.metadata.to_string())
        .bind(&s.text)
        .bind(s.chunks.len() as i64)
        .bind(self.clock.now().unix_millis())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        if outcome != PutOutcome::Unchanged {
            for statement in [
                "DELETE FROM forge_chunk_vectors WHERE tenant_id = $1 AND source_id = $2",
                "DELETE FROM forge_chunks WHERE tenant_id = $1 AND source_id = $2",
            ] {
                sqlx::query(statement)
                    .bind(tenant)
                    .bind(s.id.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?;
            }
            for c in &s.chunks {
                sqlx::query(
                    "INSERT INTO forge_chunks (tenant_id, source_id, version, idx, start_byte, end_byte, heading, words, text)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                )
                .bind(tenant)
                .bind(s.id.as_str())
                .bind(&c.version)
                .bind(i64::from(c.index))
                .bind(c.start as i64)
                .bind(c.end as i64)
                .bind(&c.heading)
                .bind(rag::chunk_words(&c.text))
                .bind(&c.text)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            }
        }
        tx.commit().await.map_err(db_error)?;
        Ok(outcome)
    }

    async fn source(&self, scope: &Scope, id: &SourceId) -> Result<Option<Source>, Error> {
        sqlx::query(concat!(
            "SELECT ",
            source_columns!(),
            " FROM forge_sources WHERE tenant_id = $1 AND id = $2"
        ))
        .bind(scope.tenant_id().as_str())
        .bind(id.as_str())
        .fetch_optional(&mut *self.conn().await?)
        .await
        .map_err(db_error)?
        .map(|r| source_of(&r))
        .transpose()
    }

    async fn list_sources(&self, scope: &Scope, limit: usize) -> Result<Vec<Source>, Error> {
        sqlx::query(concat!(
            "SELECT ",
            source_columns!(),
            " FROM forge_sources WHERE tenant_id = $1 ORDER BY id LIMIT $2"
        ))
        .bind(scope.tenant_id().as_str())
        .bind(limit as i64)
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(db_error)?
        .iter()
        .map(source_of)
        .collect()
    }

    async fn source_refs(&self, scope: &Scope) -> Result<Vec<SourceRef>, Error> {
        sqlx::query("SELECT id, label FROM forge_sources WHERE tenant_id = $1 ORDER BY id")
            .bind(scope.tenant_id().as_str())
            .fetch_all(&mut *self.conn().await?)
            .await
            .map_err(db_error)?
            .iter()
            .map(|r| {
                Ok(SourceRef {
                    id: SourceId::new(r.get::<&str, _>("id"))?,
                    label: r.get("label"),
                })
            })
            .collect()
    }

    async fn source_text(
        &self,
        scope: &Scope,
        id: &SourceId,
        version: &str,
    ) -> Result<Option<String>, Error> {
        sqlx::query_scalar(
            "SELECT text FROM forge_sources WHERE tenant_id = $1 AND id = $2 AND version = $3",
        )
        .bind(scope.tenant_id().as_str())
        .bind(id.as_str())
        .bind(version)
        .fetch_optional(&mut *self.conn().await?)
        .await
        .map_err(db_error)
    }

    async fn source_chunks(&self, scope: &Scope, id: &SourceId) -> Result<Vec<Chunk>, Error> {
        sqlx::query(
            "SELECT * FROM forge_chunks WHERE tenant_id = $1 AND source_id = $2 ORDER BY idx",
        )
        .bind(scope.tenant_id().as_str())
        .bind(id.as_str())
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(db_error)?
        .iter()
        .map(chunk_of)
        .collect()
    }

    async fn delete_source(
        &self,
        scope: &Scope,
        id: &SourceId,
        actor: &str,
    ) -> Result<bool, Error> {
        let tenant = scope.tenant_id().as_str();
        let (_gate, mut tx) = self.write_tx().await?;
        let found: Option<(String, i64)> = sqlx::query_as(
            "SELECT version, chunks FROM forge_sources WHERE tenant_id = $1 AND id = $2",
        )
        .bind(tenant)
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        let Some((version, chunks)) = found else {
            return Ok(false);
        };
        for statement in [
            "DELETE FROM forge_chunk_vectors WHERE tenant_id = $1 AND source_id = $2",
            "DELETE FROM forge_chunks WHERE tenant_id = $1 AND source_id = $2",
            "DELETE FROM forge_sources WHERE tenant_id = $1 AND id = $2",
        ] {
            sqlx::query(statement)
                .bind(tenant)
                .bind(id.as_str())
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        // The copies of its text the tenant's runs made, found by the quoted id and checked by
        // structure.
        let quoted = rag::quoted_id(id);
        let events: Vec<((String, i64), String)> = sqlx::query_as::<_, (String, i64, String)>(
            "SELECT run_id, seq, body FROM forge_run_events WHERE tenant_id = $1 AND instr(body, $2) > 0",
        )
        .bind(tenant)
        .bind(&quoted)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?
        .into_iter()
        .map(|(run, seq, body)| ((run, seq), body))
        .collect();
        let events = rag::events_to_rewrite(events, id)?;
        for ((run, seq), body) in &events {
            sqlx::query("UPDATE forge_run_events SET body = $3 WHERE run_id = $1 AND seq = $2")
                .bind(run)
                .bind(seq)
                .bind(body)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        let messages: Vec<(i64, String)> = sqlx::query_as(
            "SELECT seq, parts FROM forge_messages WHERE tenant_id = $1 AND instr(parts, $2) > 0",
        )
        .bind(tenant)
        .bind(&quoted)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        let messages = rag::messages_to_rewrite(messages, id)?;
        for (seq, parts) in &messages {
            sqlx::query("UPDATE forge_messages SET parts = $2 WHERE seq = $1")
                .bind(seq)
                .bind(parts)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        let quotes = (events.len() + messages.len()) as u64;
        let record = rules::deleted(scope, id, actor, self.clock.now(), &version, chunks, quotes);
        crate::interactions::audit(&mut tx, &record).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(true)
    }

    async fn candidates(
        &self,
        scope: &Scope,
        allowed: &[SourceId],
        terms: &[String],
        cap: usize,
    ) -> Result<Candidates, Error> {
        if allowed.is_empty() {
            return Ok(Candidates::default());
        }
        let tenant = scope.tenant_id().as_str();
        // The allowed ids travel as one JSON array, so the statement's text never grows with them.
        let ids = serde_json::to_string(&allowed.iter().map(SourceId::as_str).collect::<Vec<_>>())
            .map_err(|e| Error::invalid(e.to_string()))?;
        let (corpus_chunks, corpus_words): (i64, Option<i64>) = sqlx::query_as(
            "SELECT count(*), sum(words) FROM forge_chunks
             WHERE tenant_id = $1 AND source_id IN (SELECT value FROM json_each($2))",
        )
        .bind(tenant)
        .bind(&ids)
        .fetch_one(&mut *self.conn().await?)
        .await
        .map_err(db_error)?;
        let mut out = Candidates {
            chunks: vec![],
            corpus_chunks: corpus_chunks.max(0) as u64,
            corpus_words: corpus_words.unwrap_or(0).max(0) as u64,
        };
        if terms.is_empty() {
            return Ok(out);
        }
        // Terms are words of letters and digits; quoted, each is one FTS5 string.
        let matched: Vec<String> = terms.iter().map(|t| format!("\"{t}\"")).collect();
        out.chunks = sqlx::query(
            // The full-text match runs once, as a subquery: joined instead, the planner may
            // probe the index once per chunk row.
            "SELECT c.* FROM forge_chunks c
             WHERE c.rowid IN (SELECT rowid FROM forge_chunks_fts WHERE forge_chunks_fts MATCH $1)
               AND c.tenant_id = $2 AND c.source_id IN (SELECT value FROM json_each($3))
             ORDER BY c.rowid LIMIT $4",
        )
        .bind(matched.join(" OR "))
        .bind(tenant)
        .bind(&ids)
        .bind(cap as i64)
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(db_error)?
        .iter()
        .map(chunk_of)
        .collect::<Result<_, _>>()?;
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
        let tenant = scope.tenant_id().as_str();
        let (_gate, mut tx) = self.write_tx().await?;
        let chunks: Option<i64> = sqlx::query_scalar(
            "SELECT chunks FROM forge_sources WHERE tenant_id = $1 AND id = $2 AND version = $3",
        )
        .bind(tenant)
        .bind(id.as_str())
        .bind(version)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        let Some(chunks) = chunks else {
            return Ok(false);
        };
        rules::check_vectors(chunks.max(0) as usize, vectors)?;
        sqlx::query(
            "DELETE FROM forge_chunk_vectors WHERE tenant_id = $1 AND model = $2 AND source_id = $3",
        )
        .bind(tenant)
        .bind(model)
        .bind(id.as_str())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        for (i, v) in vectors.iter().enumerate() {
            sqlx::query(
                "INSERT INTO forge_chunk_vectors (tenant_id, model, source_id, idx, version, vector)
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(tenant)
            .bind(model)
            .bind(id.as_str())
            .bind(i as i64)
            .bind(version)
            .bind(vector::encode(v))
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)?;
        Ok(true)
    }

    async fn has_vectors(
        &self,
        scope: &Scope,
        id: &SourceId,
        version: &str,
        model: &str,
    ) -> Result<bool, Error> {
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM forge_chunk_vectors
             WHERE tenant_id = $1 AND model = $2 AND source_id = $3 AND version = $4)",
        )
        .bind(scope.tenant_id().as_str())
        .bind(model)
        .bind(id.as_str())
        .bind(version)
        .fetch_one(&mut *self.conn().await?)
        .await
        .map_err(db_error)
    }

    async fn nearest(
        &self,
        scope: &Scope,
        allowed: &[SourceId],
        model: &str,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<SearchHit>, Error> {
        if allowed.is_empty() || k == 0 {
            return Ok(vec![]);
        }
        let tenant = scope.tenant_id().as_str();
        let ids = serde_json::to_string(&allowed.iter().map(SourceId::as_str).collect::<Vec<_>>())
            .map_err(|e| Error::invalid(e.to_string()))?;
        let mut top = TopK::new(k);
        let mut conn = self.conn().await?;
        // Streamed: the vectors are scored as they arrive, never all held at once.
        let mut rows = sqlx::query(
            "SELECT source_id, idx, vector FROM forge_chunk_vectors
             WHERE tenant_id = $1 AND model = $2 AND source_id IN (SELECT value FROM json_each($3))",
        )
        .bind(tenant)
        .bind(model)
        .bind(&ids)
        .fetch(&mut *conn);
        while let Some(r) = rows.try_next().await.map_err(db_error)? {
            if let Some(score) = vector::dot_encoded(r.get::<&[u8], _>("vector"), query) {
                top.push(
                    (
                        r.get::<String, _>("source_id"),
                        r.get::<i64, _>("idx") as u32,
                    ),
                    score,
                );
            }
        }
        drop(rows);
        let top = top.into_sorted();
        if top.is_empty() {
            return Ok(vec![]);
        }
        let chunks = sqlx::query(
            "SELECT * FROM forge_chunks WHERE tenant_id = $1 AND (source_id, idx) IN
             (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each($2))",
        )
        .bind(tenant)
        .bind(rag::keys_json(&top))
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(db_error)?
        .iter()
        .map(chunk_of)
        .collect::<Result<Vec<_>, _>>()?;
        Ok(rag::ordered_hits(top, chunks))
    }
}
