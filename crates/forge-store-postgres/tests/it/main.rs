//! The PostgreSQL store on a real server: the conformance suite in both modes, row-level security
//! checked with raw SQL as the application role, start-up refusals, and migrations.

#![allow(clippy::unwrap_used)]

mod claim_batch;
mod claim_plan;
mod event_log;
mod group_commit;
mod group_write;
mod isolation;
mod lease_reads;
mod migrations;
mod notify;
mod pool;
mod row_locks;
mod starts;
mod step_plan;

use std::sync::Arc;

use forge_core::id::SequentialIds;
use forge_core::time::ManualClock;
use forge_store_postgres::testing::{Flavor, TestDatabase};
use forge_store_postgres::{Mode, PostgresStore};

/// The store mode a flavor of test database is used in.
pub(crate) fn mode_of(flavor: Flavor) -> Mode {
    match flavor {
        Flavor::Plain => Mode::Rls,
        Flavor::Supabase => Mode::Supabase,
    }
}

/// A store on a fresh database, with the database's login and administrator URLs; the database is
/// dropped with the last clone of the store.
pub(crate) async fn fresh(
    flavor: Flavor,
    clock: Arc<ManualClock>,
) -> (PostgresStore, String, String) {
    let db = TestDatabase::create(flavor)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mode = mode_of(flavor);
    let url = db.url().to_owned();
    let store = PostgresStore::connect_with(&url, mode, clock, Arc::new(SequentialIds::new()))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "failed to connect: {e}: {:?}",
                std::error::Error::source(&e)
            )
        });
    let admin = db.admin_url().to_owned();
    (store.with_guard(db), url, admin)
}

/// A store on a fresh database of the pgvector server, with the extension installed, so that
/// nearest-chunk search runs in PostgreSQL.
async fn fresh_pgvector(clock: Arc<ManualClock>) -> PostgresStore {
    let server =
        forge_store_postgres::testing::pgvector_admin_url().unwrap_or_else(|e| panic!("{e}"));
    let db = TestDatabase::create_with_pgvector_on(&server)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let store =
        PostgresStore::connect_with(db.url(), Mode::Rls, clock, Arc::new(SequentialIds::new()))
            .await
            .unwrap_or_else(|e| panic!("failed to connect: {e}"));
    assert!(store.uses_pgvector(), "the store did not see pgvector");
    store.with_guard(db)
}

pub(crate) struct Postgres;

impl forge_testkit::StoreFactory for Postgres {
    type Store = PostgresStore;
    const READS_HISTORY_WITH_LEASE: bool = true;

    async fn make(clock: Arc<ManualClock>) -> Arc<PostgresStore> {
        Arc::new(fresh(Flavor::Plain, clock).await.0)
    }
}

struct Supabase;

impl forge_testkit::StoreFactory for Supabase {
    type Store = PostgresStore;
    const READS_HISTORY_WITH_LEASE: bool = true;

    async fn make(clock: Arc<ManualClock>) -> Arc<PostgresStore> {
        Arc::new(fresh(Flavor::Supabase, clock).await.0)
    }
}

impl forge_testkit::LeaseFactory for Postgres {
    type Locks = PostgresStore;

    async fn make(clock: Arc<ManualClock>) -> Arc<PostgresStore> {
        Arc::new(fresh(Flavor::Plain, clock).await.0)
    }
}

/// The store with one step writer: a step sent while another is in flight waits and is
/// group-committed, so the suites whose steps race are run through groups.
struct Grouped;

impl forge_testkit::StoreFactory for Grouped {
    type Store = PostgresStore;
    const READS_HISTORY_WITH_LEASE: bool = true;

    async fn make(clock: Arc<ManualClock>) -> Arc<PostgresStore> {
        // A group that fails fails its steps: the suites pass only on the set-based write.
        Arc::new(
            fresh(Flavor::Plain, clock)
                .await
                .0
                .with_step_writers(1)
                .with_groups_never_resent(),
        )
    }
}

struct Pgvector;

impl forge_testkit::StoreFactory for Pgvector {
    type Store = PostgresStore;
    const READS_HISTORY_WITH_LEASE: bool = true;

    async fn make(clock: Arc<ManualClock>) -> Arc<PostgresStore> {
        Arc::new(fresh_pgvector(clock).await)
    }
}

/// The retrieval suite again where nearest-chunk search is pgvector's, not the adapter's.
mod pgvector_mode {
    use super::*;
    forge_testkit::sources_conformance!(Pgvector);
}

mod rls_mode {
    use super::*;
    forge_testkit::store_conformance!(Postgres);
    forge_testkit::lock_conformance!(Postgres);
}

/// The suites whose steps race one another (one run's concurrent writers, the event log's 32
/// appenders) and those that settle calls with a step, with their steps group-committed.
mod grouped_mode {
    use super::*;
    forge_testkit::runs_conformance!(Grouped);
    forge_testkit::event_log_conformance!(Grouped);
    forge_testkit::usage_conformance!(Grouped);
}

mod supabase_mode {
    use super::*;
    forge_testkit::store_conformance!(Supabase);
}
