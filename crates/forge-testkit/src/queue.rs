//! The queue conformance suite: claims, heartbeats and completion (by `complete`, or by the step
//! that ends or parks the run), lapsed claims fenced and dead-lettered, releases, concurrent
//! claims, claim filters, dead letters replayed or discarded, and the audit trail those actions
//! write.

use std::time::Duration;

use forge_core::ErrorKind;
use forge_core::agent::AgentRef;
use forge_core::id::JobId;
use forge_core::id::SequentialIds;
use forge_core::part::Part;
use forge_core::ports::audit::AuditLog;
use forge_core::ports::queue::{ClaimFilter, JobQueue, JobState};
use forge_core::ports::store::{LeasedRun, NewRun, NewThread, RunStore, ThreadStore};
use forge_core::scope::SystemScope;
use forge_core::time::Clock;

use crate::StoreFactory;
use crate::fixtures::{agent_ref, scope};

use crate::store::{TTL, expect_kind, fixture};

/// A claim takes only jobs its filter admits (issue 17, item 1): a worker without a run's agent
/// version never takes its job (and so never spends its attempts), and a claim for one run takes
/// that run's job only, however many older jobs are ready. Another tenant's jobs pass the filter
/// like any other: the filter is about what a worker can run, not whose run it is.
pub async fn claims_take_only_jobs_the_filter_admits<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let sys = SystemScope::new("conformance");
    let v1 = f.run().await;
    let v2_agent = AgentRef {
        name: v1.agent.name.clone(),
        version: format!("{}-next", v1.agent.version),
    };
    let other_scope = scope("tenant-b");
    let thread = f
        .store
        .create_thread(&other_scope, NewThread::default())
        .await
        .expect("create thread");
    let v2 = f
        .store
        .create_run(
            &other_scope,
            NewRun::new(thread.id, v2_agent.clone(), vec![Part::text("hi")]),
        )
        .await
        .expect("create run");
    let unknown = ClaimFilter::agents([AgentRef {
        name: "someone-else".into(),
        version: v1.agent.version.clone(),
    }]);
    assert!(
        f.store
            .claim(&sys, "w0", TTL, &unknown)
            .await
            .expect("claim")
            .is_none(),
        "no job is of an agent this worker has"
    );
    // Only the newer version's run, though the older job is first in line.
    let new_only = ClaimFilter::agents([v2_agent.clone()]);
    let job = f
        .store
        .claim(&sys, "w2", TTL, &new_only)
        .await
        .expect("claim")
        .expect("the v2 run's job");
    assert_eq!(job.run_id, v2.id);
    assert!(
        f.store
            .claim(&sys, "w2", TTL, &new_only)
            .await
            .expect("claim")
            .is_none()
    );
    f.store.complete(&sys, &job).await.expect("complete");
    // A claim for one run takes only that run's job.
    let third = f.run().await;
    let own = ClaimFilter::agents([v1.agent.clone(), v2_agent]).only_run(third.id);
    let job = f
        .store
        .claim(&sys, "forge-run", TTL, &own)
        .await
        .expect("claim")
        .expect("its own run's job");
    assert_eq!(job.run_id, third.id, "not the older v1 job ahead of it");
    // The job no worker could take was never claimed, so it spent no attempt.
    let job = f
        .store
        .claim(&sys, "w1", TTL, &ClaimFilter::agents([v1.agent.clone()]))
        .await
        .expect("claim")
        .expect("the v1 run's job");
    assert_eq!((job.run_id, job.attempt), (v1.id, 1));
}

