//! The erasure conformance suite: erasing a thread or a run removes its runs, messages, events,
//! interactions and jobs in one step, keeps the tenant's usage totals with the calls unlinked,
//! is audited, refuses while a run has not ended, and stays inside its tenant.

use std::sync::Arc;
use std::time::Duration;

use forge_core::event::{RunEvent, RunEventKind};
use forge_core::id::{
    InteractionId, MessageId, ModelCallId, ThreadId, ToolCallId, UuidV7Generator,
};
use forge_core::interaction::{
    Decision, Interaction, InteractionRequest, InteractionStatus, Resolve, input_hash,
};
use forge_core::message::{Message, Role};
use forge_core::metering::{CallStatus, ModelCall, QuotaPeriod};
use forge_core::part::Part;
use forge_core::ports::audit::{AuditLog, AuditQuery};
use forge_core::ports::erasure::{DataErasure, ERASED_RUN, Erase, RUN_ERASED, THREAD_ERASED};
use forge_core::ports::interaction::{InteractionFilter, InteractionStore};
use forge_core::ports::queue::{ClaimFilter, JobQueue};
use forge_core::ports::store::{NewRun, NewThread, RunStore, StepCommit, ThreadStore};
use forge_core::ports::usage::{CallFilter, UsageLedger};
use forge_core::run::{Checkpoint, Run, RunStatus, WaitReason};
use forge_core::scope::{Scope, SystemScope};
use forge_core::time::{Clock, ManualClock, Timestamp};
use forge_core::usage::Usage;
use forge_core::{Error, ErrorKind};
use serde_json::json;

use crate::StoreFactory;
use crate::fixtures::{agent_ref, scope};

const TTL: Duration = Duration::from_secs(30);

struct World<F: StoreFactory> {
    store: Arc<F::Store>,
    clock: Arc<ManualClock>,
    scope: Scope,
    sys: SystemScope,
}

async fn world<F: StoreFactory>() -> World<F> {
    let clock = Arc::new(ManualClock::at_2026());
    World {
        store: F::make(clock.clone()).await,
        clock,
        scope: scope("tenant-a"),
        sys: SystemScope::new("conformance"),
    }
}

fn expect_kind<T: std::fmt::Debug>(r: Result<T, Error>, kind: ErrorKind, what: &str) {
    match r {
        Err(e) if e.kind() == kind => {}
        other => panic!("{what}: expected a {kind:?} error, got {other:?}"),
    }
}

impl<F: StoreFactory> World<F> {
    async fn thread(&self) -> ThreadId {
        self.store
            .create_thread(&self.scope, NewThread::default())
            .await
            .expect("create thread")
            .id
    }

    fn call(&self, run: &Run, step: u32, tokens: u64) -> ModelCall {
        let at = self.clock.now();
        let usage = Usage {
            input_tokens: tokens,
            output_tokens: tokens,
            ..Usage::default()
        };
        ModelCall {
            id: ModelCallId::generate(&UuidV7Generator),
            tenant_id: self.scope.tenant_id().clone(),
            run_id: run.id,
            step,
            attempt: 1,
            model: "openai:gpt-4o-mini".into(),
            at,
            period_start: QuotaPeriod::Day.start(at),
            estimate: usage,
            estimated_cost_micros: tokens,
            actual: Some(usage),
            cost_micros: Some(tokens),
            request_id: Some(format!("req-{}", run.id)),
            provider_model: None,
            holder: None,
            trace_id: None,
            status: CallStatus::Settled,
        }
    }

    fn message(&self, run: &Run, text: &str) -> Message {
        Message {
            id: MessageId::generate(&UuidV7Generator),
            run_id: run.id,
            role: Role::Assistant,
            parts: vec![Part::text(text)],
            created_at: self.clock.now(),
        }
    }

