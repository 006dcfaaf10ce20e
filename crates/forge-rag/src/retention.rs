//! Retention: each tenant's sources are deleted once their current version is older than the
//! tenant's `max_age`, by a sweep the worker processes run on a schedule. Deletion is
//! [`SourceStore::delete_source`]'s: text, chunks and index entries, audited (`source.deleted` by
//! the actor `retention`).

use std::time::Duration;

use forge_core::Error;
use forge_core::scope::{PrincipalId, Scope, TenantId};
use forge_core::time::Clock;

use crate::model::SourceId;
use crate::ports::SourceStore;

/// The actor retention deletions are audited as.
pub const RETENTION_ACTOR: &str = "retention";

/// How long each tenant keeps its sources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retention {
    /// `(tenant, max_age)`.
    pub tenants: Vec<(TenantId, Duration)>,
}

impl Retention {
    /// Parses `TENANT=DAYS`.
    pub fn parse_rule(rule: &str) -> Result<(TenantId, Duration), Error> {
        let (tenant, days) = rule
            .split_once('=')
            .ok_or_else(|| Error::invalid(format!("{rule:?} is not TENANT=DAYS")))?;
        let days: u64 =
            days.trim().parse().ok().filter(|d| *d > 0).ok_or_else(|| {
                Error::invalid(format!("{rule:?}: DAYS must be a positive integer"))
            })?;
        Ok((
            TenantId::new(tenant.trim())?,
            Duration::from_secs(days * 86_400),
        ))
    }

    /// Deletes every tenant's sources older than its `max_age`; returns what was deleted.
    pub async fn sweep(
        &self,
        store: &dyn SourceStore,
        clock: &dyn Clock,
    ) -> Result<Vec<(TenantId, SourceId)>, Error> {
        let now = clock.now();
        let mut deleted = Vec::new();
        for (tenant, max_age) in &self.tenants {
            let scope = Scope::new(tenant.clone(), PrincipalId::new(RETENTION_ACTOR)?, vec![]);
            let before = now.minus(*max_age);
            for id in store
                .expire_sources(&scope, before, RETENTION_ACTOR)
                .await?
            {
                deleted.push((tenant.clone(), id));
            }
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse() {
        let (t, d) = Retention::parse_rule("acme=30").unwrap();
        assert_eq!((t.as_str(), d), ("acme", Duration::from_secs(30 * 86_400)));
        for bad in ["acme", "acme=0", "acme=x", "=3"] {
            assert!(Retention::parse_rule(bad).is_err(), "{bad}");
        }
    }
}
