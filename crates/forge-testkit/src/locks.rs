//! The lease (lock) conformance suite, for every `LeaseStore` adapter.

use std::sync::Arc;
use std::time::Duration;

use forge_core::ErrorKind;
use forge_core::ports::lease::LeaseStore;
use forge_core::scope::SystemScope;
use forge_core::time::{Clock, ManualClock};

use crate::LeaseFactory;

const TTL: Duration = Duration::from_secs(30);

fn sys() -> SystemScope {
    SystemScope::new("conformance")
}

async fn fixture<F: LeaseFactory>() -> (Arc<F::Locks>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::at_2026());
    (F::make(clock.clone()).await, clock)
}

/// One holder at a time until expiry; each acquisition mints a higher token; keys are independent.
pub async fn lock_is_exclusive_until_expiry<F: LeaseFactory>() {
    let (locks, clock) = fixture::<F>().await;
    let a = locks
        .acquire(&sys(), "thread-7", "w1", TTL)
        .await
        .expect("acquire");
    assert_eq!((a.key.as_str(), a.holder.as_str()), ("thread-7", "w1"));
    assert_eq!(a.expires_at, clock.now().plus(TTL));
    let held = locks
        .acquire(&sys(), "thread-7", "w2", TTL)
        .await
        .map(|_| ())
        .expect_err("held by w1");
    assert_eq!(held.kind(), ErrorKind::Conflict, "{held}");
    assert!(
        matches!(held, forge_core::Error::LeaseHeld { until, .. } if until == a.expires_at),
        "{held:?}"
    );
    let other = locks
        .acquire(&sys(), "thread-8", "w2", TTL)
        .await
        .expect("another key is free");
    let again = locks
        .acquire(&sys(), "thread-7", "w1", TTL)
        .await
        .expect("the holder re-acquires");
    assert!(again.token > a.token, "a re-acquisition gets a new token");
    clock.advance(TTL + Duration::from_secs(1));
    let b = locks
        .acquire(&sys(), "thread-7", "w2", TTL)
        .await
        .expect("an expired lease is free");
    assert!(b.token > again.token, "tokens only grow");
    assert_eq!(other.key, "thread-8");
}

/// Renew and release check the token: a lease that was taken over can do neither.
pub async fn renew_and_release_are_token_checked<F: LeaseFactory>() {
    let (locks, clock) = fixture::<F>().await;
    let a = locks
        .acquire(&sys(), "k", "w1", TTL)
        .await
        .expect("acquire");
    clock.advance(Duration::from_secs(20));
    let a = locks.renew(&sys(), &a, TTL).await.expect("renew");
    assert_eq!(a.expires_at, clock.now().plus(TTL));
    clock.advance(Duration::from_secs(20));
    let held = locks
        .acquire(&sys(), "k", "w2", TTL)
        .await
        .map(|_| ())
        .expect_err("the renewal holds");
    assert_eq!(held.kind(), ErrorKind::Conflict);
    clock.advance(TTL);
    let b = locks
        .acquire(&sys(), "k", "w2", TTL)
        .await
        .expect("taken over after expiry");
    let stale = locks
        .renew(&sys(), &a, TTL)
        .await
        .map(|_| ())
        .expect_err("stale renew");
    assert_eq!(stale.kind(), ErrorKind::Conflict, "{stale}");
    locks
        .release(&sys(), &a)
        .await
        .expect("a stale release is a no-op");
    let still = locks
        .acquire(&sys(), "k", "w3", TTL)
        .await
        .map(|_| ())
        .expect_err("w2 still holds it");
    assert_eq!(still.kind(), ErrorKind::Conflict);
    locks.release(&sys(), &b).await.expect("release");
    let c = locks
        .acquire(&sys(), "k", "w3", TTL)
        .await
        .expect("free after release");
    assert!(c.token > b.token);
}

/// Sixteen holders racing for one key: exactly one wins.
pub async fn concurrent_acquire_has_one_winner<F: LeaseFactory>() {
    let (locks, _clock) = fixture::<F>().await;
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let locks = locks.clone();
            tokio::spawn(async move { locks.acquire(&sys(), "race", &format!("w{i}"), TTL).await })
        })
        .collect();
    let mut wins = 0;
    for t in tasks {
        match t.await.expect("join") {
            Ok(_) => wins += 1,
            Err(e) => assert_eq!(e.kind(), ErrorKind::Conflict, "{e}"),
        }
    }
    assert_eq!(wins, 1, "exactly one holder wins a race for a free key");
}