    /// Claims the run's job and leases the run, then commits one step ending in `status`.
    #[allow(clippy::too_many_arguments)]
    async fn step(
        &self,
        run: &Run,
        step: u32,
        status: RunStatus,
        text: &str,
        interactions: Vec<Interaction>,
        call: ModelCall,
    ) -> Run {
        let job = self
            .store
            .claim(&self.sys, "w1", TTL, &ClaimFilter::any())
            .await
            .expect("claim")
            .expect("the run's job");
        assert_eq!(job.run_id, run.id);
        let run = self.store.get_run(&self.scope, run.id).await.expect("run");
        let lease = self
            .store
            .acquire_lease(&self.scope, run.id, "w1", TTL)
            .await
            .expect("lease");
        self.store
            .commit_step(
                &self.scope,
                StepCommit {
                    run_id: run.id,
                    expected_version: run.version,
                    lease: lease.clone(),
                    events: vec![RunEvent {
                        run_id: run.id,
                        seq: run.last_seq + 1,
                        at: self.clock.now(),
                        kind: RunEventKind::StepStarted { step },
                    }],
                    messages: vec![self.message(&run, text)],
                    checkpoint: Checkpoint {
                        step,
                        ..Checkpoint::default()
                    },
                    status,
                    failure: None,
                    interactions,
                    audit: vec![],
                    settlements: vec![call],
                    state: None,
                    summary: None,
                    job: None,
                },
            )
            .await
            .expect("commit");
        self.store
            .release_lease(&self.scope, &lease)
            .await
            .expect("release");
        self.store
            .complete(&self.sys, &job)
            .await
            .expect("complete");
        self.store.get_run(&self.scope, run.id).await.expect("run")
    }

    /// A run on `thread` that ends completed, through an approval when `approve` is set.
    async fn finished_run(&self, thread: ThreadId, text: &str, approve: bool) -> Run {
        let run = self
            .store
            .create_run(
                &self.scope,
                NewRun::new(thread, agent_ref(), vec![Part::text(text)]),
            )
            .await
            .expect("create run");
        let run = if approve {
            let approval = Interaction {
                id: InteractionId::generate(&UuidV7Generator),
                tenant_id: run.tenant_id.clone(),
                run_id: run.id,
                thread_id: run.thread_id,
                step: 1,
                agent: run.agent.clone(),
                request: InteractionRequest::Approval {
                    tool_call_id: ToolCallId("call_send".into()),
                    tool_name: "send".into(),
                    input_hash: input_hash(&json!({"to": text})),
                    input: json!({"to": text}),
                    preview: Some(forge_core::interaction::ApprovalPreview::new(format!(
                        "Send to {text}"
                    ))),
                },
                status: InteractionStatus::Pending,
                resolution: None,
                created_at: self.clock.now(),
                expires_at: self.clock.now().plus(Duration::from_secs(3600)),
            };
            let parked = self
                .step(
                    &run,
                    1,
                    RunStatus::Waiting(WaitReason::Approval),
                    text,
                    vec![approval.clone()],
                    self.call(&run, 1, 10),
                )
                .await;
            self.store
                .resolve_interaction(
                    &self.scope,
                    Resolve {
                        id: approval.id,
                        decision: Decision::Approve,
                        actor: "bob".into(),
                        key: "k1".into(),
                        input_hash: None,
                    },
                )
                .await
                .expect("approve");
            parked
        } else {
            run
        };
        let step = if approve { 2 } else { 1 };
        let done = self
            .step(
                &run,
                step,
                RunStatus::Completed,
                text,
                vec![],
                self.call(&run, step, 100),
            )
            .await;
        assert_eq!(done.status, RunStatus::Completed);
        done
    }

    async fn calls(&self) -> Vec<ModelCall> {
        self.store
            .model_calls(
                &self.scope,
                CallFilter::Between(Timestamp::from_unix_millis(0).expect("epoch"), far()),
            )
            .await
            .expect("calls")
    }

    async fn audit(&self, action: &str) -> Vec<forge_core::ports::audit::AuditRecord> {
        self.store
            .query_audit(
                &self.scope,
                &AuditQuery {
                    action: Some(action.into()),
                    ..AuditQuery::latest(100)
                },
            )
            .await
            .expect("audit")
    }

    /// Messages, runs, events and interactions a run still has (`None` when the run is gone).
    async fn run_data(&self, run: &Run) -> Option<(usize, usize)> {
        let found = self.store.get_run(&self.scope, run.id).await;
        match found {
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let interactions = self
                    .store
                    .list_interactions(&self.scope, InteractionFilter::Run(run.id))
                    .await
                    .map(|i| i.len())
                    .unwrap_or(0);
                assert_eq!(interactions, 0, "an erased run keeps no interaction");
                let events = self
                    .store
                    .read_events(&self.scope, run.id, 0, 100)
                    .await
                    .map(|e| e.len())
                    .unwrap_or(0);
                assert_eq!(events, 0, "an erased run keeps no event");
                None
            }
            Err(e) => panic!("get run: {e}"),
            Ok(_) => {
                let events = self
                    .store
                    .read_events(&self.scope, run.id, 0, 100)
                    .await
                    .expect("events")
                    .len();
                let interactions = self
                    .store
                    .list_interactions(&self.scope, InteractionFilter::Run(run.id))
                    .await
                    .expect("interactions")
                    .len();
                Some((events, interactions))
            }
        }
    }
}

