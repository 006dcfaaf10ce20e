//! Interactions: an approval a person must give, or a question a person must answer, before a
//! parked run goes on.
//!
//! An interaction is created by the step that parks the run (in the same commit), records the agent
//! version it was raised under, and is resolved exactly once: [`decide`] is the rule every store
//! applies under its lock. Resolving again with the same idempotency key returns the first
//! outcome; with another key it is [`Error::AlreadyResolved`]; after its deadline it is
//! [`Error::Expired`]. An approval is bound to one call: the tool's name and the SHA-256 of its
//! canonical input ([`input_hash`]); a resolution naming another hash is refused, and the engine
//! re-checks the hash against the call it is about to run.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use crate::preview::{ApprovalPreview, PreviewFact, PreviewTemplate, TextChange};

use crate::agent::AgentRef;
use crate::error::Error;
use crate::id::{InteractionId, RunId, ThreadId, ToolCallId};
use crate::scope::TenantId;
use crate::time::Timestamp;

/// SHA-256, hex, of a tool input's canonical JSON (object keys sorted, no whitespace).
pub fn input_hash(input: &serde_json::Value) -> String {
    let mut canonical = String::new();
    canonical_json(input, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `value` as compact JSON with every object's keys sorted, whatever order the map keeps
/// them in (serde_json's `preserve_order` may be on anywhere in a build).
fn canonical_json(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(k) {
                    canonical_json(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// What a person is asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InteractionRequest {
    /// May this exact tool call run?
    Approval {
        /// The call.
        tool_call_id: ToolCallId,
        /// The tool.
        tool_name: String,
        /// [`input_hash`] of the call's input.
        input_hash: String,
        /// The input, for the person deciding.
        input: serde_json::Value,
        /// What the call will do in the application's terms, when its tool has a previewer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        preview: Option<ApprovalPreview>,
    },
    /// The agent's question, through its `ask_user` call.
    Question {
        /// The `ask_user` call the answer returns to.
        tool_call_id: ToolCallId,
        /// The question.
        prompt: String,
        /// JSON Schema an answer must satisfy.
        answer_schema: serde_json::Value,
    },
}

impl InteractionRequest {
    /// The tool call the interaction is about.
    pub fn tool_call_id(&self) -> &ToolCallId {
        match self {
            InteractionRequest::Approval { tool_call_id, .. }
            | InteractionRequest::Question { tool_call_id, .. } => tool_call_id,
        }
    }

    /// `approval` or `question`.
    pub fn kind(&self) -> &'static str {
        match self {
            InteractionRequest::Approval { .. } => "approval",
            InteractionRequest::Question { .. } => "question",
        }
    }
}

/// Where an interaction stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InteractionStatus {
    /// Waiting for a person.
    Pending,
    /// Decided.
    Resolved,
    /// Nobody decided in time; the run treats it as refused.
    Expired,
}

impl InteractionStatus {
    /// The status's name, as stored.
    pub fn name(&self) -> &'static str {
        match self {
            InteractionStatus::Pending => "pending",
            InteractionStatus::Resolved => "resolved",
            InteractionStatus::Expired => "expired",
        }
    }
}

/// A person's decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// The call may run.
    Approve,
    /// The call must not run (or the question is declined); the model is told.
    Reject {
        /// Why, for the model and the audit trail.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The answer to a question (already checked against its schema by the engine).
    Answer {
        /// The answer.
        answer: serde_json::Value,
    },
}

impl Decision {
    /// The audit action this decision records, for an interaction of `kind`.
    pub fn action(&self, kind: &str) -> String {
        let verb = match self {
            Decision::Approve => "approved",
            Decision::Reject { .. } => "rejected",
            Decision::Answer { .. } => "answered",
        };
        format!("{kind}.{verb}")
    }
}

/// A decision as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Resolution {
    /// The decision.
    #[serde(flatten)]
    pub decision: Decision,
    /// Who decided.
    pub actor: String,
    /// When.
    pub at: Timestamp,
    /// The idempotency key it was resolved under.
    pub key: String,
}

/// An approval or a question, stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Interaction {
    /// Its id.
    pub id: InteractionId,
    /// The tenant.
    pub tenant_id: TenantId,
    /// The parked run.
    pub run_id: RunId,
    /// The run's thread.
    pub thread_id: ThreadId,
    /// The step that raised it.
    pub step: u32,
    /// The agent version it was raised under; the run resumes with this version or not at all.
    pub agent: AgentRef,
    /// What is asked.
    pub request: InteractionRequest,
    /// Where it stands.
    pub status: InteractionStatus,
    /// The decision, once made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<Resolution>,
    /// When it was raised.
    pub created_at: Timestamp,
    /// When it expires if still pending.
    pub expires_at: Timestamp,
}

