//! Scope: who is asking. Every data path takes one.
//!
//! A [`Scope`] names a tenant, a principal and the principal's roles; every store, tool and context
//! call takes `&Scope`. The few operations that legitimately span tenants (migrations, queue claims,
//! rollups) take a [`SystemScope`] instead, whose name makes each such call easy to find and review.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Longest tenant, principal or role id accepted, in bytes.
pub const MAX_SCOPE_ID_LEN: usize = 256;

macro_rules! scope_id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps an id: non-empty, at most [`MAX_SCOPE_ID_LEN`] bytes, no control
            /// characters.
            pub fn new(id: impl Into<String>) -> Result<Self, Error> {
                let id = id.into();
                if id.is_empty() || id.len() > MAX_SCOPE_ID_LEN || id.chars().any(char::is_control) {
                    return Err(Error::invalid(format!(
                        concat!($what, " id must be 1 to {} bytes without control characters"),
                        MAX_SCOPE_ID_LEN
                    )));
                }
                Ok(Self(id))
            }

            /// The id as a string.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = Error;
            fn try_from(s: String) -> Result<Self, Error> {
                Self::new(s)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

scope_id!(
    /// A tenant of the host product. Opaque: Forge never interprets it.
    TenantId,
    "tenant"
);
/// Tenant ids starting with this are Forge's own (`_deployment`, where the configuration
/// audit is kept): no token may name one ([`TenantId::is_reserved`]).
pub const RESERVED_TENANT_PREFIX: &str = "_";

impl TenantId {
    /// Whether the id is one of Forge's own ([`RESERVED_TENANT_PREFIX`]): operators reach such a
    /// tenant from the command line, never a caller through a token.
    pub fn is_reserved(&self) -> bool {
        self.0.starts_with(RESERVED_TENANT_PREFIX)
    }
}

scope_id!(
    /// A user or service acting within a tenant.
    PrincipalId,
    "principal"
);
scope_id!(
    /// A role a principal holds; authorization policies key on it.
    RoleId,
    "role"
);

/// Who is asking: the tenant, the principal and its roles.
///
/// Every tenant-owned read and write takes `&Scope`; there is no unscoped data path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct Scope {
    tenant_id: TenantId,
    principal_id: PrincipalId,
    role_ids: Vec<RoleId>,
}

impl Scope {
    /// A scope for `principal_id` in `tenant_id` holding `role_ids`.
    pub fn new(tenant_id: TenantId, principal_id: PrincipalId, role_ids: Vec<RoleId>) -> Self {
        Self {
            tenant_id,
            principal_id,
            role_ids,
        }
    }

    /// Convenience for callers holding plain strings; validates each id.
    pub fn parse(tenant: &str, principal: &str, roles: &[&str]) -> Result<Self, Error> {
        Ok(Self::new(
            TenantId::new(tenant)?,
            PrincipalId::new(principal)?,
            roles
                .iter()
                .map(|r| RoleId::new(*r))
                .collect::<Result<_, _>>()?,
        ))
    }

    /// The tenant every read and write of this scope is confined to.
    pub fn tenant_id(&self) -> &TenantId {
        &self.tenant_id
    }

    /// The acting principal.
    pub fn principal_id(&self) -> &PrincipalId {
        &self.principal_id
    }

    /// The principal's roles.
    pub fn role_ids(&self) -> &[RoleId] {
        &self.role_ids
    }

    /// Whether the principal holds `role`.
    pub fn has_role(&self, role: &str) -> bool {
        self.role_ids.iter().any(|r| r.as_str() == role)
    }
}

/// Authority to act across tenants, for the few operations that must: schema migrations, claiming
/// queued jobs, usage rollups. Construct it where the reason is visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemScope {
    reason: &'static str,
}

impl SystemScope {
    /// Grants cross-tenant authority for `reason` (for example `"queue claim"`).
    pub fn new(reason: &'static str) -> Self {
        Self { reason }
    }

    /// Why this authority was granted.
    pub fn reason(&self) -> &'static str {
        self.reason
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_ids_reject_empty_long_and_control_characters() {
        assert!(TenantId::new("acme").is_ok());
        assert!(TenantId::new("").is_err());
        assert!(TenantId::new("a".repeat(MAX_SCOPE_ID_LEN + 1)).is_err());
        assert!(PrincipalId::new("bob\n").is_err());
        let err = serde_json::from_str::<TenantId>("\"\"")
            .map(|_| ())
            .unwrap_err();
        assert!(err.to_string().contains("tenant id must be"), "{err}");
    }

    #[test]
    fn scope_knows_its_roles() {
        let s = Scope::parse("acme", "bob", &["admin"]).unwrap();
        assert!(s.has_role("admin"));
        assert!(!s.has_role("viewer"));
        assert_eq!(s.tenant_id().as_str(), "acme");
    }
}
