//! The retrieval store's rows on SQL, for both SQL stores: chunk hits read back in rank order,
//! their keys for one statement, the word counts ranking reads, and the rewriting of stored
//! copies of a deleted source's text.

use forge_core::Error;
use forge_rag::model::{Chunk, SearchHit, SourceId};

/// The hits of `top` (source id and chunk index, with similarity, best first) from `chunks`
/// (those chunks, in any order); a key whose chunk is missing is dropped.
pub fn ordered_hits(top: Vec<((String, u32), f32)>, chunks: Vec<Chunk>) -> Vec<SearchHit> {
    let mut by_key: std::collections::HashMap<(String, u32), Chunk> = chunks
        .into_iter()
        .map(|c| ((c.source_id.as_str().to_owned(), c.index), c))
        .collect();
    top.into_iter()
        .filter_map(|(k, score)| by_key.remove(&k).map(|chunk| SearchHit { chunk, score }))
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
    forge_rag::rank::words(text).len() as i64
}

/// The JSON-quoted id, which every stored event or message quoting the source contains: a
/// cheap filter before each candidate is parsed and checked by structure.
pub fn quoted_id(id: &SourceId) -> String {
    serde_json::Value::String(id.as_str().to_owned()).to_string()
}

/// `body` (a stored event) with the quotes of `id` removed, when it had any.
fn event_forgetting(body: &str, id: &SourceId) -> Result<Option<String>, Error> {
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
fn parts_forgetting(parts: &str, id: &SourceId) -> Result<Option<String>, Error> {
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