/// A request to resolve an interaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolve {
    /// The interaction.
    pub id: InteractionId,
    /// The decision.
    pub decision: Decision,
    /// Who decides.
    pub actor: String,
    /// Idempotency key: resolving again with it returns the first outcome.
    pub key: String,
    /// For an approval, the input hash the person saw; another value is refused, so an approval
    /// given for one call cannot be replayed onto another.
    pub input_hash: Option<String>,
}

/// What a store does with a [`Resolve`], decided by [`decide`].
#[derive(Debug, Clone, PartialEq)]
pub enum Decided {
    /// Already resolved under the same key: return it unchanged.
    Replay,
    /// Store this resolved interaction (and audit the decision).
    Apply(Interaction),
    /// The deadline passed: store it expired, then answer [`Error::Expired`].
    Expire(Interaction),
}

/// The idempotency key of the expiry sweep: a resolution under it only ever expires an interaction
/// that is past its deadline, and changes nothing otherwise.
pub const EXPIRY_KEY: &str = "forge-expiry";

/// The one rule for resolving: what to store given the interaction as it is now.
pub fn decide(current: &Interaction, req: &Resolve, now: Timestamp) -> Result<Decided, Error> {
    if req.key.is_empty() || req.key.len() > 256 {
        return Err(Error::invalid(
            "an idempotency key of 1 to 256 bytes is required",
        ));
    }
    match current.status {
        InteractionStatus::Resolved => {
            return match &current.resolution {
                Some(r) if r.key == req.key => Ok(Decided::Replay),
                _ => Err(Error::AlreadyResolved {
                    id: current.id.to_string(),
                }),
            };
        }
        // Closed before its deadline: its run ended, and no deadline is to blame.
        InteractionStatus::Expired if current.expires_at > now => {
            return Err(Error::Closed {
                id: current.id.to_string(),
            });
        }
        InteractionStatus::Expired => {
            return Err(Error::Expired {
                id: current.id.to_string(),
                at: current.expires_at,
            });
        }
        InteractionStatus::Pending => {}
    }
    match (&current.request, &req.decision) {
        (
            InteractionRequest::Approval { input_hash, .. },
            Decision::Approve | Decision::Reject { .. },
        ) => {
            if let Some(seen) = &req.input_hash
                && seen != input_hash
            {
                return Err(Error::invalid(format!(
                    "interaction {} approves a call with input hash {input_hash}, not {seen}",
                    current.id
                )));
            }
        }
        (
            InteractionRequest::Question { .. },
            Decision::Answer { .. } | Decision::Reject { .. },
        ) => {}
        (request, decision) => {
            return Err(Error::invalid(format!(
                "a {} cannot be resolved with {}",
                request.kind(),
                decision.action(request.kind())
            )));
        }
    }
    if req.key == EXPIRY_KEY && now < current.expires_at {
        return Err(Error::invalid(format!(
            "interaction {} is not due to expire",
            current.id
        )));
    }
    if now >= current.expires_at {
        let mut expired = current.clone();
        expired.status = InteractionStatus::Expired;
        return Ok(Decided::Expire(expired));
    }
    let mut resolved = current.clone();
    resolved.status = InteractionStatus::Resolved;
    resolved.resolution = Some(Resolution {
        decision: req.decision.clone(),
        actor: req.actor.clone(),
        at: now,
        key: req.key.clone(),
    });
    Ok(Decided::Apply(resolved))
}

