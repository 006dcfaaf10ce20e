//! Forge's default [`Authorizer`]: [Cedar](https://www.cedarpolicy.com) policies read from files.
//!
//! # The entity model policies are written against
//!
//! | Cedar | from |
//! | --- | --- |
//! | `principal`: `Forge::Principal::"<principal id>"`, attributes `id`, `tenant` | the [`Scope`] |
//! | its parents: `Forge::Role::"<role>"` for each role, and `Forge::Tenant::"<tenant>"` | the scope's roles and tenant |
//! | `action`: `Forge::Action::"discover"`, `"execute"`, `"read"`, `"approve"`, `"act_unreviewed"` or `"administer"` | [`PolicyAction`] |
//! | `resource`: `Forge::Tool::"<name>"` with `name`, `classification` (`read` / `write` / `external_write`), `version` and, when set, `permission` | the tool's spec |
//! | `resource`: `Forge::Skill::"<name>"` (`name`, `version`), `Forge::Thread::"<id>"` (`id`, `tenant`) | |
//! | `resource`: `Forge::Source::"<id>"` with `id`, `label`, `tenant`, and `owner` when the source is someone's own | the source's record |
//! | `resource`: `Forge::File::"<file id>"` with `id`, `owner`, `label`, `tenant` — asked only for someone other than its uploader, and only when it has a label | the file's record |
//! | `resource`: `Forge::Administration::"<power>"` with `name`, `tenant` — for `administer`: `erase_threads`, `erase_runs`, `delete_threads`, `delete_files`, `delete_sources`, `audit_trail`, `inspect_runs`, `dead_letters`, `mcp_servers` | the server |
//! | `resource`: `Forge::Approval::"<interaction id>"` with `id`, `tenant`, `thread`, `thread_created_by`, `run_initiator`, `tool`, `classification` — for `approve` | the interaction, its run and thread |
//! | `context`: `tenant`, `principal`, `roles` (a set), and for a tool's execution `input` (a record) | the request |
//!
//! Cedar denies unless a `permit` matches and no `forbid` does. This adapter also fails closed on
//! evaluation errors: a policy that errors (say, it reads `context.input.amount` from a call
//! without one) denies the request instead of being skipped, so a broken `forbid` never opens a
//! door.
//!
//! An application decides its own actions with the same policies ([`CedarAuthorizer::decide_app`]):
//! `App::Action::"<name>"` on `App::<Type>::"<id>"` with the attributes it gives, the caller as
//! above — role checks in the policies rather than in application code.
//!
//! Call inputs enter the context as data: JSON `null`s are dropped (Cedar has none), numbers that
//! are not 64-bit integers become strings, and nothing in an input can name an entity — Cedar's
//! JSON escapes (`__entity`, `__extn`) are never interpreted, because the conversion builds
//! values directly.
//!
//! # Example
//!
//! Support staff may run skills; a `forbid` takes one away from everyone outside finance:
//!
//! ```
//! use forge_core::ports::policy::{Authorizer, PolicyAction, PolicyDecision, PolicyRequest, PolicyResource};
//! use forge_core::scope::Scope;
//! use forge_policy::CedarAuthorizer;
//!
//! let policies = CedarAuthorizer::from_sources([(
//!     "support.cedar",
//!     r#"
//!     permit(principal in Forge::Role::"support", action == Forge::Action::"execute", resource);
//!     forbid(principal, action, resource == Forge::Skill::"refunds")
//!         unless { principal in Forge::Role::"finance" };
//!     "#,
//! )])?;
//! let alice = Scope::parse("acme", "alice", &["support"])?;
//! let ask = |name| PolicyRequest {
//!     scope: &alice,
//!     action: PolicyAction::Execute,
//!     resource: PolicyResource::Skill { name, version: "1" },
//!     input: None,
//! };
//! assert_eq!(policies.authorize(&ask("tone"))?, PolicyDecision::Allow);
//! assert!(matches!(policies.authorize(&ask("refunds"))?, PolicyDecision::Deny { .. }));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod check;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use cedar_policy::{
    Authorizer as CedarEngine, Context, Decision, Entities, Entity, EntityId, EntityTypeName,
    EntityUid, PolicyId, PolicySet, Request, RestrictedExpression,
};
use forge_core::Error;
use forge_core::ports::policy::{
    Authorizer, PolicyAction, PolicyDecision, PolicyRequest, PolicyResource,
};
use forge_core::ports::tool::{ToolClassification, ToolSource};
use forge_core::scope::Scope;