/// Seeds `store` with a thread of `scope` holding two completed runs whose input, messages and
/// approval carry `text` (one run through an approval, both with a settled model call): what an
/// adapter's own erasure tests can search for afterwards.
pub async fn finished_thread<F: StoreFactory>(
    store: Arc<F::Store>,
    clock: Arc<ManualClock>,
    scope: Scope,
    text: &str,
) -> ThreadId {
    let w = World::<F> {
        store,
        clock,
        scope,
        sys: SystemScope::new("conformance"),
    };
    let thread = w.thread().await;
    w.finished_run(thread, text, true).await;
    w.finished_run(thread, text, false).await;
    thread
}

fn far() -> Timestamp {
    Timestamp::from_unix_millis(4_102_444_800_000).expect("2100")
}

fn charged(calls: &[ModelCall]) -> (u64, u64) {
    calls.iter().fold((0, 0), |(t, c), call| {
        let (tt, cc) = call.charged();
        (t + tt, c + cc)
    })
}

/// A thread's erasure removes everything of its runs in one step, keeps the tenant's usage with
/// the calls unlinked, is audited with the counts, and leaves the tenant's other thread alone.
pub async fn erasing_a_thread_removes_its_runs_and_keeps_usage_totals<F: StoreFactory>() {
    let w = world::<F>().await;
    let doomed = w.thread().await;
    let kept = w.thread().await;
    let a = w.finished_run(doomed, "erase-me alpha", true).await;
    let b = w.finished_run(doomed, "erase-me beta", false).await;
    let other = w.finished_run(kept, "keep-me", false).await;
    let messages = w
        .store
        .list_messages(&w.scope, doomed)
        .await
        .expect("messages")
        .len();
    assert!(messages >= 3, "the runs wrote messages: {messages}");
    let (events_a, interactions_a) = w.run_data(&a).await.expect("run a");
    let (events_b, _) = w.run_data(&b).await.expect("run b");
    assert_eq!(interactions_a, 1);
    let before = w.calls().await;
    assert_eq!(before.len(), 4);
    let kept_messages = w.store.list_messages(&w.scope, kept).await.expect("kept");

    let erased = w
        .store
        .erase(&w.scope, Erase::Thread(doomed), "admin-1")
        .await
        .expect("erase the thread");
    assert_eq!(erased.threads, 1);
    assert_eq!(erased.runs, 2);
    assert_eq!(erased.messages, messages as u64);
    assert_eq!(erased.events, (events_a + events_b) as u64);
    assert_eq!(erased.interactions, 1);
    assert!(erased.jobs >= 3, "three jobs ran: {erased:?}");
    assert_eq!(erased.model_calls_unlinked, 3);

    expect_kind(
        w.store.get_thread(&w.scope, doomed).await,
        ErrorKind::NotFound,
        "the erased thread",
    );
    expect_kind(
        w.store.list_messages(&w.scope, doomed).await,
        ErrorKind::NotFound,
        "the erased thread's messages",
    );
    assert!(w.run_data(&a).await.is_none(), "run a is gone");
    assert!(w.run_data(&b).await.is_none(), "run b is gone");
    let after = w.calls().await;
    assert_eq!(after.len(), 4, "calls stay for the tenant's totals");
    assert_eq!(charged(&after), charged(&before), "the totals do not move");
    let unlinked: Vec<_> = after.iter().filter(|c| c.run_id == ERASED_RUN).collect();
    assert_eq!(unlinked.len(), 3);
    assert!(
        unlinked
            .iter()
            .all(|c| c.step == 0 && c.request_id.is_none()),
        "{unlinked:?}"
    );
    for run in [&a, &b] {
        assert!(
            w.store
                .model_calls(&w.scope, CallFilter::Run(run.id))
                .await
                .expect("calls of an erased run")
                .is_empty()
        );
    }
    let records = w.audit(THREAD_ERASED).await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].actor, "admin-1");
    assert_eq!(records[0].subject, format!("thread {doomed}"));
    assert_eq!(records[0].detail["runs"], 2);
    assert_eq!(records[0].detail["model_calls_unlinked"], 3);

    assert_eq!(
        w.store.list_messages(&w.scope, kept).await.expect("kept"),
        kept_messages
    );
    assert!(
        w.run_data(&other).await.is_some(),
        "the other thread's run stays"
    );
    expect_kind(
        w.store
            .erase(&w.scope, Erase::Thread(doomed), "admin-1")
            .await,
        ErrorKind::NotFound,
        "erasing it again",
    );
}

