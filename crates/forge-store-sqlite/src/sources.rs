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
use rusqlite::{Connection, params};

use crate::SqliteStore;
use crate::db;
use crate::rows::{self, text};

/// The columns [`rows::source`] reads.
macro_rules! source_columns {
    () => {
        "id, version, title, label, owner, format, metadata, length(CAST(text AS BLOB)) AS text_bytes, chunks, updated_at"
    };
}

/// Removes the chunks of tenant `$1`'s source `$2` and their vectors.
const DROP_CHUNKS: [&str; 2] = [
    "DELETE FROM forge_chunk_vectors WHERE tenant_id = ?1 AND source_id = ?2",
    "DELETE FROM forge_chunks WHERE tenant_id = ?1 AND source_id = ?2",
];

/// `allowed` as one JSON array, so that a statement's text never grows with it.
fn ids_json(allowed: &[SourceId]) -> Result<String, Error> {
    rows::to_json(&allowed.iter().map(SourceId::as_str).collect::<Vec<_>>())
}

/// Rewrites, in tenant `tenant`'s run events and messages, the copies of source `id`'s text
/// (found by its quoted id, checked by structure); how many it rewrote.
fn forget_quotes(conn: &Connection, tenant: &str, id: &SourceId) -> Result<u64, Error> {
    let quoted = rag::quoted_id(id);
    let events = db::all(
        conn,
        "SELECT run_id, seq, body FROM forge_run_events WHERE tenant_id = ?1 AND instr(body, ?2) > 0",
        params![tenant, quoted],
        |row| {
            Ok((
                (text(row, "run_id")?, rows::int(row, "seq")?),
                text(row, "body")?,
            ))
        },
    )?;
    let events = rag::events_to_rewrite(events, id)?;
    for ((run, seq), body) in &events {
        db::execute(
            conn,
            "UPDATE forge_run_events SET body = ?3 WHERE run_id = ?1 AND seq = ?2",
            params![run, seq, body],
        )?;
    }
    let messages = db::all(
        conn,
        "SELECT seq, parts FROM forge_messages WHERE tenant_id = ?1 AND instr(parts, ?2) > 0",
        params![tenant, quoted],
        |row| Ok((rows::int(row, "seq")?, text(row, "parts")?)),
    )?;
    let messages = rag::messages_to_rewrite(messages, id)?;
    for (seq, parts) in &messages {
        db::execute(
            conn,
            "UPDATE forge_messages SET parts = ?2 WHERE seq = ?1",
            params![seq, parts],
        )?;
    }
    Ok((events.len() + messages.len()) as u64)
}