/// Why policies could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyLoadError {
    /// A policy file or directory could not be read.
    #[error("cannot read policies at {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file does not parse as Cedar.
    #[error("{file}: {message}")]
    Parse {
        /// The file's name.
        file: String,
        /// Cedar's message, with the position.
        message: String,
    },
    /// A file holds a template; Forge links no templates.
    #[error("{file}: policy templates are not supported; write static policies")]
    Template {
        /// The file's name.
        file: String,
    },
    /// Policies that do not parse, or name what Forge does not have (an entity type, an
    /// action, an attribute): every problem of every file, each as `file:line:column: what`.
    #[error("{} problem(s) in the policies:\n  {}", .problems.len(), .problems.join("\n  "))]
    Invalid {
        /// The problems, in file order.
        problems: Vec<String>,
    },
    /// A directory held no `.cedar` file: with no policy at all, everything would be denied.
    #[error("no .cedar files in {0}")]
    Empty(PathBuf),
}

/// Cedar policies, ready to decide.
pub struct CedarAuthorizer {
    policies: PolicySet,
    engine: CedarEngine,
}

impl std::fmt::Debug for CedarAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CedarAuthorizer")
            .field("policies", &self.policies.policies().count())
            .finish()
    }
}

impl CedarAuthorizer {
    /// Parses policies from `(file name, text)` pairs and checks them against Forge's Cedar
    /// schema (see `check`): a syntax error, an unknown entity type, action or attribute is
    /// [`PolicyLoadError::Invalid`], with every problem of every file. Each policy is named
    /// `<file>#<n>` in denial reasons.
    pub fn from_sources<'a>(
        sources: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, PolicyLoadError> {
        let sources: Vec<(&str, &str)> = sources.into_iter().collect();
        let mut policies = PolicySet::new();
        let mut problems = Vec::new();
        for (index, &(file, text)) in sources.iter().enumerate() {
            let parsed = match PolicySet::from_str(text) {
                Ok(parsed) => parsed,
                Err(e) => {
                    let message = match render_causes(&e) {
                        causes if causes.is_empty() => e.to_string(),
                        causes => format!("{e}: {causes}"),
                    };
                    problems.push(check::located(&sources, index, &e, &message));
                    continue;
                }
            };
            if parsed.templates().next().is_some() {
                return Err(PolicyLoadError::Template {
                    file: file.to_owned(),
                });
            }
            for (n, policy) in parsed.policies().enumerate() {
                let named = policy.new_id(PolicyId::new(format!("{file}#{n}")));
                policies.add(named).map_err(|e| PolicyLoadError::Parse {
                    file: file.to_owned(),
                    message: e.to_string(),
                })?;
            }
        }
        problems.extend(check::problems(&policies, &sources));
        if !problems.is_empty() {
            return Err(PolicyLoadError::Invalid {
                problems: check::in_order(problems),
            });
        }
        Ok(Self {
            policies,
            engine: CedarEngine::new(),
        })
    }

    /// Reads every `*.cedar` file in `dir` (or the one file `dir` names), in name order.
    pub fn from_path(path: &Path) -> Result<Self, PolicyLoadError> {
        let io = |source| PolicyLoadError::Io {
            path: path.to_owned(),
            source,
        };
        let mut files = Vec::new();
        if path.is_dir() {
            for entry in std::fs::read_dir(path).map_err(io)? {
                let p = entry.map_err(io)?.path();
                if p.extension().is_some_and(|e| e == "cedar") {
                    files.push(p);
                }
            }
            files.sort();
            if files.is_empty() {
                return Err(PolicyLoadError::Empty(path.to_owned()));
            }
        } else {
            files.push(path.to_owned());
        }
        let mut texts = Vec::with_capacity(files.len());
        for f in &files {
            let text = std::fs::read_to_string(f).map_err(|source| PolicyLoadError::Io {
                path: f.clone(),
                source,
            })?;
            let name = f
                .file_name()
                .map_or_else(|| f.display().to_string(), |n| n.to_string_lossy().into());
            texts.push((name, text));
        }
        Self::from_sources(texts.iter().map(|(n, t)| (n.as_str(), t.as_str())))
    }

    /// How many policies are loaded.
    pub fn len(&self) -> usize {
        self.policies.policies().count()
    }

    /// Whether no policy is loaded (everything is denied).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn render_causes(e: &dyn std::error::Error) -> String {
    let mut out = Vec::new();
    let mut cur = e.source();
    while let Some(c) = cur {
        out.push(c.to_string());
        cur = c.source();
    }
    out.join(": ")
}

fn uid(kind: &str, id: &str) -> Result<EntityUid, Error> {
    let name = EntityTypeName::from_str(kind)
        .map_err(|e| Error::invalid(format!("entity type {kind}: {e}")))?;
    Ok(EntityUid::from_type_name_and_id(name, EntityId::new(id)))
}

