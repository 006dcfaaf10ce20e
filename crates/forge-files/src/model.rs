//! Stored files: their ids, what inspection found, and the record kept for each.

use forge_core::Error;
use forge_core::scope::TenantId;
use forge_core::time::Timestamp;
use serde::{Deserialize, Serialize};

/// A file's id within its tenant: `file_` and 32 lower-case hex digits (a UUIDv7), minted by
/// Forge — never a name the caller chose.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FileId(String);

impl FileId {
    /// A fresh id from `uuid`.
    pub fn from_uuid(uuid: uuid::Uuid) -> Self {
        Self(format!("file_{}", uuid.simple()))
    }

    /// Validates `id`.
    pub fn new(id: impl Into<String>) -> Result<Self, Error> {
        let id = id.into();
        let ok = id.len() == 37
            && id.starts_with("file_")
            && id[5..]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if ok {
            Ok(Self(id))
        } else {
            Err(Error::invalid(format!("{id:?} is not a file id")))
        }
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for FileId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Something inspection noticed and the policy let through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Finding {
    /// The declared type or the extension disagreed with the bytes; the bytes' type was kept.
    TypeMismatch {
        /// What the uploader declared (or the extension implied).
        claimed: String,
        /// What the bytes are.
        detected: String,
    },
    /// Scripts, event handlers or macros.
    ActiveContent {
        /// Which (`script`, `event handler`, `javascript: URL`, `macros`).
        what: String,
    },
    /// An archive, whose members were not inspected.
    Archive,
}

/// What the malware scanner said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ScanOutcome {
    /// No scanner is configured.
    NotScanned,
    /// The scanner found nothing.
    Clean {
        /// The scanner (`clamd`).
        scanner: String,
    },
}

/// A stored file: what was accepted, under which name and type, and where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// Its id.
    pub id: FileId,
    /// The tenant it belongs to.
    pub tenant_id: TenantId,
    /// Its name as uploaded, reduced to a safe display name (no directories, no control
    /// characters).
    pub name: String,
    /// The media type the uploader declared, if any.
    pub declared_type: Option<String>,
    /// The media type decided from its bytes.
    pub media_type: String,
    /// Its size.
    pub size_bytes: u64,
    /// Its version: `sha256:` and the SHA-256 of its bytes, in hex. Files never change; a
    /// reference names the version it was signed for.
    pub version: String,
    /// What inspection noticed and let through.
    pub findings: Vec<Finding>,
    /// What the scanner said.
    pub scan: ScanOutcome,
    /// The retrieval source made from it, if it was indexed.
    pub source_id: Option<String>,
    /// Who uploaded it: they always have it.
    pub created_by: String,
    /// Its access label: who else has it is the policy's decision about this label
    /// ([`forge_core::ports::policy::PolicyResource::File`]). Without one it is its uploader's
    /// alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// When.
    pub created_at: Timestamp,
}

impl FileRecord {
    /// The key of its bytes in the blob store: the tenant (hex-encoded, so no tenant id can
    /// name a path) and the file id.
    pub fn blob_key(&self) -> String {
        blob_key(&self.tenant_id, &self.id)
    }

    /// Whether its text may be read as text (and indexed for retrieval).
    pub fn is_text(&self) -> bool {
        crate::inspect::is_textual(&self.media_type)
    }
}

/// The blob key of `id` in `tenant`.
pub fn blob_key(tenant: &TenantId, id: &FileId) -> String {
    let hex: String = tenant
        .as_str()
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("t{hex}/{id}")
}

/// The audit action of an accepted upload.
pub const FILE_ACCEPTED: &str = "file.accepted";
/// The audit action of a refused upload.
pub const FILE_REFUSED: &str = "file.refused";
/// The audit action of a deleted file.
pub const FILE_DELETED: &str = "file.deleted";
/// The audit action of a file's bytes read through a reference.
pub const FILE_DOWNLOADED: &str = "file.downloaded";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_minted_and_checked() {
        let id = FileId::from_uuid(uuid::Uuid::from_u128(0xabc));
        assert_eq!(FileId::new(id.as_str()).unwrap(), id);
        for bad in [
            "",
            "file_",
            "../etc/passwd",
            "file_ABC00000000000000000000000000000",
            "x",
        ] {
            assert!(FileId::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn blob_keys_never_follow_the_tenant_id() {
        let tenant = TenantId::new("../../etc").unwrap();
        let key = blob_key(&tenant, &FileId::from_uuid(uuid::Uuid::from_u128(1)));
        assert!(!key.contains(".."), "{key}");
        assert_eq!(key.matches('/').count(), 1, "{key}");
    }
}
