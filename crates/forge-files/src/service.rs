//! [`Files`]: uploads inspected before they are accepted, signed references, reading, and
//! deletion that reaches every copy.
//!
//! An upload is streamed to a staging file (hashed and measured as it arrives, and cut off one
//! byte past the tenant's limit, so nothing larger is ever held), inspected
//! ([`crate::inspect::decide`]), scanned when a scanner is configured (a scanner that cannot
//! answer refuses the file), stored as a blob, optionally indexed as a retrieval source, and
//! recorded with its audit entry — in that order, and undone when a later step fails, so a
//! refused upload leaves nothing but a `file.refused` audit record. The staging file is always
//! removed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use forge_core::Error;
use forge_core::id::IdGenerator;
use forge_core::part::{FilePart, Trust};
use forge_core::ports::audit::{AuditLog, AuditRecord};
use forge_core::ports::files::FileContents;
use forge_core::ports::policy::{
    AllowAll, Authorizer, PolicyAction, PolicyRequest, PolicyResource,
};
use forge_core::scope::Scope;
use forge_core::time::{Clock, Timestamp};
use futures_core::Stream;
use futures_util::StreamExt;
use sha2::Digest;
use tokio::io::AsyncWriteExt;

use crate::inspect::{self, HEAD_BYTES, Policy, Refusal};
use crate::model::{FILE_REFUSED, FileId, FileRecord, ScanOutcome};
use crate::ports::{BlobStore, BlobStream, FileStore, ScanError, Scanner, Verdict};
use crate::refs::{RefKeys, Rejected};

/// The most records [`Files::list_visible`] looks through for the ones a caller may see.
pub const LIST_SCAN: usize = 1000;

/// How long a reference lasts unless asked otherwise.
pub const DEFAULT_REFERENCE_TTL: Duration = Duration::from_secs(15 * 60);
/// The longest a reference may last by default ([`Policy::max_reference_ttl`]).
pub const MAX_REFERENCE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// What went wrong with an upload's body before it was whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// It arrived too slowly or stalled (the server's timeouts).
    TooSlow,
    /// The client went away or sent something unreadable.
    Aborted(String),
}

/// Why an upload did not become a file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UploadError {
    /// Refused: what the uploader should be told.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The client went away before the body was whole.
    #[error("the upload was interrupted: {0}")]
    Interrupted(String),
    /// Storing it failed.
    #[error(transparent)]
    Failed(#[from] Error),
}

/// One upload's description.
#[derive(Debug, Clone, Default)]
pub struct Upload {
    /// The file's name as the uploader gave it.
    pub name: String,
    /// The media type the uploader declared.
    pub declared_type: Option<String>,
    /// When set, a text file also becomes a retrieval source with this access label.
    pub index_label: Option<String>,
    /// The file's access label (by default the index label, if any): without one, the file is
    /// its uploader's alone.
    pub label: Option<String>,
}

/// The pieces [`Files`] is made of.
pub struct FilesParts {
    /// The records.
    pub store: Arc<dyn FileStore>,
    /// The bytes.
    pub blobs: Arc<dyn BlobStore>,
    /// The malware scanner, if any.
    pub scanner: Option<Arc<dyn Scanner>>,
    /// Where text files are indexed, if anywhere.
    pub retriever: Option<forge_rag::Retriever>,
    /// Where refusals are audited.
    pub audit: Option<Arc<dyn AuditLog>>,
    /// What is accepted.
    pub policy: Policy,
    /// Where uploads are staged while they are inspected.
    pub staging: PathBuf,
    /// The reference keys.
    pub keys: RefKeys,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// The id generator.
    pub ids: Arc<dyn IdGenerator>,
}

/// Files: upload, read, reference, delete.
#[derive(Clone)]
pub struct Files {
    parts: Arc<FilesParts>,
    telemetry: forge_core::telemetry::Telemetry,
    authorizer: Arc<dyn Authorizer>,
}

