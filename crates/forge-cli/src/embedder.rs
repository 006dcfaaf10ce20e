//! `--embedder`: the embedding model retrieval searches and indexes with, shared by `rag`,
//! `run`, `worker` and `serve`. Without it retrieval is lexical only.

use std::sync::{Arc, OnceLock};

use anyhow::{Context, bail};
use forge_providers::{EmbeddingSettings, OpenAiEmbeddings, SecretRef};
use forge_rag::Embedder;

/// The embedding model, loaded once per process however many places ask.
#[derive(Clone, Default)]
pub(crate) struct Loaded(Arc<OnceLock<Option<Arc<dyn Embedder>>>>);

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Loaded")
    }
}

/// Which embedding model, and how to reach it.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct EmbedderArgs {
    /// `none` (lexical search only), `local` or `local:DIR` (all-MiniLM-L6-v2 on the CPU; the
    /// directory defaults to `$FORGE_MINILM_DIR`, filled by
    /// `crates/forge-embed-local/fetch-model.sh`), or `openai-compatible:MODEL` (an
    /// `/v1/embeddings` server at `--embedder-url`).
    #[arg(long = "embedder", env = "FORGE_EMBEDDER", default_value = "none")]
    pub(crate) embedder: String,
    /// The embeddings server's base URL.
    #[arg(
        long = "embedder-url",
        env = "FORGE_EMBEDDER_URL",
        default_value = "https://api.openai.com/v1"
    )]
    pub(crate) embedder_url: String,
    /// The embeddings server's API key, as `env:NAME` or `file:PATH`.
    #[arg(long = "embedder-key", env = "FORGE_EMBEDDER_KEY")]
    pub(crate) embedder_key: Option<String>,
    /// Vector length, for models that can shorten theirs.
    #[arg(long = "embedder-dimensions", env = "FORGE_EMBEDDER_DIMENSIONS")]
    pub(crate) embedder_dimensions: Option<u32>,
    #[arg(skip)]
    loaded: Loaded,
}

impl EmbedderArgs {
    /// The embedder, or `None` for `none`. Loaded on first use, then shared.
    pub(crate) fn embedder(&self) -> anyhow::Result<Option<Arc<dyn Embedder>>> {
        if let Some(done) = self.loaded.0.get() {
            return Ok(done.clone());
        }
        let built = self.build()?;
        Ok(self.loaded.0.get_or_init(|| built).clone())
    }

    /// A retriever over `sources` for `authorizer`, with the embedder if one is set.
    pub(crate) fn retriever(
        &self,
        sources: Arc<dyn forge_rag::SourceStore>,
        authorizer: Arc<dyn forge_core::ports::policy::Authorizer>,
    ) -> anyhow::Result<forge_rag::Retriever> {
        let retriever = forge_rag::Retriever::new(sources, authorizer);
        Ok(match self.embedder()? {
            Some(e) => retriever.with_embedder(e),
            None => retriever,
        })
    }

    fn build(&self) -> anyhow::Result<Option<Arc<dyn Embedder>>> {
        let spec = self.embedder.trim();
        if spec.is_empty() || spec == "none" {
            return Ok(None);
        }
        if spec == "local" || spec.starts_with("local:") {
            return local(spec.strip_prefix("local:")).map(Some);
        }
        if let Some(model) = spec.strip_prefix("openai-compatible:") {
            if model.is_empty() {
                bail!("--embedder openai-compatible:MODEL needs a model name");
            }
            let mut settings = EmbeddingSettings::new(self.embedder_url.clone(), model);
            settings.dimensions = self.embedder_dimensions;
            if let Some(key) = &self.embedder_key {
                let reference: SecretRef = key.parse().context("--embedder-key")?;
                settings.api_key = Some(
                    reference
                        .resolve(&|name| std::env::var(name).ok())
                        .context("--embedder-key")?,
                );
            }
            return Ok(Some(Arc::new(OpenAiEmbeddings::new(settings)?)));
        }
        bail!("--embedder {spec:?}: expected none, local, local:DIR or openai-compatible:MODEL")
    }
}

#[cfg(feature = "local-embeddings")]
fn local(dir: Option<&str>) -> anyhow::Result<Arc<dyn Embedder>> {
    let dir = dir
        .map(std::path::PathBuf::from)
        .unwrap_or_else(forge_embed_local::default_dir);
    Ok(Arc::new(forge_embed_local::MiniLm::load(&dir)?))
}

#[cfg(not(feature = "local-embeddings"))]
fn local(_dir: Option<&str>) -> anyhow::Result<Arc<dyn Embedder>> {
    bail!(
        "this forge was built without the local embedding model; build it with `--features local-embeddings` or use --embedder openai-compatible:MODEL"
    )
}
