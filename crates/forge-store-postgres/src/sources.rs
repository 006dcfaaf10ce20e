//! Retrieval sources on PostgreSQL: rows, chunks, a `tsvector` (GIN) index and chunk vectors,
//! under forced RLS. Ranking itself is `forge_rag::rank`'s, over the allowed sources only; nearest
//! vectors are found by pgvector where the database has it, by brute force here otherwise.

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
use sqlx::postgres::PgRow;

use crate::PostgresStore;
use crate::rows::db_error;

/// The columns [`source_of`] reads.
macro_rules! source_columns {
    () => {
        "id, version, title, label, owner, format, metadata::text AS metadata, octet_length(text)::bigint AS text_bytes, chunks::bigint AS chunks, updated_at"
    };
}

fn source_of(r: &PgRow) -> Result<Source, Error> {
    forge_sql::rows::source(&crate::rows::Pg(r))
}

fn chunk_of(r: &PgRow) -> Result<Chunk, Error> {
    forge_sql::rows::chunk(&crate::rows::Pg(r))
}

#[async_trait]
impl SourceStore for PostgresStore {
    async fn put_source(&self, scope: &Scope, s: &IngestedSource) -> Result<PutOutcome, Error> {
        let tenant = scope.tenant_id().as_str();
        let mut tx = self.tenant_tx(scope).await?;
        let existing: Option<String> = sqlx::query_scalar(
            "SELECT version FROM forge_sources WHERE tenant_id = $1 AND id = $2 FOR UPDATE",
        )
        .bind(tenant)
        .bind(s.id.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        let outcome = rules::put_outcome(existing.as_deref(), &s.version);
        sqlx::query(
            "INSERT INTO forge_sources (tenant_id, id, version, title, label, format, metadata, text, chunks, updated_at, owner)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
             ON CONFLICT (tenant_id, id) DO UPDATE SET version = excluded.version, title = excluded.title,
                 label = excluded.label, owner = excluded.owner, format = excluded.format, metadata = excluded.metadata,
                 text = excluded.text, chunks = excluded.chunks, updated_at = excluded.updated_at",
        )
        .bind(tenant)
        .bind(s.id.as_str())
        .bind(&s.version)
        .bind(&s.title)
        .bind(&s.label)
        .bind(s.format.as_str())
        .bind(&s.metadata)
        .bind(&s.text)
        .bind(s.chunks.len() as i32)
        .bind(self.clock.now().0)
        .bind(s.owner.as_deref())
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
            // One statement for every chunk: arrays zipped by unnest.
            let idx: Vec<i32> = s.chunks.iter().map(|c| c.index as i32).collect();
            let start: Vec<i64> = s.chunks.iter().map(|c| c.start as i64).collect();
            let end: Vec<i64> = s.chunks.iter().map(|c| c.end as i64).collect();
            let heading: Vec<Option<String>> = s.chunks.iter().map(|c| c.heading.clone()).collect();
            let words: Vec<i32> = s
                .chunks
                .iter()
                .map(|c| rag::chunk_words(&c.text) as i32)
                .collect();
            let text: Vec<String> = s.chunks.iter().map(|c| c.text.clone()).collect();
            sqlx::query(
                "INSERT INTO forge_chunks (tenant_id, source_id, version, idx, start_byte, end_byte, heading, words, text)
                 SELECT $1, $2, $3, i, s, e, h, w, t
                 FROM unnest($4::int[], $5::bigint[], $6::bigint[], $7::text[], $8::int[], $9::text[]) AS u(i, s, e, h, w, t)",
            )
            .bind(tenant)
            .bind(s.id.as_str())
            .bind(&s.version)
            .bind(&idx)
            .bind(&start)
            .bind(&end)
            .bind(&heading)
            .bind(&words)
            .bind(&text)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)?;
        Ok(outcome)
    }

