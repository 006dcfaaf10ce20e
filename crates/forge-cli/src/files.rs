//! Files: where they are kept (`--files-dir`, or `--files-s3` with its endpoint and
//! credentials), the scanner (`--clamd`), the reference keys (`--file-key`), the inspection
//! policy — shared by `serve`, `run` and `forge files` — and `forge files put | list | get |
//! delete | ref`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use forge_core::id::UuidV7Generator;
use forge_core::time::SystemClock;
use forge_files::{
    Action, BlobStore, ClamdScanner, FileId, FileStore, Files, FilesParts, FsBlobStore, Policy,
    RefKeys, Scanner, Upload,
};
use forge_providers::SecretRef;
use futures_util::StreamExt;

use crate::compose::ScopeArgs;
use crate::store::StoreArgs;

/// Where files live and what is accepted.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct FilesArgs {
    /// The directory files are kept in (when not on S3).
    #[arg(
        long = "files-dir",
        env = "FORGE_FILES_DIR",
        default_value = "forge-files"
    )]
    pub(crate) dir: PathBuf,
    /// Keep files in S3-compatible storage instead: `s3://BUCKET[/PREFIX]`.
    #[arg(long = "files-s3", env = "FORGE_FILES_S3")]
    pub(crate) s3: Option<String>,
    /// The S3-compatible endpoint (AWS's when absent).
    #[arg(long = "s3-endpoint", env = "FORGE_S3_ENDPOINT")]
    pub(crate) s3_endpoint: Option<String>,
    /// The S3 region.
    #[arg(
        long = "s3-region",
        env = "FORGE_S3_REGION",
        default_value = "us-east-1"
    )]
    pub(crate) s3_region: String,
    /// The S3 access key id, as `env:NAME` or `file:PATH`.
    #[arg(long = "s3-access-key", env = "FORGE_S3_ACCESS_KEY")]
    pub(crate) s3_access_key: Option<String>,
    /// The S3 secret access key, as `env:NAME` or `file:PATH`.
    #[arg(long = "s3-secret-key", env = "FORGE_S3_SECRET_KEY")]
    pub(crate) s3_secret_key: Option<String>,
    /// Scan every upload with ClamAV's daemon: `unix:/path/clamd.sock` or `tcp:HOST:PORT`. A
    /// daemon that cannot answer refuses the upload.
    #[arg(long = "clamd", env = "FORGE_CLAMD")]
    pub(crate) clamd: Option<String>,
    /// How long one scan may take, in milliseconds.
    #[arg(
        long = "clamd-timeout-ms",
        env = "FORGE_CLAMD_TIMEOUT_MS",
        default_value_t = 30_000
    )]
    pub(crate) clamd_timeout_ms: u64,
    /// A key that signs file references, `ID=env:NAME` or `ID=file:PATH` (32 bytes or more);
    /// repeat it during a rotation: the first signs, every one verifies. Without one, a random
    /// key for this process only (references die with it).
    #[arg(long = "file-key", env = "FORGE_FILE_KEYS", value_delimiter = ',')]
    pub(crate) keys: Vec<String>,
    /// The largest file accepted, in bytes.
    #[arg(long = "max-file-bytes", env = "FORGE_MAX_FILE_BYTES", default_value_t = 25 * 1024 * 1024)]
    pub(crate) max_bytes: u64,
    /// A tenant's own limit, `TENANT=BYTES` (repeatable).
    #[arg(long = "tenant-max-file-bytes", value_delimiter = ',')]
    pub(crate) tenant_max_bytes: Vec<String>,
    /// A declared type or extension the bytes contradict: `refuse` or `flag` (keep the bytes'
    /// type).
    #[arg(long = "on-type-mismatch", default_value = "refuse")]
    pub(crate) on_mismatch: String,
    /// Scripts, event handlers, macros: `refuse` or `flag`.
    #[arg(long = "on-active-content", default_value = "refuse")]
    pub(crate) on_active_content: String,
    /// Archives: `refuse` or `flag`.
    #[arg(long = "on-archive", default_value = "refuse")]
    pub(crate) on_archive: String,
    /// The longest a file reference lasts, in seconds: none is issued for longer, and one
    /// expiring further ahead is refused when used.
    #[arg(long = "max-file-reference-secs", env = "FORGE_MAX_FILE_REFERENCE_SECS", default_value_t = 7 * 24 * 3600)]
    pub(crate) max_reference_secs: u64,
}

