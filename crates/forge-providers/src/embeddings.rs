//! Embeddings from any OpenAI-compatible `POST {base}/embeddings` server (OpenAI, Azure's
//! compatible endpoint, vLLM, Ollama, LM Studio, a gateway): the [`Embedder`] port's HTTP adapter.
//!
//! One request per batch, `encoding_format: "float"`; the answer's `data[].index` decides the
//! order (servers may return items out of order); errors are classified like model calls', and
//! the credential never appears in one.

use std::time::Duration;

use async_trait::async_trait;
use forge_core::Error;
use forge_core::ports::model::{ModelError, ModelErrorKind};
use forge_rag::embed::{Embedder, Purpose};
use reqwest::header::{HeaderMap, HeaderValue};
use serde::Deserialize;

use crate::http::{install_crypto_provider, read_limited};
use crate::secret::Secret;
use crate::wire::errors::classify;

/// How to reach an embeddings server.
#[derive(Debug, Clone)]
pub struct EmbeddingSettings {
    /// Base URL, for example `https://api.openai.com/v1`.
    pub base_url: String,
    /// The model, for example `text-embedding-3-small`.
    pub model: String,
    /// The API key, sent as `Authorization: Bearer`.
    pub api_key: Option<Secret>,
    /// Output dimensions, for models that can shorten their vectors.
    pub dimensions: Option<u32>,
    /// The most one request may take.
    pub timeout: Duration,
}

impl EmbeddingSettings {
    /// Settings for `model` at `base_url`, without a key, a 60 s timeout.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            dimensions: None,
            timeout: Duration::from_secs(60),
        }
    }
}

/// An OpenAI-compatible embeddings client.
#[derive(Debug, Clone)]
pub struct OpenAiEmbeddings {
    /// The name vectors are stored under.
    stored_as: String,
    url: String,
    /// `{base}/models`, which a readiness check asks.
    models_url: String,
    /// The server's model name.
    server_model: String,
    dimensions: Option<u32>,
    timeout: Duration,
    headers: HeaderMap,
    client: reqwest::Client,
}

#[derive(Deserialize)]
struct Response {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    index: usize,
    embedding: Vec<f32>,
}

impl OpenAiEmbeddings {
    /// A client from `settings`; the base URL must be http(s).
    pub fn new(settings: EmbeddingSettings) -> Result<Self, Error> {
        let EmbeddingSettings {
            base_url,
            model,
            api_key,
            dimensions,
            timeout,
        } = settings;
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(Error::invalid(format!(
                "embeddings base URL {base_url:?} must start with http:// or https://"
            )));
        }
        let mut headers = HeaderMap::new();
        if let Some(key) = &api_key {
            let mut value =
                HeaderValue::from_str(&format!("Bearer {}", key.expose())).map_err(|_| {
                    Error::invalid("the embeddings API key is not a valid header value")
                })?;
            value.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("forge/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::invalid(format!("embeddings HTTP client: {e}")))?;
        let stored_as = match dimensions {
            Some(d) => format!("openai-compatible:{model}:{d}"),
            None => format!("openai-compatible:{model}"),
        };
        Ok(Self {
            stored_as,
            url: format!("{}/embeddings", base_url.trim_end_matches('/')),
            models_url: format!("{}/models", base_url.trim_end_matches('/')),
            server_model: model,
            dimensions,
            timeout,
            headers,
            client,
        })
    }

    async fn call(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut body = serde_json::json!({
            "model": self.server_model,
            "input": texts,
            "encoding_format": "float",
        });
        if let (Some(d), Some(o)) = (self.dimensions, body.as_object_mut()) {
            o.insert("dimensions".into(), d.into());
        }
        let request = self
            .client
            .post(&self.url)
            .headers(self.headers.clone())
            .json(&body)
            .send();
        let response = tokio::time::timeout(self.timeout, request)
            .await
            .map_err(|_| ModelErrorKind::Timeout)?
            .map_err(|e| {
                if e.is_timeout() {
                    ModelErrorKind::Timeout
                } else {
                    ModelErrorKind::Transport
                }
            })?;
        let status = response.status().as_u16();
        let bytes = read_limited(response, self.timeout).await?;
        if !(200..300).contains(&status) {
            return Err(classify(status, None, &String::from_utf8_lossy(&bytes)));
        }
        let parsed: Response = serde_json::from_slice(&bytes).map_err(|e| {
            ModelErrorKind::MalformedStream(format!("the embeddings response is not valid: {e}"))
        })?;
        order(parsed.data, texts.len())
    }
}

/// The items' vectors in input order: each index from 0 to `n - 1` exactly once.
fn order(items: Vec<Item>, n: usize) -> Result<Vec<Vec<f32>>, ModelError> {
    let mut out: Vec<Option<Vec<f32>>> = vec![None; n];
    for item in items {
        match out.get_mut(item.index) {
            Some(slot @ None) => *slot = Some(item.embedding),
            _ => {
                return Err(ModelErrorKind::MalformedStream(format!(
                    "the embeddings response has index {} twice or out of range",
                    item.index
                ))
                .into());
            }
        }
    }
    out.into_iter().collect::<Option<Vec<_>>>().ok_or_else(|| {
        ModelErrorKind::MalformedStream("the embeddings response lacks an item".into()).into()
    })
}

#[async_trait]
impl Embedder for OpenAiEmbeddings {
    fn model(&self) -> &str {
        &self.stored_as
    }

    async fn embed(&self, texts: &[String], _purpose: Purpose) -> Result<Vec<Vec<f32>>, Error> {
        if texts.is_empty() {
            return Ok(vec![]);
        }
        self.call(texts).await.map_err(backend)
    }

    /// `GET {base}/models` answered with success within the timeout: the server is up and takes
    /// the key. Costs no tokens.
    async fn health(&self) -> Result<(), Error> {
        let request = self
            .client
            .get(&self.models_url)
            .headers(self.headers.clone())
            .send();
        let response = tokio::time::timeout(self.timeout, request)
            .await
            .map_err(|_| backend(ModelErrorKind::Timeout.into()))?
            .map_err(|_| backend(ModelErrorKind::Transport.into()))?;
        let status = response.status().as_u16();
        let bytes = read_limited(response, self.timeout)
            .await
            .map_err(backend)?;
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(backend(classify(
                status,
                None,
                &String::from_utf8_lossy(&bytes),
            )))
        }
    }
}

fn backend(e: ModelError) -> Error {
    let retryable = e.is_retryable();
    Error::backend(retryable, e)
}