/// A run's job is claimable once; heartbeats keep the claim; a completed job is not claimed again.
pub async fn queue_claim_heartbeat_complete<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let sys = SystemScope::new("conformance");
    let run = f.run().await;
    let job = f
        .store
        .claim(&sys, "w1", TTL, &ClaimFilter::any())
        .await
        .expect("claim")
        .expect("the run's job is ready");
    assert_eq!((job.run_id, job.attempt), (run.id, 1));
    assert_eq!(&job.tenant_id, f.scope.tenant_id());
    assert!(
        f.store
            .claim(&sys, "w2", TTL, &ClaimFilter::any())
            .await
            .expect("claim")
            .is_none(),
        "a claimed job is not claimed twice"
    );
    f.clock.advance(Duration::from_secs(20));
    let job = f.store.heartbeat(&sys, &job, TTL).await.expect("heartbeat");
    f.clock.advance(Duration::from_secs(20));
    assert!(
        f.store
            .claim(&sys, "w2", TTL, &ClaimFilter::any())
            .await
            .expect("claim")
            .is_none(),
        "a heartbeated claim holds"
    );
    f.store.complete(&sys, &job).await.expect("complete");
    assert_eq!(
        f.store.job_state(&sys, job.id).await.expect("state"),
        JobState::Completed
    );
    f.clock.advance(TTL * 4);
    assert!(
        f.store
            .claim(&sys, "w2", TTL, &ClaimFilter::any())
            .await
            .expect("claim")
            .is_none()
    );
    // An explicitly enqueued job (as a dead-letter replay makes) is a new job for the same run.
    let replayed = f.enqueue(run.id, 3).await;
    let again = f
        .store
        .claim(&sys, "w3", TTL, &ClaimFilter::any())
        .await
        .expect("claim")
        .expect("the enqueued job");
    assert_eq!(
        (again.id, again.run_id, again.attempt),
        (replayed, run.id, 1)
    );
}

/// A lapsed claim is re-claimed with a higher token, the old claim is fenced, and spent attempts
/// dead-letter the job.
pub async fn queue_lapsed_claim_is_fenced_and_dead_letters<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let sys = SystemScope::new("conformance");
    let thread = f
        .store
        .create_thread(&f.scope, NewThread::default())
        .await
        .expect("thread");
    let mut new = NewRun::new(thread.id, agent_ref(), vec![Part::text("poison")]);
    new.max_attempts = 2;
    f.store.create_run(&f.scope, new).await.expect("run");
    let first = f
        .store
        .claim(&sys, "w1", TTL, &ClaimFilter::any())
        .await
        .expect("claim")
        .expect("job");
    f.clock.advance(TTL + Duration::from_secs(1));
    let second = f
        .store
        .claim(&sys, "w2", TTL, &ClaimFilter::any())
        .await
        .expect("claim")
        .expect("the lapsed job");
    assert_eq!((second.id, second.attempt), (first.id, 2));
    assert!(second.token > first.token);
    expect_kind(
        f.store.heartbeat(&sys, &first, TTL).await,
        ErrorKind::Conflict,
        "heartbeat of a lapsed claim",
    );
    expect_kind(
        f.store.complete(&sys, &first).await,
        ErrorKind::Conflict,
        "completing a lapsed claim",
    );
    let state = f
        .store
        .fail(&sys, &second, Duration::from_secs(1), "poison")
        .await
        .expect("fail");
    assert_eq!(
        state,
        JobState::Dead,
        "the last attempt's failure dead-letters the job"
    );
    f.clock.advance(Duration::from_secs(60));
    assert!(
        f.store
            .claim(&sys, "w3", TTL, &ClaimFilter::any())
            .await
            .expect("claim")
            .is_none(),
        "a dead job is not claimed"
    );
    assert_eq!(
        f.store.job_state(&sys, first.id).await.expect("state"),
        JobState::Dead
    );
    let dead = f.store.job(&sys, first.id).await.expect("job");
    assert_eq!(dead.last_error.as_deref(), Some("poison"));

    // A job whose workers all died is dead-lettered with that as its reason (issue 17, item 10).
    let thread = f
        .store
        .create_thread(&f.scope, NewThread::default())
        .await
        .expect("thread");
    let mut new = NewRun::new(thread.id, agent_ref(), vec![Part::text("crash")]);
    new.max_attempts = 1;
    f.store.create_run(&f.scope, new).await.expect("run");
    let lost = f
        .store
        .claim(&sys, "w4", TTL, &ClaimFilter::any())
        .await
        .expect("claim")
        .expect("job");
    f.clock.advance(TTL + Duration::from_secs(1));
    assert!(
        f.store
            .claim(&sys, "w5", TTL, &ClaimFilter::any())
            .await
            .expect("claim")
            .is_none()
    );
    let dead = f.store.job(&sys, lost.id).await.expect("job");
    assert_eq!(dead.state, JobState::Dead);
    assert_eq!(
        dead.last_error.as_deref(),
        Some(forge_core::ports::queue::WORKER_LOST),
        "dead letters say why"
    );
    // Both were dead-lettered, and claims have passed over them since: a replay makes either
    // claimable again.
    for job in [first.id, lost.id] {
        f.store.replay(&sys, job, "operator").await.expect("replay");
        let again = f
            .store
            .claim(&sys, "w6", TTL, &ClaimFilter::any())
            .await
            .expect("claim")
            .expect("the replayed job");
        assert_eq!(again.id, job, "a replayed dead letter is claimed again");
    }
}