fn action(flag: &str, value: &str) -> anyhow::Result<Action> {
    match value {
        "refuse" => Ok(Action::Refuse),
        "flag" => Ok(Action::Flag),
        other => bail!("{flag} must be refuse or flag, not {other:?}"),
    }
}

fn secret(flag: &str, reference: &str) -> anyhow::Result<String> {
    let r: SecretRef = reference
        .parse()
        .with_context(|| format!("{flag} must be env:NAME or file:PATH"))?;
    Ok(r.resolve(&|name| std::env::var(name).ok())
        .with_context(|| format!("failed to read {flag}"))?
        .expose()
        .to_owned())
}

impl FilesArgs {
    /// The inspection switches and limits, and which scanner and store are configured (never a
    /// key), for the configuration's audit record.
    pub(crate) fn settings(&self) -> anyhow::Result<serde_json::Value> {
        let policy = self.policy()?;
        Ok(serde_json::json!({
            "max_bytes": policy.max_bytes,
            "tenant_max_bytes": self.tenant_max_bytes,
            "allowed": policy.allowed,
            "on_type_mismatch": self.on_mismatch,
            "on_active_content": self.on_active_content,
            "on_archive": self.on_archive,
            "max_reference_secs": self.max_reference_secs,
            "clamd": self.clamd.is_some(),
            "s3": self.s3.is_some(),
            "signing_keys": self.keys.len(),
        }))
    }

    fn policy(&self) -> anyhow::Result<Policy> {
        let mut policy = Policy {
            max_bytes: self.max_bytes,
            on_mismatch: action("--on-type-mismatch", &self.on_mismatch)?,
            on_active_content: action("--on-active-content", &self.on_active_content)?,
            on_archive: action("--on-archive", &self.on_archive)?,
            max_reference_ttl: Duration::from_secs(self.max_reference_secs),
            ..Policy::default()
        };
        for entry in &self.tenant_max_bytes {
            let (tenant, bytes) = entry.split_once('=').with_context(|| {
                format!("--tenant-max-file-bytes {entry:?}: expected TENANT=BYTES")
            })?;
            policy.tenant_max_bytes.insert(
                forge_core::scope::TenantId::new(tenant)?,
                bytes
                    .parse()
                    .with_context(|| format!("--tenant-max-file-bytes {entry:?}"))?,
            );
        }
        Ok(policy)
    }

    fn keys(&self) -> anyhow::Result<RefKeys> {
        if self.keys.is_empty() {
            let random: Vec<u8> = (0..2)
                .flat_map(|_| uuid::Uuid::new_v4().into_bytes())
                .collect();
            return Ok(RefKeys::new(vec![("ephemeral".into(), random)])?);
        }
        let mut keys = Vec::new();
        for entry in &self.keys {
            let (id, reference) = entry.split_once('=').with_context(|| {
                format!(
                    "--file-key {id:?}: expected ID=env:NAME or ID=file:PATH",
                    id = entry.split('=').next().unwrap_or("")
                )
            })?;
            keys.push((id.to_owned(), secret("--file-key", reference)?.into_bytes()));
        }
        Ok(RefKeys::new(keys)?)
    }