fn string(s: &str) -> RestrictedExpression {
    RestrictedExpression::new_string(s.to_owned())
}

/// A JSON value as Cedar data; `None` for `null`.
fn to_cedar(value: &serde_json::Value) -> Option<RestrictedExpression> {
    use serde_json::Value;
    Some(match value {
        Value::Null => return None,
        Value::Bool(b) => RestrictedExpression::new_bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => RestrictedExpression::new_long(i),
            None => RestrictedExpression::new_string(n.to_string()),
        },
        Value::String(s) => RestrictedExpression::new_string(s.clone()),
        Value::Array(items) => RestrictedExpression::new_set(items.iter().filter_map(to_cedar)),
        Value::Object(fields) => RestrictedExpression::new_record(
            fields
                .iter()
                .filter_map(|(k, v)| to_cedar(v).map(|v| (k.clone(), v))),
        )
        // Keys of a JSON object are unique, so building the record cannot fail.
        .unwrap_or_else(|_| RestrictedExpression::new_string(String::new())),
    })
}

fn classification(c: ToolClassification) -> &'static str {
    match c {
        ToolClassification::Read => "read",
        ToolClassification::Write => "write",
        ToolClassification::ExternalWrite => "external_write",
    }
}

fn principal(scope: &Scope) -> Result<Entity, Error> {
    let mut parents = HashSet::new();
    for role in scope.role_ids() {
        parents.insert(uid("Forge::Role", role.as_str())?);
    }
    parents.insert(uid("Forge::Tenant", scope.tenant_id().as_str())?);
    let attrs = HashMap::from([
        ("id".to_owned(), string(scope.principal_id().as_str())),
        ("tenant".to_owned(), string(scope.tenant_id().as_str())),
    ]);
    Entity::new(
        uid("Forge::Principal", scope.principal_id().as_str())?,
        attrs,
        parents,
    )
    .map_err(|e| Error::invalid(format!("principal entity: {e}")))
}

fn resource(scope: &Scope, r: &PolicyResource<'_>) -> Result<Entity, Error> {
    let (uid, attrs) = match r {
        PolicyResource::Tool(spec) => {
            let mut attrs = HashMap::from([
                ("name".to_owned(), string(&spec.name)),
                (
                    "classification".to_owned(),
                    string(classification(spec.classification)),
                ),
                ("version".to_owned(), string(&spec.version)),
                ("source".to_owned(), string(spec.source.kind())),
            ]);
            if let Some(p) = &spec.permission {
                attrs.insert("permission".to_owned(), string(p));
            }
            if let ToolSource::Mcp { server } = &spec.source {
                attrs.insert("server".to_owned(), string(server));
            }
            (uid("Forge::Tool", &spec.name)?, attrs)
        }
        PolicyResource::Skill { name, version } => (
            uid("Forge::Skill", name)?,
            HashMap::from([
                ("name".to_owned(), string(name)),
                ("version".to_owned(), string(version)),
            ]),
        ),
        PolicyResource::Approval {
            id,
            thread,
            thread_created_by,
            run_initiator,
            tool_name,
            classification: c,
        } => (
            uid("Forge::Approval", id)?,
            HashMap::from([
                ("id".to_owned(), string(id)),
                ("tenant".to_owned(), string(scope.tenant_id().as_str())),
                ("thread".to_owned(), string(thread)),
                ("thread_created_by".to_owned(), string(thread_created_by)),
                ("run_initiator".to_owned(), string(run_initiator)),
                ("tool".to_owned(), string(tool_name)),
                ("classification".to_owned(), string(classification(*c))),
            ]),
        ),
        PolicyResource::Source { id, label, owner } => (
            uid("Forge::Source", id)?,
            HashMap::from_iter(
                [
                    ("id".to_owned(), string(id)),
                    ("label".to_owned(), string(label)),
                    ("tenant".to_owned(), string(scope.tenant_id().as_str())),
                ]
                .into_iter()
                // Absent for a source nobody owns: policies test `resource has owner`.
                .chain(owner.map(|o| ("owner".to_owned(), string(o)))),
            ),
        ),
        PolicyResource::Thread(id) => (
            uid("Forge::Thread", id)?,
            HashMap::from([
                ("id".to_owned(), string(id)),
                ("tenant".to_owned(), string(scope.tenant_id().as_str())),
            ]),
        ),
        PolicyResource::File { id, owner, label } => (
            uid("Forge::File", id)?,
            HashMap::from([
                ("id".to_owned(), string(id)),
                ("owner".to_owned(), string(owner)),
                ("label".to_owned(), string(label)),
                ("tenant".to_owned(), string(scope.tenant_id().as_str())),
            ]),
        ),
        PolicyResource::Administration(power) => (
            uid("Forge::Administration", power)?,
            HashMap::from([
                ("name".to_owned(), string(power)),
                ("tenant".to_owned(), string(scope.tenant_id().as_str())),
            ]),
        ),
    };
    Entity::new(uid, attrs, HashSet::new())
        .map_err(|e| Error::invalid(format!("resource entity: {e}")))
}

