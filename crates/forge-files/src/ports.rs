//! The ports files go through: [`FileStore`] (the records, tenant-scoped, on the SQL stores),
//! [`BlobStore`] (the bytes: a directory, or S3-compatible object storage) and [`Scanner`]
//! (malware scanning, ClamAV's `clamd`).

use std::path::Path;
use std::pin::Pin;

use async_trait::async_trait;
use bytes::Bytes;
use forge_core::Error;
use forge_core::scope::Scope;
use futures_core::Stream;

use crate::model::{FileId, FileRecord};

/// Port: file records of one tenant. Every call is confined to `scope`'s tenant.
#[async_trait]
pub trait FileStore: Send + Sync {
    /// Stores a new record and its `file.accepted` audit record by `actor`, in one
    /// transaction; an id already stored is a conflict. A record of another tenant than the
    /// scope's is refused here ([`rules::check_tenant`]), for every adapter.
    async fn put_file(&self, scope: &Scope, file: &FileRecord, actor: &str) -> Result<(), Error> {
        rules::check_tenant(scope, file)?;
        self.insert_file(scope, file, actor).await
    }

    /// The adapter's write of [`FileStore::put_file`], given a record already checked to be of
    /// the scope's tenant. Callers use `put_file`.
    async fn insert_file(&self, scope: &Scope, file: &FileRecord, actor: &str)
    -> Result<(), Error>;

    /// A record, or `None`.
    async fn file(&self, scope: &Scope, id: &FileId) -> Result<Option<FileRecord>, Error>;

    /// The tenant's records, newest first, at most `limit`.
    async fn list_files(&self, scope: &Scope, limit: usize) -> Result<Vec<FileRecord>, Error>;

    /// Removes a record and appends its `file.deleted` audit record by `actor`, in one
    /// transaction; the removed record, or `None` when there was none.
    async fn delete_file(
        &self,
        scope: &Scope,
        id: &FileId,
        actor: &str,
    ) -> Result<Option<FileRecord>, Error>;
}

/// A blob's bytes, in pieces.
pub type BlobStream = Pin<Box<dyn Stream<Item = Result<Bytes, Error>> + Send>>;

/// Port: where files' bytes live, by key. Keys are made by Forge (`model::blob_key`), never
/// by a caller.
#[async_trait]
pub trait BlobStore: Send + Sync {
    /// Stores the file at `path` (of `size` bytes) under `key`, replacing nothing: a key in use
    /// is a conflict.
    async fn put(&self, key: &str, path: &Path, size: u64) -> Result<(), Error>;

    /// The bytes under `key`, or `None`.
    async fn get(&self, key: &str) -> Result<Option<BlobStream>, Error>;

    /// Removes `key`; `false` when there was nothing.
    async fn delete(&self, key: &str) -> Result<bool, Error>;

    /// Whether the store answers, for readiness: by default, a read of a key no file has
    /// (absent is an answer; an error is not).
    async fn health(&self) -> Result<(), Error> {
        let probe = crate::model::blob_key(
            &forge_core::scope::TenantId::new("_readiness")?,
            &crate::model::FileId::from_uuid(uuid::Uuid::nil()),
        );
        self.get(&probe).await.map(|_| ())
    }
}

/// What a scanner found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing.
    Clean,
    /// A signature, by name.
    Infected(String),
}

/// Why a scan did not happen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScanError {
    /// The scanner could not be reached or did not answer in time.
    #[error("the scanner is unavailable: {0}")]
    Unavailable(String),
    /// The scanner answered with an error (the file too large for it, a bad request).
    #[error("the scanner refused the scan: {0}")]
    Refused(String),
}

/// Port: malware scanning. Errors fail closed: a file that could not be scanned is refused.
#[async_trait]
pub trait Scanner: Send + Sync {
    /// Its name, recorded with each file it scanned.
    fn name(&self) -> &str;

    /// Scans the file at `path`.
    async fn scan(&self, path: &Path) -> Result<Verdict, ScanError>;

    /// Whether the scanner answers, for readiness (a scanner that cannot be asked refuses every
    /// upload). By default it is taken to.
    async fn health(&self) -> Result<(), ScanError> {
        Ok(())
    }
}

/// The rules every adapter applies (memory and SQL alike), written once; the SQL stores' row
/// mapping is `forge_sql::files`'s.
pub mod rules {
    use forge_core::Error;
    use forge_core::ports::audit::AuditRecord;
    use forge_core::scope::Scope;
    use forge_core::time::Timestamp;

    use crate::model::{FILE_ACCEPTED, FILE_DELETED, FILE_DOWNLOADED, FileRecord};

    /// Refuses a record of another tenant than `scope`'s.
    pub fn check_tenant(scope: &Scope, file: &FileRecord) -> Result<(), Error> {
        if &file.tenant_id == scope.tenant_id() {
            Ok(())
        } else {
            Err(Error::invalid(
                "a file record must belong to the caller's tenant",
            ))
        }
    }

    /// The audit record of an accepted upload (no content: name, type, size, version).
    pub fn accepted(scope: &Scope, file: &FileRecord, actor: &str) -> AuditRecord {
        audit(scope, file, actor, FILE_ACCEPTED, file.created_at)
    }

    /// The audit record of a deletion.
    pub fn deleted(scope: &Scope, file: &FileRecord, actor: &str, at: Timestamp) -> AuditRecord {
        audit(scope, file, actor, FILE_DELETED, at)
    }

    /// The audit record of a download through a reference, by `scope`'s principal.
    pub fn downloaded(scope: &Scope, file: &FileRecord, at: Timestamp) -> AuditRecord {
        audit(
            scope,
            file,
            scope.principal_id().as_str(),
            FILE_DOWNLOADED,
            at,
        )
    }

    fn audit(
        scope: &Scope,
        file: &FileRecord,
        actor: &str,
        action: &str,
        at: Timestamp,
    ) -> AuditRecord {
        AuditRecord {
            tenant_id: scope.tenant_id().clone(),
            at,
            actor: actor.to_owned(),
            action: action.into(),
            subject: format!("file {}", file.id),
            detail: serde_json::json!({
                "media_type": file.media_type,
                "size_bytes": file.size_bytes,
                "version": file.version,
                "source_id": file.source_id,
            }),
        }
    }
}