    async fn source(&self, scope: &Scope, id: &SourceId) -> Result<Option<Source>, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        let row = sqlx::query(concat!(
            "SELECT ",
            source_columns!(),
            " FROM forge_sources WHERE tenant_id = $1 AND id = $2"
        ))
        .bind(scope.tenant_id().as_str())
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        row.map(|r| source_of(&r)).transpose()
    }

    async fn list_sources(&self, scope: &Scope, limit: usize) -> Result<Vec<Source>, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        let found = sqlx::query(concat!(
            "SELECT ",
            source_columns!(),
            " FROM forge_sources WHERE tenant_id = $1 ORDER BY id LIMIT $2"
        ))
        .bind(scope.tenant_id().as_str())
        .bind(limit as i64)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        found.iter().map(source_of).collect()
    }

    async fn source_refs(&self, scope: &Scope) -> Result<Vec<SourceRef>, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        let found = sqlx::query(
            "SELECT id, label, owner FROM forge_sources WHERE tenant_id = $1 ORDER BY id",
        )
        .bind(scope.tenant_id().as_str())
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        found
            .iter()
            .map(|r| {
                Ok(SourceRef {
                    id: SourceId::new(r.get::<&str, _>("id"))?,
                    label: r.get("label"),
                    owner: r.get("owner"),
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
        let mut tx = self.tenant_tx(scope).await?;
        let text = sqlx::query_scalar(
            "SELECT text FROM forge_sources WHERE tenant_id = $1 AND id = $2 AND version = $3",
        )
        .bind(scope.tenant_id().as_str())
        .bind(id.as_str())
        .bind(version)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(text)
    }

    async fn source_chunks(&self, scope: &Scope, id: &SourceId) -> Result<Vec<Chunk>, Error> {
        let mut tx = self.tenant_tx(scope).await?;
        let found = sqlx::query(
            "SELECT source_id, version, idx, start_byte, end_byte, text, heading FROM forge_chunks
             WHERE tenant_id = $1 AND source_id = $2 ORDER BY idx",
        )
        .bind(scope.tenant_id().as_str())
        .bind(id.as_str())
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        found.iter().map(chunk_of).collect()
    }

    async fn delete_source(
        &self,
        scope: &Scope,
        id: &SourceId,
        actor: &str,
    ) -> Result<bool, Error> {
        let tenant = scope.tenant_id().as_str();
        let mut tx = self.tenant_tx(scope).await?;
        let found: Option<(String, i32)> = sqlx::query_as(
            "DELETE FROM forge_sources WHERE tenant_id = $1 AND id = $2 RETURNING version, chunks",
        )
        .bind(tenant)
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        let Some((version, chunks)) = found else {
            return Ok(false);
        };
        // The chunks (and their index entries) and vectors went with the source (ON DELETE
        // CASCADE). The copies of its text the tenant's runs made are found by the quoted id and
        // checked by structure.
        let quoted = rag::quoted_id(id);
        let events: Vec<((uuid::Uuid, i64), String)> =
            sqlx::query_as::<_, (uuid::Uuid, i64, String)>(
                "SELECT run_id, seq, body::text FROM forge_run_events \
                 WHERE tenant_id = $1 AND strpos(body::text, $2) > 0",
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
            sqlx::query(
                "UPDATE forge_run_events SET body = $3::json WHERE run_id = $1 AND seq = $2",
            )
            .bind(run)
            .bind(seq)
            .bind(body)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        }
        let messages: Vec<(i64, String)> = sqlx::query_as(
            "SELECT seq, parts::text FROM forge_messages \
             WHERE tenant_id = $1 AND strpos(parts::text, $2) > 0",
        )
        .bind(tenant)
        .bind(&quoted)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        let messages = rag::messages_to_rewrite(messages, id)?;
        for (seq, parts) in &messages {
            sqlx::query("UPDATE forge_messages SET parts = $2::jsonb WHERE seq = $1")
                .bind(seq)
                .bind(parts)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        let quotes = (events.len() + messages.len()) as u64;
        let record = rules::deleted(
            scope,
            id,
            actor,
            self.clock.now(),
            &version,
            i64::from(chunks),
            quotes,
        );
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
        let ids: Vec<&str> = allowed.iter().map(SourceId::as_str).collect();
        let mut tx = self.tenant_tx(scope).await?;
        let (corpus_chunks, corpus_words): (i64, Option<i64>) = sqlx::query_as(
            "SELECT count(*), sum(words)::bigint FROM forge_chunks
             WHERE tenant_id = $1 AND source_id IN (SELECT unnest($2::text[]))",
        )
        .bind(tenant)
        .bind(&ids)
        .fetch_one(&mut *tx)
        .await
        .map_err(db_error)?;
        let chunks = if terms.is_empty() {
            vec![]
        } else {
            // Terms are words of letters and digits: safe as tsquery lexemes, OR'd.
            sqlx::query(
                "SELECT source_id, version, idx, start_byte, end_byte, text, heading FROM forge_chunks
                 WHERE tenant_id = $1 AND source_id IN (SELECT unnest($2::text[])) AND tsv @@ to_tsquery('simple', $3)
                 ORDER BY id LIMIT $4",
            )
            .bind(tenant)
            .bind(&ids)
            .bind(terms.join(" | "))
            .bind(cap as i64)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?
        };
        tx.commit().await.map_err(db_error)?;
        Ok(Candidates {
            chunks: chunks.iter().map(chunk_of).collect::<Result<_, _>>()?,
            corpus_chunks: corpus_chunks.max(0) as u64,
            corpus_words: corpus_words.unwrap_or(0).max(0) as u64,
        })
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
        let mut tx = self.tenant_tx(scope).await?;
        // Locked, so the version cannot change between this check and the insert.
        let chunks: Option<i32> = sqlx::query_scalar(
            "SELECT chunks FROM forge_sources WHERE tenant_id = $1 AND id = $2 AND version = $3
             FOR UPDATE",
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
        // One statement: the vectors travel as one flat array, cut into rows by their length.
        let dims = vectors.first().map_or(0, Vec::len) as i32;
        let flat: Vec<f32> = vectors.iter().flatten().copied().collect();
        sqlx::query(
            "INSERT INTO forge_chunk_vectors (tenant_id, model, source_id, idx, version, vector)
             SELECT $1, $2, $3, i, $4, ($5::real[])[(i * $6 + 1):((i + 1) * $6)]
             FROM generate_series(0, $7 - 1) AS i",
        )
        .bind(tenant)
        .bind(model)
        .bind(id.as_str())
        .bind(version)
        .bind(&flat)
        .bind(dims)
        .bind(vectors.len() as i32)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
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
        let mut tx = self.tenant_tx(scope).await?;
        let found: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM forge_chunk_vectors
             WHERE tenant_id = $1 AND model = $2 AND source_id = $3 AND version = $4)",
        )
        .bind(scope.tenant_id().as_str())
        .bind(model)
        .bind(id.as_str())
        .bind(version)
        .fetch_one(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(found)
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
        let ids: Vec<&str> = allowed.iter().map(SourceId::as_str).collect();
        let mut tx = self.tenant_tx(scope).await?;
        let top = if self.uses_pgvector() {
            // `<#>` is the negated inner product: the cosine of unit vectors, negated.
            sqlx::query(
                "SELECT source_id, idx, -((vector::vector) <#> $4::real[]::vector) AS score
                 FROM forge_chunk_vectors
                 WHERE tenant_id = $1 AND model = $2 AND source_id IN (SELECT unnest($3::text[]))
                   AND cardinality(vector) = cardinality($4::real[])
                 ORDER BY (vector::vector) <#> $4::real[]::vector, source_id, idx LIMIT $5",
            )
            .bind(tenant)
            .bind(model)
            .bind(&ids)
            .bind(query)
            .bind(k as i64)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?
            .iter()
            .map(|r| {
                (
                    (
                        r.get::<String, _>("source_id"),
                        r.get::<i32, _>("idx") as u32,
                    ),
                    r.get::<f64, _>("score") as f32,
                )
            })
            .collect()
        } else {
            let mut top = TopK::new(k);
            // Streamed: the vectors are scored as they arrive, never all held at once.
            let mut rows = sqlx::query(
                "SELECT source_id, idx, vector FROM forge_chunk_vectors
                 WHERE tenant_id = $1 AND model = $2 AND source_id IN (SELECT unnest($3::text[]))",
            )
            .bind(tenant)
            .bind(model)
            .bind(&ids)
            .fetch(&mut *tx);
            while let Some(r) = rows.try_next().await.map_err(db_error)? {
                let v: Vec<f32> = r.get("vector");
                if let Some(score) = vector::dot(&v, query) {
                    top.push(
                        (
                            r.get::<String, _>("source_id"),
                            r.get::<i32, _>("idx") as u32,
                        ),
                        score,
                    );
                }
            }
            drop(rows);
            top.into_sorted()
        };
        if top.is_empty() {
            tx.commit().await.map_err(db_error)?;
            return Ok(vec![]);
        }
        let (key_ids, key_idx): (Vec<&str>, Vec<i32>) = top
            .iter()
            .map(|((id, idx), _)| (id.as_str(), *idx as i32))
            .unzip();
        let found = sqlx::query(
            "SELECT source_id, version, idx, start_byte, end_byte, text, heading FROM forge_chunks
             WHERE tenant_id = $1 AND (source_id, idx) IN (SELECT * FROM unnest($2::text[], $3::int[]))",
        )
        .bind(tenant)
        .bind(&key_ids)
        .bind(&key_idx)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        let chunks = found.iter().map(chunk_of).collect::<Result<Vec<_>, _>>()?;
        Ok(rag::ordered_hits(top, chunks))
    }
}
