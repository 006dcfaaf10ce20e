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

mod upgrade;

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
    const READS_HISTORY_WITH_LEASE: bool = true;

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
        forge_store_sqlite::migrations()
            .list()
            .iter()
            .map(|m| m.version)
            .collect::<Vec<_>>(),
        "reopening applies nothing twice"
    );
}

/// The schema from SQLite's catalog, one object a line, sorted (internal tables left out).
async fn schema(path: &std::path::Path) -> String {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut statement = conn
        .prepare("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name")
        .unwrap();
    let rows: Vec<(String, String, Option<String>)> = statement
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
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
    let (dead, alive) = (
        dead_holder(),
        forge_store_sqlite::holder::this_process("other"),
    );
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
    let me = forge_store_sqlite::holder::this_process("worker");
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

/// Runs each with a lease, on a fresh store at a fixed time, and the file's path.
async fn leased_runs(
    tag: &str,
    count: usize,
) -> (
    Arc<ManualClock>,
    Arc<SqliteStore>,
    forge_core::scope::Scope,
    PathBuf,
    Vec<(forge_core::run::Run, forge_core::run::RunLease)>,
) {
    let path = fresh_path(tag);
    let clock = Arc::new(ManualClock::at_2026());
    let store = SqliteStore::open_with(&url(&path), clock.clone(), Arc::new(SequentialIds::new()))
        .await
        .unwrap();
    let scope = forge_testkit::fixtures::scope("acme");
    let mut runs = Vec::new();
    for _ in 0..count {
        let run = forge_testkit::fixtures::run_on_new_thread(&store, &scope).await;
        let (lease, run) = store
            .lease_run(&scope, run.id, "w", std::time::Duration::from_secs(30))
            .await
            .unwrap();
        runs.push((run, lease));
    }
    (clock, Arc::new(store), scope, path, runs)
}

/// Holds SQLite's write lock on `path` from a connection of its own until the returned sender is
/// used (or dropped), so that what the store's lane is sent meanwhile queues up as one group.
async fn hold_write_lock(path: &std::path::Path) -> tokio::sync::oneshot::Sender<()> {
    let path = path.to_owned();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let (held, holding) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        held.send(()).unwrap();
        let _ = released.blocking_recv();
        conn.execute_batch("COMMIT").unwrap();
    });
    holding.await.expect("the lock is taken");
    release
}