/// Releasing a claim gives the job back without spending an attempt, and fences the old claim.
pub async fn queue_release_keeps_the_attempt<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let sys = SystemScope::new("conformance");
    f.run().await;
    let first = f
        .store
        .claim(&sys, "w1", TTL, &ClaimFilter::any())
        .await
        .expect("claim")
        .expect("job");
    let later = f.clock.now().plus(Duration::from_secs(5));
    f.store.release(&sys, &first, later).await.expect("release");
    assert!(
        f.store
            .claim(&sys, "w2", TTL, &ClaimFilter::any())
            .await
            .expect("claim")
            .is_none(),
        "not before the given time"
    );
    f.clock.advance(Duration::from_secs(5));
    let again = f
        .store
        .claim(&sys, "w2", TTL, &ClaimFilter::any())
        .await
        .expect("claim")
        .expect("the released job");
    assert_eq!(
        (again.id, again.attempt),
        (first.id, 1),
        "releasing spent no attempt"
    );
    assert!(again.token > first.token);
    expect_kind(
        f.store.complete(&sys, &first).await,
        ErrorKind::Conflict,
        "completing a released claim",
    );
}

/// Eight workers claiming at once take each of twenty jobs exactly once.
pub async fn queue_concurrent_claims_take_each_job_once<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let mut runs = Vec::new();
    for _ in 0..20 {
        runs.push(f.run().await.id);
    }
    let mut workers = Vec::new();
    for w in 0..8 {
        let store = f.store.clone();
        workers.push(tokio::spawn(async move {
            let sys = SystemScope::new("conformance");
            let mut mine = Vec::new();
            while let Some(job) = store
                .claim(&sys, &format!("w{w}"), TTL, &ClaimFilter::any())
                .await
                .expect("claim")
            {
                store.complete(&sys, &job).await.expect("complete");
                mine.push(job.run_id);
            }
            mine
        }));
    }
    let mut claimed = Vec::new();
    for w in workers {
        claimed.extend(w.await.expect("worker"));
    }
    claimed.sort();
    runs.sort();
    assert_eq!(claimed, runs, "every run's job claimed exactly once");
}

