//! Fixtures built from the real types.

use forge_core::agent::AgentRef;
use forge_core::scope::Scope;

/// A scope in tenant `tenant` for principal `user-1` with role `member`.
pub fn scope(tenant: &str) -> Scope {
    Scope::parse(tenant, "user-1", &["member"]).expect("fixture scope ids are valid")
}

/// The agent reference used by fixtures.
pub fn agent_ref() -> AgentRef {
    AgentRef {
        name: "fixture-agent".into(),
        version: "1".into(),
    }
}
