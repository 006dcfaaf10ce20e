//! The configuration a process runs with, in the audit trail.
//!
//! [`Engine::configuration`] summarises what decides how runs behave — agent definitions (name,
//! version and a hash of the whole definition), tools (name, version, classification), skills and
//! whether their scripts run, self-approval, prices, quotas, the policies' fingerprint, and the
//! process's own settings (`EngineBuilder::settings`: development sign-in, CORS, MCP egress, file
//! inspection, source retention) — with no secret in it. [`Engine::audit_configuration`] appends it to the trail whenever it differs
//! from the last record: deployment-wide settings in the trail of [`DEPLOYMENT_TENANT`], each
//! tenant's own quota in that tenant's trail. Every process that starts (server, worker) calls it,
//! so a changed agent, policy file, price table or quota is on record with who started the process
//! that brought it.

use forge_core::ports::audit::{AuditQuery, AuditRecord};
use forge_core::scope::{Scope, TenantId};
use serde_json::{Value, json};

use super::Engine;
use crate::error::EngineError;

/// The reserved tenant whose audit trail holds deployment-wide configuration.
pub const DEPLOYMENT_TENANT: &str = "_deployment";

/// The action of a configuration record.
pub const CONFIG_ACTION: &str = "config.changed";

impl Engine {
    /// The scope's tenant's audit entries that pass `query`, newest first (empty without an
    /// audit store).
    pub async fn audit_trail(
        &self,
        scope: &Scope,
        query: &AuditQuery,
    ) -> Result<Vec<AuditRecord>, EngineError> {
        match &self.stores.audit {
            Some(audit) => Ok(audit.query_audit(scope, query).await?),
            None => Ok(Vec::new()),
        }
    }

    /// What this engine runs with, deployment-wide (see the module docs). Deterministic: equal
    /// configurations give equal values.
    pub fn configuration(&self) -> Value {
        let agents: Vec<Value> = self
            .agents()
            .iter()
            .map(|a| {
                json!({
                    "name": a.agent.name,
                    "version": a.agent.version,
                    "model": a.model,
                    "definition_sha256": forge_core::interaction::input_hash(
                        &serde_json::to_value(a.as_ref()).unwrap_or(Value::Null)
                    ),
                })
            })
            .collect();
        let mut tools: Vec<Value> = self
            .catalog
            .tools
            .specs()
            .map(|t| {
                json!({
                    "name": t.name,
                    "version": t.version,
                    "classification": t.classification,
                    "approval": t.approval,
                })
            })
            .collect();
        tools.sort_by_key(|t| t["name"].to_string());
        let skills: Vec<Value> = self
            .catalog
            .skills
            .all()
            .map(|s| json!({"name": s.name, "version": s.version}))
            .collect();
        json!({
            "agents": agents,
            "tools": tools,
            "skills": skills,
            "skill_scripts_enabled": self.catalog.skills.scripts_enabled(),
            "self_approval_allowed": self.guards.allow_self_approval,
            "policies": self.guards.authorizer.fingerprint(),
            "prices": self.catalog.prices,
            "default_quota": self.catalog.quotas.default,
            "settings": self.local.settings,
        })
    }

    /// Records the configuration where it changed since the last record (see the module docs);
    /// returns the number of records written. Without an audit store, nothing is recorded.
    pub async fn audit_configuration(&self, actor: &str) -> Result<usize, EngineError> {
        let Some(audit) = &self.stores.audit else {
            return Ok(0);
        };
        let mut wanted = vec![(
            TenantId::new(DEPLOYMENT_TENANT)?,
            "deployment".to_owned(),
            self.configuration(),
        )];
        let mut tenants: Vec<_> = self.catalog.quotas.tenants.iter().collect();
        tenants.sort_by(|a, b| a.0.cmp(b.0));
        for (tenant, quota) in tenants {
            wanted.push((
                tenant.clone(),
                "quota".to_owned(),
                json!({ "quota": quota }),
            ));
        }
        let mut written = 0;
        for (tenant, subject, detail) in wanted {
            let scope = Scope::new(
                tenant.clone(),
                forge_core::scope::PrincipalId::new(actor)?,
                vec![],
            );
            let last = audit
                .query_audit(
                    &scope,
                    &AuditQuery {
                        action: Some(CONFIG_ACTION.into()),
                        subject: Some(subject.clone()),
                        ..AuditQuery::latest(1)
                    },
                )
                .await?;
            if last.first().is_some_and(|r| r.detail == detail) {
                continue;
            }
            audit
                .record_audit(
                    &scope,
                    AuditRecord {
                        tenant_id: tenant,
                        at: self.services.clock.now(),
                        actor: actor.to_owned(),
                        action: CONFIG_ACTION.into(),
                        subject,
                        detail,
                    },
                )
                .await?;
            written += 1;
        }
        Ok(written)
    }
}
