//! The interaction conformance suite: approvals and questions created by a parking commit,
//! resolved exactly once (idempotent by key, one winner among racers), bound to their call,
//! expiring with a clear error, audited, and readying the run when the last one is settled.

use std::sync::Arc;
use std::time::Duration;

use forge_core::event::{RunEvent, RunEventKind};
use forge_core::id::{InteractionId, ToolCallId, UuidV7Generator};
use forge_core::interaction::{
    Decision, Interaction, InteractionRequest, InteractionStatus, Resolve, input_hash,
};
use forge_core::part::Part;
use forge_core::ports::audit::AuditLog;
use forge_core::ports::interaction::{InteractionFilter, InteractionStore};
use forge_core::ports::queue::{ClaimFilter, JobQueue};
use forge_core::ports::store::{NewRun, NewThread, RunStore, StepCommit, ThreadStore};
use forge_core::run::{Checkpoint, Run, RunStatus, WaitReason};
use forge_core::scope::{Scope, SystemScope};
use forge_core::time::{Clock, ManualClock};
use forge_core::{Error, ErrorKind};
use serde_json::json;

use crate::StoreFactory;
use crate::fixtures::{agent_ref, scope};

const TTL: Duration = Duration::from_secs(30);
const ANSWER_WINDOW: Duration = Duration::from_secs(3600);

struct Parked<F: StoreFactory> {
    store: Arc<F::Store>,
    clock: Arc<ManualClock>,
    scope: Scope,
    run: Run,
    approval: Interaction,
    question: Interaction,
}

fn expect_kind<T: std::fmt::Debug>(r: Result<T, Error>, kind: ErrorKind, what: &str) -> Error {
    match r {
        Err(e) if e.kind() == kind => e,
        other => panic!("{what}: expected a {kind:?} error, got {other:?}"),
    }
}

pub(crate) fn interaction(
    run: &Run,
    request: InteractionRequest,
    now: forge_core::time::Timestamp,
) -> Interaction {
    Interaction {
        id: InteractionId::generate(&UuidV7Generator),
        tenant_id: run.tenant_id.clone(),
        run_id: run.id,
        thread_id: run.thread_id,
        step: 1,
        agent: run.agent.clone(),
        request,
        status: InteractionStatus::Pending,
        resolution: None,
        created_at: now,
        expires_at: now.plus(ANSWER_WINDOW),
    }
}

/// A run whose first step raised an approval and a question and parked it; its first job is done.
async fn parked<F: StoreFactory>() -> Parked<F> {
    parked_with::<F>(true).await.0
}

