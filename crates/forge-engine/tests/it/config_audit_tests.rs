//! The configuration a process runs with reaches the audit trail when it changes, and only then:
//! deployment-wide in the deployment's trail, a tenant's quota in that tenant's (issue 16, item 9).

use std::sync::Arc;

use forge_core::agent::RunLimits;
use forge_core::metering::{Quota, QuotaPeriod};
use forge_core::ports::audit::{AuditLog, AuditQuery};
use forge_core::scope::{Scope, TenantId};
use forge_engine::{CONFIG_ACTION, DEPLOYMENT_TENANT, Engine};
use forge_providers::ScriptedProvider;
use forge_store_memory::MemoryStore;

use crate::harness::agent;

fn engine(store: &Arc<MemoryStore>, version: &str, self_approval: bool) -> Engine {
    let mut def = agent(&[], RunLimits::default());
    def.agent.version = version.into();
    Engine::builder()
        .store(store.clone())
        .model(Arc::new(ScriptedProvider::empty()))
        .agent(def)
        .allow_self_approval(self_approval)
        .tenant_quota(
            TenantId::new("acme").unwrap(),
            Quota {
                period: QuotaPeriod::Day,
                max_tokens: Some(1_000),
                max_cost_micros: None,
            },
        )
        .build()
        .unwrap()
}

async fn trail(store: &MemoryStore, tenant: &str) -> Vec<forge_core::ports::audit::AuditRecord> {
    let scope = Scope::parse(tenant, "operator", &[]).unwrap();
    store
        .query_audit(
            &scope,
            &AuditQuery {
                action: Some(CONFIG_ACTION.into()),
                ..AuditQuery::latest(100)
            },
        )
        .await
        .unwrap()
}

#[tokio::test]
async fn configuration_is_recorded_when_it_changes_and_only_then() {
    let store = Arc::new(MemoryStore::default());
    let first = engine(&store, "1", false);
    assert_eq!(first.audit_configuration("worker 1").await.unwrap(), 2);
    // The same configuration again (another process, a restart): nothing new.
    let again = engine(&store, "1", false);
    assert_eq!(again.audit_configuration("worker 2").await.unwrap(), 0);
    let deployment = trail(&store, DEPLOYMENT_TENANT).await;
    assert_eq!(deployment.len(), 1);
    let detail = &deployment[0].detail;
    assert_eq!(detail["agents"][0]["version"], "1");
    assert_eq!(detail["self_approval_allowed"], false);
    assert_eq!(deployment[0].actor, "worker 1");
    // The tenant's quota is in the tenant's own trail, not another's.
    let acme = trail(&store, "acme").await;
    assert_eq!(acme.len(), 1);
    assert_eq!(acme[0].subject, "quota");
    assert_eq!(acme[0].detail["quota"]["max_tokens"], 1_000);
    assert!(trail(&store, "globex").await.is_empty());

    // A new agent version and self-approval turned on: one new deployment record.
    let changed = engine(&store, "2", true);
    assert_eq!(changed.audit_configuration("worker 3").await.unwrap(), 1);
    let deployment = trail(&store, DEPLOYMENT_TENANT).await;
    assert_eq!(deployment.len(), 2);
    assert_eq!(
        deployment[0].detail["agents"][0]["version"], "2",
        "newest first"
    );
    assert_eq!(deployment[0].detail["self_approval_allowed"], true);
    assert_ne!(
        deployment[0].detail["agents"][0]["definition_sha256"],
        deployment[1].detail["agents"][0]["definition_sha256"]
    );
}