/// A run's erasure removes that run's messages and records and nothing else of its thread.
pub async fn erasing_a_run_leaves_the_rest_of_its_thread<F: StoreFactory>() {
    let w = world::<F>().await;
    let thread = w.thread().await;
    let kept = w.finished_run(thread, "keep-me", true).await;
    let doomed = w.finished_run(thread, "erase-me", false).await;
    let all = w.store.list_messages(&w.scope, thread).await.expect("all");
    let kept_before = w.run_data(&kept).await.expect("kept run");

    let erased = w
        .store
        .erase(&w.scope, Erase::Run(doomed.id), "admin-1")
        .await
        .expect("erase the run");
    assert_eq!(erased.threads, 0);
    assert_eq!(erased.runs, 1);
    assert_eq!(erased.model_calls_unlinked, 1);
    let left = w.store.list_messages(&w.scope, thread).await.expect("left");
    assert_eq!(
        left,
        all.iter()
            .filter(|m| m.run_id != doomed.id)
            .cloned()
            .collect::<Vec<_>>()
    );
    assert_eq!(erased.messages, (all.len() - left.len()) as u64);
    assert!(erased.messages >= 1);
    assert!(w.run_data(&doomed).await.is_none());
    assert_eq!(w.run_data(&kept).await, Some(kept_before));
    w.store.get_thread(&w.scope, thread).await.expect("thread");
    let runs = w.store.list_runs(&w.scope, thread).await.expect("runs");
    assert_eq!(runs.iter().map(|r| r.id).collect::<Vec<_>>(), vec![kept.id]);
    let records = w.audit(RUN_ERASED).await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].subject, format!("run {}", doomed.id));
}

/// Nothing is erased while a run of it is queued, running or waiting.
pub async fn a_run_that_has_not_ended_cannot_be_erased<F: StoreFactory>() {
    let w = world::<F>().await;
    let thread = w.thread().await;
    let done = w.finished_run(thread, "done", false).await;
    let pending = w
        .store
        .create_run(
            &w.scope,
            NewRun::new(thread, agent_ref(), vec![Part::text("pending")]),
        )
        .await
        .expect("a queued run");
    let messages = w.store.list_messages(&w.scope, thread).await.expect("m");
    for target in [Erase::Thread(thread), Erase::Run(pending.id)] {
        expect_kind(
            w.store.erase(&w.scope, target, "admin-1").await,
            ErrorKind::Conflict,
            "erasing what has a queued run",
        );
    }
    assert_eq!(
        w.store.list_messages(&w.scope, thread).await.expect("m"),
        messages,
        "nothing was removed"
    );
    assert!(w.run_data(&done).await.is_some());
    w.store
        .get_run(&w.scope, pending.id)
        .await
        .expect("pending");
    assert!(w.audit("thread.").await.is_empty());
    assert!(w.audit("run.erased").await.is_empty());
    // The ended run alone may go, though its thread is busy.
    w.store
        .erase(&w.scope, Erase::Run(done.id), "admin-1")
        .await
        .expect("erase the ended run");
}

/// Another tenant cannot erase, or learn of, a tenant's thread or run.
pub async fn erasure_is_confined_to_its_tenant<F: StoreFactory>() {
    let w = world::<F>().await;
    let thread = w.thread().await;
    let run = w.finished_run(thread, "mine", false).await;
    let intruder = scope("tenant-b");
    for target in [Erase::Thread(thread), Erase::Run(run.id)] {
        expect_kind(
            w.store.erase(&intruder, target, "mallory").await,
            ErrorKind::NotFound,
            "another tenant's erasure",
        );
    }
    assert!(w.run_data(&run).await.is_some());
    assert_eq!(w.calls().await.len(), 1);
    assert!(w.calls().await.iter().all(|c| c.run_id == run.id));
    assert!(
        w.store
            .query_audit(
                &intruder,
                &AuditQuery {
                    ..AuditQuery::latest(10)
                },
            )
            .await
            .expect("audit")
            .is_empty()
    );
}
