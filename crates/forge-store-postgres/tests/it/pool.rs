//! The store survives its connections being closed by the server while idle (a restart, an
//! administrator ending sessions): the next call retries its `BEGIN` on a new connection instead
//! of failing, as sqlx's pinging pool did.

use std::sync::Arc;

use forge_core::ports::store::{NewThread, ThreadStore};
use forge_core::time::ManualClock;
use forge_store_postgres::testing::Flavor;
use forge_testkit::fixtures::scope;
use sqlx::Connection;

#[tokio::test]
async fn a_call_after_the_server_ended_every_idle_session_succeeds() {
    let (store, _, admin) = crate::fresh(Flavor::Plain, Arc::new(ManualClock::at_2026())).await;
    let acme = scope("acme");
    // Several connections into the pool, idle now.
    let threads = futures_util::future::try_join_all(
        (0..4).map(|_| store.create_thread(&acme, NewThread::default())),
    )
    .await
    .expect("threads");
    let mut conn = sqlx::PgConnection::connect(&admin).await.expect("admin");
    let ended: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND application_name = 'forge' AND pid <> pg_backend_pid()",
    )
    .fetch_all(&mut conn)
    .await
    .expect("terminate");
    assert!(!ended.is_empty(), "no Forge session to end");
    for thread in &threads {
        let read = store
            .get_thread(&acme, thread.id)
            .await
            .expect("a read after");
        assert_eq!(read.id, thread.id);
    }
    store
        .create_thread(&acme, NewThread::default())
        .await
        .expect("a write after");
}