/// Audit records appended on their own (the configuration a process runs with) are listed newest
/// first, filtered by action prefix, subject, actor and time window, for their tenant only; a
/// record for another tenant is refused.
pub async fn audit_records_are_appended_and_filtered_per_tenant<F: StoreFactory>() {
    use forge_core::ports::audit::{AuditQuery, AuditRecord};
    let f = fixture::<F>().await;
    let t0 = f.clock.now();
    let record = |action: &str, subject: &str, at| AuditRecord {
        tenant_id: f.scope.tenant_id().clone(),
        at,
        actor: "forge serve".into(),
        action: action.into(),
        subject: subject.into(),
        detail: serde_json::json!({"n": 1, "under_score": "100%"}),
    };
    f.store
        .record_audit(&f.scope, record("config.changed", "deployment", t0))
        .await
        .expect("append");
    f.clock.advance(Duration::from_secs(60));
    let t1 = f.clock.now();
    f.store
        .record_audit(&f.scope, record("config.changed", "quota", t1))
        .await
        .expect("append");
    f.store
        .record_audit(&f.scope, record("configure_x", "deployment", t1))
        .await
        .expect("append");
    f.clock.advance(Duration::from_secs(60));
    let t2 = f.clock.now();
    f.store
        .record_audit(
            &f.scope,
            AuditRecord {
                actor: "ada".into(),
                ..record("approval.approved", "run-1", t2)
            },
        )
        .await
        .expect("append");
    let by_actor = |actor: &str, since, until| AuditQuery {
        actor: Some(actor.into()),
        since,
        until,
        ..AuditQuery::latest(10)
    };
    let subjects =
        |records: Vec<AuditRecord>| records.into_iter().map(|r| r.subject).collect::<Vec<_>>();
    let got = f
        .store
        .query_audit(&f.scope, &by_actor("ada", None, None))
        .await
        .expect("by actor");
    assert_eq!(subjects(got), ["run-1"], "by actor");
    let got = f
        .store
        .query_audit(&f.scope, &by_actor("forge serve", Some(t1), Some(t2)))
        .await
        .expect("window");
    assert_eq!(
        subjects(got),
        ["deployment", "quota"],
        "since included, until excluded"
    );
    expect_kind(
        f.store
            .query_audit(&f.scope, &by_actor("a\0b", None, None))
            .await,
        ErrorKind::Invalid,
        "a control character in the actor",
    );
    let all = f.store.list_audit(&f.scope, 10).await.expect("list");
    assert_eq!(all.len(), 4);
    let all = all[1..].to_vec();
    assert_eq!(all[0].action, "configure_x", "newest first");
    assert_eq!(all[2].detail["under_score"], "100%");
    let q = |action: Option<&str>, subject: Option<&str>, since| AuditQuery {
        action: action.map(Into::into),
        subject: subject.map(Into::into),
        since,
        ..AuditQuery::latest(10)
    };
    let got = f
        .store
        .query_audit(&f.scope, &q(Some("config."), None, None))
        .await
        .expect("by action");
    assert_eq!(got.len(), 2, "a prefix, with `.` and `_` literal: {got:?}");
    let got = f
        .store
        .query_audit(&f.scope, &q(Some("config_"), None, None))
        .await
        .expect("by action");
    assert!(got.is_empty(), "`_` is no wildcard: {got:?}");
    let got = f
        .store
        .query_audit(&f.scope, &q(None, Some("deployment"), None))
        .await
        .expect("by subject");
    assert_eq!(got.len(), 2);
    let got = f
        .store
        .query_audit(&f.scope, &q(Some("config."), None, Some(t1)))
        .await
        .expect("since");
    assert_eq!(
        got.iter().map(|r| r.subject.as_str()).collect::<Vec<_>>(),
        ["quota"]
    );
    assert!(
        f.store
            .list_audit(&scope("tenant-b"), 10)
            .await
            .expect("list")
            .is_empty(),
        "per tenant"
    );
    expect_kind(
        f.store
            .record_audit(&scope("tenant-b"), record("config.changed", "x", t1))
            .await,
        ErrorKind::Invalid,
        "a record for another tenant",
    );
    // A NUL (an error inside PostgreSQL) or another control character: a clear refusal.
    for (action, subject) in [(Some("config.\0"), None), (None, Some("a\u{1}b"))] {
        expect_kind(
            f.store
                .query_audit(&f.scope, &q(action, subject, None))
                .await,
            ErrorKind::Invalid,
            "a control character in a filter",
        );
    }
}

