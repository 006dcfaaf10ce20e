//! The audit port: an append-only, tenant-scoped record of who did what.
//!
//! Entries are written by the adapter in the same transaction as the action they record (an
//! operator replaying a dead letter today; approvals and external writes later), so an action never
//! happens unrecorded.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::scope::{Scope, TenantId};
use crate::time::Timestamp;

/// One audited action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// The tenant whose data the action touched.
    pub tenant_id: TenantId,
    /// When.
    pub at: Timestamp,
    /// Who: a principal, an operator or a worker.
    pub actor: String,
    /// What, for example `job.replayed`.
    pub action: String,
    /// On what, for example `job 0190…`.
    pub subject: String,
    /// Details of the action (never secrets or content).
    pub detail: serde_json::Value,
}

/// Port: reading the audit trail.
#[async_trait]
pub trait AuditLog: Send + Sync {
    /// The scope's tenant's audit entries, newest first, at most `limit`.
    async fn list_audit(&self, scope: &Scope, limit: usize) -> Result<Vec<AuditRecord>, Error>;
}
