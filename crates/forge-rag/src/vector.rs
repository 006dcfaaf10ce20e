//! Vector arithmetic every adapter shares: unit normalization, the stored byte encoding, and a
//! brute-force top-k by cosine similarity (a dot product of unit vectors).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Scales `v` to unit length; `false` (and `v` unchanged) when it is zero or not finite.
pub fn normalize(v: &mut [f32]) -> bool {
    let norm = v
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    if !norm.is_finite() || norm == 0.0 {
        return false;
    }
    for x in v.iter_mut() {
        *x = (f64::from(*x) / norm) as f32;
    }
    true
}

/// The dot product; the cosine similarity of two unit vectors. Vectors of different lengths
/// (another model's) are not comparable: `None`.
pub fn dot(a: &[f32], b: &[f32]) -> Option<f32> {
    (a.len() == b.len()).then(|| a.iter().zip(b).map(|(x, y)| x * y).sum())
}

/// `v` as stored: little-endian `f32`s.
pub fn encode(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A stored vector, or `None` when `bytes` is not a whole number of `f32`s.
pub fn decode(bytes: &[u8]) -> Option<Vec<f32>> {
    bytes.len().is_multiple_of(4).then(|| {
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    })
}

/// The similarity of `stored` (encoded) to `query`, without decoding into a new vector.
pub fn dot_encoded(stored: &[u8], query: &[f32]) -> Option<f32> {
    (stored.len() == query.len() * 4).then(|| {
        stored
            .chunks_exact(4)
            .zip(query)
            .map(|(b, q)| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * q)
            .sum()
    })
}

struct Entry<K> {
    score: f32,
    key: K,
}

impl<K: Ord> PartialEq for Entry<K> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<K: Ord> Eq for Entry<K> {}
impl<K: Ord> PartialOrd for Entry<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<K: Ord> Ord for Entry<K> {
    // Reversed, so the heap's top is the worst kept entry: lowest score, then greatest key.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then_with(|| self.key.cmp(&other.key))
    }
}

/// The `k` best-scoring keys seen, best first; equal scores keep the smaller key, so the result
/// does not depend on the order keys are offered in.
pub struct TopK<K> {
    k: usize,
    heap: BinaryHeap<Entry<K>>,
}

impl<K: Ord> TopK<K> {
    /// Keeps at most `k`.
    pub fn new(k: usize) -> Self {
        Self {
            k,
            heap: BinaryHeap::with_capacity(k.saturating_add(1).min(4096)),
        }
    }

    /// Offers `key` with `score`.
    pub fn push(&mut self, key: K, score: f32) {
        if self.k == 0 || score.is_nan() {
            return;
        }
        let entry = Entry { score, key };
        if self.heap.len() < self.k {
            self.heap.push(entry);
        } else if self.heap.peek().is_some_and(|worst| entry < *worst) {
            self.heap.pop();
            self.heap.push(entry);
        }
    }

    /// The kept keys with their scores, best first.
    pub fn into_sorted(self) -> Vec<(K, f32)> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|e| (e.key, e.score))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips() {
        let v = vec![0.25f32, -1.5, 3.0e-7];
        assert_eq!(decode(&encode(&v)), Some(v.clone()));
        assert_eq!(decode(&[0, 1, 2]), None);
        let q = [1.0f32, 2.0, 0.0];
        assert_eq!(dot_encoded(&encode(&v), &q), dot(&v, &q));
        assert_eq!(dot_encoded(&encode(&v), &[1.0]), None);
    }

    #[test]
    fn top_k_keeps_the_best_in_order_whatever_the_offer_order() {
        let scores = [(3, 0.1), (1, 0.9), (4, 0.5), (2, 0.9), (5, 0.7)];
        let mut forward = TopK::new(3);
        let mut backward = TopK::new(3);
        for (k, s) in scores {
            forward.push(k, s);
        }
        for (k, s) in scores.iter().rev() {
            backward.push(*k, *s);
        }
        let expected = vec![(1, 0.9), (2, 0.9), (5, 0.7)];
        assert_eq!(forward.into_sorted(), expected);
        assert_eq!(backward.into_sorted(), expected);
    }

    #[test]
    fn normalize_refuses_zero_and_nan() {
        let mut v = vec![0.0, 0.0];
        assert!(!normalize(&mut v));
        let mut v = vec![f32::INFINITY, 0.0];
        assert!(!normalize(&mut v));
        let mut v = vec![2.0, 0.0];
        assert!(normalize(&mut v));
        assert_eq!(v, vec![1.0, 0.0]);
    }
}
