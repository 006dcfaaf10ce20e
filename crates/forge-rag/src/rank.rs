//! Lexical ranking: BM25 over the chunks of the sources the caller may read, computed here rather
//! than by a database's full-text ranking, whose statistics would count every tenant's and every
//! label's documents. The index only finds candidates; who may read what decides the corpus the
//! scores are computed over, so a document the caller cannot read cannot move a score.

use std::collections::BTreeSet;

use crate::model::{Candidates, SearchHit};

/// BM25's term-frequency saturation and length normalisation.
const K1: f32 = 1.2;
const B: f32 = 0.75;

/// Lower-case words of letters and digits: what queries and chunks are compared by.
pub fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The distinct words of a query, at most 32 (longer queries add nothing but cost).
pub fn query_terms(query: &str) -> Vec<String> {
    words(query)
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .take(32)
        .collect()
}

/// How often each of `terms` occurs in `text`, and how many words `text` has — the same words
/// [`words`] yields, counted without allocating one string per word.
pub fn term_counts(text: &str, terms: &[String]) -> (Vec<u32>, u64) {
    let mut tf = vec![0u32; terms.len()];
    let mut total = 0u64;
    let longest = terms.iter().map(String::len).max().unwrap_or(0);
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        if word.is_empty() {
            continue;
        }
        total += 1;
        // Lower-casing can change a word's length only outside ASCII; skip what cannot match.
        if word.is_ascii() && word.len() > longest {
            continue;
        }
        let lowered;
        let w = if word.chars().any(char::is_uppercase) {
            lowered = word.to_lowercase();
            lowered.as_str()
        } else {
            word
        };
        if let Some(i) = terms.iter().position(|t| t == w) {
            tf[i] += 1;
        }
    }
    (tf, total)
}

/// Scores `candidates` against `terms`, best first (ties by source and position), at most
/// `limit`; chunks matching no term are left out.
pub fn rank(candidates: Candidates, terms: &[String], limit: usize) -> Vec<SearchHit> {
    let n = candidates.corpus_chunks.max(1) as f32;
    let avg = (candidates.corpus_words as f32 / n).max(1.0);
    let counts: Vec<(Vec<u32>, u64)> = candidates
        .chunks
        .iter()
        .map(|c| term_counts(&c.text, terms))
        .collect();
    let df: Vec<f32> = (0..terms.len())
        .map(|i| counts.iter().filter(|(tf, _)| tf[i] > 0).count() as f32)
        .collect();
    let mut hits: Vec<SearchHit> = candidates
        .chunks
        .into_iter()
        .zip(&counts)
        .filter_map(|(chunk, (tf, len))| {
            let len = *len as f32;
            let score: f32 = tf
                .iter()
                .zip(&df)
                .map(|(&tf, df)| {
                    if tf == 0 {
                        return 0.0;
                    }
                    let tf = tf as f32;
                    let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                    idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / avg))
                })
                .sum();
            (score > 0.0).then_some(SearchHit { chunk, score })
        })
        .collect();
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.chunk.source_id.cmp(&b.chunk.source_id))
            .then_with(|| a.chunk.index.cmp(&b.chunk.index))
    });
    hits.truncate(limit);
    hits
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Chunk, SourceId};

    fn chunk(id: &str, index: u32, text: &str) -> Chunk {
        Chunk {
            source_id: SourceId::new(id).unwrap(),
            version: "v".into(),
            index,
            start: 0,
            end: text.len() as u64,
            text: text.into(),
            heading: None,
        }
    }

    #[test]
    fn rarer_terms_and_denser_chunks_rank_first() {
        let c = Candidates {
            chunks: vec![
                chunk("a", 0, "the cat sat on the mat"),
                chunk("b", 0, "a cat and a rare aardvark"),
                chunk("c", 0, "nothing here"),
            ],
            corpus_chunks: 10,
            corpus_words: 60,
        };
        let hits = rank(c, &query_terms("Aardvark cat"), 10);
        let ids: Vec<_> = hits.iter().map(|h| h.chunk.source_id.as_str()).collect();
        assert_eq!(ids, ["b", "a"]);
        assert!(query_terms("").is_empty());
    }

    #[test]
    fn term_counts_agree_with_words() {
        let text = "Ünïcode ÜNÏCODE words, WORDS and wordsmith; 42 42x";
        let terms = query_terms("ünïcode words 42");
        let (tf, total) = term_counts(text, &terms);
        let all = words(text);
        assert_eq!(total, all.len() as u64);
        for (t, n) in terms.iter().zip(tf) {
            assert_eq!(n as usize, all.iter().filter(|w| *w == t).count(), "{t}");
        }
    }
}
