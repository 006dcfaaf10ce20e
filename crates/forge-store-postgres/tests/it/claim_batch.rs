//! A worker's claims for several loops at once are one statement (`forge_sys_claim_many`,
//! migration 32): every claim of the batch, and every run lease taken with them, is written by
//! one transaction, across tenants, and each claimed run's history is read under its own
//! tenant.

use std::sync::Arc;
use std::time::Duration;

use forge_core::part::Part;
use forge_core::ports::queue::{ClaimFilter, JobQueue, LeaseRequest};
use forge_core::ports::store::{NewRun, NewThread, RunStore, ThreadStore};
use forge_core::scope::SystemScope;
use forge_core::time::ManualClock;
use forge_store_postgres::testing::Flavor;
use forge_testkit::fixtures::{agent_ref, scope};
use sqlx::{Connection, PgConnection};

#[tokio::test]
async fn a_batch_of_claims_is_one_transaction_across_tenants() {
    let (store, _, admin) = crate::fresh(Flavor::Plain, Arc::new(ManualClock::at_2026())).await;
    let mut runs = Vec::new();
    for tenant in ["t-a", "t-a", "t-b"] {
        let s = scope(tenant);
        let thread = store.create_thread(&s, NewThread::default()).await.unwrap();
        let new = NewRun::new(thread.id, agent_ref(), vec![Part::text("go")]);
        runs.push(store.create_run(&s, new).await.unwrap());
    }
    let request = LeaseRequest {
        holder: "w".into(),
        ttl: Duration::from_secs(60),
        history: Some(10),
    };
    let sys = SystemScope::new("test");
    let batch = store
        .claim_leased_batch(
            &sys,
            "w",
            Duration::from_secs(30),
            &ClaimFilter::any(),
            &request,
            8,
        )
        .await
        .unwrap();
    assert_eq!(batch.len(), 3, "the three ready jobs");
    for claim in &batch {
        let run = runs
            .iter()
            .find(|r| r.id == claim.job.run_id)
            .expect("one of the runs");
        assert_eq!(claim.job.tenant_id, run.tenant_id);
        let leased = claim
            .lease
            .as_ref()
            .expect("each run leased with its claim");
        let (thread, page) = leased.history.as_ref().expect("and its history read");
        assert_eq!(
            (thread.id, thread.tenant_id.as_str(), page.len()),
            (run.thread_id, run.tenant_id.as_str(), 0),
            "the run's own thread (no message yet), read under its tenant"
        );
    }
    let mut conn = PgConnection::connect(&admin).await.unwrap();
    let ids: Vec<uuid::Uuid> = runs.iter().map(|r| r.id.0).collect();
    let written: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "SELECT j.xmin::text, r.xmin::text, r.lease_holder FROM forge_jobs j \
         JOIN forge_runs r ON r.id = j.run_id WHERE r.id = ANY($1)",
    )
    .bind(&ids)
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(written.len(), 3);
    let first = &written[0].0;
    for (job, run, holder) in &written {
        assert_eq!(holder.as_deref(), Some("w"), "the lease is stored");
        assert_eq!(
            (job, run),
            (first, first),
            "every claim and lease of the batch was written by one transaction: {written:?}"
        );
    }
}