/// Dead letters are listed with their last error, replayed with a fresh attempt budget or
/// discarded, each audited for its tenant in the same transaction.
pub async fn dead_letters_are_replayed_or_discarded_and_audited<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let sys = SystemScope::new("conformance");
    let thread = f
        .store
        .create_thread(&f.scope, NewThread::default())
        .await
        .expect("thread");
    let mut new = NewRun::new(thread.id, agent_ref(), vec![Part::text("poison")]);
    new.max_attempts = 1;
    let run = f.store.create_run(&f.scope, new).await.expect("run");
    let job = f
        .store
        .claim(&sys, "w", TTL, &ClaimFilter::any())
        .await
        .expect("claim")
        .expect("job");
    assert_eq!(
        f.store
            .fail(&sys, &job, TTL, "agent ghost version 1 is not registered")
            .await
            .expect("fail"),
        JobState::Dead
    );
    let dead = f.store.dead_jobs(&sys, 10).await.expect("dead");
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].id, dead[0].run_id, dead[0].attempts),
        (job.id, run.id, 1)
    );
    assert_eq!(
        dead[0].last_error.as_deref(),
        Some("agent ghost version 1 is not registered")
    );
    assert!(
        f.store
            .list_audit(&f.scope, 10)
            .await
            .expect("audit")
            .is_empty()
    );

    let replayed = f
        .store
        .replay(&sys, job.id, "operator-ann")
        .await
        .expect("replay");
    assert_eq!((replayed.state, replayed.attempts), (JobState::Ready, 0));
    let read = f.store.job(&sys, job.id).await.expect("job");
    assert_eq!(
        (read.state, read.attempts, read.max_attempts, read.run_id),
        (JobState::Ready, 0, 1, run.id),
        "the job as an operator reads it"
    );
    assert!(f.store.dead_jobs(&sys, 10).await.expect("dead").is_empty());
    let again = f
        .store
        .claim(&sys, "w", TTL, &ClaimFilter::any())
        .await
        .expect("claim")
        .expect("the replayed job");
    assert_eq!(
        (again.id, again.attempt),
        (job.id, 1),
        "a fresh attempt budget"
    );
    expect_kind(
        f.store.replay(&sys, job.id, "operator-ann").await,
        ErrorKind::Invalid,
        "only a dead job can be replayed",
    );

    f.store
        .fail(&sys, &again, TTL, "still broken")
        .await
        .expect("fail");
    let discarded = f
        .store
        .discard(&sys, job.id, "operator-bob")
        .await
        .expect("discard");
    assert_eq!(discarded.state, JobState::Discarded);
    assert_eq!(
        f.store.job(&sys, job.id).await.expect("job").state,
        JobState::Discarded
    );
    f.clock.advance(TTL * 10);
    assert!(
        f.store
            .claim(&sys, "w", TTL, &ClaimFilter::any())
            .await
            .expect("claim")
            .is_none(),
        "a discarded job never runs"
    );

    let trail = f.store.list_audit(&f.scope, 10).await.expect("audit");
    let summary: Vec<(&str, &str)> = trail
        .iter()
        .map(|r| (r.action.as_str(), r.actor.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            ("job.discarded", "operator-bob"),
            ("job.replayed", "operator-ann")
        ],
        "newest first"
    );
    assert_eq!(trail[1].subject, format!("job {}", job.id));
    assert_eq!(
        trail[1].detail["last_error"],
        "agent ghost version 1 is not registered"
    );
    assert!(
        f.store
            .list_audit(&scope("tenant-b"), 10)
            .await
            .expect("audit")
            .is_empty(),
        "audit is per tenant"
    );
    expect_kind(
        f.store
            .job(&sys, JobId::generate(&SequentialIds::new()))
            .await,
        ErrorKind::NotFound,
        "a missing job",
    );
}

/// A claim returns the `traceparent` its job was enqueued under (by `create_run` or `enqueue`),
/// and when it became claimable; a job enqueued without one has none.
pub async fn claims_return_the_trace_they_were_enqueued_under<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let sys = SystemScope::new("conformance");
    let traced = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let thread = f
        .store
        .create_thread(&f.scope, NewThread::default())
        .await
        .expect("thread");
    let mut new = NewRun::new(thread.id, agent_ref(), vec![Part::text("traced")]);
    new.traceparent = Some(traced.into());
    let enqueued_at = f.clock.now();
    let run = f.store.create_run(&f.scope, new).await.expect("run");
    f.clock.advance(Duration::from_secs(3));
    let job = f
        .store
        .claim(&sys, "w1", TTL, &ClaimFilter::any())
        .await
        .expect("claim")
        .expect("the traced run's job");
    assert_eq!(job.run_id, run.id);
    assert_eq!(job.traceparent.as_deref(), Some(traced));
    assert_eq!(
        job.available_at, enqueued_at,
        "the claim latency runs from here"
    );
    f.store.complete(&sys, &job).await.expect("complete");

    let plain = f.run().await;
    let job = f
        .store
        .claim(&sys, "w1", TTL, &ClaimFilter::any())
        .await
        .expect("claim")
        .expect("the untraced run's job");
    assert_eq!((job.run_id, job.traceparent.as_deref()), (plain.id, None));
    f.store.complete(&sys, &job).await.expect("complete");

    let explicit = f
        .store
        .enqueue(
            &f.scope,
            forge_core::ports::queue::NewJob {
                run_id: plain.id,
                not_before: None,
                max_attempts: 1,
                traceparent: Some(traced.into()),
            },
        )
        .await
        .expect("enqueue");
    let job = f
        .store
        .claim(&sys, "w1", TTL, &ClaimFilter::any())
        .await
        .expect("claim")
        .expect("the enqueued job");
    assert_eq!(
        (job.id, job.traceparent.as_deref()),
        (explicit, Some(traced))
    );
    let counts = f.store.job_counts(&sys).await.expect("counts");
    assert_eq!(
        counts,
        [("claimed", 1), ("completed", 2)].into_iter().collect(),
        "the queue's depth by state"
    );
}

