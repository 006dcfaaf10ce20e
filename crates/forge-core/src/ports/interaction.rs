//! The interaction port: approvals and questions of parked runs, resolved exactly once.
//!
//! Interactions are created by the commit of the step that parks a run
//! ([`crate::ports::store::StepCommit::interactions`]). Resolving one applies
//! [`crate::interaction::decide`] under the store's lock, writes the audit entry in the same
//! transaction, and — when it was the run's last pending interaction and the run still waits —
//! enqueues a ready job for the run, so a worker resumes it. Nothing holds a worker, a connection
//! or a task while a run waits.

use async_trait::async_trait;

use crate::Error;
use crate::id::{InteractionId, RunId};
use crate::interaction::{Decision, Interaction, Resolve};
use crate::scope::{PrincipalId, Scope, SystemScope, TenantId};

/// Attempts a resumed run's job gets.
pub const RESUME_MAX_ATTEMPTS: u32 = 5;

/// Which interactions to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InteractionFilter {
    /// The tenant's pending interactions, oldest first.
    Pending,
    /// A page of them: at most `limit`, after the interaction `after` (a cursor: the last of
    /// the previous page, which may have been resolved since; one that is not the tenant's is
    /// `NotFound`).
    PendingPage {
        /// The cursor.
        after: Option<InteractionId>,
        /// At most this many.
        limit: usize,
    },
    /// Every interaction of one run, oldest first.
    Run(RunId),
}

/// The outcome of a resolution.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The interaction as stored.
    pub interaction: Interaction,
    /// Whether this was a repeat under the same key (nothing changed).
    pub replayed: bool,
    /// Whether this resolution readied the run to resume.
    pub resumed: bool,
}

/// Port: interactions.
#[async_trait]
pub trait InteractionStore: Send + Sync {
    /// One interaction of the scope's tenant.
    async fn get_interaction(&self, scope: &Scope, id: InteractionId)
    -> Result<Interaction, Error>;

    /// The scope's tenant's interactions.
    async fn list_interactions(
        &self,
        scope: &Scope,
        filter: InteractionFilter,
    ) -> Result<Vec<Interaction>, Error>;

    /// Resolves an interaction once (see the module docs).
    async fn resolve_interaction(&self, scope: &Scope, req: Resolve) -> Result<Resolved, Error>;

    /// Marks every pending interaction past its deadline expired (audited), and readies the runs
    /// left with nothing pending. Returns how many expired.
    async fn expire_interactions(&self, system: &SystemScope) -> Result<usize, Error>;
}

/// Expires each listed interaction through the ordinary resolution path, which stores the expiry,
/// audits it and readies the run — one tenant-scoped call each. For adapters whose sweep lists due
/// interactions across tenants first. A resolution can only expire an interaction already past its
/// deadline by the store's clock; one a person resolved meanwhile is left alone.
pub async fn expire_due(
    store: &dyn InteractionStore,
    due: Vec<(InteractionId, TenantId)>,
) -> Result<usize, Error> {
    let mut expired = 0;
    for (id, tenant) in due {
        let scope = Scope::new(tenant, PrincipalId::new("forge")?, vec![]);
        let sweep = Resolve {
            id,
            decision: Decision::Reject { reason: None },
            actor: "forge".into(),
            key: crate::interaction::EXPIRY_KEY.into(),
            input_hash: None,
        };
        match store.resolve_interaction(&scope, sweep).await {
            Err(Error::Expired { .. }) => expired += 1,
            // Resolved by a person meantime, or not due by the store's clock: left alone.
            Ok(_) | Err(Error::AlreadyResolved { .. } | Error::Invalid(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(expired)
}
