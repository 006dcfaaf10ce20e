//! Running a step's tool calls ([`ToolExecutor`]): concurrently, each in a `tool.call` span,
//! within the run's timeout and output limits, the lease made sure of immediately before a tool
//! acts. Every registered tool — the built-ins too — is called the same way, with a
//! `ToolContext` carrying the step's session state; a citation the built-in `cite` passed is
//! kept beside its result; every result is scrubbed of secrets and marked untrusted.

use std::sync::Arc;
use std::time::Duration;

use forge_core::agent::RunLimits;
use forge_core::audit::AuditRecord;
use forge_core::id::IdempotencyKey;
use forge_core::interaction::input_hash;
use forge_core::part::{Part, ToolCallPart, ToolResultPart, Trust};
use forge_core::ports::store::RunStore;
use forge_core::ports::tool::{Session, ToolClassification, ToolContext};
use forge_core::redact::Redactor;
use forge_core::scope::Scope;
use forge_core::telemetry::Telemetry;
use forge_core::time::Clock;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::execution::Execution;
use crate::plan::Prepared;
use crate::state::StepDraft;
use crate::tools::ToolRegistry;

/// Runs one run's tool calls in `scope`.
pub(crate) struct ToolExecutor<'a> {
    pub(crate) scope: &'a Scope,
    pub(crate) limits: &'a RunLimits,
    pub(crate) tools: &'a ToolRegistry,
    /// Whether the deployment checks citations: a passed call of the built-in `cite` then adds
    /// its citation to the tool message.
    pub(crate) citations: bool,
    pub(crate) redactor: &'a Redactor,
    pub(crate) telemetry: &'a Telemetry,
    pub(crate) runs: &'a dyn RunStore,
    pub(crate) clock: &'a dyn Clock,
    pub(crate) cancel: &'a CancellationToken,
}