#[async_trait]
impl SourceStore for SqliteStore {
    async fn put_source(&self, scope: &Scope, s: &IngestedSource) -> Result<PutOutcome, Error> {
        let (tenant, s) = (scope.tenant_id().to_string(), s.clone());
        let now = self.clock.now().unix_millis();
        self.write(move |conn| {
            let id = s.id.as_str();
            let existing: Option<String> = db::value(
                conn,
                "SELECT version FROM forge_sources WHERE tenant_id = ?1 AND id = ?2",
                params![tenant, id],
            )?;
            let outcome = rules::put_outcome(existing.as_deref(), &s.version);
            db::execute(
                conn,
                "INSERT INTO forge_sources (tenant_id, id, version, title, label, format, metadata, text, chunks, updated_at, owner) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
                 ON CONFLICT (tenant_id, id) DO UPDATE SET version = excluded.version, title = excluded.title, \
                     label = excluded.label, owner = excluded.owner, format = excluded.format, metadata = excluded.metadata, \
                     text = excluded.text, chunks = excluded.chunks, updated_at = excluded.updated_at",
                params![
                    tenant,
                    id,
                    s.version,
                    s.title,
                    s.label,
                    s.format.as_str(),
                    s.metadata.to_string(),
                    s.text,
                    s.chunks.len() as i64,
                    now,
                    s.owner
                ],
            )?;
            if outcome != PutOutcome::Unchanged {
                for sql in DROP_CHUNKS {
                    db::execute(conn, sql, params![tenant, id])?;
                }
                for c in &s.chunks {
                    db::execute(
                        conn,
                        "INSERT INTO forge_chunks (tenant_id, source_id, version, idx, start_byte, end_byte, heading, words, text) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                        params![
                            tenant,
                            id,
                            c.version,
                            i64::from(c.index),
                            c.start as i64,
                            c.end as i64,
                            c.heading,
                            rag::chunk_words(&c.text),
                            c.text
                        ],
                    )?;
                }
            }
            Ok(outcome)
        })
        .await
    }

    async fn source(&self, scope: &Scope, id: &SourceId) -> Result<Option<Source>, Error> {
        let (tenant, id) = (scope.tenant_id().to_string(), id.to_string());
        self.read(move |conn| {
            db::first(
                conn,
                concat!(
                    "SELECT ",
                    source_columns!(),
                    " FROM forge_sources WHERE tenant_id = ?1 AND id = ?2"
                ),
                params![tenant, id],
                rows::source,
            )
        })
        .await
    }

    async fn list_sources(&self, scope: &Scope, limit: usize) -> Result<Vec<Source>, Error> {
        let tenant = scope.tenant_id().to_string();
        let limit = db::saturating(limit);
        self.read(move |conn| {
            db::all(
                conn,
                concat!(
                    "SELECT ",
                    source_columns!(),
                    " FROM forge_sources WHERE tenant_id = ?1 ORDER BY id LIMIT ?2"
                ),
                params![tenant, limit],
                rows::source,
            )
        })
        .await
    }

    async fn source_refs(&self, scope: &Scope) -> Result<Vec<SourceRef>, Error> {
        let tenant = scope.tenant_id().to_string();
        self.read(move |conn| {
            db::all(
                conn,
                "SELECT id, label, owner FROM forge_sources WHERE tenant_id = ?1 ORDER BY id",
                params![tenant],
                |row| {
                    Ok(SourceRef {
                        id: SourceId::new(text(row, "id")?)?,
                        label: text(row, "label")?,
                        owner: forge_sql::rows::Columns::text(&rows::Row(row), "owner")?,
                    })
                },
            )
        })
        .await
    }

    async fn source_text(
        &self,
        scope: &Scope,
        id: &SourceId,
        version: &str,
    ) -> Result<Option<String>, Error> {
        let (tenant, id, version) = (
            scope.tenant_id().to_string(),
            id.to_string(),
            version.to_owned(),
        );
        self.read(move |conn| {
            db::value(
                conn,
                "SELECT text FROM forge_sources WHERE tenant_id = ?1 AND id = ?2 AND version = ?3",
                params![tenant, id, version],
            )
        })
        .await
    }

    async fn source_chunks(&self, scope: &Scope, id: &SourceId) -> Result<Vec<Chunk>, Error> {
        let (tenant, id) = (scope.tenant_id().to_string(), id.to_string());
        self.read(move |conn| {
            db::all(
                conn,
                "SELECT * FROM forge_chunks WHERE tenant_id = ?1 AND source_id = ?2 ORDER BY idx",
                params![tenant, id],
                rows::chunk,
            )
        })
        .await
    }

    async fn delete_source(
        &self,
        scope: &Scope,
        id: &SourceId,
        actor: &str,
    ) -> Result<bool, Error> {
        let (scope, id, actor) = (scope.clone(), id.clone(), actor.to_owned());
        let now = self.clock.now();
        self.write(move |conn| {
            let tenant = scope.tenant_id().as_str();
            let found = db::first(
                conn,
                "SELECT version, chunks FROM forge_sources WHERE tenant_id = ?1 AND id = ?2",
                params![tenant, id.as_str()],
                |row| Ok((text(row, "version")?, rows::int(row, "chunks")?)),
            )?;
            let Some((version, chunks)) = found else {
                return Ok(false);
            };
            for sql in DROP_CHUNKS
                .into_iter()
                .chain(["DELETE FROM forge_sources WHERE tenant_id = ?1 AND id = ?2"])
            {
                db::execute(conn, sql, params![tenant, id.as_str()])?;
            }
            let quotes = forget_quotes(conn, tenant, &id)?;
            let record = rules::deleted(&scope, &id, &actor, now, &version, chunks, quotes);
            crate::interactions::audit(conn, &record)?;
            Ok(true)
        })
        .await
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
        let (tenant, ids) = (scope.tenant_id().to_string(), ids_json(allowed)?);
        // Terms are words of letters and digits; quoted, each is one FTS5 string.
        let matched = (!terms.is_empty()).then(|| {
            terms
                .iter()
                .map(|t| format!("\"{t}\""))
                .collect::<Vec<_>>()
                .join(" OR ")
        });
        let cap = db::saturating(cap);
        self.read(move |conn| {
            db::snapshot(conn, |conn| {
                let (corpus_chunks, corpus_words) = db::first(
                    conn,
                    "SELECT count(*), sum(words) FROM forge_chunks \
                     WHERE tenant_id = ?1 AND source_id IN (SELECT value FROM json_each(?2))",
                    params![tenant, ids],
                    |row| {
                        let chunks: i64 = row.get(0).map_err(db::error)?;
                        let words: Option<i64> = row.get(1).map_err(db::error)?;
                        Ok((chunks, words))
                    },
                )?
                .unwrap_or_default();
                let mut out = Candidates {
                    chunks: vec![],
                    corpus_chunks: corpus_chunks.max(0) as u64,
                    corpus_words: corpus_words.unwrap_or(0).max(0) as u64,
                };
                let Some(matched) = matched else {
                    return Ok(out);
                };
                out.chunks = db::all(
                    conn,
                    // The full-text match runs once, as a subquery: joined instead, the planner
                    // may probe the index once per chunk row.
                    "SELECT c.* FROM forge_chunks c \
                     WHERE c.rowid IN (SELECT rowid FROM forge_chunks_fts WHERE forge_chunks_fts MATCH ?1) \
                       AND c.tenant_id = ?2 AND c.source_id IN (SELECT value FROM json_each(?3)) \
                     ORDER BY c.rowid LIMIT ?4",
                    params![matched, tenant, ids, cap],
                    rows::chunk,
                )?;
                Ok(out)
            })
        })
        .await
    }

    async fn put_vectors(
        &self,
        scope: &Scope,
        id: &SourceId,
        version: &str,
        model: &str,
        vectors: &[Vec<f32>],
    ) -> Result<bool, Error> {
        let tenant = scope.tenant_id().to_string();
        let (id, version, model) = (id.to_string(), version.to_owned(), model.to_owned());
        let vectors = vectors.to_vec();
        self.write(move |conn| {
            let chunks: Option<i64> = db::value(
                conn,
                "SELECT chunks FROM forge_sources WHERE tenant_id = ?1 AND id = ?2 AND version = ?3",
                params![tenant, id, version],
            )?;
            let Some(chunks) = chunks else {
                return Ok(false);
            };
            rules::check_vectors(chunks.max(0) as usize, &vectors)?;
            db::execute(
                conn,
                "DELETE FROM forge_chunk_vectors WHERE tenant_id = ?1 AND model = ?2 AND source_id = ?3",
                params![tenant, model, id],
            )?;
            for (i, v) in vectors.iter().enumerate() {
                db::execute(
                    conn,
                    "INSERT INTO forge_chunk_vectors (tenant_id, model, source_id, idx, version, vector) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![tenant, model, id, i as i64, version, vector::encode(v)],
                )?;
            }
            Ok(true)
        })
        .await
    }

    async fn has_vectors(
        &self,
        scope: &Scope,
        id: &SourceId,
        version: &str,
        model: &str,
    ) -> Result<bool, Error> {
        let tenant = scope.tenant_id().to_string();
        let (id, version, model) = (id.to_string(), version.to_owned(), model.to_owned());
        self.read(move |conn| {
            db::value(
                conn,
                "SELECT EXISTS (SELECT 1 FROM forge_chunk_vectors \
                 WHERE tenant_id = ?1 AND model = ?2 AND source_id = ?3 AND version = ?4)",
                params![tenant, model, id, version],
            )
            .map(|found| found.unwrap_or(false))
        })
        .await
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
        let (tenant, ids, model) = (
            scope.tenant_id().to_string(),
            ids_json(allowed)?,
            model.to_owned(),
        );
        let query = query.to_vec();
        self.read(move |conn| {
            db::snapshot(conn, |conn| {
                let mut top = TopK::new(k);
                // Scored as the rows are read, never all held at once.
                let mut statement = conn
                    .prepare_cached(
                        "SELECT source_id, idx, vector FROM forge_chunk_vectors \
                         WHERE tenant_id = ?1 AND model = ?2 AND source_id IN (SELECT value FROM json_each(?3))",
                    )
                    .map_err(db::error)?;
                let mut found = statement.query(params![tenant, model, ids]).map_err(db::error)?;
                while let Some(row) = found.next().map_err(db::error)? {
                    let encoded = row.get_ref(2).and_then(|v| Ok(v.as_blob()?)).map_err(db::error)?;
                    if let Some(score) = vector::dot_encoded(encoded, &query) {
                        let idx = u32::try_from(rows::int(row, "idx")?).unwrap_or(u32::MAX);
                        top.push((text(row, "source_id")?, idx), score);
                    }
                }
                drop(found);
                drop(statement);
                let top = top.into_sorted();
                if top.is_empty() {
                    return Ok(vec![]);
                }
                let chunks = db::all(
                    conn,
                    "SELECT * FROM forge_chunks WHERE tenant_id = ?1 AND (source_id, idx) IN \
                     (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?2))",
                    params![tenant, rag::keys_json(&top)],
                    rows::chunk,
                )?;
                Ok(rag::ordered_hits(top, chunks))
            })
        })
        .await
    }
}
