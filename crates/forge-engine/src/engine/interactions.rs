//! The human-in-the-loop API: approvals and questions, and who may approve what.

use super::*;

/// Why separation of duties refuses an approval.
const SELF_APPROVAL: &str = "a person may not approve an external write in a run they started";

impl Engine {
    /// One approval or question of the scope's tenant.
    pub async fn interaction(
        &self,
        scope: &Scope,
        id: forge_core::id::InteractionId,
    ) -> Result<Interaction, EngineError> {
        Ok(self.stores.interactions.get_interaction(scope, id).await?)
    }

    /// The tenant's pending interactions this caller may act on: every question, and the
    /// approvals [`Engine::may_approve`] allows.
    pub async fn pending_interactions(
        &self,
        scope: &Scope,
    ) -> Result<Vec<Interaction>, EngineError> {
        let pending = self
            .stores
            .interactions
            .list_interactions(scope, InteractionFilter::Pending)
            .await?;
        let mut mine = Vec::with_capacity(pending.len());
        for i in pending {
            if !matches!(i.request, InteractionRequest::Approval { .. })
                || self.may_approve(scope, &i).await?.is_allowed()
            {
                mine.push(i);
            }
        }
        Ok(mine)
    }

    /// One page of [`Engine::pending_interactions`]: at most `limit` of the pending
    /// interactions after `after` (oldest first) that the caller may act on and `keep` admits
    /// (a server's own access rule), read from the store a page at a time, so a tenant with
    /// many pending interactions is never loaded whole. The flag says whether more follow.
    pub async fn pending_interactions_page(
        &self,
        scope: &Scope,
        mut after: Option<forge_core::id::InteractionId>,
        limit: usize,
        keep: impl Fn(&Interaction) -> bool + Send + Sync,
    ) -> Result<(Vec<Interaction>, bool), EngineError> {
        let mut mine = Vec::with_capacity(limit);
        loop {
            let page = self
                .stores
                .interactions
                .list_interactions(
                    scope,
                    InteractionFilter::PendingPage {
                        after,
                        limit: limit + 1,
                    },
                )
                .await?;
            let exhausted = page.len() <= limit;
            for i in page {
                after = Some(i.id);
                let allowed = !matches!(i.request, InteractionRequest::Approval { .. })
                    || self.may_approve(scope, &i).await?.is_allowed();
                if allowed && keep(&i) {
                    if mine.len() == limit {
                        return Ok((mine, true));
                    }
                    mine.push(i);
                }
            }
            if exhausted {
                return Ok((mine, false));
            }
        }
    }

    /// Whether the caller may approve this interaction: not an external write in a run they
    /// started (unless self-approval is allowed), and the policies allow `approve` on it (with
    /// the thread's creator and the run's initiator). Questions are answered, not approved:
    /// always allowed here.
    pub async fn may_approve(
        &self,
        scope: &Scope,
        interaction: &Interaction,
    ) -> Result<forge_core::ports::policy::PolicyDecision, EngineError> {
        use forge_core::ports::policy::{
            PolicyAction, PolicyDecision, PolicyRequest, PolicyResource,
        };
        use forge_core::ports::tool::ToolClassification;
        let InteractionRequest::Approval { tool_name, .. } = &interaction.request else {
            return Ok(PolicyDecision::Allow);
        };
        let run = self.stores.runs.get_run(scope, interaction.run_id).await?;
        let thread = self
            .stores
            .threads
            .get_thread(scope, interaction.thread_id)
            .await?;
        // A tool this process does not know counts as the riskiest kind.
        let classification = self
            .catalog
            .tools
            .get(tool_name)
            .map_or(ToolClassification::ExternalWrite, |t| {
                t.tool.spec().classification
            });
        if classification == ToolClassification::ExternalWrite
            && !self.guards.allow_self_approval
            && run.principal_id == *scope.principal_id()
        {
            return Ok(PolicyDecision::Deny {
                reason: SELF_APPROVAL.into(),
            });
        }
        let id = interaction.id.to_string();
        let thread_id = thread.id.to_string();
        Ok(self.guards.authorizer.decide(&PolicyRequest {
            scope,
            action: PolicyAction::Approve,
            resource: PolicyResource::Approval {
                id: &id,
                thread: &thread_id,
                thread_created_by: thread.created_by.as_str(),
                run_initiator: run.principal_id.as_str(),
                tool_name,
                classification,
            },
            input: None,
        }))
    }

    /// Every approval and question of one run.
    pub async fn run_interactions(
        &self,
        scope: &Scope,
        run: RunId,
    ) -> Result<Vec<Interaction>, EngineError> {
        Ok(self
            .stores
            .interactions
            .list_interactions(scope, InteractionFilter::Run(run))
            .await?)
    }

    /// Resolves an approval or a question exactly once (see
    /// [`forge_core::ports::interaction`]). An answer is checked against the question's schema
    /// first: an answer that does not fit is refused and nothing is stored.
    pub async fn resolve_interaction(
        &self,
        scope: &Scope,
        req: Resolve,
    ) -> Result<Resolved, EngineError> {
        forge_core::input::check("the decision", &req.decision)?;
        forge_core::input::check_text("the key", &req.key)?;
        if let Decision::Approve = &req.decision {
            let current = self
                .stores
                .interactions
                .get_interaction(scope, req.id)
                .await?;
            if let forge_core::ports::policy::PolicyDecision::Deny { reason } =
                self.may_approve(scope, &current).await?
            {
                // A policy's reason names policies: for operators, not for the caller.
                let shown = if reason == SELF_APPROVAL {
                    reason
                } else {
                    "the policies do not let this caller approve it".to_owned()
                };
                return Err(forge_core::Error::Forbidden(shown).into());
            }
        }
        if let Decision::Answer { answer } = &req.decision {
            let current = self
                .stores
                .interactions
                .get_interaction(scope, req.id)
                .await?;
            if let InteractionRequest::Question { answer_schema, .. } = &current.request {
                let problems = crate::hitl::schema_violations(answer_schema, answer);
                if !problems.is_empty() {
                    return Err(forge_core::Error::invalid(format!(
                        "the answer does not match the question's schema: {}",
                        problems.join("; ")
                    ))
                    .into());
                }
            }
        }
        let resolved = self
            .stores
            .interactions
            .resolve_interaction(scope, req)
            .await?;
        if resolved.resumed {
            self.local.work.notify_one();
        }
        Ok(resolved)
    }
}
