//! Erasing a tenant's conversation data: a thread, or one run of it, with everything recorded
//! about it, in one transaction with its audit record.
//!
//! What goes: the runs (their checkpoints and input), their messages, committed events,
//! interactions, queue jobs and request keys, and — for a thread — the thread itself with its
//! session state.
//! What stays: the tenant's usage totals. A model call of an erased run keeps its tokens and cost
//! (the tenant's bill, rollups and quota do not change) but loses every link to what it served:
//! [`unlinked`] replaces its run with [`ERASED_RUN`] and drops its step, attempt and the
//! provider's request id. The audit trail, append-only and free of content, keeps its records
//! and gains one for the erasure ([`THREAD_ERASED`] or [`RUN_ERASED`]) with the counts.
//!
//! Nothing that has not ended may be erased: a run that is queued, running or waiting makes the
//! erasure a [`crate::Error::ThreadBusy`] (cancel it first), and nothing is removed.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::id::{RunId, ThreadId};
use crate::metering::ModelCall;
use crate::ports::audit::AuditRecord;
use crate::run::RunStatus;
use crate::scope::Scope;
use crate::time::Timestamp;

/// The audit action of an erased thread.
pub const THREAD_ERASED: &str = "thread.erased";
/// The audit action of an erased run.
pub const RUN_ERASED: &str = "run.erased";
/// The run an erased run's model calls are attributed to: the nil id, which no run has.
pub const ERASED_RUN: RunId = RunId(uuid::Uuid::nil());

/// What to erase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Erase {
    /// A thread, its session state and all its runs.
    Thread(ThreadId),
    /// One run: its messages, events, interactions and jobs.
    Run(RunId),
}

impl Erase {
    /// The audit action for this target.
    pub fn action(&self) -> &'static str {
        match self {
            Erase::Thread(_) => THREAD_ERASED,
            Erase::Run(_) => RUN_ERASED,
        }
    }

    /// The audit subject (`thread …` or `run …`).
    pub fn subject(&self) -> String {
        match self {
            Erase::Thread(id) => format!("thread {id}"),
            Erase::Run(id) => format!("run {id}"),
        }
    }

    /// Whether erasing this removes a request key of `kind` claimed as `claim`
    /// ([`crate::ports::keys`]): a thread's erasure removes the keys of the thread and of its
    /// runs, a run's erasure the run's key.
    pub fn erases_key(
        &self,
        kind: crate::ports::keys::KeyKind,
        claim: &crate::ports::keys::KeyClaim,
    ) -> bool {
        match self {
            Erase::Thread(id) => claim.thread_id == *id,
            Erase::Run(id) => kind == crate::ports::keys::KeyKind::Run && claim.id == id.0,
        }
    }

    /// The error for a target that does not exist in the scope.
    pub fn not_found(&self) -> Error {
        match self {
            Erase::Thread(id) => Error::not_found("thread", id),
            Erase::Run(id) => Error::not_found("run", id),
        }
    }
}

/// How much an erasure removed (and, for model calls, unlinked).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Erased {
    /// Threads removed (0 or 1).
    pub threads: u64,
    /// Runs removed.
    pub runs: u64,
    /// Messages removed.
    pub messages: u64,
    /// Committed run events removed.
    pub events: u64,
    /// Approvals and questions removed.
    pub interactions: u64,
    /// Queue jobs removed.
    pub jobs: u64,
    /// Model calls kept for the tenant's totals with their link to the run removed.
    pub model_calls_unlinked: u64,
}

/// Port: erasing conversation data.
#[async_trait]
pub trait DataErasure: Send + Sync {
    /// Erases `target` as the module describes, appending the audit record by `actor` in the
    /// same transaction. [`Error::NotFound`] when it does not exist in `scope`'s tenant;
    /// [`Error::ThreadBusy`] when a run of it has not ended.
    async fn erase(&self, scope: &Scope, target: Erase, actor: &str) -> Result<Erased, Error>;
}

/// Refuses an erasure while any of `runs` (id and status) has not ended, or while the thread
/// names an active run: every adapter's rule.
pub fn check_ended(
    thread: ThreadId,
    active_run: Option<RunId>,
    runs: &[(RunId, RunStatus)],
) -> Result<(), Error> {
    let busy = active_run.or_else(|| {
        runs.iter()
            .find(|(_, status)| !status.is_terminal())
            .map(|(id, _)| *id)
    });
    match busy {
        Some(active) => Err(Error::ThreadBusy {
            thread: thread.to_string(),
            active: active.to_string(),
        }),
        None => Ok(()),
    }
}

/// `call` with its link to the erased run removed; its usage, cost, model and status stay.
pub fn unlinked(mut call: ModelCall) -> ModelCall {
    call.run_id = ERASED_RUN;
    call.step = 0;
    call.attempt = 0;
    call.request_id = None;
    call
}

/// The audit record of an erasure.
pub fn audit_record(
    scope: &Scope,
    target: Erase,
    actor: &str,
    at: Timestamp,
    erased: &Erased,
) -> AuditRecord {
    AuditRecord {
        tenant_id: scope.tenant_id().clone(),
        at,
        actor: actor.to_owned(),
        action: target.action().into(),
        subject: target.subject(),
        detail: serde_json::to_value(erased).unwrap_or(serde_json::Value::Null),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u128) -> RunId {
        RunId(uuid::Uuid::from_u128(n))
    }

    #[test]
    fn only_ended_runs_may_be_erased() {
        let thread = ThreadId(uuid::Uuid::from_u128(9));
        assert!(check_ended(thread, None, &[]).is_ok());
        assert!(
            check_ended(
                thread,
                None,
                &[(ids(1), RunStatus::Completed), (ids(2), RunStatus::Failed)]
            )
            .is_ok()
        );
        let busy = check_ended(
            thread,
            None,
            &[
                (ids(1), RunStatus::Completed),
                (ids(2), RunStatus::Waiting(crate::run::WaitReason::Approval)),
            ],
        )
        .unwrap_err();
        assert!(busy.to_string().contains(&ids(2).to_string()), "{busy}");
        assert_eq!(busy.kind(), crate::ErrorKind::Conflict);
        assert!(check_ended(thread, Some(ids(3)), &[]).is_err());
    }
}
