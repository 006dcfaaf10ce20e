//! Forge's files: uploads inspected before they are accepted, stored through a blob store,
//! scanned for malware when a scanner is configured, addressed by signed expiring references,
//! given to runs as untrusted content, indexed as retrieval sources, and deleted everywhere.
//!
//! - [`model`]: file ids, records, findings.
//! - [`inspect`]: names, types from the bytes, mismatches, active content, archives, the
//!   [`Policy`].
//! - [`ports`]: [`FileStore`] (records; on memory, SQLite and PostgreSQL, held to the `files`
//!   conformance suite), [`BlobStore`] ([`FsBlobStore`] here, S3 in `forge-files-s3`) and
//!   [`Scanner`] ([`ClamdScanner`]).
//! - [`refs`]: HMAC-signed references bound to tenant, file, version and expiry, with key
//!   rotation.
//! - [`service`]: [`Files`], which does all of it in order and undoes what a failure leaves.

#![deny(missing_docs)]

pub mod clamd;
pub mod fs;
pub mod inspect;
pub mod model;
pub mod ports;
pub mod refs;
pub mod service;

pub use clamd::{ClamdAddress, ClamdScanner};
pub use fs::FsBlobStore;
pub use inspect::{Action, Policy, Refusal};
pub use model::{FileId, FileRecord, Finding, ScanOutcome};
pub use ports::{BlobStore, BlobStream, FileStore, ScanError, Scanner, Verdict};
pub use refs::{RefKeys, Rejected};
pub use service::{BodyError, Files, FilesParts, Upload, UploadError};
