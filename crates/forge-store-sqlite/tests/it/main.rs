//! The SQLite store: the conformance suite, durability across reopening, and migrations.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use forge_core::id::SequentialIds;
use forge_core::part::Part;
use forge_core::ports::store::{NewRun, NewThread, RunStore, ThreadStore};
use forge_core::time::ManualClock;
use forge_store_sqlite::SqliteStore;

/// A fresh database file under the test target directory.
fn fresh_path(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("forge-store-sqlite");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!(
        "{tag}-{}-{}.db",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    path
}

fn url(path: &std::path::Path) -> String {
    format!("sqlite://{}", path.display())
}

struct Sqlite;

impl forge_testkit::StoreFactory for Sqlite {
    type Store = SqliteStore;

    async fn make(clock: Arc<ManualClock>) -> Arc<SqliteStore> {
        let path = fresh_path("conformance");
        Arc::new(
            SqliteStore::open_with(&url(&path), clock, Arc::new(SequentialIds::new()))
                .await
                .unwrap(),
        )
    }
}

forge_testkit::store_conformance!(Sqlite);

#[tokio::test]
async fn data_survives_closing_and_reopening_the_file() {
    let path = fresh_path("durable");
    let scope = forge_testkit::fixtures::scope("acme");
    let (thread, run) = {
        let store = SqliteStore::open(&url(&path)).await.unwrap();
        let thread = store
            .create_thread(&scope, NewThread::default())
            .await
            .unwrap();
        let run = store
            .create_run(
                &scope,
                NewRun::new(
                    thread.id,
                    forge_testkit::fixtures::agent_ref(),
                    vec![Part::text("hi")],
                ),
            )
            .await
            .unwrap();
        let thread = store.get_thread(&scope, thread.id).await.unwrap();
        assert_eq!(thread.active_run, Some(run.id));
        store.close().await;
        (thread, run)
    };
    let reopened = SqliteStore::open(&url(&path)).await.unwrap();
    assert_eq!(
        reopened.get_thread(&scope, thread.id).await.unwrap(),
        thread
    );
    assert_eq!(reopened.get_run(&scope, run.id).await.unwrap(), run);
    assert_eq!(
        reopened.get_run(&scope, run.id).await.unwrap().input,
        vec![Part::text("hi")]
    );
    assert_eq!(
        reopened.applied_migrations().await.unwrap(),
        forge_store_sqlite::MIGRATIONS
            .iter()
            .map(|m| m.version)
            .collect::<Vec<_>>(),
        "reopening applies nothing twice"
    );
}

/// The schema from SQLite's catalog, one object a line, sorted (internal tables left out).
async fn schema(path: &std::path::Path) -> String {
    let pool = sqlx::SqlitePool::connect(&url(path)).await.unwrap();
    let rows: Vec<(String, String, Option<String>)> =
        sqlx::query_as("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name")
            .fetch_all(&pool)
            .await
            .unwrap();
    pool.close().await;
    rows.iter()
        .map(|(t, n, s)| format!("{t} {n}: {}", s.clone().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn migrations_up_down_up_leave_an_identical_schema() {
    let path = fresh_path("migrations");
    let store = SqliteStore::open(&url(&path)).await.unwrap();
    let first = schema(&path).await;
    assert!(first.contains("forge_run_events"), "{first}");
    store.migrate_down_all().await.unwrap();
    let empty = schema(&path).await;
    assert!(
        !empty.contains("forge_runs"),
        "down must drop every table: {empty}"
    );
    assert!(store.applied_migrations().await.unwrap().is_empty());
    store.migrate_up().await.unwrap();
    assert_eq!(schema(&path).await, first);
}

#[tokio::test]
async fn a_bad_url_is_a_clear_error() {
    let err = SqliteStore::open("postgres://nope").await.unwrap_err();
    assert!(err.to_string().starts_with("invalid SQLite URL"), "{err}");
    let err = SqliteStore::open("sqlite:///no/such/dir/forge.db")
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "could not open SQLite database \"sqlite:///no/such/dir/forge.db\""
    );
}

/// A holder name for a process that has exited (spawned, named, reaped).
fn dead_holder() -> String {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let start = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .to_owned();
    child.wait().unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    format!("worker-{pid}@{}#{start}", host.trim())
}

/// A store on a fresh file with a manual clock at 2026, and tenant `acme`'s scope.
async fn at_2026(tag: &str) -> (Arc<ManualClock>, SqliteStore, forge_core::scope::Scope) {
    let clock = Arc::new(ManualClock::at_2026());
    let store = SqliteStore::open_with(
        &url(&fresh_path(tag)),
        clock.clone(),
        Arc::new(SequentialIds::new()),
    )
    .await
    .unwrap();
    (clock, store, forge_testkit::fixtures::scope("acme"))
}

/// One host holds every process of a SQLite store (issue 17, item 13): the claim and the run
/// lease of a holder that is no longer running are taken over at once, not after their lease;
/// those of a live holder are not.
#[tokio::test]
async fn a_dead_holders_claim_and_lease_are_taken_over_at_once() {
    use forge_core::ports::queue::{ClaimFilter, JobQueue};
    let (_clock, store, scope) = at_2026("holders").await;
    let sys = forge_core::scope::SystemScope::new("test");
    let ttl = std::time::Duration::from_secs(30);
    let mut runs = vec![];
    for _ in 0..2 {
        runs.push(forge_testkit::fixtures::run_on_new_thread(&store, &scope).await);
    }
    let (dead, alive) = (dead_holder(), forge_core::holder::this_process("other"));
    let any = ClaimFilter::any();
    // (The live holder claims first: any claim takes over a dead holder's job.)
    let second = store.claim(&sys, &alive, ttl, &any).await.unwrap().unwrap();
    let first = store.claim(&sys, &dead, ttl, &any).await.unwrap().unwrap();
    store
        .acquire_lease(&scope, first.run_id, &dead, ttl)
        .await
        .unwrap();
    store
        .acquire_lease(&scope, second.run_id, &alive, ttl)
        .await
        .unwrap();

    // No time passes: the dead holder's job and lease are free, the live holder's are not.
    let me = forge_core::holder::this_process("worker");
    let taken = store.claim(&sys, &me, ttl, &any).await.unwrap().unwrap();
    assert_eq!((taken.id, taken.attempt), (first.id, 2));
    assert!(store.claim(&sys, &me, ttl, &any).await.unwrap().is_none());
    let lease = store
        .acquire_lease(&scope, first.run_id, &me, ttl)
        .await
        .unwrap();
    assert_eq!(lease.holder, me);
    let held = store
        .acquire_lease(&scope, second.run_id, &me, ttl)
        .await
        .unwrap_err();
    assert_eq!(held.kind(), forge_core::ErrorKind::Conflict, "{held}");
}

/// The common step (events, a message and a settled model call) is committed in one trip to the
/// connection; a step that writes beside the log, and one the database refuses, are judged the
/// long way. Every other test passes on either path (they differ in cost only), so this is the
/// test that fails when the one-trip path is never taken, or taken for a step it cannot decide.
#[tokio::test]
async fn the_common_step_is_committed_in_one_trip() {
    use forge_core::id::{MessageId, ModelCallId, UuidV7Generator};
    use forge_core::message::{Message, Role};
    use forge_core::metering::{CallStatus, ModelCall, QuotaPeriod};
    use forge_core::ports::store::StateUpdate;
    use forge_core::time::Clock;
    use forge_core::usage::Usage;
    use forge_store_sqlite::CommitPaths;

    let (clock, store, scope) = at_2026("paths").await;
    let run = forge_testkit::fixtures::run_on_new_thread(&store, &scope).await;
    let lease = store
        .acquire_lease(&scope, run.id, "w", std::time::Duration::from_secs(30))
        .await
        .unwrap();
    let at = clock.now();
    let step = |run: &forge_core::run::Run, step: u32| {
        let message = Message {
            id: MessageId::generate(&UuidV7Generator),
            run_id: run.id,
            role: Role::Assistant,
            parts: vec![Part::text("step")],
            created_at: at,
        };
        forge_testkit::fixtures::step(run, &lease, step, vec![message], at)
    };
    let usage = Usage {
        input_tokens: 3,
        output_tokens: 5,
        ..Usage::default()
    };
    let mut common = step(&run, 1);
    common.settlements = vec![ModelCall {
        id: ModelCallId::generate(&UuidV7Generator),
        tenant_id: scope.tenant_id().clone(),
        run_id: run.id,
        step: 1,
        attempt: 1,
        model: "openai:gpt-4o-mini".into(),
        at,
        period_start: QuotaPeriod::Day.start(at),
        estimate: usage,
        estimated_cost_micros: 8,
        actual: Some(usage),
        cost_micros: Some(8),
        request_id: None,
        provider_model: None,
        status: CallStatus::Settled,
    }];
    store.commit_step(&scope, common).await.unwrap();
    let paths = |one_trip, judged| CommitPaths { one_trip, judged };
    assert_eq!(store.commit_paths(), paths(1, 0), "the common step");

    let run = store.get_run(&scope, run.id).await.unwrap();
    let mut stale = step(&run, 2);
    stale.expected_version += 1;
    let refused = store.commit_step(&scope, stale).await.unwrap_err();
    assert_eq!(refused.kind(), forge_core::ErrorKind::Conflict, "{refused}");
    assert_eq!(
        store.commit_paths(),
        paths(1, 1),
        "a refused step is named the long way"
    );

    let mut with_state = step(&run, 2);
    with_state.state = Some(StateUpdate {
        expected_version: 0,
        values: serde_json::Map::new(),
    });
    store.commit_step(&scope, with_state).await.unwrap();
    assert_eq!(
        store.commit_paths(),
        paths(1, 2),
        "a step that writes state"
    );
    assert_eq!(
        store.get_run(&scope, run.id).await.unwrap().last_seq,
        2,
        "both committed steps are in the log"
    );
}
