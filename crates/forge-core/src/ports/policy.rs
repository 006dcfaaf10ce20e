//! The policy port: whether a scope may discover or execute a tool, load a skill, read a source, a
//! thread or another person's file, or use an administrative power.
//!
//! Forge asks twice (invariant 4): before discovery — what the model is offered, what tool search
//! returns, what any listing shows — and again before execution, with the call's actual input. A
//! denied call and a call of a tool that does not exist look the same to the caller, so a denial
//! never tells anyone that a tool exists.

use crate::Error;
use crate::ports::tool::{ToolClassification, ToolSpec};
use crate::scope::Scope;

/// What the scope wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyAction {
    /// Learn that the resource exists: offered to the model, listed, found by search.
    Discover,
    /// Run it (a tool call) or load it (a skill); re-checked with the actual input.
    Execute,
    /// Read it (a source or a thread).
    Read,
    /// Approve it: a tool call waiting for a person ([`PolicyResource::Approval`]).
    Approve,
    /// Run a call of a tool whose approval policy is `policy` without a person's approval,
    /// decided with the call's input: what policies do not permit waits for a person.
    ActUnreviewed,
    /// Use one administrative power of the tenant ([`PolicyResource::Administration`]): erase,
    /// delete what others made, read the audit trail.
    Administer,
}

impl PolicyAction {
    /// The action's name in policies: `discover`, `execute`, `read`, `approve`,
    /// `act_unreviewed` or `administer`.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyAction::Discover => "discover",
            PolicyAction::Execute => "execute",
            PolicyAction::Read => "read",
            PolicyAction::Approve => "approve",
            PolicyAction::ActUnreviewed => "act_unreviewed",
            PolicyAction::Administer => "administer",
        }
    }
}

/// What the action is on.
#[derive(Debug, Clone, Copy)]
pub enum PolicyResource<'a> {
    /// A tool, native or imported.
    Tool(&'a ToolSpec),
    /// A skill, by name and version.
    Skill {
        /// Its name.
        name: &'a str,
        /// Its version.
        version: &'a str,
    },
    /// A retrieval source: its id and the access label policies read (`resource.label`).
    Source {
        /// Its id.
        id: &'a str,
        /// Its access label.
        label: &'a str,
        /// The principal it belongs to, when it is someone's own.
        owner: Option<&'a str>,
    },
    /// A thread, by id.
    Thread(&'a str),
    /// A stored file, for someone other than its uploader (who always has it): policies are
    /// asked only about a file with an access label; one without is its uploader's alone.
    File {
        /// Its id.
        id: &'a str,
        /// Who uploaded it.
        owner: &'a str,
        /// Its access label.
        label: &'a str,
    },
    /// One administrative power of the tenant, by name: `erase_threads`, `erase_runs`,
    /// `delete_threads` and `delete_files` (of other people), `delete_sources`, `audit_trail`.
    Administration(&'a str),
    /// A tool call waiting for approval, with who is involved: policies can require that the
    /// person approving is neither the thread's creator nor the run's initiator.
    Approval {
        /// The interaction's id.
        id: &'a str,
        /// Its thread.
        thread: &'a str,
        /// Who created the thread.
        thread_created_by: &'a str,
        /// Who started the run.
        run_initiator: &'a str,
        /// The tool called.
        tool_name: &'a str,
        /// The tool's classification (an unknown tool counts as an external write).
        classification: ToolClassification,
    },
}

/// One authorization question.
#[derive(Debug, Clone, Copy)]
pub struct PolicyRequest<'a> {
    /// Who asks: tenant, principal and roles.
    pub scope: &'a Scope,
    /// What they want to do.
    pub action: PolicyAction,
    /// On what.
    pub resource: PolicyResource<'a>,
    /// The call's input, for [`PolicyAction::Execute`] of a tool (already valid against its
    /// schema); `None` otherwise.
    pub input: Option<&'a serde_json::Value>,
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyDecision {
    /// Allowed.
    Allow,
    /// Denied, with the reason for the audit trail (policy ids, never shown to a model).
    Deny {
        /// Why, for operators.
        reason: String,
    },
}

impl PolicyDecision {
    /// Whether the decision allows.
    pub fn is_allowed(&self) -> bool {
        matches!(self, PolicyDecision::Allow)
    }
}

/// Port: a policy engine. Pure and synchronous — it decides from the request alone, so it can
/// run for every tool on every step. An error means "deny": callers fail closed.
pub trait Authorizer: Send + Sync {
    /// Decides one request.
    fn authorize(&self, request: &PolicyRequest<'_>) -> Result<PolicyDecision, Error>;

    /// What identifies this policy set in the audit trail of configuration (a hash of the
    /// policies, say); `None` when there is nothing to tell apart.
    fn fingerprint(&self) -> Option<String> {
        None
    }

    /// Decides, failing closed: an error becomes a denial naming it.
    fn decide(&self, request: &PolicyRequest<'_>) -> PolicyDecision {
        self.authorize(request)
            .unwrap_or_else(|e| PolicyDecision::Deny {
                reason: format!("policy evaluation failed: {e}"),
            })
    }
}

/// The role [`AllowAll`] grants administration to.
pub const ADMIN_ROLE: &str = "admin";

/// An authorizer that allows everything but administration: the engine's default, where the
/// agent's own tool and skill lists are the only restriction, and [`PolicyAction::Administer`]
/// is for principals with the role [`ADMIN_ROLE`]. Deployments with more than one role configure
/// a real policy engine (`forge-policy`), whose policies decide administration too.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl Authorizer for AllowAll {
    fn authorize(&self, request: &PolicyRequest<'_>) -> Result<PolicyDecision, Error> {
        Ok(
            if request.action == PolicyAction::Administer && !request.scope.has_role(ADMIN_ROLE) {
                PolicyDecision::Deny {
                    reason: format!("administration is for the role {ADMIN_ROLE}"),
                }
            } else {
                PolicyDecision::Allow
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_all_leaves_administration_to_the_admin_role() {
        let ask = |scope: &Scope, action| {
            AllowAll
                .decide(&PolicyRequest {
                    scope,
                    action,
                    resource: PolicyResource::Administration("audit_trail"),
                    input: None,
                })
                .is_allowed()
        };
        let admin = Scope::parse("acme", "ada", &[ADMIN_ROLE]).unwrap_or_else(|e| panic!("{e}"));
        let member = Scope::parse("acme", "bob", &["support"]).unwrap_or_else(|e| panic!("{e}"));
        assert!(ask(&admin, PolicyAction::Administer));
        assert!(!ask(&member, PolicyAction::Administer));
        assert!(
            ask(&member, PolicyAction::Read),
            "everything else is allowed"
        );
    }
}
