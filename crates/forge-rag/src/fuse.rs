//! Reciprocal-rank fusion: lexical and vector result lists merged by rank alone, so neither
//! list's score scale (BM25 is unbounded, cosine is in [-1, 1]) decides for the other.

use std::collections::HashMap;

use crate::model::SearchHit;

/// The constant in `1 / (K + rank)`; 60 is the value the method was published with.
pub const K: f32 = 60.0;

/// Merges `lists` (each best first) into at most `limit` hits, best first. A chunk's score is the
/// sum of `1 / (K + rank)` over the lists it is in (ranks from 1); ties go to the chunk with the
/// better single rank, then to source id and chunk order.
pub fn reciprocal_rank(lists: &[Vec<SearchHit>], limit: usize) -> Vec<SearchHit> {
    struct Fused {
        hit: SearchHit,
        score: f32,
        best: usize,
    }
    let mut by_chunk: HashMap<(String, u32), Fused> = HashMap::new();
    for list in lists {
        for (i, hit) in list.iter().enumerate() {
            let rank = i + 1;
            let key = (hit.chunk.source_id.as_str().to_owned(), hit.chunk.index);
            let add = 1.0 / (K + rank as f32);
            by_chunk
                .entry(key)
                .and_modify(|f| {
                    f.score += add;
                    f.best = f.best.min(rank);
                })
                .or_insert_with(|| Fused {
                    hit: hit.clone(),
                    score: add,
                    best: rank,
                });
        }
    }
    let mut fused: Vec<Fused> = by_chunk.into_values().collect();
    fused.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(a.best.cmp(&b.best))
            .then_with(|| a.hit.chunk.source_id.cmp(&b.hit.chunk.source_id))
            .then(a.hit.chunk.index.cmp(&b.hit.chunk.index))
    });
    fused
        .into_iter()
        .take(limit)
        .map(|f| SearchHit {
            chunk: f.hit.chunk,
            score: f.score,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Chunk, SourceId};

    fn hit(source: &str, index: u32, score: f32) -> SearchHit {
        SearchHit {
            chunk: Chunk {
                source_id: SourceId::new(source).expect("id"),
                version: "v".into(),
                index,
                start: 0,
                end: 1,
                text: "x".into(),
                heading: None,
            },
            score,
        }
    }

    fn keys(hits: &[SearchHit]) -> Vec<(&str, u32)> {
        hits.iter()
            .map(|h| (h.chunk.source_id.as_str(), h.chunk.index))
            .collect()
    }

    #[test]
    fn a_chunk_both_lists_rank_beats_one_only_one_ranks_first() {
        let lexical = vec![hit("a", 0, 9.0), hit("b", 0, 5.0), hit("c", 0, 1.0)];
        let vector = vec![hit("d", 0, 0.9), hit("b", 0, 0.8)];
        let fused = reciprocal_rank(&[lexical, vector], 10);
        assert_eq!(keys(&fused), [("b", 0), ("a", 0), ("d", 0), ("c", 0)]);
        let b = 1.0 / (K + 2.0) + 1.0 / (K + 2.0);
        assert!((fused[0].score - b).abs() < 1e-6);
    }

    #[test]
    fn scales_do_not_matter_and_limit_holds() {
        // The same ranks with scores a thousand times apart fuse the same way.
        let small = vec![hit("a", 0, 0.002), hit("b", 1, 0.001)];
        let large = vec![hit("a", 0, 2000.0), hit("b", 1, 1000.0)];
        assert_eq!(
            keys(&reciprocal_rank(&[small.clone(), vec![]], 1)),
            keys(&reciprocal_rank(&[large, vec![]], 1))
        );
        assert_eq!(reciprocal_rank(&[small], 1).len(), 1);
    }
}
