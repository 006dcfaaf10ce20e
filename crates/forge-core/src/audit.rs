//! What an audit entry says: who did what to which tenant's data, and when. The audit port
//! ([`crate::ports::audit`]) stores and lists them.

use serde::{Deserialize, Serialize};

use crate::scope::TenantId;
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