impl std::fmt::Debug for Files {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Files")
            .field("policy", &self.parts.policy)
            .field(
                "scanner",
                &self.parts.scanner.as_ref().map(|s| s.name().to_owned()),
            )
            .finish_non_exhaustive()
    }
}

/// A staging file, removed when dropped.
struct Staged {
    path: PathBuf,
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A received body: its staging file, size, hash and first bytes.
struct Received {
    staged: Staged,
    size: u64,
    sha256: String,
    head: Vec<u8>,
}

fn io_failed(what: &str, e: std::io::Error) -> Error {
    Error::Backend {
        retryable: false,
        source: format!("{what}: {e}").into(),
    }
}

/// The id of the retrieval source made from `file`.
pub fn source_id_of(file: &FileId) -> String {
    format!("file:{file}")
}

impl Files {
    /// Files from its parts; the staging directory is created.
    pub fn new(parts: FilesParts) -> Result<Self, Error> {
        std::fs::create_dir_all(&parts.staging)
            .map_err(|e| io_failed("creating the staging directory", e))?;
        Ok(Self {
            parts: Arc::new(parts),
            telemetry: forge_core::telemetry::Telemetry::noop(),
            authorizer: Arc::new(AllowAll),
        })
    }

    /// The same, deciding who other than a file's uploader has it with `authorizer` (by
    /// default [`AllowAll`]: everyone in the tenant has a labelled file).
    pub fn with_authorizer(mut self, authorizer: Arc<dyn Authorizer>) -> Self {
        self.authorizer = authorizer;
        self
    }

    /// Whether `scope` may do `action` (discover: list it; read: fetch it, reference it,
    /// attach it to a run) with `file`: its uploader always; anyone else only when it has an
    /// access label and the policy permits the action on it.
    pub fn permits(&self, scope: &Scope, action: PolicyAction, file: &FileRecord) -> bool {
        if file.created_by == scope.principal_id().as_str() {
            return true;
        }
        let Some(label) = file.label.as_deref() else {
            return false;
        };
        self.authorizer
            .decide(&PolicyRequest {
                scope,
                action,
                resource: PolicyResource::File {
                    id: file.id.as_str(),
                    owner: &file.created_by,
                    label,
                },
                input: None,
            })
            .is_allowed()
    }

    /// Up to `limit` of the tenant's files `scope` may discover, newest first. Looks through at
    /// most [`LIST_SCAN`] of the newest records.
    pub async fn list_visible(
        &self,
        scope: &Scope,
        limit: usize,
    ) -> Result<Vec<FileRecord>, Error> {
        let records = self.parts.store.list_files(scope, LIST_SCAN).await?;
        Ok(records
            .into_iter()
            .filter(|f| self.permits(scope, PolicyAction::Discover, f))
            .take(limit)
            .collect())
    }

    /// The record of `id` when `scope` may read it; `None` alike for a file that does not
    /// exist and one the caller may not have.
    pub async fn readable(&self, scope: &Scope, id: &FileId) -> Result<Option<FileRecord>, Error> {
        Ok(self
            .parts
            .store
            .file(scope, id)
            .await?
            .filter(|f| self.permits(scope, PolicyAction::Read, f)))
    }

    /// The same, logging through `telemetry` (by default, nowhere).
    pub fn with_telemetry(mut self, telemetry: forge_core::telemetry::Telemetry) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// What is accepted.
    pub fn policy(&self) -> &Policy {
        &self.parts.policy
    }

    /// The record store.
    pub fn store(&self) -> &Arc<dyn FileStore> {
        &self.parts.store
    }