/// Like [`parked`]; without `complete`, the parking worker's job is still claimed (returned).
async fn parked_with<F: StoreFactory>(
    complete: bool,
) -> (Parked<F>, forge_core::ports::queue::ClaimedJob) {
    let clock = Arc::new(ManualClock::at_2026());
    let store = F::make(clock.clone()).await;
    let scope = scope("tenant-a");
    let sys = SystemScope::new("conformance");
    let thread = store
        .create_thread(&scope, NewThread::default())
        .await
        .expect("create thread");
    let run = store
        .create_run(
            &scope,
            NewRun::new(thread.id, agent_ref(), vec![Part::text("pay 5")]),
        )
        .await
        .expect("create run");
    let job = store
        .claim(&sys, "w1", TTL, &ClaimFilter::any())
        .await
        .expect("claim")
        .expect("the run's job");
    let lease = store
        .acquire_lease(&scope, run.id, "w1", TTL)
        .await
        .expect("lease");
    let now = clock.now();
    let approval = interaction(
        &run,
        InteractionRequest::Approval {
            tool_call_id: ToolCallId("call_pay".into()),
            tool_name: "pay".into(),
            input_hash: input_hash(&json!({"amount": 5})),
            input: json!({"amount": 5}),
            // Stored with the interaction: the pending list below reads it back whole.
            preview: Some(
                forge_core::interaction::ApprovalPreview::new("Pay 5 € to Zoë")
                    .fact("Amount", "5 €")
                    .change("balance 10 €", "balance 5 €"),
            ),
        },
        now,
    );
    let question = interaction(
        &run,
        InteractionRequest::Question {
            tool_call_id: ToolCallId("call_ask".into()),
            prompt: "Which account?".into(),
            answer_schema: json!({"type": "string"}),
        },
        now,
    );
    store
        .commit_step(
            &scope,
            StepCommit {
                run_id: run.id,
                expected_version: run.version,
                lease: lease.clone(),
                events: vec![RunEvent {
                    run_id: run.id,
                    seq: run.last_seq + 1,
                    at: now,
                    kind: RunEventKind::StepStarted { step: 1 },
                }],
                messages: vec![],
                checkpoint: Checkpoint {
                    step: 1,
                    ..Checkpoint::default()
                },
                status: RunStatus::Waiting(WaitReason::Approval),
                failure: None,
                interactions: vec![approval.clone(), question.clone()],
                audit: vec![],
                settlements: vec![],
                state: None,
                summary: None,
                job: None,
            },
        )
        .await
        .expect("the parking commit");
    store.release_lease(&scope, &lease).await.expect("release");
    if complete {
        store.complete(&sys, &job).await.expect("complete the job");
    }
    let run = store.get_run(&scope, run.id).await.expect("run");
    (
        Parked {
            store,
            clock,
            scope,
            run,
            approval,
            question,
        },
        job,
    )
}

fn resolve(id: InteractionId, key: &str, decision: Decision) -> Resolve {
    Resolve {
        id,
        decision,
        actor: "bob".into(),
        key: key.into(),
        input_hash: None,
    }
}

impl<F: StoreFactory> Parked<F> {
    async fn claimable(&self) -> bool {
        let sys = SystemScope::new("conformance");
        match self
            .store
            .claim(&sys, "w2", TTL, &ClaimFilter::any())
            .await
            .expect("claim")
        {
            Some(job) => {
                assert_eq!(job.run_id, self.run.id, "only the parked run has jobs");
                true
            }
            None => false,
        }
    }

    async fn actions(&self) -> Vec<String> {
        self.store
            .list_audit(&self.scope, 100)
            .await
            .expect("audit")
            .into_iter()
            .map(|r| r.action)
            .collect()
    }
}

