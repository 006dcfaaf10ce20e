//! Conformance scenarios of run leases: exclusive until expiry, taken with the run in one call,
//! taken as the run is created (on a thread created with it, too), and given up by the commit
//! that ends the run.

use std::time::Duration;

use forge_core::Error;
use forge_core::ErrorKind;
use forge_core::ports::store::{RunStore, StepCommit};
use forge_core::run::{RunStatus, WaitReason};
use forge_core::time::Clock;

use crate::StoreFactory;
use crate::fixtures::agent_ref;
use crate::store::{TTL, expect_kind, fixture};

/// Only one holder at a time; an expired lease can be taken over; release frees it.
pub async fn lease_is_exclusive_until_expiry<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let run = f.run().await;
    let a = f
        .store
        .acquire_lease(&f.scope, run.id, "w1", TTL)
        .await
        .expect("lease");
    let held = expect_kind(
        f.store.acquire_lease(&f.scope, run.id, "w2", TTL).await,
        ErrorKind::Conflict,
        "a second holder",
    );
    assert!(matches!(held, Error::LeaseHeld { .. }), "{held:?}");
    f.clock.advance(Duration::from_secs(20));
    let a = f.store.renew_lease(&f.scope, &a, TTL).await.expect("renew");
    f.clock.advance(Duration::from_secs(20));
    expect_kind(
        f.store.acquire_lease(&f.scope, run.id, "w2", TTL).await,
        ErrorKind::Conflict,
        "after a renewal",
    );
    f.store.release_lease(&f.scope, &a).await.expect("release");
    let b = f
        .store
        .acquire_lease(&f.scope, run.id, "w2", TTL)
        .await
        .expect("lease after release");
    assert!(b.token > a.token);
    f.store
        .release_lease(&f.scope, &a)
        .await
        .expect("releasing a stale lease is a no-op");
    expect_kind(
        f.store.acquire_lease(&f.scope, run.id, "w3", TTL).await,
        ErrorKind::Conflict,
        "stale release freed it",
    );
}

/// `lease_run` takes the lease and returns the run exactly as the store now holds it.
pub async fn lease_run_reads_the_run_under_its_lease<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let run = f.run().await;
    let (lease, leased) = f
        .store
        .lease_run(&f.scope, run.id, "w1", TTL)
        .await
        .expect("lease_run");
    assert_eq!(leased.lease.as_ref(), Some(&lease));
    assert_eq!(
        leased,
        f.store.get_run(&f.scope, run.id).await.expect("get_run"),
        "the returned run is the stored one"
    );
    expect_kind(
        f.store.lease_run(&f.scope, run.id, "w2", TTL).await,
        ErrorKind::Conflict,
        "another holder while the lease lives",
    );
}

/// A commit that ends the run gives its lease up in the same transaction (the engine makes no
/// release call after it). A commit that goes on, or parks the run, keeps the lease.
pub async fn a_commit_that_ends_the_run_releases_its_lease<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let run = f.run().await;
    let lease = f
        .store
        .acquire_lease(&f.scope, run.id, "w1", TTL)
        .await
        .expect("lease");
    let goes_on: StepCommit = f.commit(&run, &lease, f.events(run.id, 1, 1), RunStatus::Running);
    f.store
        .commit_step(&f.scope, goes_on)
        .await
        .expect("a step that goes on");
    expect_kind(
        f.store.acquire_lease(&f.scope, run.id, "w2", TTL).await,
        ErrorKind::Conflict,
        "a run that goes on keeps its lease",
    );
    let run = f.store.get_run(&f.scope, run.id).await.expect("get");
    let parks = f.commit(
        &run,
        &lease,
        f.events(run.id, 2, 1),
        RunStatus::Waiting(WaitReason::Approval),
    );
    f.store
        .commit_step(&f.scope, parks)
        .await
        .expect("a step that parks");
    expect_kind(
        f.store.acquire_lease(&f.scope, run.id, "w2", TTL).await,
        ErrorKind::Conflict,
        "a parked run keeps its lease until its holder releases it",
    );

    let other = f.run().await;
    let lease = f
        .store
        .acquire_lease(&f.scope, other.id, "w1", TTL)
        .await
        .expect("lease");
    let ends = f.commit(
        &other,
        &lease,
        f.events(other.id, 1, 1),
        RunStatus::Completed,
    );
    f.store
        .commit_step(&f.scope, ends)
        .await
        .expect("a step that ends the run");
    let ended = f.store.get_run(&f.scope, other.id).await.expect("get");
    assert_eq!(ended.lease, None, "an ended run holds no lease");
    let stale = f.commit(
        &ended,
        &lease,
        f.events(other.id, 2, 1),
        RunStatus::Completed,
    );
    let refused = expect_kind(
        f.store.commit_step(&f.scope, stale).await,
        ErrorKind::Conflict,
        "committing under the lease an ending commit gave up",
    );
    assert!(matches!(refused, Error::Fenced { .. }), "{refused:?}");
    f.store
        .release_lease(&f.scope, &lease)
        .await
        .expect("releasing the lease an ending commit gave up is a no-op");
}