/// The step that ends or parks a run completes the claim it was executed under, in its own write
/// (issue 28: a worker then makes no `complete` call): a step that does neither leaves the claim
/// alone, a refused step completes nothing, a claim that lapsed is left for the next worker while
/// the step is still written, and a claim of another run is not completed by this run's step.
/// The parking step also writes an audit entry, so that adapters with a separate path for such
/// steps are tried on it.
pub async fn a_step_that_ends_or_parks_its_run_completes_its_claim<F: StoreFactory>() {
    use forge_core::ports::queue::ClaimedJob;
    use forge_core::run::{RunStatus, WaitReason};

    let f = fixture::<F>().await;
    let sys = SystemScope::new("conformance");
    let state = |id: JobId| {
        let store = f.store.clone();
        async move { store.job_state(&sys, id).await.expect("job state") }
    };

    // A run parked by its second step.
    let (job, lease, run) = claimed(&f, "w1", TTL).await;
    let mut first = f.commit(&run, &lease, f.events(run.id, 1, 1), RunStatus::Running);
    first.job = Some(job.clone());
    let committed = f.store.commit_step(&f.scope, first).await.expect("step 1");
    assert!(
        !committed.job_completed,
        "a step that neither ends nor parks its run leaves the claim"
    );
    assert_eq!(state(job.id).await, JobState::Claimed);
    let parked = RunStatus::Waiting(WaitReason::Approval);
    let mut stale = f.commit(&run, &lease, f.events(run.id, 2, 1), parked);
    stale.job = Some(job.clone());
    expect_kind(
        f.store.commit_step(&f.scope, stale).await,
        ErrorKind::Conflict,
        "a step computed from an older version",
    );
    assert_eq!(
        state(job.id).await,
        JobState::Claimed,
        "a refused step completes nothing"
    );
    let run = f.store.get_run(&f.scope, run.id).await.expect("run");
    let mut park = f.commit(&run, &lease, f.events(run.id, 2, 1), parked);
    park.job = Some(job.clone());
    park.audit = vec![forge_core::ports::audit::AuditRecord {
        tenant_id: f.scope.tenant_id().clone(),
        at: f.clock.now(),
        actor: "w1".into(),
        action: "conformance.parked".into(),
        subject: format!("run {}", run.id),
        detail: serde_json::json!({}),
    }];
    let committed = f.store.commit_step(&f.scope, park).await.expect("park");
    assert!(
        committed.job_completed,
        "the parking step completes the claim"
    );
    assert_eq!(state(job.id).await, JobState::Completed);
    expect_kind(
        f.store.complete(&sys, &job).await,
        ErrorKind::Conflict,
        "completing a job its run's step completed",
    );
    assert_eq!(
        f.store.get_run(&f.scope, run.id).await.expect("run").status,
        parked,
        "the step itself was written"
    );

    // A run ended under a claim that lapsed while its lease (taken for longer) held.
    let (lapsed, lease, run) = claimed(&f, "w2", TTL * 10).await;
    let run = started(&f, &run, &lease).await;
    f.clock.advance(TTL + Duration::from_secs(1));
    let mut end = f.commit(&run, &lease, f.events(run.id, 2, 1), RunStatus::Completed);
    end.job = Some(lapsed.clone());
    let committed = f.store.commit_step(&f.scope, end).await.expect("end");
    assert!(!committed.job_completed, "a lapsed claim is not completed");
    assert_eq!(
        f.store.get_run(&f.scope, run.id).await.expect("run").status,
        RunStatus::Completed,
        "the step is written under its lease all the same"
    );
    let again = f
        .store
        .claim(&sys, "w3", TTL, &ClaimFilter::any())
        .await
        .expect("claim")
        .expect("a ready job");
    assert_eq!(
        (again.id, again.run_id),
        (lapsed.id, run.id),
        "the lapsed claim's job is left for the next worker"
    );

    // A run ended with a claim of another run: that claim is not this step's to complete.
    let (own, lease, run) = claimed(&f, "w4", TTL).await;
    let run = started(&f, &run, &lease).await;
    let mut end = f.commit(&run, &lease, f.events(run.id, 2, 1), RunStatus::Completed);
    end.job = Some(ClaimedJob {
        run_id: again.run_id,
        ..own.clone()
    });
    let committed = f.store.commit_step(&f.scope, end).await.expect("end");
    assert!(
        !committed.job_completed,
        "another run's claim is left alone"
    );
    assert_eq!(state(own.id).await, JobState::Claimed);
    f.store.complete(&sys, &own).await.expect("complete");
}