/// A parking commit creates the interactions; each is resolved once (a repeat with its key returns
/// the first outcome, another key is refused); settling the last one readies the run; decisions
/// are audited; other tenants see nothing.
pub async fn interactions_resolve_once_and_resume<F: StoreFactory>() {
    let p = parked::<F>().await;
    assert_eq!(p.run.status, RunStatus::Waiting(WaitReason::Approval));
    let pending = p
        .store
        .list_interactions(&p.scope, InteractionFilter::Pending)
        .await
        .expect("pending");
    assert_eq!(pending, vec![p.approval.clone(), p.question.clone()]);
    assert_eq!(
        p.store
            .list_interactions(&p.scope, InteractionFilter::Run(p.run.id))
            .await
            .expect("by run"),
        pending
    );
    assert!(!p.claimable().await, "a waiting run has no job");

    let other = scope("tenant-b");
    expect_kind(
        p.store.get_interaction(&other, p.approval.id).await,
        ErrorKind::NotFound,
        "another tenant's interaction",
    );
    expect_kind(
        p.store
            .resolve_interaction(&other, resolve(p.approval.id, "k", Decision::Approve))
            .await,
        ErrorKind::NotFound,
        "resolving another tenant's interaction",
    );
    assert!(
        p.store
            .list_interactions(&other, InteractionFilter::Pending)
            .await
            .expect("other tenant's pending")
            .is_empty()
    );

    let first = p
        .store
        .resolve_interaction(&p.scope, resolve(p.approval.id, "k1", Decision::Approve))
        .await
        .expect("approve");
    assert!(
        !first.replayed && !first.resumed,
        "the question is still pending"
    );
    assert_eq!(first.interaction.status, InteractionStatus::Resolved);
    let again = p
        .store
        .resolve_interaction(&p.scope, resolve(p.approval.id, "k1", Decision::Approve))
        .await
        .expect("the same key again");
    assert!(again.replayed, "a repeat with the same key is a replay");
    assert_eq!(again.interaction, first.interaction);
    expect_kind(
        p.store
            .resolve_interaction(
                &p.scope,
                resolve(p.approval.id, "k2", Decision::Reject { reason: None }),
            )
            .await,
        ErrorKind::Conflict,
        "a second decision under another key",
    );
    assert_eq!(
        p.store
            .get_interaction(&p.scope, p.approval.id)
            .await
            .expect("get"),
        first.interaction,
        "the refused decision changed nothing"
    );
    assert!(!p.claimable().await, "one interaction is still pending");

    let answered = p
        .store
        .resolve_interaction(
            &p.scope,
            resolve(
                p.question.id,
                "k3",
                Decision::Answer {
                    answer: json!("savings"),
                },
            ),
        )
        .await
        .expect("answer");
    assert!(answered.resumed, "the last settlement readies the run");
    assert!(p.claimable().await, "the run has a ready job again");
    assert!(!p.claimable().await, "exactly one job");
    let actions = p.actions().await;
    assert!(
        actions.contains(&"approval.approved".to_owned()),
        "{actions:?}"
    );
    assert!(
        actions.contains(&"question.answered".to_owned()),
        "{actions:?}"
    );
    assert_eq!(
        actions
            .iter()
            .filter(|a| a.starts_with("approval."))
            .count(),
        1,
        "replays and refusals are not decisions: {actions:?}"
    );
}

/// An approval names the input it approves: another input hash is refused, as is a decision of
/// the wrong kind; neither changes anything.
pub async fn interactions_are_bound_to_their_call<F: StoreFactory>() {
    let p = parked::<F>().await;
    let mut replayed = resolve(p.approval.id, "k", Decision::Approve);
    replayed.input_hash = Some(input_hash(&json!({"amount": 5000})));
    expect_kind(
        p.store.resolve_interaction(&p.scope, replayed).await,
        ErrorKind::Invalid,
        "an approval for another input",
    );
    expect_kind(
        p.store
            .resolve_interaction(
                &p.scope,
                resolve(p.approval.id, "k", Decision::Answer { answer: json!(1) }),
            )
            .await,
        ErrorKind::Invalid,
        "an answer to an approval",
    );
    expect_kind(
        p.store
            .resolve_interaction(&p.scope, resolve(p.question.id, "k", Decision::Approve))
            .await,
        ErrorKind::Invalid,
        "an approval of a question",
    );
    assert_eq!(
        p.store
            .get_interaction(&p.scope, p.approval.id)
            .await
            .expect("get")
            .status,
        InteractionStatus::Pending
    );
    let mut same = resolve(p.approval.id, "k", Decision::Approve);
    same.input_hash = Some(input_hash(&json!({"amount": 5})));
    p.store
        .resolve_interaction(&p.scope, same)
        .await
        .expect("the approval of the exact call");
}

