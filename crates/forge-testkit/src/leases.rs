//! Conformance scenarios of run leases: exclusive until expiry, taken with the run in one call,
//! and given up by the commit that ends the run.

use std::time::Duration;

use forge_core::Error;
use forge_core::ErrorKind;
use forge_core::ports::store::{RunStore, StepCommit};
use forge_core::run::{RunStatus, WaitReason};

use crate::StoreFactory;
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