/// The `policy` approval rule: a call of a tool whose approval policy is `policy` runs without
/// a person only where the policies permit `act_unreviewed` on the tool for the caller, with
/// the call's input in the context; anything else (no permit, a forbid, an error) waits for a
/// person.
#[async_trait::async_trait]
impl forge_core::ports::tool::ApprovalRule for CedarAuthorizer {
    async fn requires_approval(
        &self,
        scope: &forge_core::scope::Scope,
        tool: &forge_core::ports::tool::ToolSpec,
        input: &serde_json::Value,
    ) -> Result<bool, Error> {
        let decision = self.authorize(&PolicyRequest {
            scope,
            action: PolicyAction::ActUnreviewed,
            resource: PolicyResource::Tool(tool),
            input: Some(input),
        })?;
        Ok(!matches!(decision, PolicyDecision::Allow))
    }
}

impl Authorizer for CedarAuthorizer {
    fn fingerprint(&self) -> Option<String> {
        // The policies as loaded (ids included), hashed: a changed policy changes it.
        Some(forge_core::interaction::input_hash(
            &serde_json::Value::String(self.policies.to_string()),
        ))
    }

    fn authorize(&self, req: &PolicyRequest<'_>) -> Result<PolicyDecision, Error> {
        let resource = resource(req.scope, &req.resource)?;
        let action = uid("Forge::Action", req.action.as_str())?;
        self.evaluate(req.scope, action, resource, req.input)
    }
}

/// An application's own action on one of its own resources, decided by the same policies as
/// Forge's: `App::Action::"add_note"` on `App::Note::"<id>"`, with the caller as
/// `Forge::Principal` (its roles and tenant as parents) — so role checks live in the policies,
/// not in application code. The application's namespace may not be `Forge`.
#[derive(Debug, Clone, Copy)]
pub struct AppRequest<'a> {
    /// The caller.
    pub scope: &'a Scope,
    /// The application's Cedar namespace (`Crm`).
    pub namespace: &'a str,
    /// The action's name (`add_note` is `Crm::Action::"add_note"`).
    pub action: &'a str,
    /// The resource's type in the namespace (`Note` is `Crm::Note`).
    pub resource_type: &'a str,
    /// The resource's id.
    pub resource_id: &'a str,
    /// The resource's attributes, a JSON object (`null` values are left out); `tenant` is added.
    pub attributes: &'a serde_json::Value,
}

impl CedarAuthorizer {
    /// Decides an application's own action ([`AppRequest`]). A malformed request (a namespace
    /// or name Cedar refuses, the `Forge` namespace, attributes that are not an object) is an
    /// error, never an allow.
    pub fn decide_app(&self, req: &AppRequest<'_>) -> Result<PolicyDecision, Error> {
        if req.namespace == "Forge" {
            return Err(Error::invalid(
                "an application's actions are in its own namespace, not Forge's",
            ));
        }
        let serde_json::Value::Object(fields) = req.attributes else {
            return Err(Error::invalid(
                "an application resource's attributes are an object",
            ));
        };
        let mut attrs: HashMap<String, RestrictedExpression> = fields
            .iter()
            .filter_map(|(k, v)| to_cedar(v).map(|v| (k.clone(), v)))
            .collect();
        attrs.insert("tenant".to_owned(), string(req.scope.tenant_id().as_str()));
        let resource = Entity::new(
            uid(
                &format!("{}::{}", req.namespace, req.resource_type),
                req.resource_id,
            )?,
            attrs,
            HashSet::new(),
        )
        .map_err(|e| Error::invalid(format!("resource entity: {e}")))?;
        let action = uid(&format!("{}::Action", req.namespace), req.action)?;
        self.evaluate(req.scope, action, resource, None)
    }