/// A claim takes its run's lease with it when the lease is free (issue 28: one write fewer per
/// run), exactly as `lease_run` would: a new fencing token, the run as it stands under it, and a
/// lease its holder commits under. A run whose lease another holds is claimed without it, and
/// that lease is left as it is.
pub async fn claims_take_the_runs_lease_when_it_is_free<F: StoreFactory>() {
    use forge_core::ports::queue::LeaseRequest;
    use forge_core::run::RunStatus;

    let f = fixture::<F>().await;
    let sys = SystemScope::new("conformance");
    let request = LeaseRequest {
        holder: "engine-1".into(),
        ttl: TTL * 2,
        history: None,
    };
    let run = f.run().await;
    let claimed = f
        .store
        .claim_leased(&sys, "w1", TTL, &ClaimFilter::any(), &request)
        .await
        .expect("claim")
        .expect("the run's job");
    assert_eq!(claimed.job.run_id, run.id);
    let LeasedRun {
        lease,
        run: leased,
        history,
    } = claimed.lease.expect("a free lease is taken with the claim");
    assert!(history.is_none(), "no history is read unless asked for");
    assert_eq!(
        (lease.run_id, lease.holder.as_str(), lease.expires_at),
        (run.id, "engine-1", f.clock.now().plus(TTL * 2))
    );
    assert!(lease.token > run.fence, "a new fencing token");
    assert_eq!(
        (leased.id, leased.fence, leased.lease.as_ref()),
        (run.id, lease.token, Some(&lease)),
        "the run as it stands under the lease"
    );
    let stored = f.store.get_run(&f.scope, run.id).await.expect("run");
    assert_eq!(stored.lease.as_ref(), Some(&lease), "the lease is stored");
    let step = f.commit(&leased, &lease, f.events(run.id, 1, 1), RunStatus::Running);
    f.store
        .commit_step(&f.scope, step)
        .await
        .expect("a step commits under the lease taken with the claim");
    expect_kind(
        f.store.lease_run(&f.scope, run.id, "engine-2", TTL).await,
        ErrorKind::Conflict,
        "another holder while the claim's lease holds",
    );

    let held = f.run().await;
    let (other, _) = f
        .store
        .lease_run(&f.scope, held.id, "someone-else", TTL)
        .await
        .expect("lease");
    let claimed = f
        .store
        .claim_leased(&sys, "w2", TTL, &ClaimFilter::any(), &request)
        .await
        .expect("claim")
        .expect("the second run's job");
    assert_eq!(claimed.job.run_id, held.id);
    assert!(claimed.lease.is_none(), "a held lease is not taken");
    assert_eq!(
        f.store
            .job_state(&sys, claimed.job.id)
            .await
            .expect("state"),
        JobState::Claimed,
        "the claim stands"
    );
    assert_eq!(
        f.store.get_run(&f.scope, held.id).await.expect("run").lease,
        Some(other),
        "the other holder's lease is left as it is"
    );
}

