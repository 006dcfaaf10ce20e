//! The HTTP model adapter: one [`Dialect`] spoken to one base URL.
//!
//! A call is `POST {base_url}{dialect path}` with the dialect's streaming body. A non-success
//! status is classified (see [`crate::wire::errors`]); a success is decoded as an event stream, or
//! as one JSON document when the server answers `application/json`. Three timeouts bound a call:
//! connecting, waiting for the response head, and silence between two reads of the body.
//! Credentials travel in headers marked sensitive and never appear in `Debug` output.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use forge_core::ports::model::{
    CallDetail, ModelChunk, ModelError, ModelErrorKind, ModelProvider, ModelRequest, ModelStream,
};
use futures_core::Stream;
use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::secret::Secret;
use crate::wire::errors::{classify, retry_after};
use crate::wire::{BodyOptions, Dialect, StreamDecoder};

/// Installs ring as the process's TLS crypto provider (as the database drivers use): one provider
/// for the whole process. Idempotent; anything building a `reqwest` client calls it first.
pub fn install_crypto_provider() {
    // An error only means one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Largest error body or non-streamed JSON response read (4 MiB).
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// How long a call may take at each stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Establishing the connection.
    pub connect: Duration,
    /// From sending the request to the response head.
    pub response: Duration,
    /// Silence between two reads of the response body.
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            response: Duration::from_secs(120),
            idle: Duration::from_secs(120),
        }
    }
}

/// Everything an [`HttpProvider`] needs.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// The prefix in model strings (`openai`, `anthropic`, or a configured name).
    pub name: String,
    /// The wire format.
    pub dialect: Dialect,
    /// Base URL, for example `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    /// The API key, sent as the dialect's credential header.
    pub api_key: Option<Secret>,
    /// Further headers (organisation, project, gateway tokens).
    pub headers: Vec<(String, Secret)>,
    /// Body choices.
    pub body: BodyOptions,
    /// Timeouts.
    pub timeouts: Timeouts,
}

/// Why an [`HttpProvider`] could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpSetupError {
    /// A header name or value is not valid HTTP.
    #[error("provider {provider}: header {header:?} is not a valid HTTP header")]
    BadHeader {
        /// The provider.
        provider: String,
        /// The header's name (never its value).
        header: String,
    },
    /// The base URL is not an http(s) URL.
    #[error("provider {provider}: base URL {url:?} must start with http:// or https://")]
    BadBaseUrl {
        /// The provider.
        provider: String,
        /// The URL.
        url: String,
    },
    /// The HTTP client could not be built.
    #[error("provider {provider}: could not build the HTTP client: {message}")]
    Client {
        /// The provider.
        provider: String,
        /// Why.
        message: String,
    },
}

/// A model provider reached over HTTP.
#[derive(Debug, Clone)]
pub struct HttpProvider {
    name: String,
    dialect: Dialect,
    base_url: String,
    client: reqwest::Client,
    headers: HeaderMap,
    body: BodyOptions,
    timeouts: Timeouts,
}

impl HttpProvider {
    /// Builds a provider from its settings.
    pub fn new(settings: HttpSettings) -> Result<Self, HttpSetupError> {
        let HttpSettings {
            name,
            dialect,
            base_url,
            api_key,
            headers: extra,
            body,
            timeouts,
        } = settings;
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(HttpSetupError::BadBaseUrl {
                provider: name,
                url: base_url,
            });
        }
        let mut headers = HeaderMap::new();
        let mut insert = |header: &str, value: &str| -> Result<(), HttpSetupError> {
            let bad = || HttpSetupError::BadHeader {
                provider: name.clone(),
                header: header.to_owned(),
            };
            let key = HeaderName::from_bytes(header.as_bytes()).map_err(|_| bad())?;
            let mut value = HeaderValue::from_str(value).map_err(|_| bad())?;
            value.set_sensitive(true);
            headers.insert(key, value);
            Ok(())
        };
        if let Some(key) = &api_key {
            match dialect {
                Dialect::Anthropic => insert("x-api-key", key.expose())?,
                Dialect::OpenAiChat | Dialect::OpenAiResponses => {
                    insert("authorization", &format!("Bearer {}", key.expose()))?
                }
            }
        }
        if dialect == Dialect::Anthropic {
            insert("anthropic-version", "2023-06-01")?;
        }
        for (header, value) in &extra {
            insert(header, value.expose())?;
        }
        install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(timeouts.connect)
            .user_agent(concat!("forge/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| HttpSetupError::Client {
                provider: name.clone(),
                message: e.to_string(),
            })?;
        Ok(Self {
            name,
            dialect,
            base_url: base_url.trim_end_matches('/').to_owned(),
            client,
            headers,
            body,
            timeouts,
        })
    }

    /// The wire format this provider speaks.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Sends `request` (a `method` to `url`); a failure names the endpoint, and for a refused
    /// request the status and the provider's message, for a failed connection its cause.
    async fn send(
        &self,
        method: &str,
        url: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ModelError> {
        let at = |e: ModelError| e.at(method, url);
        let response = tokio::time::timeout(self.timeouts.response, request.send())
            .await
            .map_err(|_| {
                at(ModelError::from(ModelErrorKind::Timeout).with_detail(
                    CallDetail::default().cause(format!(
                        "no response within {} ms",
                        self.timeouts.response.as_millis()
                    )),
                ))
            })?
            .map_err(|e| at(transport(&e)))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let delay = retry_after(|name| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        });
        let body = read_limited(response, self.timeouts.idle)
            .await
            .map_err(at)?;
        Err(at(classify(status, delay, &String::from_utf8_lossy(&body))))
    }
}