    /// The decision for `scope` doing `action` on `resource`, with `input` in the context.
    fn evaluate(
        &self,
        scope: &Scope,
        action: EntityUid,
        resource: Entity,
        input: Option<&serde_json::Value>,
    ) -> Result<PolicyDecision, Error> {
        let principal = principal(scope)?;
        let mut context = vec![
            ("tenant".to_owned(), string(scope.tenant_id().as_str())),
            (
                "principal".to_owned(),
                string(scope.principal_id().as_str()),
            ),
            (
                "roles".to_owned(),
                RestrictedExpression::new_set(scope.role_ids().iter().map(|r| string(r.as_str()))),
            ),
        ];
        if let Some(input) = input.and_then(to_cedar) {
            context.push(("input".to_owned(), input));
        }
        let context = Context::from_pairs(context)
            .map_err(|e| Error::invalid(format!("policy context: {e}")))?;
        let request = Request::new(principal.uid(), action, resource.uid(), context, None)
            .map_err(|e| Error::invalid(format!("policy request: {e}")))?;
        let entities = Entities::from_entities([principal, resource], None)
            .map_err(|e| Error::invalid(format!("policy entities: {e}")))?;
        let response = self
            .engine
            .is_authorized(&request, &self.policies, &entities);
        let diagnostics = response.diagnostics();
        let errors: Vec<String> = diagnostics.errors().map(ToString::to_string).collect();
        if !errors.is_empty() {
            return Ok(PolicyDecision::Deny {
                reason: format!("policy evaluation failed: {}", errors.join("; ")),
            });
        }
        let reasons: Vec<String> = diagnostics.reason().map(ToString::to_string).collect();
        Ok(match response.decision() {
            Decision::Allow => PolicyDecision::Allow,
            Decision::Deny if reasons.is_empty() => PolicyDecision::Deny {
                reason: "no policy permits it".into(),
            },
            Decision::Deny => PolicyDecision::Deny {
                reason: format!("forbidden by {}", reasons.join(", ")),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forge_core::ports::policy::PolicyAction;
    use forge_core::ports::tool::{ApprovalPolicy, ToolSpec};
    use serde_json::json;

    fn examples() -> CedarAuthorizer {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies");
        CedarAuthorizer::from_path(&dir).expect("the example policies load")
    }

    fn tool(name: &str, classification: ToolClassification, permission: Option<&str>) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            classification,
            approval: ApprovalPolicy::Never,
            version: "1".into(),
            permission: permission.map(Into::into),
            source: Default::default(),
        }
    }

    fn pay() -> ToolSpec {
        tool(
            "pay_invoice",
            ToolClassification::ExternalWrite,
            Some("payments.write"),
        )
    }

    fn ask(
        a: &CedarAuthorizer,
        scope: &Scope,
        action: PolicyAction,
        spec: &ToolSpec,
        input: Option<&serde_json::Value>,
    ) -> PolicyDecision {
        a.decide(&PolicyRequest {
            scope,
            action,
            resource: PolicyResource::Tool(spec),
            input,
        })
    }

    #[test]
    fn roles_and_tenants_decide_discovery() {
        let a = examples();
        let pay = pay();
        let lookup = tool("lookup", ToolClassification::Read, None);
        let support = Scope::parse("acme", "alice", &["support"]).unwrap();
        let finance = Scope::parse("acme", "bob", &["finance"]).unwrap();
        let finance_elsewhere = Scope::parse("globex", "carol", &["finance"]).unwrap();
        for s in [&support, &finance, &finance_elsewhere] {
            assert!(ask(&a, s, PolicyAction::Discover, &lookup, None).is_allowed());
        }
        assert!(!ask(&a, &support, PolicyAction::Discover, &pay, None).is_allowed());
        assert!(ask(&a, &finance, PolicyAction::Discover, &pay, None).is_allowed());
        assert!(
            !ask(&a, &finance_elsewhere, PolicyAction::Discover, &pay, None).is_allowed(),
            "a role of the same name in another tenant grants nothing here"
        );
    }

    #[tokio::test]
    async fn a_policy_tool_runs_unreviewed_only_where_policies_permit_it() {
        use forge_core::ports::tool::ApprovalRule;
        let a = examples();
        let pay = pay();
        let finance = Scope::parse("acme", "bob", &["finance"]).unwrap();
        let support = Scope::parse("acme", "alice", &["support"]).unwrap();
        let elsewhere = Scope::parse("globex", "carol", &["finance"]).unwrap();
        let needs = |scope: &Scope, input: serde_json::Value| {
            let (a, pay, scope) = (&a, &pay, scope.clone());
            async move { a.requires_approval(&scope, pay, &input).await.unwrap() }
        };
        assert!(!needs(&finance, json!({"invoice": "I", "amount": 100})).await);
        assert!(needs(&finance, json!({"invoice": "I", "amount": 101})).await);
        assert!(
            needs(&finance, json!({"invoice": "I"})).await,
            "no amount: ask"
        );
        assert!(needs(&support, json!({"invoice": "I", "amount": 5})).await);
        assert!(needs(&elsewhere, json!({"invoice": "I", "amount": 5})).await);
        let lookup = tool("lookup", ToolClassification::Read, None);
        assert!(
            a.requires_approval(&finance, &lookup, &json!({}))
                .await
                .unwrap(),
            "no permit for the tool: ask"
        );
    }

    #[test]
    fn execution_depends_on_the_input() {
        let a = examples();
        let pay = pay();
        let finance = Scope::parse("acme", "bob", &["finance"]).unwrap();
        let cfo = Scope::parse("acme", "dana", &["finance", "cfo"]).unwrap();
        let small = json!({"invoice": "INV-1", "amount": 200});
        let large = json!({"invoice": "INV-2", "amount": 5000});
        assert!(ask(&a, &finance, PolicyAction::Execute, &pay, Some(&small)).is_allowed());
        let denied = ask(&a, &finance, PolicyAction::Execute, &pay, Some(&large));
        assert!(
            matches!(&denied, PolicyDecision::Deny { reason } if reason.contains("tools.cedar#2")),
            "{denied:?}"
        );
        assert!(ask(&a, &cfo, PolicyAction::Execute, &pay, Some(&large)).is_allowed());
    }

    #[test]
    fn evaluation_errors_deny_instead_of_skipping_a_forbid() {
        let a = examples();
        let finance = Scope::parse("acme", "bob", &["finance"]).unwrap();
        // No amount: the forbid cannot be evaluated, so the call is denied, not let through.
        let decision = ask(
            &a,
            &finance,
            PolicyAction::Execute,
            &pay(),
            Some(&json!({"invoice": "INV-3"})),
        );
        assert!(
            matches!(&decision, PolicyDecision::Deny { reason } if reason.contains("evaluation failed")),
            "{decision:?}"
        );
        // A fractional amount becomes a string, which cannot be compared: denied too.
        let decision = ask(
            &a,
            &finance,
            PolicyAction::Execute,
            &pay(),
            Some(&json!({"invoice": "INV-4", "amount": 99.5})),
        );
        assert!(!decision.is_allowed());
    }

    #[test]
    fn input_cannot_name_entities_or_smuggle_roles() {
        let a = CedarAuthorizer::from_sources([(
            "t.cedar",
            r#"permit(principal, action, resource)
               when { context.input.who in Forge::Role::"admin" };"#,
        )])
        .unwrap();
        let s = Scope::parse("acme", "mallory", &[]).unwrap();
        let hostile = json!({"who": {"__entity": {"type": "Forge::Role", "id": "admin"}}});
        let d = ask(&a, &s, PolicyAction::Execute, &pay(), Some(&hostile));
        assert!(!d.is_allowed(), "{d:?}");
    }

    #[test]
    fn nulls_are_dropped_and_nested_input_is_readable() {
        let a = CedarAuthorizer::from_sources([(
            "t.cedar",
            r#"permit(principal, action, resource)
               when { context.input.to.country == "NO" && !(context.input has note) };"#,
        )])
        .unwrap();
        let s = Scope::parse("acme", "a", &[]).unwrap();
        let input = json!({"to": {"country": "NO", "tags": [1, null]}, "note": null});
        assert!(ask(&a, &s, PolicyAction::Execute, &pay(), Some(&input)).is_allowed());
    }

    #[test]
    fn loading_names_the_broken_file_and_refuses_templates_and_empty_dirs() {
        let e = CedarAuthorizer::from_sources([
            ("ok.cedar", "permit(principal, action, resource);"),
            ("bad.cedar", "permit(principal, action"),
        ])
        .unwrap_err();
        assert!(
            e.to_string()
                .ends_with("\n  bad.cedar:1:25: unexpected end of input"),
            "{e}"
        );
        let e = CedarAuthorizer::from_sources([(
            "tpl.cedar",
            "permit(principal == ?principal, action, resource);",
        )])
        .unwrap_err();
        assert!(matches!(e, PolicyLoadError::Template { .. }), "{e}");
        let dir = std::env::temp_dir().join(format!("forge-policy-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = CedarAuthorizer::from_path(&dir).unwrap_err();
        assert!(matches!(e, PolicyLoadError::Empty(_)), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(examples().len(), 16);
    }

    /// A policy that could never match is refused as it loads, every problem of every file at
    /// once, each at its file, line and column (issue 68, items 3 and 8).
    #[test]
    fn policies_naming_what_forge_does_not_have_are_refused_with_their_place() {
        let tools = "// tools\npermit(principal, action == Forge::Action::\"executee\", resource);\n\
                     permit(principal, action, resource is Forge::Tool)\n  \
                     when { resource.clasification == \"read\" };\n";
        let other = "permit(principal, action, resource is Forge::Tol);\n\
                     permit(principal, action == Forge::Action::\"read\", resource is Forge::File)\n  \
                     when { resource.owner == principal.name };\n";
        let broken = "permit(principal, action, resource) when { resource.name == };";
        let e = CedarAuthorizer::from_sources([
            ("tools.cedar", tools),
            ("other.cedar", other),
            ("broken.cedar", broken),
        ])
        .unwrap_err();
        let PolicyLoadError::Invalid { problems } = &e else {
            panic!("{e}");
        };
        let places: Vec<&str> = problems
            .iter()
            .map(|p| p.split(": ").next().unwrap_or_default())
            .collect();
        assert_eq!(
            places,
            [
                "tools.cedar:2:29",
                "tools.cedar:4:10",
                "other.cedar:1:39",
                "other.cedar:3:28",
                "broken.cedar:1:61"
            ],
            "{e}"
        );
        assert!(problems[0].contains("Forge::Action::\"executee\""), "{e}");
        assert!(problems[1].contains("clasification"), "{e}");
        assert!(problems[2].contains("Forge::Tol"), "{e}");
        assert!(problems[3].contains("name"), "{e}");

        // An application's namespace is its own, and a call's input the tool's.
        let a = CedarAuthorizer::from_sources([(
            "app.cedar",
            r#"permit(principal, action == Crm::Action::"add_note", resource is Crm::Note)
                 when { resource.anything == "x" };
               forbid(principal, action == Forge::Action::"execute", resource is Forge::Tool)
                 when { context.input.amount > 1000 };
               permit(principal, action, resource is Forge::Tool)
                 when { context has input && context.input has to && context.input.to == "x" };"#,
        )])
        .unwrap();
        assert_eq!(a.len(), 3);
    }

    #[test]
    fn skills_sources_and_threads_are_resources_too() {
        let a = examples();
        let support = Scope::parse("acme", "alice", &["support"]).unwrap();
        let sales = Scope::parse("acme", "sam", &["sales"]).unwrap();
        let refunds = PolicyResource::Skill {
            name: "refunds",
            version: "1",
        };
        let style = PolicyResource::Skill {
            name: "style",
            version: "1",
        };
        let req = |scope, resource| PolicyRequest {
            scope,
            action: PolicyAction::Discover,
            resource,
            input: None,
        };
        assert!(a.decide(&req(&support, refunds)).is_allowed());
        assert!(!a.decide(&req(&sales, refunds)).is_allowed());
        assert!(a.decide(&req(&sales, style)).is_allowed());
        // Nothing permits reading sources in the examples: denied by default.
        let source = PolicyRequest {
            scope: &support,
            action: PolicyAction::Read,
            resource: PolicyResource::Source {
                id: "handbook",
                label: "internal",
                owner: None,
            },
            input: None,
        };
        assert_eq!(
            a.decide(&source),
            PolicyDecision::Deny {
                reason: "no policy permits it".into()
            }
        );
    }

    #[test]
    fn an_applications_own_actions_are_decided_by_the_same_policies() {
        let a = CedarAuthorizer::from_sources([(
            "crm.cedar",
            r#"permit (principal, action == Crm::Action::"add_note", resource is Crm::Note)
               when { principal in Forge::Role::"sales" &&
                      (resource.visibility == "private" || resource.record != "") };"#,
        )])
        .unwrap();
        let add = |roles: &[&str], visibility: &str| {
            let scope = Scope::parse("acme", "alice", roles).unwrap();
            a.decide_app(&AppRequest {
                scope: &scope,
                namespace: "Crm",
                action: "add_note",
                resource_type: "Note",
                resource_id: "note-1",
                attributes: &json!({"visibility": visibility, "record": "co-1", "gone": null}),
            })
            .unwrap()
            .is_allowed()
        };
        assert!(add(&["sales"], "team"));
        assert!(!add(&["viewer"], "team"), "a viewer adds no note");
        assert!(!add(&["viewer"], "private"));
        let scope = Scope::parse("acme", "alice", &["sales"]).unwrap();
        let forged = a.decide_app(&AppRequest {
            scope: &scope,
            namespace: "Forge",
            action: "approve",
            resource_type: "Approval",
            resource_id: "x",
            attributes: &json!({}),
        });
        assert!(
            forged.is_err(),
            "an application cannot ask for Forge's actions"
        );
        let not_an_object = a.decide_app(&AppRequest {
            scope: &scope,
            namespace: "Crm",
            action: "add_note",
            resource_type: "Note",
            resource_id: "x",
            attributes: &json!(["visibility"]),
        });
        assert!(not_an_object.is_err());
    }

    #[test]
    fn a_sources_owner_is_an_attribute_only_when_it_has_one() {
        let a = CedarAuthorizer::from_sources([(
            "notes.cedar",
            r#"permit (principal, action == Forge::Action::"read", resource is Forge::Source)
               when { resource.label == "team" ||
                      (resource has owner && resource.owner == principal.id) };"#,
        )])
        .unwrap();
        let read = |principal: &str, label, owner| {
            let scope = Scope::parse("acme", principal, &[]).unwrap();
            a.decide(&PolicyRequest {
                scope: &scope,
                action: PolicyAction::Read,
                resource: PolicyResource::Source {
                    id: "note-1",
                    label,
                    owner,
                },
                input: None,
            })
            .is_allowed()
        };
        assert!(read("alice", "private", Some("alice")));
        assert!(!read("bob", "private", Some("alice")));
        // A principal named like a label gains nothing from it.
        assert!(!read("team", "private", None));
        assert!(read("bob", "team", None));
    }

    #[test]
    fn a_files_owner_is_an_attribute_policies_decide_on() {
        // Bob reads the files alice shares with her delegate; not dave's, and carol none.
        let a = CedarAuthorizer::from_sources([(
            "files.cedar",
            r#"permit (principal == Forge::Principal::"bob", action == Forge::Action::"read",
                       resource is Forge::File)
               when { resource.owner == "alice" && resource.label == "delegate" };"#,
        )])
        .unwrap();
        let read = |principal: &str, owner| {
            let scope = Scope::parse("acme", principal, &[]).unwrap();
            a.decide(&PolicyRequest {
                scope: &scope,
                action: PolicyAction::Read,
                resource: PolicyResource::File {
                    id: "file_1",
                    owner,
                    label: "delegate",
                },
                input: None,
            })
            .is_allowed()
        };
        assert!(read("bob", "alice"));
        assert!(!read("bob", "dave"));
        assert!(!read("carol", "alice"));
    }

    #[test]
    fn files_and_administration_are_decided_by_the_policies() {
        let a = examples();
        let file = |scope: &Scope, action, label| {
            a.decide(&PolicyRequest {
                scope,
                action,
                resource: PolicyResource::File {
                    id: "file_1",
                    owner: "alice",
                    label,
                },
                input: None,
            })
            .is_allowed()
        };
        let bob = Scope::parse("acme", "bob", &["support"]).unwrap();
        let fred = Scope::parse("acme", "fred", &["finance"]).unwrap();
        assert!(file(&bob, PolicyAction::Read, "team"));
        assert!(file(&bob, PolicyAction::Discover, "team"));
        assert!(!file(&bob, PolicyAction::Read, "finance"));
        assert!(file(&fred, PolicyAction::Read, "finance"));
        assert!(
            !file(&fred, PolicyAction::Read, "hr"),
            "no policy permits it"
        );
        let administer = |scope: &Scope, power| {
            a.decide(&PolicyRequest {
                scope,
                action: PolicyAction::Administer,
                resource: PolicyResource::Administration(power),
                input: None,
            })
            .is_allowed()
        };
        let admin = Scope::parse("acme", "ada", &["admin"]).unwrap();
        let auditor = Scope::parse("acme", "aude", &["auditor"]).unwrap();
        assert!(administer(&admin, "erase_threads"));
        assert!(administer(&auditor, "audit_trail"));
        assert!(!administer(&auditor, "erase_threads"));
        assert!(!administer(&bob, "audit_trail"));
    }

    #[test]
    fn approvals_are_their_own_action_with_who_is_involved() {
        let a = examples();
        let approve = |who: &Scope, creator: &str, tool: &str| {
            a.decide(&PolicyRequest {
                scope: who,
                action: PolicyAction::Approve,
                resource: PolicyResource::Approval {
                    id: "i1",
                    thread: "t1",
                    thread_created_by: creator,
                    run_initiator: "carol",
                    tool_name: tool,
                    classification: ToolClassification::ExternalWrite,
                },
                input: None,
            })
            .is_allowed()
        };
        let finance = Scope::parse("acme", "fred", &["finance"]).unwrap();
        let support = Scope::parse("acme", "sam", &["support"]).unwrap();
        assert!(approve(&finance, "carol", "pay"));
        assert!(!approve(&support, "carol", "pay"), "only finance approves");
        assert!(
            !approve(&finance, "fred", "pay"),
            "not a payment on a thread one created"
        );
        assert!(approve(&finance, "fred", "send_email"));
    }
}