/// Past its deadline an interaction cannot be resolved (a clear `Expired` error); it is stored
/// expired, audited, and the run goes on. The sweep expires the rest.
pub async fn expired_interactions_refuse_and_free_the_run<F: StoreFactory>() {
    let p = parked::<F>().await;
    p.clock.advance(ANSWER_WINDOW + Duration::from_secs(1));
    let err = p
        .store
        .resolve_interaction(&p.scope, resolve(p.approval.id, "k", Decision::Approve))
        .await;
    assert!(matches!(err, Err(Error::Expired { .. })), "{err:?}");
    assert_eq!(
        p.store
            .get_interaction(&p.scope, p.approval.id)
            .await
            .expect("get")
            .status,
        InteractionStatus::Expired
    );
    assert!(!p.claimable().await, "the question is still pending");
    let sys = SystemScope::new("conformance");
    assert_eq!(
        p.store.expire_interactions(&sys).await.expect("sweep"),
        1,
        "the sweep expires the overdue question"
    );
    assert_eq!(p.store.expire_interactions(&sys).await.expect("sweep"), 0);
    assert!(p.claimable().await, "nothing pending: the run goes on");
    let actions = p.actions().await;
    assert!(
        actions.contains(&"approval.expired".to_owned()),
        "{actions:?}"
    );
    assert!(
        actions.contains(&"question.expired".to_owned()),
        "{actions:?}"
    );
}

/// Many resolvers racing on one interaction under different keys: exactly one wins, one decision
/// is audited, and the run gets one job.
pub async fn concurrent_resolutions_have_one_winner<F: StoreFactory>() {
    let p = Arc::new(parked::<F>().await);
    p.store
        .resolve_interaction(
            &p.scope,
            resolve(p.question.id, "q", Decision::Answer { answer: json!("a") }),
        )
        .await
        .expect("answer the question first");
    let racers = (0..12).map(|n| {
        let p = Arc::clone(&p);
        tokio::spawn(async move {
            let decision = if n % 2 == 0 {
                Decision::Approve
            } else {
                Decision::Reject { reason: None }
            };
            p.store
                .resolve_interaction(&p.scope, resolve(p.approval.id, &format!("k{n}"), decision))
                .await
        })
    });
    let results = futures_util::future::join_all(racers).await;
    let mut wins = 0;
    for r in results {
        match r.expect("task") {
            Ok(resolved) => {
                assert!(resolved.resumed, "the winner readies the run");
                wins += 1;
            }
            Err(e) => assert_eq!(e.kind(), ErrorKind::Conflict, "losers are refused: {e}"),
        }
    }
    assert_eq!(wins, 1, "exactly one resolver wins");
    assert!(p.claimable().await);
    assert!(!p.claimable().await, "one job, not one per racer");
    let decisions = p
        .actions()
        .await
        .into_iter()
        .filter(|a| a.starts_with("approval."))
        .count();
    assert_eq!(decisions, 1);
}

/// Only a commit that parks its run may raise interactions; a refused commit stores none.
pub async fn only_a_parking_commit_raises_interactions<F: StoreFactory>() {
    let clock = Arc::new(ManualClock::at_2026());
    let store = F::make(clock.clone()).await;
    let scope = scope("tenant-a");
    let thread = store
        .create_thread(&scope, NewThread::default())
        .await
        .expect("thread");
    let run = store
        .create_run(
            &scope,
            NewRun::new(thread.id, agent_ref(), vec![Part::text("x")]),
        )
        .await
        .expect("run");
    let lease = store
        .acquire_lease(&scope, run.id, "w1", TTL)
        .await
        .expect("lease");
    let approval = interaction(
        &run,
        InteractionRequest::Approval {
            tool_call_id: ToolCallId("c".into()),
            tool_name: "pay".into(),
            input_hash: input_hash(&json!({})),
            input: json!({}),
            preview: None,
        },
        clock.now(),
    );
    let commit = StepCommit {
        run_id: run.id,
        expected_version: run.version,
        lease,
        events: vec![RunEvent {
            run_id: run.id,
            seq: run.last_seq + 1,
            at: clock.now(),
            kind: RunEventKind::StepStarted { step: 1 },
        }],
        messages: vec![],
        checkpoint: Checkpoint::default(),
        status: RunStatus::Running,
        failure: None,
        interactions: vec![approval.clone()],
        audit: vec![],
        settlements: vec![],
        state: None,
        summary: None,
        job: None,
    };
    expect_kind(
        store.commit_step(&scope, commit).await,
        ErrorKind::Invalid,
        "raising an interaction without parking",
    );
    expect_kind(
        store.get_interaction(&scope, approval.id).await,
        ErrorKind::NotFound,
        "the refused commit's interaction",
    );
}