/// `create_run_leased` creates the run exactly as `create_run` does (its job included) and holds
/// its lease from the start: the stored run is the one returned, a step commits under the lease,
/// another holder is refused, and the job is claimable. On a busy thread the run is queued as
/// `create_run` queues it, and leased all the same.
pub async fn a_run_created_leased_is_created_and_held_at_once<F: StoreFactory>() {
    use forge_core::part::Part;
    use forge_core::ports::queue::{ClaimFilter, JobQueue};
    use forge_core::ports::store::{NewRun, NewThread, ThreadStore};
    use forge_core::scope::SystemScope;

    let f = fixture::<F>().await;
    let thread = f
        .store
        .create_thread(&f.scope, NewThread::default())
        .await
        .expect("thread");
    let new = || NewRun::new(thread.id, agent_ref(), vec![Part::text("hi")]);
    let first = f
        .store
        .create_run_leased(&f.scope, new(), "w1", TTL, 10)
        .await
        .expect("create_run_leased");
    let (lease, run) = (&first.lease, &first.run);
    assert_eq!(
        (lease.run_id, lease.holder.as_str(), lease.expires_at),
        (run.id, "w1", f.clock.now().plus(TTL))
    );
    assert_eq!(
        (run.status, run.last_seq, run.fence, run.lease.as_ref()),
        (RunStatus::Queued, 0, lease.token, Some(lease)),
        "a run its idle thread admits at once, under the new lease"
    );
    assert_eq!(
        run,
        &f.store.get_run(&f.scope, run.id).await.expect("get_run"),
        "the returned run is the stored one"
    );
    assert_eq!(
        f.store
            .get_thread(&f.scope, thread.id)
            .await
            .expect("thread")
            .active_run,
        Some(run.id),
        "the run is its thread's active one"
    );
    if let Some((read, page)) = &first.history {
        assert_eq!(read.id, thread.id, "the history of the run's thread");
        assert!(
            page.is_empty(),
            "the input joins the history in the first step: {page:?}"
        );
    }
    expect_kind(
        f.store.lease_run(&f.scope, run.id, "w2", TTL).await,
        ErrorKind::Conflict,
        "another holder while the lease lives",
    );
    let step = f.commit(run, lease, f.events(run.id, 1, 1), RunStatus::Running);
    f.store
        .commit_step(&f.scope, step)
        .await
        .expect("a step commits under the lease taken at creation");

    // A busy thread: queued behind the first run, as create_run queues it, and leased.
    let second = f
        .store
        .create_run_leased(&f.scope, new(), "w1", TTL, 10)
        .await
        .expect("create_run_leased on a busy thread");
    assert_eq!(
        (
            second.run.status,
            second.run.last_seq,
            second.lease.holder.as_str()
        ),
        (RunStatus::Queued, 1, "w1"),
        "queued behind the active run (its `run.queued` event), under its lease"
    );
    assert_eq!(
        second.run,
        f.store
            .get_run(&f.scope, second.run.id)
            .await
            .expect("get_run")
    );

    // The first run's job is in the queue as create_run leaves it; the second's waits its turn.
    let system = SystemScope::new("conformance");
    let any = ClaimFilter::any();
    let claim = || f.store.claim(&system, "w9", TTL, &any);
    let claimed = claim()
        .await
        .expect("claim")
        .expect("the first run's job is ready");
    assert_eq!(claimed.run_id, run.id);
    assert!(
        claim().await.expect("claim").is_none(),
        "the queued run's job waits for the active run to end"
    );
}

