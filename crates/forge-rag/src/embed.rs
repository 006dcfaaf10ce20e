//! The embedding port: text in, one vector per text out. Adapters: an OpenAI-compatible
//! `/v1/embeddings` client (`forge-providers`) and a local all-MiniLM-L6-v2 (`forge-embed-local`).
//!
//! Vectors are stored under the embedder's [`Embedder::model`] name, so vectors of two models are
//! never compared; what an adapter returns is checked and normalized here ([`checked`]) before it
//! is stored or searched with.

use async_trait::async_trait;
use forge_core::Error;

/// What a text is embedded for: some models embed queries and passages differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A chunk being indexed.
    Document,
    /// A search query.
    Query,
}

/// Port: an embedding model.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// The model's stable name (`local:all-MiniLM-L6-v2`, `openai:text-embedding-3-small`):
    /// vectors are stored and searched under it.
    fn model(&self) -> &str;

    /// One vector per text, in order.
    async fn embed(&self, texts: &[String], purpose: Purpose) -> Result<Vec<Vec<f32>>, Error>;

    /// Whether the model can be reached now, for a readiness check. `Ok` unless the adapter
    /// depends on something outside the process (a model loaded in memory is always ready).
    async fn health(&self) -> Result<(), Error> {
        Ok(())
    }
}

/// The most texts one [`Embedder::embed`] call is given by [`embed_all`].
pub const BATCH: usize = 32;

/// Embeds `texts` in batches of [`BATCH`] and checks the result with [`checked`].
pub async fn embed_all(
    embedder: &dyn Embedder,
    texts: &[String],
    purpose: Purpose,
) -> Result<Vec<Vec<f32>>, Error> {
    let mut out = Vec::with_capacity(texts.len());
    for batch in texts.chunks(BATCH) {
        let vectors = embedder.embed(batch, purpose).await?;
        out.extend(checked(embedder.model(), batch.len(), vectors)?);
    }
    if let Some(first) = out.first() {
        let dims = first.len();
        if out.iter().any(|v| v.len() != dims) {
            return Err(Error::invalid(format!(
                "embedding model {} returned vectors of different lengths",
                embedder.model()
            )));
        }
    }
    Ok(out)
}

/// `vectors` as `expected` unit vectors of one length, or an error naming what `model` got wrong:
/// a wrong count, an empty or ragged vector, a non-finite or all-zero component set.
pub fn checked(
    model: &str,
    expected: usize,
    vectors: Vec<Vec<f32>>,
) -> Result<Vec<Vec<f32>>, Error> {
    if vectors.len() != expected {
        return Err(Error::invalid(format!(
            "embedding model {model} returned {} vectors for {expected} texts",
            vectors.len()
        )));
    }
    let dims = vectors.first().map_or(0, Vec::len);
    vectors
        .into_iter()
        .map(|mut v| {
            if v.is_empty() || v.len() != dims {
                return Err(Error::invalid(format!(
                    "embedding model {model} returned vectors of different lengths"
                )));
            }
            if !crate::vector::normalize(&mut v) {
                return Err(Error::invalid(format!(
                    "embedding model {model} returned a zero or non-finite vector"
                )));
            }
            Ok(v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_normalized_and_checked() {
        let ok = checked("m", 2, vec![vec![3.0, 4.0], vec![0.0, 2.0]]).expect("valid");
        assert_eq!(ok, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
        assert!(checked("m", 3, vec![vec![1.0]]).is_err(), "count");
        assert!(
            checked("m", 2, vec![vec![1.0], vec![1.0, 0.0]]).is_err(),
            "ragged"
        );
        assert!(checked("m", 1, vec![vec![0.0, 0.0]]).is_err(), "zero");
        assert!(checked("m", 1, vec![vec![f32::NAN, 1.0]]).is_err(), "NaN");
        assert!(checked("m", 1, vec![vec![]]).is_err(), "empty");
    }
}
