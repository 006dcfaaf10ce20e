//! A stand-in embedder for tests (not a model): each lower-case word of letters and digits adds
//! one to a dimension picked by hashing it, so texts sharing words point the same way. It is
//! deterministic, needs no weights, and is what the mock model server's `/v1/embeddings` returns.
//! Semantic behaviour is tested with the real local model (`forge-embed-local`).

use async_trait::async_trait;
use forge_rag::embed::{Embedder, Purpose};

/// The stand-in's dimensions.
pub const DIMS: usize = 64;

/// The stand-in vector of `text` (not normalized; all zero for a text without words).
pub fn hashed(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; DIMS];
    for word in forge_rag::rank::words(text) {
        // FNV-1a: stable across platforms and runs.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in word.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        v[(h % DIMS as u64) as usize] += 1.0;
    }
    v
}

/// The stand-in embedder; a zero vector (a text without words) gets a fixed direction instead.
#[derive(Debug, Clone)]
pub struct HashingEmbedder {
    model: String,
}

impl HashingEmbedder {
    /// Named `test:hashing-<name>`, so two of them can stand for two models.
    pub fn new(name: &str) -> Self {
        Self {
            model: format!("test:hashing-{name}"),
        }
    }
}

#[async_trait]
impl Embedder for HashingEmbedder {
    fn model(&self) -> &str {
        &self.model
    }

    async fn embed(
        &self,
        texts: &[String],
        _purpose: Purpose,
    ) -> Result<Vec<Vec<f32>>, forge_core::Error> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = hashed(t);
                if v.iter().all(|x| *x == 0.0) {
                    v[0] = 1.0;
                }
                v
            })
            .collect())
    }
}