/// A run on a new thread (`NewRun::on_new_thread`) creates the thread with it: the thread holds
/// what was asked for, and the run is its active run with a ready job, leased when created
/// leased. An id that exists already (the tenant's own thread, or another tenant's) fails the
/// call and writes nothing: no run is added and the existing thread is unchanged.
pub async fn a_run_on_a_new_thread_is_created_with_its_thread<F: StoreFactory>() {
    use forge_core::id::UuidV7Generator;
    use forge_core::part::Part;
    use forge_core::ports::queue::{ClaimFilter, JobQueue};
    use forge_core::ports::store::{NewRun, NewThread, ThreadStore};
    use forge_core::scope::SystemScope;

    let f = fixture::<F>().await;
    let asked = NewThread {
        title: Some("a new conversation".into()),
        state: serde_json::json!({ "plan": "pro" })
            .as_object()
            .cloned()
            .unwrap_or_default(),
        id: None,
    };
    let new = |thread: NewThread| {
        NewRun::on_new_thread(
            &UuidV7Generator,
            thread,
            agent_ref(),
            vec![Part::text("hi")],
        )
    };
    let leased = f
        .store
        .create_run_leased(&f.scope, new(asked.clone()), "w1", TTL, 10)
        .await
        .expect("a run created leased on a new thread");
    let run = &leased.run;
    let thread = f
        .store
        .get_thread(&f.scope, run.thread_id)
        .await
        .expect("the run's thread was created with it");
    assert_eq!(
        (
            thread.title.as_deref(),
            &thread.state.values,
            thread.state.version,
            &thread.created_by,
            thread.created_at,
            thread.active_run,
        ),
        (
            asked.title.as_deref(),
            &asked.state,
            0,
            f.scope.principal_id(),
            f.clock.now(),
            Some(run.id),
        ),
        "the thread asked for, with the run as its active run"
    );
    assert_eq!(
        (run.status, run.last_seq, run.lease.as_ref()),
        (RunStatus::Queued, 0, Some(&leased.lease)),
        "started at once on its idle thread, under the new lease"
    );
    if let Some((read, page)) = &leased.history {
        assert_eq!(
            read, &thread,
            "the history read with the lease is the new thread's"
        );
        assert!(page.is_empty(), "{page:?}");
    }

    // Not leased: the same, with the run's job ready for a worker.
    let other = f
        .store
        .create_run(&f.scope, new(NewThread::default()))
        .await
        .expect("a run on a new thread");
    assert_eq!(
        f.store
            .get_thread(&f.scope, other.thread_id)
            .await
            .expect("its thread")
            .active_run,
        Some(other.id)
    );
    let system = SystemScope::new("conformance");
    let mut claimed = Vec::new();
    while let Some(job) = f
        .store
        .claim(&system, "w9", TTL, &ClaimFilter::any())
        .await
        .expect("claim")
    {
        claimed.push(job.run_id);
    }
    claimed.sort();
    let mut runs = vec![run.id, other.id];
    runs.sort();
    assert_eq!(claimed, runs, "each run's job was ready");

    // The id of a thread that exists: refused, of the same tenant or another, and nothing
    // written.
    let other_tenant = crate::fixtures::scope("tenant-b");
    for scope in [&f.scope, &other_tenant] {
        let mut again = new(NewThread::default());
        again.thread_id = thread.id;
        assert!(
            f.store.create_run(scope, again).await.is_err(),
            "{}: a new thread with an id that exists",
            scope.tenant_id().as_str()
        );
    }
    assert_eq!(
        f.store
            .get_thread(&f.scope, thread.id)
            .await
            .expect("the thread"),
        thread,
        "the existing thread is unchanged"
    );
    let on_it: Vec<_> = f
        .store
        .list_runs(&f.scope, thread.id)
        .await
        .expect("its runs")
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(on_it, vec![run.id], "no run was added to it");
    expect_kind(
        f.store.get_thread(&other_tenant, thread.id).await,
        ErrorKind::NotFound,
        "the other tenant has no thread of that id",
    );
}
