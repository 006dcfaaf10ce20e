//! The Redis lease store on a real Redis: the lease conformance suite the PostgreSQL lease store
//! passes too. Each test uses its own key prefix.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use forge_core::time::ManualClock;
use forge_store_redis::RedisLeaseStore;

fn url() -> String {
    std::env::var("FORGE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

struct Redis;

impl forge_testkit::LeaseFactory for Redis {
    type Locks = RedisLeaseStore;

    async fn make(clock: Arc<ManualClock>) -> Arc<RedisLeaseStore> {
        let prefix = format!("forge-test-{}", uuid::Uuid::new_v4().simple());
        let store = RedisLeaseStore::connect_with(&url(), &prefix, clock).await.unwrap_or_else(|e| {
            panic!(
                "Redis is not reachable at {}: {e:?}\nrun `scripts/test-services.sh` (it starts Redis, or names \
                 the package to install) or point FORGE_TEST_REDIS_URL at a server",
                url()
            )
        });
        Arc::new(store)
    }
}

forge_testkit::lock_conformance!(Redis);

#[tokio::test]
async fn a_holder_name_with_the_separator_is_refused() {
    let clock = Arc::new(ManualClock::at_2026());
    let store = <Redis as forge_testkit::LeaseFactory>::make(clock).await;
    let sys = forge_core::scope::SystemScope::new("test");
    use forge_core::ports::lease::LeaseStore;
    let err = store
        .acquire(&sys, "k", "a|b", std::time::Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid input: a lease holder's name cannot contain '|'"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_error() {
    let err = RedisLeaseStore::connect("redis://127.0.0.1:1", "x")
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "could not connect to Redis");
}

/// The readiness probe (issue 62, item 8): a Redis that answers is ready; one nobody listens for
/// is not, and the reason names neither its address nor its password.
#[tokio::test]
async fn the_probe_is_ready_only_when_redis_answers_and_never_names_the_url() {
    use forge_store_redis::probe::RedisProbe;
    let up = RedisProbe::new(&url()).unwrap();
    up.ping().await.unwrap_or_else(|e| {
        panic!(
            "Redis is not reachable at {}: {e}\nrun `scripts/test-services.sh` or point FORGE_TEST_REDIS_URL at a server",
            url()
        )
    });
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let down = RedisProbe::new(&format!("redis://:hunter2secret@{closed}")).unwrap();
    let reason = down.ping().await.unwrap_err();
    assert!(!reason.contains("hunter2secret"), "{reason}");
    assert!(!reason.contains(&closed.port().to_string()), "{reason}");
    assert!(RedisProbe::new("http://not-redis").is_err());
}