impl ToolExecutor<'_> {
    /// The audit entries of the step's calls, written by its commit: each denial, and each
    /// external write about to run.
    pub(crate) fn audit(&self, cur: &Execution<'_>, prepared: &[Prepared]) -> Vec<AuditRecord> {
        let mut audit = self.denials(cur, prepared);
        audit.extend(self.external_writes(cur, prepared));
        audit
    }

    /// Audit entries for the calls policy denied (or that named a tool this run may not see).
    fn denials(&self, cur: &Execution<'_>, prepared: &[Prepared]) -> Vec<AuditRecord> {
        let now = self.clock.now();
        prepared
            .iter()
            .filter_map(|p| match p {
                Prepared::Denied { call, reason, .. } => Some(AuditRecord {
                    tenant_id: cur.run().tenant_id.clone(),
                    at: now,
                    actor: self.scope.principal_id().as_str().to_owned(),
                    action: "tool.denied".into(),
                    subject: format!("tool call {}", call.tool_call_id),
                    detail: json!({
                        "run_id": cur.run().id,
                        // The model may invent any name: keep at most a name's length of it.
                        "tool_name": call.tool_name.chars().take(64).collect::<String>(),
                        "input_hash": input_hash(&call.input),
                        "reason": reason,
                    }),
                }),
                _ => None,
            })
            .collect()
    }

    /// Audit entries for the external writes among `prepared` (before they run).
    fn external_writes(&self, cur: &Execution<'_>, prepared: &[Prepared]) -> Vec<AuditRecord> {
        let now = self.clock.now();
        prepared
            .iter()
            .filter_map(|p| match p {
                Prepared::Run { call } => Some(call),
                _ => None,
            })
            .filter(|call| {
                self.tools.get(&call.tool_name).is_some_and(|r| {
                    r.tool.spec().classification == ToolClassification::ExternalWrite
                })
            })
            .map(|call| AuditRecord {
                tenant_id: cur.run().tenant_id.clone(),
                at: now,
                actor: self.scope.principal_id().as_str().to_owned(),
                action: "tool.external_write".into(),
                subject: format!("tool call {}", call.tool_call_id),
                detail: json!({
                    "run_id": cur.run().id,
                    "tool_name": call.tool_name,
                    "input_hash": input_hash(&call.input),
                    "idempotency_key": IdempotencyKey::for_tool_call(cur.run().id, &call.tool_call_id),
                }),
            })
            .collect()
    }

    /// The version of the tool `call` names, recorded with its result.
    fn version(&self, call: &ToolCallPart) -> Option<String> {
        self.tools
            .get(&call.tool_name)
            .map(|r| r.tool.spec().version.clone())
    }

    /// Runs the valid calls concurrently; `None` when cancelled first. A call whose lease check
    /// fails does not run; the first such error is put in `lost`.
    pub(crate) async fn execute(
        &self,
        cur: &Execution<'_>,
        prepared: Vec<Prepared>,
        draft: &Arc<StepDraft>,
        lost: &parking_lot::Mutex<Option<forge_core::Error>>,
    ) -> Option<Vec<Part>> {
        let futures = prepared.into_iter().map(|p| self.one(cur, p, draft, lost));
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => None,
            results = futures_util::future::join_all(futures) => Some(results.into_iter().flatten().collect()),
        }
    }

    /// Runs one prepared call (or answers it as prepared) in its span: the parts it adds to the
    /// tool message.
    async fn one(
        &self,
        cur: &Execution<'_>,
        p: Prepared,
        draft: &Arc<StepDraft>,
        lost: &parking_lot::Mutex<Option<forge_core::Error>>,
    ) -> Vec<Part> {
        let t = self.telemetry;
        let (tool, denied) = match &p {
            Prepared::Refused { call, .. }
            | Prepared::Answered { call, .. }
            | Prepared::Run { call } => (call.tool_name.clone(), false),
            Prepared::Denied { call, .. } => (call.tool_name.clone(), true),
        };
        let span = t.span(
            forge_core::telemetry::SpanName::ToolCall,
            forge_core::telemetry::Parent::Span(cur.step_span()),
        );
        span.set("tool", tool.as_str().into());
        let (call, result, tool_version) = match p {
            Prepared::Refused {
                call,
                code,
                message,
            } => (call, Err((code, message)), None),
            Prepared::Denied { call, message, .. } => (call, Err(("forbidden", message)), None),
            Prepared::Answered { call, output } => (call, Ok(output), None),
            Prepared::Run { call } => {
                let result = self.invoke(cur, &call, draft, lost).await;
                let version = self.version(&call);
                (call, result, version)
            }
        };
        let outcome = match (&result, denied) {
            (_, true) => "denied",
            (Ok(_), _) => "ok",
            (Err(_), _) => "error",
        };
        if let Err((code, _)) = &result {
            span.fail(code);
            t.meter.record(
                forge_core::telemetry::Instrument::ToolErrors,
                1.0,
                &[("tool", &tool), ("code", code)],
            );
        }
        t.meter.record(
            forge_core::telemetry::Instrument::ToolCalls,
            1.0,
            &[("tool", &tool), ("outcome", outcome)],
        );
        span.set("outcome", outcome.into());
        span.end();
        let (mut output, is_error) = match result {
            Ok(out) => (out, false),
            Err((code, message)) => (json!({ "code": code, "message": message }), true),
        };
        // Secrets never enter the prompt, the store or an observer through a tool result.
        self.redactor.redact_json(&mut output);
        // A citation the built-in `cite` checked is kept beside its result.
        let citation = (self.citations && call.tool_name == crate::cite::CITE && !is_error)
            .then(|| crate::cite::citation_of(&call.input));
        let result = Part::ToolResult(ToolResultPart {
            tool_call_id: call.tool_call_id,
            tool_name: call.tool_name,
            output,
            is_error,
            trust: Trust::Untrusted,
            tool_version,
        });
        crate::cite::with_citation(result, citation)
    }

    /// Calls the tool `call` names within the run's timeout and output limit, with the step's
    /// session `draft`, its lease made sure of immediately before; a lost lease is put in
    /// `lost`.
    async fn invoke(
        &self,
        cur: &Execution<'_>,
        call: &ToolCallPart,
        draft: &Arc<StepDraft>,
        lost: &parking_lot::Mutex<Option<forge_core::Error>>,
    ) -> Result<serde_json::Value, (&'static str, String)> {
        let timeout = Duration::from_millis(self.limits.tool_timeout_ms);
        let max_out = self.limits.max_tool_output_bytes;
        let ctx = ToolContext {
            scope: self.scope.clone(),
            run_id: cur.run().id,
            thread_id: cur.run().thread_id,
            tool_call_id: call.tool_call_id.clone(),
            idempotency_key: IdempotencyKey::for_tool_call(cur.run().id, &call.tool_call_id),
            lease_token: cur.lease().token,
            timeout,
            max_output_bytes: max_out,
            session: Some(Session(draft.clone())),
        };
        let result = match self.tools.get(&call.tool_name) {
            None => Err((
                "unknown_tool",
                format!("there is no tool named {:?}", call.tool_name),
            )),
            // Immediately before the tool acts: a frozen process that lost the run
            // must not act a second time beside the new holder.
            Some(_) if let Err(e) = cur.ensure_lease(self.runs, self.clock, self.scope).await => {
                let mut first = lost.lock();
                first.get_or_insert(e);
                Err(("lease_lost", "the run's lease was lost".to_owned()))
            }
            Some(r) => {
                match tokio::time::timeout(timeout, r.tool.call(&ctx, call.input.clone())).await {
                    Err(_) => Err((
                        "tool_timeout",
                        format!("the tool did not finish within {} ms", timeout.as_millis()),
                    )),
                    Ok(Err(e)) => Err((e.code(), e.to_string())),
                    Ok(Ok(out)) => Ok(out),
                }
            }
        };
        result.and_then(|out| {
            let size = serde_json::to_vec(&out)
                .map(|v| v.len())
                .unwrap_or(usize::MAX);
            if size > max_out {
                Err((
                    "output_too_large",
                    format!("tool output is {size} bytes; the limit is {max_out}"),
                ))
            } else {
                Ok(out)
            }
        })
    }
}