/// Sends `steps` to the store together while another connection holds the write lock, waits
/// until all of them wait for the lane (none may be answered then), releases the lock, and
/// returns each outcome in order.
async fn commit_together(
    store: &Arc<SqliteStore>,
    scope: &forge_core::scope::Scope,
    path: &std::path::Path,
    steps: Vec<forge_core::ports::store::StepCommit>,
) -> Vec<Result<forge_core::ports::store::Committed, forge_core::Error>> {
    let release = hold_write_lock(path).await;
    let sent: Vec<_> = steps
        .into_iter()
        .map(|step| {
            let (store, scope) = (store.clone(), scope.clone());
            tokio::spawn(async move { store.commit_step(&scope, step).await })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        sent.iter().all(|s| !s.is_finished()),
        "nothing is answered before its commit"
    );
    release.send(()).unwrap();
    let mut outcomes = Vec::new();
    for step in sent {
        outcomes.push(step.await.unwrap());
    }
    outcomes
}

/// Each run's first step (one event), at the clock's time.
fn first_steps(
    clock: &ManualClock,
    runs: &[(forge_core::run::Run, forge_core::run::RunLease)],
) -> Vec<forge_core::ports::store::StepCommit> {
    use forge_core::time::Clock;
    let at = clock.now();
    runs.iter()
        .map(|(run, lease)| forge_testkit::fixtures::step(run, lease, 1, vec![], at))
        .collect()
}

/// Steps of many runs sent together are committed together: the lane runs what waits for it in
/// one transaction (a savepoint each), and answers each step once that transaction committed.
#[tokio::test]
async fn concurrent_steps_are_committed_in_groups() {
    let (clock, store, scope, path, runs) = leased_runs("groups", 24).await;
    let before = store.lane_stats();
    let steps = first_steps(&clock, &runs);
    for committed in commit_together(&store, &scope, &path, steps).await {
        assert_eq!(committed.unwrap().last_seq, 1);
    }
    for (run, _) in &runs {
        let events = store.read_events(&scope, run.id, 0, 10).await.unwrap();
        assert_eq!(events.len(), 1, "each run's step is in its log");
    }
    let after = store.lane_stats();
    assert_eq!(after.operations - before.operations, 24);
    assert!(
        after.groups - before.groups <= 3,
        "24 steps sent together were committed in {} transactions",
        after.groups - before.groups
    );
}

/// The lane's commits are checkpointed into the database file by the checkpointer's thread, soon
/// after they were made, and an idle store is not checkpointed again.
#[tokio::test]
async fn committed_steps_are_checkpointed_by_the_checkpointer() {
    let (clock, store, scope, path, runs) = leased_runs("checkpoints", 8).await;
    let steps = first_steps(&clock, &runs);
    for committed in commit_together(&store, &scope, &path, steps).await {
        committed.unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let settled = loop {
        let stats = store.checkpoint_stats();
        if stats.checkpoints > 0 {
            // A moment more, for a checkpoint still to come after the last commit.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let again = store.checkpoint_stats();
            if again == stats {
                break stats;
            }
            continue;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nothing was checkpointed: {stats:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(settled.frames_copied > 0, "{settled:?}");
    assert_eq!(settled.failures, 0, "{settled:?}");
    assert_eq!(
        settled.behind, 0,
        "the last checkpoint copied the whole log: {settled:?}"
    );
    // Idle: no commit, no checkpoint.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(store.checkpoint_stats(), settled);
}

/// A burst that grows the log past 4 MiB does not keep its disk space: once writes pause and the
/// log is checkpointed, the next write restarts it and truncates the `-wal` file.
#[tokio::test]
async fn the_log_file_is_truncated_after_a_burst() {
    let path = fresh_path("wal-limit");
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    let store = SqliteStore::open(&url(&path)).await.unwrap();
    let scope = forge_testkit::fixtures::scope("acme");
    let thread = |n: usize| {
        let mut state = serde_json::Map::new();
        state.insert(
            "blob".into(),
            format!("{n}{}", "x".repeat(64 * 1024)).into(),
        );
        NewThread {
            title: None,
            state,
            id: None,
        }
    };
    // A reader's snapshot keeps the log from being copied and restarted during the burst.
    let reader = rusqlite::Connection::open(&path).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let _: i64 = reader
        .query_row("SELECT count(*) FROM forge_threads", [], |r| r.get(0))
        .unwrap();
    for n in 0..100 {
        store.create_thread(&scope, thread(n)).await.unwrap();
    }
    let grown = std::fs::metadata(&wal).unwrap().len();
    assert!(
        grown > 5 * 1024 * 1024,
        "the burst grew the log to {grown} bytes"
    );
    // The checkpoint after the burst could not copy what the reader's snapshot still needs.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while store.checkpoint_stats().checkpoints == 0 {
        assert!(std::time::Instant::now() < deadline, "no checkpoint came");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let pinned = store.checkpoint_stats();
    assert!(
        pinned.behind > 0,
        "the burst's frames stayed in the log: {pinned:?}"
    );
    reader.execute_batch("COMMIT").unwrap();
    drop(reader);
    // A write, and the checkpoint after it (within an interval) copies the whole log; the next
    // write restarts the log and truncates its file.
    let mut after = grown;
    for n in 100..120 {
        store.create_thread(&scope, thread(n)).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        store.create_thread(&scope, thread(n + 1000)).await.unwrap();
        after = std::fs::metadata(&wal).unwrap().len();
        if after <= 4 * 1024 * 1024 {
            break;
        }
    }
    assert!(
        after <= 4 * 1024 * 1024,
        "the log's file kept {after} bytes after it restarted (it had grown to {grown})"
    );
}

/// An operation that fails in a group is rolled back alone: the steps beside it are committed,
/// and it left nothing behind.
#[tokio::test]
async fn a_refused_step_leaves_the_rest_of_its_group_committed() {
    let (clock, store, scope, path, runs) = leased_runs("group-refusal", 3).await;
    let before = store.lane_stats();
    let mut steps = first_steps(&clock, &runs);
    steps[1].expected_version += 1;
    let outcomes = commit_together(&store, &scope, &path, steps).await;
    let refused = outcomes[1].as_ref().unwrap_err();
    assert_eq!(refused.kind(), forge_core::ErrorKind::Conflict, "{refused}");
    assert!(outcomes[0].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
    for (i, (run, _)) in runs.iter().enumerate() {
        let stored = store.get_run(&scope, run.id).await.unwrap();
        let expected = if i == 1 { 0 } else { 1 };
        assert_eq!(stored.last_seq, expected, "run {i}");
        let events = store.read_events(&scope, run.id, 0, 10).await.unwrap();
        assert_eq!(events.len(), usize::try_from(expected).unwrap(), "run {i}");
    }
    let after = store.lane_stats();
    assert!(
        after.groups - before.groups <= 2,
        "the three steps shared a transaction ({} groups)",
        after.groups - before.groups
    );
}

/// An in-memory URL is one private database that the lane and the pool share, distinct for each
/// store, and gone when the store is.
#[tokio::test]
async fn an_in_memory_store_is_one_private_database() {
    use forge_core::ports::queue::{ClaimFilter, JobQueue, NewJob};
    use forge_core::time::Clock;
    let scope = forge_testkit::fixtures::scope("acme");
    let store = SqliteStore::open("sqlite::memory:").await.unwrap();
    let other = SqliteStore::open("sqlite::memory:").await.unwrap();
    let run = forge_testkit::fixtures::run_on_new_thread(&store, &scope).await;
    let job = NewJob {
        run_id: run.id,
        not_before: None,
        max_attempts: 3,
        traceparent: None,
    };
    store.enqueue(&scope, job).await.unwrap();
    let sys = forge_core::scope::SystemScope::new("test");
    let ttl = std::time::Duration::from_secs(30);
    let claimed = store
        .claim(&sys, "w", ttl, &ClaimFilter::default())
        .await
        .unwrap()
        .expect("the lane sees the job the pool enqueued");
    assert_eq!(claimed.run_id, run.id);
    let (lease, run) = store.lease_run(&scope, run.id, "w", ttl).await.unwrap();
    let step =
        forge_testkit::fixtures::step(&run, &lease, 1, vec![], forge_core::time::SystemClock.now());
    store.commit_step(&scope, step).await.unwrap();
    assert_eq!(store.get_run(&scope, run.id).await.unwrap().last_seq, 1);
    let err = other.get_run(&scope, run.id).await.unwrap_err();
    assert_eq!(err.kind(), forge_core::ErrorKind::NotFound, "{err}");
    let files = || {
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("forge-memory-{}-", std::process::id()))
            })
            .count()
    };
    assert!(files() >= 2, "each store has its file");
    store.close().await;
    other.close().await;
    drop((store, other));
    assert_eq!(files(), 0, "the files go with their stores");
}

/// A step that fails after it began writing (here: its message's id is taken, which only the
/// database knows) is rolled back whole: its events are not in the log, and the run is as before.
#[tokio::test]
async fn a_step_that_fails_half_way_leaves_nothing() {
    use forge_core::id::{MessageId, UuidV7Generator};
    use forge_core::message::{Message, Role};
    use forge_core::time::Clock;
    let (clock, store, scope, _path, runs) = leased_runs("half-way", 1).await;
    let (run, lease) = &runs[0];
    let at = clock.now();
    let message = Message {
        id: MessageId::generate(&UuidV7Generator),
        run_id: run.id,
        role: Role::Assistant,
        parts: vec![Part::text("first")],
        created_at: at,
    };
    let first = forge_testkit::fixtures::step(run, lease, 1, vec![message.clone()], at);
    store.commit_step(&scope, first).await.unwrap();
    let run = store.get_run(&scope, run.id).await.unwrap();
    let again = forge_testkit::fixtures::step(&run, lease, 2, vec![message], at);
    let err = store.commit_step(&scope, again).await.unwrap_err();
    assert_eq!(err.kind(), forge_core::ErrorKind::Fatal, "{err}");
    let after = store.get_run(&scope, run.id).await.unwrap();
    assert_eq!((after.version, after.last_seq), (run.version, run.last_seq));
    let events = store.read_events(&scope, run.id, 0, 10).await.unwrap();
    assert_eq!(events.len(), 1, "the failed step's event was rolled back");
    // The lane goes on: the same step with a new message commits.
    let retried = forge_testkit::fixtures::step(&run, lease, 2, vec![], at);
    assert_eq!(
        store.commit_step(&scope, retried).await.unwrap().last_seq,
        2
    );
}