/// A waiting run holds no job, so a cancel request gives it one: a worker comes and cancels it.
pub async fn a_cancel_request_wakes_a_waiting_run<F: StoreFactory>() {
    let p = parked::<F>().await;
    assert!(!p.claimable().await);
    assert!(
        p.store
            .request_cancel(&p.scope, p.run.id)
            .await
            .expect("request cancel")
    );
    assert!(
        !p.store
            .request_cancel(&p.scope, p.run.id)
            .await
            .expect("again"),
        "already asked"
    );
    assert!(p.claimable().await, "the cancel request readies the run");
    assert!(!p.claimable().await, "a second request adds no second job");
}

/// A run that ends (here: cancelled while waiting) leaves no interaction pending.
pub async fn an_ended_run_leaves_nothing_pending<F: StoreFactory>() {
    let p = parked::<F>().await;
    let lease = p
        .store
        .acquire_lease(&p.scope, p.run.id, "w1", TTL)
        .await
        .expect("lease");
    p.store
        .commit_step(
            &p.scope,
            StepCommit {
                run_id: p.run.id,
                expected_version: p.run.version,
                lease,
                events: vec![RunEvent {
                    run_id: p.run.id,
                    seq: p.run.last_seq + 1,
                    at: p.clock.now(),
                    kind: RunEventKind::RunCancelled { reason: None },
                }],
                messages: vec![],
                checkpoint: p.run.checkpoint.clone(),
                status: RunStatus::Cancelled,
                failure: None,
                interactions: vec![],
                audit: vec![],
                settlements: vec![],
                state: None,
                summary: None,
                job: None,
            },
        )
        .await
        .expect("cancel");
    assert!(
        p.store
            .list_interactions(&p.scope, InteractionFilter::Pending)
            .await
            .expect("pending")
            .is_empty()
    );
    let approval = p
        .store
        .get_interaction(&p.scope, p.approval.id)
        .await
        .expect("get");
    assert_eq!(approval.status, InteractionStatus::Expired);
    let refused = p
        .store
        .resolve_interaction(&p.scope, resolve(p.approval.id, "k", Decision::Approve))
        .await;
    // Said as it happened: closed when the run ended, not "expired at" a deadline days ahead.
    assert!(
        matches!(&refused, Err(forge_core::Error::Closed { .. })),
        "resolving an interaction of an ended run: {refused:?}"
    );
    expect_kind(
        refused,
        ErrorKind::Invalid,
        "resolving an interaction of an ended run",
    );
}

/// A wake that lands after the run parked but before its worker completed the claimed job still
/// gives the run a job (the worker completes its own without looking again).
pub async fn a_wake_before_the_parking_job_completes_is_not_lost<F: StoreFactory>() {
    let sys = SystemScope::new("conformance");
    let (p, job) = parked_with::<F>(false).await;
    assert!(
        p.store
            .request_cancel(&p.scope, p.run.id)
            .await
            .expect("cancel")
    );
    p.store.complete(&sys, &job).await.expect("complete");
    assert!(p.claimable().await, "the cancel request's job survives");

    let (p, job) = parked_with::<F>(false).await;
    p.store
        .resolve_interaction(&p.scope, resolve(p.approval.id, "a", Decision::Approve))
        .await
        .expect("approve");
    let last = p
        .store
        .resolve_interaction(
            &p.scope,
            resolve(p.question.id, "q", Decision::Answer { answer: json!("x") }),
        )
        .await
        .expect("answer");
    assert!(last.resumed);
    p.store.complete(&sys, &job).await.expect("complete");
    assert!(p.claimable().await, "the resumed run's job survives");
}
