//! The audit port: an append-only, tenant-scoped record of who did what.
//!
//! Entries are written by the adapter in the same transaction as the action they record (an
//! operator replaying a dead letter, a decision on an approval, an external write), so an action
//! never happens unrecorded. A record that is itself the event — the configuration a process runs
//! with — is appended on its own ([`AuditLog::record_audit`]).

use crate::Error;
use crate::scope::Scope;
use crate::time::Timestamp;
use async_trait::async_trait;

pub use crate::audit::AuditRecord;

/// Which audit entries to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditQuery {
    /// Only actions starting with this, for example `config.` or `job.replayed`.
    pub action: Option<String>,
    /// Only this subject.
    pub subject: Option<String>,
    /// Only entries by this actor.
    pub actor: Option<String>,
    /// Only entries at or after this time.
    pub since: Option<Timestamp>,
    /// Only entries before this time.
    pub until: Option<Timestamp>,
    /// At most this many, newest first.
    pub limit: usize,
}

impl AuditQuery {
    /// The newest `limit` entries, unfiltered.
    pub fn latest(limit: usize) -> Self {
        Self {
            action: None,
            subject: None,
            actor: None,
            since: None,
            until: None,
            limit,
        }
    }

    /// Refuses filters no stored record can match and a database cannot take: a control
    /// character (a NUL is an error in PostgreSQL's text), or more than 1,000 bytes.
    pub fn check(&self) -> Result<(), Error> {
        for (what, value) in [
            ("action", &self.action),
            ("subject", &self.subject),
            ("actor", &self.actor),
        ] {
            if let Some(v) = value
                && (v.len() > 1000 || v.chars().any(char::is_control))
            {
                return Err(Error::invalid(format!(
                    "the audit {what} filter must be at most 1000 bytes without control characters"
                )));
            }
        }
        Ok(())
    }

    /// Whether `record` passes the filters (the adapters' rule, in one place).
    pub fn matches(&self, record: &AuditRecord) -> bool {
        self.action
            .as_deref()
            .is_none_or(|a| record.action.starts_with(a))
            && self.subject.as_deref().is_none_or(|s| record.subject == s)
            && self.actor.as_deref().is_none_or(|a| record.actor == a)
            && self.since.is_none_or(|t| record.at >= t)
            && self.until.is_none_or(|t| record.at < t)
    }
}

/// Port: the audit trail.
#[async_trait]
pub trait AuditLog: Send + Sync {
    /// The scope's tenant's audit entries, newest first, at most `limit`.
    async fn list_audit(&self, scope: &Scope, limit: usize) -> Result<Vec<AuditRecord>, Error> {
        self.query_audit(scope, &AuditQuery::latest(limit)).await
    }

    /// The scope's tenant's audit entries that pass `query`, newest first. A query
    /// [`AuditQuery::check`] refuses is refused here, for every adapter.
    async fn query_audit(
        &self,
        scope: &Scope,
        query: &AuditQuery,
    ) -> Result<Vec<AuditRecord>, Error> {
        query.check()?;
        self.read_audit(scope, query).await
    }

    /// Appends `record` to the scope's tenant's trail. A record of another tenant is refused
    /// here ([`check_tenant`]), for every adapter.
    async fn record_audit(&self, scope: &Scope, record: AuditRecord) -> Result<(), Error> {
        check_tenant(scope, &record)?;
        self.append_audit(scope, record).await
    }

    /// The adapter's read of [`AuditLog::query_audit`], given a query already checked. Callers
    /// use `query_audit`.
    async fn read_audit(
        &self,
        scope: &Scope,
        query: &AuditQuery,
    ) -> Result<Vec<AuditRecord>, Error>;

    /// The adapter's append of [`AuditLog::record_audit`], given a record already checked to be
    /// of the scope's tenant. Callers use `record_audit`.
    async fn append_audit(&self, scope: &Scope, record: AuditRecord) -> Result<(), Error>;
}

/// Refuses a record for another tenant than the scope's ([`AuditLog::record_audit`] checks it
/// before any adapter sees the record).
pub fn check_tenant(scope: &Scope, record: &AuditRecord) -> Result<(), Error> {
    if &record.tenant_id != scope.tenant_id() {
        return Err(Error::invalid(format!(
            "an audit record of tenant {} cannot be written as tenant {}",
            record.tenant_id,
            scope.tenant_id()
        )));
    }
    Ok(())
}