/// A batch of claims is the claims `claim_leased` would make one after another (issue 28: a
/// worker's loops that free up together claim in one write): each ready job once, each free
/// lease taken for the holder with the run's history as asked, a held lease left alone; never
/// more than asked for, and nothing when nothing is ready or nothing is asked.
pub async fn claims_in_a_batch_are_the_claims_made_one_at_a_time<F: StoreFactory>() {
    use forge_core::ports::queue::LeaseRequest;

    let f = fixture::<F>().await;
    let sys = SystemScope::new("conformance");
    let request = LeaseRequest {
        holder: "engine-1".into(),
        ttl: TTL * 2,
        history: Some(16),
    };
    let free = [f.run().await, f.run().await, f.run().await];
    let held = f.run().await;
    let (other, _) = f
        .store
        .lease_run(&f.scope, held.id, "someone-else", TTL)
        .await
        .expect("lease");
    let batch = f
        .store
        .claim_leased_batch(&sys, "w1", TTL, &ClaimFilter::any(), &request, 8)
        .await
        .expect("batch");
    let mut claimed: Vec<_> = batch.iter().map(|c| c.job.run_id).collect();
    claimed.sort();
    let mut ready: Vec<_> = free.iter().chain([&held]).map(|r| r.id).collect();
    ready.sort();
    assert_eq!(claimed, ready, "every ready job, once, and no more");
    for claim in &batch {
        assert_eq!(
            f.store.job_state(&sys, claim.job.id).await.expect("state"),
            JobState::Claimed
        );
        let stored = f
            .store
            .get_run(&f.scope, claim.job.run_id)
            .await
            .expect("run");
        if claim.job.run_id == held.id {
            assert!(claim.lease.is_none(), "a held lease is not taken");
            assert_eq!(stored.lease, Some(other.clone()), "and is left as it is");
            continue;
        }
        let leased = claim.lease.as_ref().expect("a free lease is taken");
        assert_eq!(
            (leased.lease.holder.as_str(), leased.lease.expires_at),
            ("engine-1", f.clock.now().plus(TTL * 2))
        );
        assert_eq!(
            stored.lease.as_ref(),
            Some(&leased.lease),
            "the lease is stored"
        );
        assert_eq!(
            (leased.run.id, leased.run.fence),
            (claim.job.run_id, leased.lease.token),
            "each claim's run under its own lease"
        );
        let (thread, _) = leased.history.as_ref().expect("the history, as asked");
        assert_eq!(thread.id, stored.thread_id, "the run's own thread");
    }
    assert!(
        f.store
            .claim_leased_batch(&sys, "w1", TTL, &ClaimFilter::any(), &request, 8)
            .await
            .expect("batch")
            .is_empty(),
        "nothing is ready"
    );
    let (a, b) = (f.run().await, f.run().await);
    assert!(
        f.store
            .claim_leased_batch(&sys, "w1", TTL, &ClaimFilter::any(), &request, 0)
            .await
            .expect("batch")
            .is_empty(),
        "nothing asked, nothing claimed"
    );
    let one = f
        .store
        .claim_leased_batch(&sys, "w1", TTL, &ClaimFilter::any(), &request, 1)
        .await
        .expect("batch");
    assert_eq!(
        one.iter().map(|c| c.job.run_id).collect::<Vec<_>>(),
        [a.id],
        "one asked, the oldest claimed"
    );
    assert_eq!(
        f.store.get_run(&f.scope, b.id).await.expect("run").lease,
        None,
        "a job not claimed keeps its run unleased"
    );
}

/// A new run of the fixture's tenant, its job claimed by `worker` and the run leased to it for
/// `lease_ttl`.
async fn claimed<F: StoreFactory>(
    f: &crate::store::Fixture<F>,
    worker: &str,
    lease_ttl: Duration,
) -> (
    forge_core::ports::queue::ClaimedJob,
    forge_core::run::RunLease,
    forge_core::run::Run,
) {
    let run = f.run().await;
    let job = f
        .store
        .claim(
            &SystemScope::new("conformance"),
            worker,
            TTL,
            &ClaimFilter::any(),
        )
        .await
        .expect("claim")
        .expect("a ready job");
    assert_eq!(job.run_id, run.id, "the new run's job is the one ready");
    let (lease, run) = f
        .store
        .lease_run(&f.scope, run.id, worker, lease_ttl)
        .await
        .expect("lease");
    (job, lease, run)
}

/// The run after a first step that leaves it running, committed without a claim.
async fn started<F: StoreFactory>(
    f: &crate::store::Fixture<F>,
    run: &forge_core::run::Run,
    lease: &forge_core::run::RunLease,
) -> forge_core::run::Run {
    let step = f.commit(
        run,
        lease,
        f.events(run.id, 1, 1),
        forge_core::run::RunStatus::Running,
    );
    f.store.commit_step(&f.scope, step).await.expect("step 1");
    f.store.get_run(&f.scope, run.id).await.expect("run")
}