/// The audit entry for a stored decision (or expiry): who, when, what — the tool and the input
/// hash, never an answer's content.
pub fn audit_record(i: &Interaction, now: Timestamp) -> crate::audit::AuditRecord {
    let (actor, action) = match &i.resolution {
        Some(r) => (r.actor.clone(), r.decision.action(i.request.kind())),
        None => ("forge".to_owned(), format!("{}.expired", i.request.kind())),
    };
    let mut detail = serde_json::json!({
        "run_id": i.run_id,
        "tool_call_id": i.request.tool_call_id(),
        "agent": i.agent,
    });
    if let InteractionRequest::Approval {
        tool_name,
        input_hash,
        ..
    } = &i.request
    {
        detail["tool_name"] = serde_json::json!(tool_name);
        detail["input_hash"] = serde_json::json!(input_hash);
    }
    if let Some(Resolution {
        decision: Decision::Reject { reason: Some(r) },
        ..
    }) = &i.resolution
    {
        detail["reason"] = serde_json::json!(r);
    }
    crate::audit::AuditRecord {
        tenant_id: i.tenant_id.clone(),
        at: now,
        actor,
        action,
        subject: format!("interaction {}", i.id),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn approval(now: Timestamp) -> Interaction {
        Interaction {
            id: InteractionId(uuid::Uuid::nil()),
            tenant_id: TenantId::new("acme").unwrap(),
            run_id: RunId(uuid::Uuid::nil()),
            thread_id: ThreadId(uuid::Uuid::nil()),
            step: 1,
            agent: AgentRef {
                name: "a".into(),
                version: "1".into(),
            },
            request: InteractionRequest::Approval {
                tool_call_id: ToolCallId("c1".into()),
                tool_name: "pay".into(),
                input_hash: input_hash(&serde_json::json!({"amount": 5})),
                input: serde_json::json!({"amount": 5}),
                preview: None,
            },
            status: InteractionStatus::Pending,
            resolution: None,
            created_at: now,
            expires_at: now.plus(Duration::from_secs(60)),
        }
    }

    fn resolve(key: &str, decision: Decision) -> Resolve {
        Resolve {
            id: InteractionId(uuid::Uuid::nil()),
            decision,
            actor: "bob".into(),
            key: key.into(),
            input_hash: None,
        }
    }

    #[test]
    fn the_hash_is_canonical() {
        let a: serde_json::Value = serde_json::from_str(r#"{"b":1,"a":[1,2]}"#).unwrap();
        let b: serde_json::Value = serde_json::from_str(r#"{ "a": [1, 2], "b": 1 }"#).unwrap();
        assert_eq!(input_hash(&a), input_hash(&b));
        assert_ne!(
            input_hash(&a),
            input_hash(&serde_json::json!({"a": [2, 1], "b": 1}))
        );
        assert_eq!(input_hash(&a).len(), 64);
    }

    #[test]
    fn resolved_once_replayed_by_key_and_refused_otherwise() {
        let now = Timestamp::from_unix_millis(1_000).unwrap();
        let pending = approval(now);
        let Ok(Decided::Apply(done)) = decide(&pending, &resolve("k1", Decision::Approve), now)
        else {
            panic!("a pending approval is resolved");
        };
        assert_eq!(done.status, InteractionStatus::Resolved);
        assert_eq!(
            decide(&done, &resolve("k1", Decision::Approve), now).unwrap(),
            Decided::Replay
        );
        let again = decide(
            &done,
            &resolve("k2", Decision::Reject { reason: None }),
            now,
        );
        assert!(
            matches!(again, Err(Error::AlreadyResolved { .. })),
            "{again:?}"
        );
    }

    #[test]
    fn an_approval_is_bound_to_its_call_and_its_kind() {
        let now = Timestamp::from_unix_millis(1_000).unwrap();
        let pending = approval(now);
        let mut other = resolve("k", Decision::Approve);
        other.input_hash = Some(input_hash(&serde_json::json!({"amount": 5000})));
        assert!(matches!(
            decide(&pending, &other, now),
            Err(Error::Invalid(_))
        ));
        let answer = resolve(
            "k",
            Decision::Answer {
                answer: serde_json::json!(1),
            },
        );
        assert!(matches!(
            decide(&pending, &answer, now),
            Err(Error::Invalid(_))
        ));
        let mut same = resolve("k", Decision::Approve);
        same.input_hash = Some(input_hash(&serde_json::json!({"amount": 5})));
        assert!(matches!(
            decide(&pending, &same, now),
            Ok(Decided::Apply(_))
        ));
    }

    #[test]
    fn past_the_deadline_it_expires() {
        let now = Timestamp::from_unix_millis(1_000).unwrap();
        let pending = approval(now);
        let late = now.plus(Duration::from_secs(61));
        let Ok(Decided::Expire(expired)) = decide(&pending, &resolve("k", Decision::Approve), late)
        else {
            panic!("expired");
        };
        assert!(matches!(
            decide(&expired, &resolve("k", Decision::Approve), late),
            Err(Error::Expired { .. })
        ));
        let audit = audit_record(&expired, late);
        assert_eq!(audit.action, "approval.expired");
    }
}