    /// Streams `body` to a staging file, refusing it one byte past `limit`.
    async fn receive<S, E>(&self, mut body: S, limit: u64) -> Result<Received, UploadError>
    where
        S: Stream<Item = Result<Bytes, E>> + Send + Unpin,
        E: Into<BodyError>,
    {
        let path = self.parts.staging.join(format!(
            "upload-{}.partial",
            self.parts.ids.next_uuid().simple()
        ));
        let staged = Staged { path };
        let mut out = tokio::fs::File::create(&staged.path)
            .await
            .map_err(|e| io_failed("creating a staging file", e))?;
        let (mut size, mut hash, mut head) = (0u64, sha2::Sha256::new(), Vec::new());
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| match e.into() {
                BodyError::TooSlow => UploadError::Refused(Refusal::TooSlow),
                BodyError::Aborted(why) => UploadError::Interrupted(why),
            })?;
            size += chunk.len() as u64;
            if size > limit {
                return Err(Refusal::TooLarge { limit }.into());
            }
            if head.len() < HEAD_BYTES {
                let take = (HEAD_BYTES - head.len()).min(chunk.len());
                head.extend_from_slice(&chunk[..take]);
            }
            hash.update(&chunk);
            out.write_all(&chunk)
                .await
                .map_err(|e| io_failed("writing a staging file", e))?;
        }
        out.flush()
            .await
            .map_err(|e| io_failed("writing a staging file", e))?;
        let sha256: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        Ok(Received {
            staged,
            size,
            sha256,
            head,
        })
    }

    /// Accepts `body` as a file of `scope`'s tenant, or refuses it (see the module docs).
    pub async fn upload<S, E>(
        &self,
        scope: &Scope,
        upload: Upload,
        body: S,
    ) -> Result<FileRecord, UploadError>
    where
        S: Stream<Item = Result<Bytes, E>> + Send + Unpin,
        E: Into<BodyError>,
    {
        let outcome = self.try_upload(scope, upload, body).await;
        if let Err(UploadError::Refused(refusal)) = &outcome {
            self.audit_refusal(scope, refusal).await;
        }
        outcome
    }

    /// Records a refused upload (`file.refused`, with the refusal's code only: the name, type
    /// and bytes may all be the attacker's). [`Files::upload`] records its own; a caller that
    /// refuses before it hands the body over (a `Content-Length` past the limit) records its
    /// refusal here, so every refusal leaves its audit record.
    pub async fn audit_refusal(&self, scope: &Scope, refusal: &Refusal) {
        if let Some(audit) = &self.parts.audit {
            let record = AuditRecord {
                tenant_id: scope.tenant_id().clone(),
                at: self.parts.clock.now(),
                actor: scope.principal_id().as_str().to_owned(),
                action: FILE_REFUSED.into(),
                subject: "upload".into(),
                detail: serde_json::json!({"code": refusal.code()}),
            };
            let _ = audit.record_audit(scope, record).await;
        }
    }

    async fn try_upload<S, E>(
        &self,
        scope: &Scope,
        upload: Upload,
        body: S,
    ) -> Result<FileRecord, UploadError>
    where
        S: Stream<Item = Result<Bytes, E>> + Send + Unpin,
        E: Into<BodyError>,
    {
        let p = &self.parts;
        // The name and label are checked before a byte is read.
        let name = inspect::file_name(&upload.name)?;
        let label = upload.label.clone().or_else(|| upload.index_label.clone());
        if let Some(l) = &label
            && (l.is_empty() || l.chars().count() > 64 || l.chars().any(char::is_control))
        {
            return Err(Refusal::BadLabel(l.clone()).into());
        }
        let received = self
            .receive(body, p.policy.limit(scope.tenant_id()))
            .await?;
        if received.size == 0 {
            return Err(Refusal::Empty.into());
        }
        let path = received.staged.path.clone();
        let decision = inspect::decide(
            &p.policy,
            &path,
            &received.head,
            &name,
            upload.declared_type.as_deref(),
        )?;
        let scan = match &p.scanner {
            None => ScanOutcome::NotScanned,
            Some(scanner) => match scanner.scan(&path).await {
                Ok(Verdict::Clean) => ScanOutcome::Clean {
                    scanner: scanner.name().to_owned(),
                },
                Ok(Verdict::Infected(signature)) => {
                    return Err(Refusal::Infected(signature).into());
                }
                Err(e) => {
                    let code = match e {
                        ScanError::Unavailable(_) => "scanner_unavailable",
                        ScanError::Refused(_) => "scanner_refused",
                    };
                    forge_core::log!(self.telemetry, FileScanUnavailable, code = code);
                    return Err(Refusal::ScannerUnavailable.into());
                }
            },
        };
        let mut record = FileRecord {
            id: FileId::from_uuid(p.ids.next_uuid()),
            tenant_id: scope.tenant_id().clone(),
            name,
            declared_type: upload.declared_type,
            media_type: decision.media_type,
            size_bytes: received.size,
            version: format!("sha256:{}", received.sha256),
            findings: decision.findings,
            scan,
            source_id: None,
            created_by: scope.principal_id().as_str().to_owned(),
            label,
            created_at: p.clock.now(),
        };
        let key = record.blob_key();
        p.blobs.put(&key, &path, received.size).await?;
        let stored = async {
            if let (Some(label), Some(retriever)) = (&upload.index_label, &p.retriever)
                && record.is_text()
            {
                let text = tokio::fs::read_to_string(&path)
                    .await
                    .map_err(|e| Error::invalid(format!("the file is not UTF-8 text: {e}")))?;
                let source_id = source_id_of(&record.id);
                let source = forge_rag::ingest::ingest(
                    forge_rag::SourceId::new(source_id.clone())?,
                    record.name.clone(),
                    label.clone(),
                    forge_rag::Format::from_name(&record.name),
                    serde_json::json!({"file_id": record.id}),
                    &text,
                );
                retriever.index(scope, &source).await?;
                record.source_id = Some(source_id);
            }
            p.store
                .put_file(scope, &record, scope.principal_id().as_str())
                .await
        }
        .await;
        if let Err(e) = stored {
            // Leave nothing of a file that was not recorded.
            let _ = p.blobs.delete(&key).await;
            if let (Some(source), Some(retriever)) = (&record.source_id, &p.retriever)
                && let Ok(id) = forge_rag::SourceId::new(source.clone())
            {
                let _ = retriever
                    .store()
                    .delete_source(scope, &id, scope.principal_id().as_str())
                    .await;
            }
            return Err(e.into());
        }
        Ok(record)
    }

    /// A file's record and bytes.
    pub async fn open(
        &self,
        scope: &Scope,
        id: &FileId,
    ) -> Result<Option<(FileRecord, BlobStream)>, Error> {
        let Some(record) = self.parts.store.file(scope, id).await? else {
            return Ok(None);
        };
        Ok(self
            .parts
            .blobs
            .get(&record.blob_key())
            .await?
            .map(|bytes| (record, bytes)))
    }

    /// Whether the blob store answers, for readiness; the error as its classified code.
    pub async fn storage_health(&self) -> Result<(), String> {
        self.parts
            .blobs
            .health()
            .await
            .map_err(|e| forge_core::telemetry::error_code(&e).to_owned())
    }

    /// Whether the scanner answers, for readiness: `None` without a scanner.
    pub async fn scanner_health(&self) -> Option<Result<(), String>> {
        match &self.parts.scanner {
            Some(scanner) => Some(scanner.health().await.map_err(|e| e.to_string())),
            None => None,
        }
    }

    /// A reference to `file`, valid for `ttl` (default [`DEFAULT_REFERENCE_TTL`], at most the
    /// policy's `max_reference_ttl`), and when it expires.
    pub fn reference(&self, file: &FileRecord, ttl: Option<Duration>) -> (String, Timestamp) {
        let max = self.parts.policy.max_reference_ttl;
        let ttl = ttl.unwrap_or(DEFAULT_REFERENCE_TTL).min(max);
        let expires = self.parts.clock.now().plus(ttl);
        (
            self.parts
                .keys
                .sign(&file.tenant_id, &file.id, &file.version, expires),
            expires,
        )
    }

    /// The record and bytes a reference grants to `caller`. A reference is a short-lived bearer
    /// capability scoped to one tenant: any authenticated member of the tenant it was signed
    /// for may use it (whoever issued it could read the file), nobody else — no anonymous
    /// caller, no member of another tenant. Each use is audited (`file.downloaded`, by the
    /// caller); a use that cannot be audited is refused. A reference that does not verify, that
    /// names a file since deleted or another version, or another tenant than the caller's, is
    /// [`Rejected`] alike.
    pub async fn open_reference(
        &self,
        reference: &str,
        caller: &Scope,
    ) -> Result<(FileRecord, BlobStream), Rejected> {
        let claims = self.parts.keys.verify(
            reference,
            self.parts.clock.now(),
            self.parts.policy.max_reference_ttl,
        )?;
        if claims.tenant != caller.tenant_id().as_str() {
            return Err(Rejected);
        }
        let id = FileId::new(claims.file).map_err(|_| Rejected)?;
        let (record, bytes) = match self.open(caller, &id).await {
            Ok(Some((record, bytes))) if record.version == claims.version => (record, bytes),
            _ => return Err(Rejected),
        };
        if let Some(audit) = &self.parts.audit {
            let entry = crate::ports::rules::downloaded(caller, &record, self.parts.clock.now());
            audit
                .record_audit(caller, entry)
                .await
                .map_err(|_| Rejected)?;
        }
        Ok((record, bytes))
    }

    /// Deletes a file: the retrieval source made from it, its bytes, and its record (audited
    /// `file.deleted` by `actor`), in that order, so a failure part-way leaves the record for a
    /// retry. References to it stop working. `false` when there was none.
    pub async fn delete(&self, scope: &Scope, id: &FileId, actor: &str) -> Result<bool, Error> {
        let Some(record) = self.parts.store.file(scope, id).await? else {
            return Ok(false);
        };
        if let Some(source) = &record.source_id {
            let retriever = self.parts.retriever.as_ref().ok_or_else(|| {
                Error::invalid("the file was indexed, but this deployment has no retrieval store")
            })?;
            retriever
                .store()
                .delete_source(scope, &forge_rag::SourceId::new(source.clone())?, actor)
                .await?;
        }
        self.parts.blobs.delete(&record.blob_key()).await?;
        Ok(self
            .parts
            .store
            .delete_file(scope, id, actor)
            .await?
            .is_some())
    }

    /// The staging directory.
    pub fn staging(&self) -> &Path {
        &self.parts.staging
    }
}

