//! Forge's files on S3-compatible object storage: [`S3BlobStore`], the `forge_files::BlobStore`
//! port over Apache Arrow's `object_store` (its own SigV4 signing and retries, on the
//! workspace's reqwest with ring — no AWS SDK). Uploads stream from the staging file in
//! multipart pieces, so no file is held in memory whole; keys are Forge's, under an optional
//! prefix. Tested against a real S3-compatible server (moto, from PyPI).

#![deny(missing_docs)]

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::Error;
use forge_files::{BlobStore, BlobStream};
use futures_util::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, ObjectStore, PutMultipartOptions, WriteMultipart};
use tokio::io::AsyncReadExt;

/// Where the bucket is and how to sign for it.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Config {
    /// The bucket.
    pub bucket: String,
    /// A key prefix (no leading or trailing `/`), or empty.
    pub prefix: String,
    /// The region (`us-east-1` for most S3-compatible servers).
    pub region: String,
    /// The endpoint of an S3-compatible server (`http://127.0.0.1:9000`); AWS's when `None`.
    pub endpoint: Option<String>,
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// Blobs in an S3 bucket.
#[derive(Debug, Clone)]
pub struct S3BlobStore {
    store: Arc<AmazonS3>,
    prefix: String,
}

/// The size of each multipart piece (S3's minimum for all but the last).
const PART: usize = 5 * 1024 * 1024;

fn backend(e: object_store::Error) -> Error {
    Error::Backend {
        retryable: !matches!(
            e,
            object_store::Error::NotFound { .. }
                | object_store::Error::AlreadyExists { .. }
                | object_store::Error::InvalidPath { .. }
                | object_store::Error::NotSupported { .. }
                | object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. }
        ),
        source: Box::new(e),
    }
}

impl S3BlobStore {
    /// A store for `config`. An `http://` endpoint is allowed (a local server); the path style
    /// is used for custom endpoints.
    pub fn new(config: &S3Config) -> Result<Self, Error> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&config.bucket)
            .with_region(&config.region)
            .with_access_key_id(&config.access_key_id)
            .with_secret_access_key(&config.secret_access_key)
            // A few quick retries, not object_store's default of ten over three minutes: an
            // upload waits on this.
            .with_retry(object_store::RetryConfig {
                max_retries: 3,
                retry_timeout: std::time::Duration::from_secs(15),
                ..object_store::RetryConfig::default()
            })
            .with_client_options(
                object_store::ClientOptions::new()
                    .with_connect_timeout(std::time::Duration::from_secs(5))
                    .with_timeout(std::time::Duration::from_secs(120)),
            );
        if let Some(endpoint) = &config.endpoint {
            builder = builder
                .with_endpoint(endpoint)
                .with_allow_http(endpoint.starts_with("http://"))
                .with_virtual_hosted_style_request(false);
        }
        let store = builder
            .build()
            .map_err(|e| Error::invalid(format!("the S3 configuration: {e}")))?;
        Ok(Self {
            store: Arc::new(store),
            prefix: config.prefix.trim_matches('/').to_owned(),
        })
    }

    /// The object path of `key`; a key that is not two plain components is refused.
    fn path(&self, key: &str) -> Result<ObjectPath, Error> {
        let plain = |c: &str| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        match key.split_once('/') {
            Some((dir, name)) if plain(dir) && plain(name) => Ok(if self.prefix.is_empty() {
                ObjectPath::from(key)
            } else {
                ObjectPath::from(format!("{}/{key}", self.prefix))
            }),
            _ => Err(Error::invalid(format!("{key:?} is not a blob key"))),
        }
    }

    // The base trait's methods, whose futures are `Send` (the extension trait's are not).
    async fn exists(&self, path: &ObjectPath) -> Result<bool, Error> {
        let head = GetOptions {
            head: true,
            ..GetOptions::default()
        };
        match self.store.get_opts(path, head).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(backend(e)),
        }
    }
}

#[async_trait]
impl BlobStore for S3BlobStore {
    async fn put(&self, key: &str, path: &Path, _size: u64) -> Result<(), Error> {
        let target = self.path(key)?;
        // Keys are fresh ids, so a check before the write suffices to keep one from being
        // replaced (S3-compatible servers differ in their conditional writes).
        if self.exists(&target).await? {
            return Err(Error::invalid(format!("blob {key} exists")));
        }
        let mut file = tokio::fs::File::open(path)
            .await
            .map_err(|e| Error::Backend {
                retryable: false,
                source: format!("opening the staged upload: {e}").into(),
            })?;
        let upload = self
            .store
            .put_multipart_opts(&target, PutMultipartOptions::default())
            .await
            .map_err(backend)?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = match file.read(&mut buf).await {
                Ok(n) => n,
                Err(e) => {
                    let _ = writer.abort().await;
                    return Err(Error::Backend {
                        retryable: false,
                        source: format!("reading the staged upload: {e}").into(),
                    });
                }
            };
            if n == 0 {
                break;
            }
            writer.wait_for_capacity(4).await.map_err(backend)?;
            writer.write(&buf[..n]);
        }
        writer.finish().await.map_err(backend)?;
        Ok(())
    }

    async fn get(&self, key: &str) -> Result<Option<BlobStream>, Error> {
        match self
            .store
            .get_opts(&self.path(key)?, GetOptions::default())
            .await
        {
            Ok(found) => Ok(Some(
                found.into_stream().map(|c| c.map_err(backend)).boxed(),
            )),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(backend(e)),
        }
    }

    async fn delete(&self, key: &str) -> Result<bool, Error> {
        let path = self.path(key)?;
        if !self.exists(&path).await? {
            return Ok(false);
        }
        let mut deleted = self
            .store
            .delete_stream(futures_util::stream::once(async move { Ok(path) }).boxed());
        while let Some(done) = deleted.next().await {
            done.map_err(backend)?;
        }
        Ok(true)
    }
}