    fn blobs(&self) -> anyhow::Result<Arc<dyn BlobStore>> {
        let Some(url) = &self.s3 else {
            return Ok(Arc::new(FsBlobStore::new(&self.dir)?));
        };
        let rest = url
            .strip_prefix("s3://")
            .with_context(|| format!("--files-s3 {url:?}: expected s3://BUCKET[/PREFIX]"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let (Some(access), Some(secret_key)) = (&self.s3_access_key, &self.s3_secret_key) else {
            bail!("--files-s3 needs --s3-access-key and --s3-secret-key (env:NAME or file:PATH)");
        };
        Ok(Arc::new(forge_files_s3::S3BlobStore::new(
            &forge_files_s3::S3Config {
                bucket: bucket.to_owned(),
                prefix: prefix.to_owned(),
                region: self.s3_region.clone(),
                endpoint: self.s3_endpoint.clone(),
                access_key_id: secret("--s3-access-key", access)?,
                secret_access_key: secret("--s3-secret-key", secret_key)?,
            },
        )?))
    }

    /// Says on stderr that references will not outlive this process, when no key is set.
    pub(crate) fn warn_if_ephemeral(&self) {
        if self.keys.is_empty() {
            eprintln!(
                "forge: no --file-key: file references are signed with a key of this process \
                 only and stop working when it exits"
            );
        }
    }

    /// The files service over `store`'s records (and `retriever` for indexed files).
    pub(crate) fn files(
        &self,
        store: Arc<dyn FileStore>,
        audit: Arc<dyn forge_core::ports::audit::AuditLog>,
        retriever: Option<forge_rag::Retriever>,
    ) -> anyhow::Result<Files> {
        let scanner: Option<Arc<dyn Scanner>> = match &self.clamd {
            None => None,
            Some(address) => Some(Arc::new(ClamdScanner::new(
                address.parse().map_err(anyhow::Error::msg)?,
                Duration::from_millis(self.clamd_timeout_ms),
            ))),
        };
        let staging = self.dir.join(".staging");
        Ok(Files::new(FilesParts {
            store,
            blobs: self.blobs()?,
            scanner,
            retriever,
            audit: Some(audit),
            policy: self.policy()?,
            staging,
            keys: self.keys()?,
            clock: Arc::new(SystemClock),
            ids: Arc::new(UuidV7Generator),
        })?)
    }
}

/// `forge files`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum FilesCommand {
    /// Uploads files (inspected, scanned with `--clamd`, stored); prints each id and a reference.
    Put {
        #[command(flatten)]
        common: Common,
        /// The files.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// The declared media type (else only the bytes and the extension decide).
        #[arg(long = "type")]
        media_type: Option<String>,
        /// Also index text files as retrieval sources with this access label.
        #[arg(long)]
        index: Option<String>,
        /// The files' access label (by default `--index`'s): who else in the tenant has them is
        /// the policy's decision about it; without one a file is its uploader's alone.
        #[arg(long)]
        label: Option<String>,
    },
    /// The tenant's files, newest first.
    #[command(mut_args = crate::help::hide(&[crate::help::UPLOAD_ONLY, crate::help::REFERENCE_ONLY]))]
    List {
        #[command(flatten)]
        common: Common,
    },
    /// Writes a file's bytes to `--out` (or standard output).
    #[command(mut_args = crate::help::hide(&[crate::help::UPLOAD_ONLY, crate::help::REFERENCE_ONLY]))]
    Get {
        #[command(flatten)]
        common: Common,
        /// The file's id.
        id: String,
        /// Where to write it.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Deletes files: bytes, records (audited) and the sources made from them.
    #[command(mut_args = crate::help::hide(&[crate::help::UPLOAD_ONLY, crate::help::REFERENCE_ONLY]))]
    Delete {
        #[command(flatten)]
        common: Common,
        /// The files' ids.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Prints a signed reference to a file, for `GET /files/{reference}` on `forge serve`.
    #[command(mut_args = crate::help::hide(&[crate::help::UPLOAD_ONLY]))]
    Ref {
        #[command(flatten)]
        common: Common,
        /// The file's id.
        id: String,
        /// How long it lasts, in seconds.
        #[arg(long, default_value_t = 900)]
        ttl: u64,
    },
}

/// What every `forge files` command takes.
#[derive(Debug, clap::Args)]
pub(crate) struct Common {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    scope: ScopeArgs,
    #[command(flatten)]
    files: FilesArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl Common {
    async fn open(&self) -> anyhow::Result<(forge_core::scope::Scope, Files)> {
        let scope = self.scope.scope()?;
        let opened = crate::store::open(&self.store).await?;
        let retriever = forge_rag::Retriever::new(
            opened.sources.clone(),
            Arc::new(forge_core::ports::policy::AllowAll),
        );
        let files =
            self.files
                .files(opened.files.clone(), opened.store.clone(), Some(retriever))?;
        Ok((scope, files))
    }
}

fn file_id(id: &str) -> anyhow::Result<FileId> {
    FileId::new(id).with_context(|| format!("{id:?} is not a file id"))
}

/// Runs one `forge files` command.
pub(crate) async fn run(command: FilesCommand) -> anyhow::Result<ExitCode> {
    match command {
        FilesCommand::Put {
            common,
            paths,
            media_type,
            index,
            label,
        } => {
            let (scope, files) = common.open().await?;
            let mut refused = false;
            for path in &paths {
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let file = tokio::fs::File::open(path)
                    .await
                    .with_context(|| format!("failed to open {}", path.display()))?;
                let body = futures_util::stream::unfold(Some(file), |file| async move {
                    use tokio::io::AsyncReadExt;
                    let mut file = file?;
                    let mut buf = vec![0u8; 64 * 1024];
                    match file.read(&mut buf).await {
                        Ok(0) => None,
                        Ok(n) => {
                            buf.truncate(n);
                            Some((Ok(bytes::Bytes::from(buf)), Some(file)))
                        }
                        Err(e) => Some((Err(forge_files::BodyError::Aborted(e.to_string())), None)),
                    }
                })
                .boxed();
                let upload = Upload {
                    name,
                    declared_type: media_type.clone(),
                    index_label: index.clone(),
                    label: label.clone(),
                };
                match files.upload(&scope, upload, body).await {
                    Ok(record) => {
                        let (reference, expires) = files.reference(&record, None);
                        if common.json {
                            println!(
                                "{}",
                                serde_json::json!({"file": record, "reference": reference, "reference_expires_at": expires})
                            );
                        } else {
                            println!(
                                "{}\t{}\t{}\t{} bytes{}",
                                record.id,
                                record.name,
                                record.media_type,
                                record.size_bytes,
                                record
                                    .source_id
                                    .as_ref()
                                    .map(|s| format!("\tsource {s}"))
                                    .unwrap_or_default()
                            );
                        }
                    }
                    Err(forge_files::UploadError::Refused(r)) => {
                        refused = true;
                        eprintln!("{}: refused ({}): {r}", path.display(), r.code());
                    }
                    Err(e) => {
                        return Err(e)
                            .with_context(|| format!("failed to store {}", path.display()));
                    }
                }
            }
            Ok(if refused {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        FilesCommand::List { common } => {
            let (scope, files) = common.open().await?;
            let records = files.store().list_files(&scope, 1000).await?;
            if common.json {
                println!("{}", serde_json::to_string_pretty(&records)?);
            } else if records.is_empty() {
                println!("no files");
            } else {
                for r in &records {
                    println!(
                        "{}\t{}\t{}\t{} bytes\t{}",
                        r.id, r.name, r.media_type, r.size_bytes, r.created_at
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        FilesCommand::Get { common, id, out } => {
            use tokio::io::AsyncWriteExt;
            let (scope, files) = common.open().await?;
            let Some((_, mut bytes)) = files.open(&scope, &file_id(&id)?).await? else {
                bail!("no file {id}");
            };
            match &out {
                Some(path) => {
                    let mut sink = tokio::fs::File::create(path)
                        .await
                        .with_context(|| format!("failed to create {}", path.display()))?;
                    while let Some(chunk) = bytes.next().await {
                        sink.write_all(&chunk?).await?;
                    }
                    sink.flush().await?;
                }
                None => {
                    use std::io::Write;
                    let mut stdout = std::io::stdout().lock();
                    while let Some(chunk) = bytes.next().await {
                        stdout.write_all(&chunk?)?;
                    }
                    stdout.flush()?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        FilesCommand::Delete { common, ids } => {
            let (scope, files) = common.open().await?;
            for id in &ids {
                if files
                    .delete(&scope, &file_id(id)?, scope.principal_id().as_str())
                    .await?
                {
                    println!("deleted {id}");
                } else {
                    bail!("no file {id}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        FilesCommand::Ref { common, id, ttl } => {
            if common.files.keys.is_empty() {
                bail!(
                    "no --file-key: a reference signed with this command's own key stops working \
                     when it exits; give the key `forge serve` verifies with (--file-key \
                     ID=env:NAME or FORGE_FILE_KEYS)"
                );
            }
            let (scope, files) = common.open().await?;
            let Some(record) = files.store().file(&scope, &file_id(&id)?).await? else {
                bail!("no file {id}");
            };
            let (reference, expires) = files.reference(&record, Some(Duration::from_secs(ttl)));
            if common.json {
                println!(
                    "{}",
                    serde_json::json!({"reference": reference, "expires_at": expires})
                );
            } else {
                println!("{reference}");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