/// A failed connection or read, with its causes (the resolver's, TLS's or the operating
/// system's words). reqwest's own message is left out: it repeats the URL, query string included.
fn transport(e: &reqwest::Error) -> ModelError {
    let kind = if e.is_timeout() {
        ModelErrorKind::Timeout
    } else {
        ModelErrorKind::Transport
    };
    let mut causes: Vec<String> = Vec::new();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !text.is_empty() && !causes.iter().any(|c| c.contains(&text)) {
            causes.retain(|c| !text.contains(c.as_str()));
            causes.push(text);
        }
        source = cause.source();
    }
    let error = ModelError::from(kind);
    if causes.is_empty() {
        return error;
    }
    error.with_detail(CallDetail::default().cause(causes.join(": ")))
}

/// Reads a whole body, at most [`MAX_BODY_BYTES`].
pub(crate) async fn read_limited(
    response: reqwest::Response,
    idle: Duration,
) -> Result<Vec<u8>, ModelError> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    loop {
        match tokio::time::timeout(idle, stream.next()).await {
            Err(_) => return Err(ModelErrorKind::Timeout.into()),
            Ok(None) => return Ok(body),
            Ok(Some(Err(e))) => return Err(transport(&e)),
            Ok(Some(Ok(bytes))) => {
                if body.len() + bytes.len() > MAX_BODY_BYTES {
                    return Err(ModelErrorKind::MalformedStream(format!(
                        "the response body exceeds {MAX_BODY_BYTES} bytes"
                    ))
                    .into());
                }
                body.extend_from_slice(&bytes);
            }
        }
    }
}

type Body = Pin<Box<dyn Stream<Item = Result<Bytes, reqwest::Error>> + Send>>;

/// The state of one streamed response.
struct Reading {
    body: Body,
    decoder: StreamDecoder,
    pending: VecDeque<Result<ModelChunk, ModelError>>,
    json: Option<Vec<u8>>,
    idle: Duration,
    ended: bool,
}

impl Reading {
    fn decoded(&mut self, chunks: Vec<ModelChunk>, result: Result<(), ModelError>) {
        self.pending.extend(chunks.into_iter().map(Ok));
        if let Err(e) = result {
            self.pending.push_back(Err(e));
            self.ended = true;
        }
    }

    fn end(&mut self) {
        self.ended = true;
        let mut out = Vec::new();
        let result = match self.json.take() {
            Some(body) => self.decoder.whole(&body, &mut out),
            None => self.decoder.finish(&mut out),
        };
        self.decoded(out, result);
    }

    async fn next(mut self) -> Option<(Result<ModelChunk, ModelError>, Self)> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some((item, self));
            }
            if self.ended {
                return None;
            }
            match tokio::time::timeout(self.idle, self.body.next()).await {
                Err(_) => {
                    self.ended = true;
                    self.pending.push_back(Err(ModelErrorKind::Timeout.into()));
                }
                Ok(Some(Err(e))) => {
                    self.ended = true;
                    self.pending.push_back(Err(transport(&e)));
                }
                Ok(None) => self.end(),
                Ok(Some(Ok(bytes))) => match &mut self.json {
                    Some(buf) if buf.len() + bytes.len() > MAX_BODY_BYTES => {
                        self.ended = true;
                        self.pending
                            .push_back(Err(ModelErrorKind::MalformedStream(format!(
                                "the response body exceeds {MAX_BODY_BYTES} bytes"
                            ))
                            .into()));
                    }
                    Some(buf) => buf.extend_from_slice(&bytes),
                    None => {
                        let mut out = Vec::new();
                        let result = self.decoder.push(&bytes, &mut out);
                        self.decoded(out, result);
                        if !self.ended && self.decoder.is_done() {
                            self.end();
                        }
                    }
                },
            }
        }
    }
}

#[async_trait]
impl ModelProvider for HttpProvider {
    fn name(&self) -> &str {
        &self.name
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let body = self.dialect.encode(&request, &self.body).map_err(|e| {
            ModelErrorKind::BadRequest(format!("the request cannot be encoded as JSON: {e}"))
        })?;
        let url = format!("{}{}", self.base_url, self.dialect.path());
        // As reqwest's `json` does: the configured headers may name another JSON type.
        let mut headers = self.headers.clone();
        if !headers.contains_key(reqwest::header::CONTENT_TYPE) {
            headers.insert(
                reqwest::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        let response = self
            .send(
                "POST",
                &url,
                self.client.post(&url).headers(headers).body(body),
            )
            .await?;
        let request_id = ["x-request-id", "request-id"].iter().find_map(|name| {
            response
                .headers()
                .get(*name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        });
        let json = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.contains("json") && !t.contains("event-stream"));
        let mut pending = VecDeque::new();
        if let Some(id) = request_id {
            pending.push_back(Ok(ModelChunk::RequestId(id)));
        }
        let reading = Reading {
            body: Box::pin(response.bytes_stream()),
            decoder: self.dialect.decoder(),
            pending,
            json: json.then(Vec::new),
            idle: self.timeouts.idle,
            ended: false,
        };
        Ok(Box::pin(futures_util::stream::unfold(
            reading,
            Reading::next,
        )))
    }

    async fn health(&self) -> Result<(), ModelError> {
        let url = format!("{}{}", self.base_url, self.dialect.models_path());
        self.send(
            "GET",
            &url,
            self.client.get(&url).headers(self.headers.clone()),
        )
        .await
        .map(drop)
    }
}
