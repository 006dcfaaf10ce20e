//! Upgrading in place: what a database created by an earlier build holds ([`fill`]), and all of
//! it read back as text ([`readback`]), so that a store adapter's test can open a database an
//! earlier build filled and wrote the readback of, migrate it with this build, and compare.

use std::sync::Arc;

use forge_core::ports::audit::AuditLog;
use forge_core::ports::store::{RunStore, ThreadStore};
use forge_core::ports::usage::{CallFilter, UsageLedger};
use forge_core::run::RunQuery;
use forge_core::time::ManualClock;

use crate::StoreFactory;
use crate::fixtures::scope;

/// The tenant [`fill`] writes and [`readback`] reads.
pub const TENANT: &str = "tenant-upgrade";

/// Fills `store` with two threads of finished runs (messages, events, an approval, settled model
/// calls, audit records), all of tenant [`TENANT`].
pub async fn fill<F: StoreFactory>(store: Arc<F::Store>, clock: Arc<ManualClock>) {
    for text in ["upgrade alpha", "upgrade beta — ünïcödé"] {
        crate::erasure::finished_thread::<F>(store.clone(), clock.clone(), scope(TENANT), text)
            .await;
    }
}

/// Everything of tenant [`TENANT`] that `store` holds, one fact a line: each run (oldest first)
/// with its events and model calls, each thread with its messages, and the audit trail.
pub async fn readback<S>(store: &S) -> String
where
    S: ThreadStore + RunStore + UsageLedger + AuditLog,
{
    let scope = scope(TENANT);
    let query = RunQuery::newest(1000);
    let mut runs = store.query_runs(&scope, &query).await.expect("runs");
    runs.reverse();
    let mut lines = Vec::new();
    let mut threads = Vec::new();
    for run in &runs {
        lines.push(format!(
            "run {} thread {} agent {}@{} status {:?} version {} last_seq {} input {}",
            run.id,
            run.thread_id,
            run.agent.name,
            run.agent.version,
            run.status,
            run.version,
            run.last_seq,
            serde_json::to_string(&run.input).expect("input"),
        ));
        for event in store
            .read_events(&scope, run.id, 0, 10_000)
            .await
            .expect("events")
        {
            lines.push(format!(
                "  event {} at {} {}",
                event.seq,
                event.at,
                serde_json::to_string(&event.kind).expect("event")
            ));
        }
        for call in store
            .model_calls(&scope, CallFilter::Run(run.id))
            .await
            .expect("calls")
        {
            lines.push(format!(
                "  call {} step {} {} {:?} cost {:?} tokens {:?}",
                call.id,
                call.step,
                call.model,
                call.status,
                call.cost_micros,
                call.actual.map(|u| (u.input_tokens, u.output_tokens)),
            ));
        }
        if !threads.contains(&run.thread_id) {
            threads.push(run.thread_id);
        }
    }
    for id in threads {
        let thread = store.get_thread(&scope, id).await.expect("thread");
        lines.push(format!(
            "thread {} title {:?} active {:?} state {}",
            thread.id,
            thread.title,
            thread.active_run,
            serde_json::to_string(&thread.state).expect("state"),
        ));
        for message in store.list_messages(&scope, id).await.expect("messages") {
            lines.push(format!(
                "  message {} run {} {:?} {}",
                message.id,
                message.run_id,
                message.role,
                serde_json::to_string(&message.parts).expect("parts"),
            ));
        }
    }
    for record in store.list_audit(&scope, 1000).await.expect("audit") {
        lines.push(format!(
            "audit {} {} {} {} {}",
            record.at, record.actor, record.action, record.subject, record.detail
        ));
    }
    lines.join("\n") + "\n"
}
