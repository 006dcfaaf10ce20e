//! Fixtures built from the real types.

use forge_core::agent::AgentRef;
use forge_core::event::{RunEvent, RunEventKind};
use forge_core::message::Message;
use forge_core::part::Part;
use forge_core::ports::store::{NewRun, NewThread, RunStore, StepCommit, ThreadStore};
use forge_core::run::{Checkpoint, Run, RunLease, RunStatus};
use forge_core::scope::Scope;
use forge_core::time::Timestamp;

/// A scope in tenant `tenant` for principal `user-1` with role `member`.
pub fn scope(tenant: &str) -> Scope {
    Scope::parse(tenant, "user-1", &["member"]).expect("fixture scope ids are valid")
}

/// The agent reference used by fixtures.
pub fn agent_ref() -> AgentRef {
    AgentRef {
        name: "fixture-agent".into(),
        version: "1".into(),
    }
}

/// The common step `step` of `run` under `lease` at `at`: one `step.started` event after the
/// log, `messages`, the run still running, and nothing beside the log.
pub fn step(
    run: &Run,
    lease: &RunLease,
    step: u32,
    messages: Vec<Message>,
    at: Timestamp,
) -> StepCommit {
    StepCommit {
        run_id: run.id,
        expected_version: run.version,
        lease: lease.clone(),
        events: vec![RunEvent {
            run_id: run.id,
            seq: run.last_seq + 1,
            at,
            kind: RunEventKind::StepStarted { step },
        }],
        messages,
        checkpoint: Checkpoint {
            step,
            ..Checkpoint::default()
        },
        status: RunStatus::Running,
        failure: None,
        interactions: vec![],
        audit: vec![],
        settlements: vec![],
        state: None,
        summary: None,
        job: None,
    }
}

/// A run of [`agent_ref`] with the input `hi`, on a new thread of `scope`'s tenant.
pub async fn run_on_new_thread<S: ThreadStore + RunStore>(store: &S, scope: &Scope) -> Run {
    let thread = store
        .create_thread(scope, NewThread::default())
        .await
        .expect("create a thread");
    let new = NewRun::new(thread.id, agent_ref(), vec![Part::text("hi")]);
    store.create_run(scope, new).await.expect("create a run")
}
