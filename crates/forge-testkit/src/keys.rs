//! The request-keys conformance suite (`forge_core::ports::keys`): a key's first claim holds
//! for every later and racing claim, per tenant and kind; a run's id is created once; erasing
//! what a key names removes the key.

use forge_core::ErrorKind;
use forge_core::id::{ThreadId, UuidV7Generator};
use forge_core::part::Part;
use forge_core::ports::erasure::{DataErasure, Erase};
use forge_core::ports::keys::{KeyClaim, KeyKind, RequestKeys};
use forge_core::ports::store::{NewRun, NewThread, RunStore, StartStrategy, ThreadStore};
use forge_core::scope::Scope;
use forge_core::time::ManualClock;

use crate::StoreFactory;
use crate::fixtures::{agent_ref, scope};

/// A claim of `id` on `thread` with `digest`.
pub(crate) fn claim_of(id: uuid::Uuid, thread: ThreadId, digest: &str) -> KeyClaim {
    KeyClaim {
        id,
        thread_id: thread,
        digest: digest.into(),
    }
}

/// A new store, tenant A's scope, and a thread of it.
async fn fixture<F: StoreFactory>() -> (std::sync::Arc<F::Store>, Scope, ThreadId) {
    let (store, sc) = (
        F::make(std::sync::Arc::new(ManualClock::at_2026())).await,
        scope("tenant-a"),
    );
    let thread = store
        .create_thread(&sc, NewThread::default())
        .await
        .expect("create thread")
        .id;
    (store, sc, thread)
}

/// A request key's first claim holds, for every later and every racing claim of it; keys are
/// per tenant and per kind; a key is bounded text.
pub async fn request_keys_hold_their_first_claim<F: StoreFactory>() {
    let (store, sc, thread) = fixture::<F>().await;
    let first = claim_of(uuid::Uuid::now_v7(), thread, "d1");
    let held = store
        .claim_key(&sc, KeyKind::Run, "order-42 ✓", first.clone())
        .await
        .expect("claim");
    assert_eq!(held, first, "an unclaimed key takes the claim");
    let later = claim_of(uuid::Uuid::now_v7(), thread, "d2");
    let held = store
        .claim_key(&sc, KeyKind::Run, "order-42 ✓", later.clone())
        .await
        .expect("claim again");
    assert_eq!(held, first, "a claimed key answers with its first claim");
    let as_thread = store
        .claim_key(&sc, KeyKind::Thread, "order-42 ✓", later.clone())
        .await
        .expect("claim as a thread's key");
    assert_eq!(as_thread, later, "a thread's key and a run's are apart");
    let elsewhere = store
        .claim_key(
            &scope("tenant-b"),
            KeyKind::Run,
            "order-42 ✓",
            later.clone(),
        )
        .await
        .expect("another tenant's claim");
    assert_eq!(elsewhere, later, "another tenant's key is its own");

    let racers = (0..8).map(|i| {
        let store = store.clone();
        let scope = sc.clone();
        tokio::spawn(async move {
            let mine = claim_of(uuid::Uuid::now_v7(), thread, &format!("racer {i}"));
            store.claim_key(&scope, KeyKind::Run, "raced", mine).await
        })
    });
    let mut held = Vec::new();
    for racer in racers {
        held.push(racer.await.expect("racer").expect("racing claim"));
    }
    assert!(
        held.windows(2).all(|pair| pair[0] == pair[1]),
        "racing claims of one key hold one claim: {held:?}"
    );

    for bad in [String::new(), "k".repeat(257), "a\u{0}b".into()] {
        let refused = store
            .claim_key(&sc, KeyKind::Run, &bad, first.clone())
            .await;
        assert!(
            matches!(&refused, Err(e) if e.kind() == ErrorKind::Invalid),
            "a key that is empty, too long or has control characters: {refused:?}"
        );
    }
}

/// A run created under an id that exists changes nothing: what makes a claimed run's racing
/// creates one run.
pub async fn a_run_id_is_created_once<F: StoreFactory>() {
    let (store, sc, thread) = fixture::<F>().await;
    let mut new = NewRun::new(thread, agent_ref(), vec![Part::text("first")]);
    let id = forge_core::id::RunId::generate(&UuidV7Generator);
    new.id = Some(id);
    let run = store.create_run(&sc, new.clone()).await.expect("create");
    assert_eq!(run.id, id, "the run takes the id it was given");
    new.input = vec![Part::text("second")];
    new.strategy = StartStrategy::Enqueue;
    // It fails, or — where the store cannot tell it from its own create sent again after a
    // dropped connection (PostgreSQL, while the run is the thread's active one) — answers as
    // that would; either way nothing changes.
    let _ = store.create_run(&sc, new).await;
    let runs = store.list_runs(&sc, thread).await.expect("runs");
    assert_eq!(runs.len(), 1, "one run: {runs:?}");
    assert_eq!(runs[0].input, vec![Part::text("first")]);
}

/// Erasing a run removes its key; erasing a thread removes its key and its runs' keys; what
/// else was claimed stays.
pub async fn erasure_removes_request_keys<F: StoreFactory>() {
    let clock = std::sync::Arc::new(ManualClock::at_2026());
    let (store, sc) = (F::make(clock.clone()).await, scope("tenant-a"));
    let thread = crate::erasure::finished_thread::<F>(store.clone(), clock, sc.clone(), "x").await;
    let runs = store.list_runs(&sc, thread).await.expect("runs");
    let (kept, erased) = (&runs[0], &runs[1]);
    let other = store
        .create_thread(&sc, NewThread::default())
        .await
        .expect("create thread")
        .id;
    let claim = |kind, key: &'static str, id, thread| {
        let store = store.clone();
        let scope = sc.clone();
        async move {
            store
                .claim_key(&scope, kind, key, claim_of(id, thread, ""))
                .await
                .expect("claim")
        }
    };
    claim(KeyKind::Thread, "crm:acme", thread.0, thread).await;
    claim(KeyKind::Thread, "crm:other", other.0, other).await;
    claim(KeyKind::Run, "start-kept", kept.id.0, thread).await;
    claim(KeyKind::Run, "start-erased", erased.id.0, thread).await;
    let fresh = uuid::Uuid::now_v7();

    store
        .erase(&sc, Erase::Run(erased.id), "admin")
        .await
        .expect("erase run");
    assert_eq!(
        claim(KeyKind::Run, "start-erased", fresh, thread).await.id,
        fresh
    );
    assert_eq!(
        claim(KeyKind::Run, "start-kept", fresh, thread).await.id,
        kept.id.0
    );
    assert_eq!(
        claim(KeyKind::Thread, "crm:acme", fresh, thread).await.id,
        thread.0
    );

    store
        .erase(&sc, Erase::Thread(thread), "admin")
        .await
        .expect("erase thread");
    let again = uuid::Uuid::now_v7();
    assert_eq!(
        claim(KeyKind::Thread, "crm:acme", again, thread).await.id,
        again
    );
    assert_eq!(
        claim(KeyKind::Run, "start-kept", again, thread).await.id,
        again
    );
    assert_eq!(
        claim(KeyKind::Thread, "crm:other", again, other).await.id,
        other.0
    );
}