#[async_trait]
impl FileContents for Files {
    async fn describe(&self, scope: &Scope, file_id: &str) -> Result<FilePart, Error> {
        let id = FileId::new(file_id).map_err(|_| Error::not_found("file", file_id))?;
        // Attaching is reading: a file the caller may not read is one they do not have.
        let record = self
            .readable(scope, &id)
            .await?
            .ok_or_else(|| Error::not_found("file", file_id))?;
        Ok(FilePart {
            file_id: record.id.as_str().to_owned(),
            name: record.name,
            media_type: record.media_type,
            size_bytes: record.size_bytes,
            trust: Trust::Untrusted,
        })
    }

    async fn text(
        &self,
        scope: &Scope,
        file_id: &str,
        max_bytes: usize,
    ) -> Result<Option<String>, Error> {
        let id = FileId::new(file_id).map_err(|_| Error::not_found("file", file_id))?;
        let Some((record, mut bytes)) = self.open(scope, &id).await? else {
            return Err(Error::not_found("file", file_id));
        };
        if !record.is_text() {
            return Ok(None);
        }
        let mut buf = Vec::new();
        while let Some(chunk) = bytes.next().await {
            buf.extend_from_slice(&chunk?);
            if buf.len() >= max_bytes {
                break;
            }
        }
        let mut end = buf.len().min(max_bytes);
        let text = loop {
            match std::str::from_utf8(&buf[..end]) {
                Ok(t) => break t.to_owned(),
                Err(e) if e.valid_up_to() > 0 && end - e.valid_up_to() < 4 => {
                    end = e.valid_up_to();
                }
                Err(_) => return Ok(None),
            }
        };
        Ok(Some(text))
    }
}
