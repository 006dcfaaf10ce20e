//! Files' bytes in a directory: each blob a file under the configured root at its key (which
//! Forge makes: a hex tenant directory and a file id, so nothing a caller sends becomes a path),
//! written to a temporary name and renamed into place.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use bytes::Bytes;
use forge_core::Error;
use futures_util::StreamExt;
use tokio::io::AsyncReadExt;

use crate::ports::{BlobStore, BlobStream};

/// Blobs in a directory.
#[derive(Debug, Clone)]
pub struct FsBlobStore {
    root: PathBuf,
}

fn io_error(what: &str, e: std::io::Error) -> Error {
    Error::Backend {
        retryable: matches!(
            e.kind(),
            std::io::ErrorKind::Interrupted | std::io::ErrorKind::TimedOut
        ),
        source: format!("{what}: {e}").into(),
    }
}

impl FsBlobStore {
    /// Blobs under `root`, created if missing.
    pub fn new(root: impl Into<PathBuf>) -> Result<Self, Error> {
        let root = root.into();
        std::fs::create_dir_all(&root).map_err(|e| io_error("creating the files directory", e))?;
        Ok(Self { root })
    }

    /// The path of `key`; a key that is not two plain components is refused.
    fn path(&self, key: &str) -> Result<PathBuf, Error> {
        let plain = |c: &str| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        match key.split_once('/') {
            Some((dir, name)) if plain(dir) && plain(name) => Ok(self.root.join(dir).join(name)),
            _ => Err(Error::invalid(format!("{key:?} is not a blob key"))),
        }
    }

    /// The directory blobs are kept in.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

#[async_trait]
impl BlobStore for FsBlobStore {
    async fn put(&self, key: &str, path: &Path, _size: u64) -> Result<(), Error> {
        let target = self.path(key)?;
        if tokio::fs::try_exists(&target).await.unwrap_or(false) {
            return Err(Error::invalid(format!("blob {key} exists")));
        }
        let dir = target.parent().unwrap_or(&self.root).to_owned();
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| io_error("creating a tenant directory", e))?;
        let partial = dir.join(format!(
            ".{}.partial",
            target
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("blob")
        ));
        tokio::fs::copy(path, &partial)
            .await
            .map_err(|e| io_error("writing a blob", e))?;
        tokio::fs::rename(&partial, &target)
            .await
            .map_err(|e| io_error("moving a blob into place", e))
    }

    async fn get(&self, key: &str) -> Result<Option<BlobStream>, Error> {
        let file = match tokio::fs::File::open(self.path(key)?).await {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("opening a blob", e)),
        };
        let chunks = futures_util::stream::unfold(Some(file), |file| async move {
            let mut file = file?;
            let mut buf = vec![0u8; 64 * 1024];
            match file.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(Bytes::from(buf)), Some(file)))
                }
                Err(e) => Some((Err(io_error("reading a blob", e)), None)),
            }
        });
        Ok(Some(chunks.boxed()))
    }

    async fn delete(&self, key: &str) -> Result<bool, Error> {
        match tokio::fs::remove_file(self.path(key)?).await {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_error("deleting a blob", e)),
        }
    }
}
