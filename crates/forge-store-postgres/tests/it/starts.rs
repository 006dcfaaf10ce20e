//! A thread's creation and a run's start on an idle thread, each one call of a function that sets
//! the tenant itself (`forge_insert_thread`, `forge_start_run`, migration 26): what they write and
//! refuse when called as the store calls them, and when a call is sent again after a connection
//! the server closed (which `tenant_call` does).

use std::sync::Arc;

use forge_core::id::{RunId, ThreadId};
use forge_core::part::Part;
use forge_core::ports::store::{NewRun, NewThread, RunStore, ThreadStore};
use forge_core::run::Checkpoint;
use forge_core::time::ManualClock;
use forge_store_postgres::testing::Flavor;
use forge_testkit::fixtures::{agent_ref, scope};
use sqlx::{Connection, PgConnection};

/// Calls `forge_start_run` for the run `run` of `tenant` on `thread`, as `create_run` does.
async fn start(conn: &mut PgConnection, tenant: &str, run: RunId, thread: ThreadId) -> bool {
    sqlx::query_scalar(
        "SELECT forge_start_run($1, $2, 'someone', $3, 'agent', '1', $4, now(), '[]', '[]', \
         gen_random_uuid(), 5, NULL)",
    )
    .bind(run.0)
    .bind(tenant)
    .bind(thread.0)
    .bind(sqlx::types::Json(Checkpoint::default()))
    .fetch_one(conn)
    .await
    .unwrap()
}

/// How many runs and jobs of `run` the database holds (read as the administrator, past RLS).
async fn rows_of(admin: &str, run: RunId) -> (i64, i64) {
    let mut conn = PgConnection::connect(admin).await.unwrap();
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM forge_runs WHERE id = $1), \
         (SELECT count(*) FROM forge_jobs WHERE run_id = $1)",
    )
    .bind(run.0)
    .fetch_one(&mut conn)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_run_starts_on_an_idle_thread_once_and_a_busy_or_foreign_thread_is_left_to_admission() {
    let (store, url, admin) = crate::fresh(Flavor::Plain, Arc::new(ManualClock::at_2026())).await;
    let (a, b) = (scope("t-a"), scope("t-b"));
    let thread = store.create_thread(&a, NewThread::default()).await.unwrap();
    let mut conn = PgConnection::connect(&url).await.unwrap();

    // Another tenant's call finds no thread of its own: nothing is written.
    let foreign = RunId(uuid::Uuid::now_v7());
    assert!(!start(&mut conn, "t-b", foreign, thread.id).await);
    assert_eq!(rows_of(&admin, foreign).await, (0, 0));

    // The idle thread admits the run as its active one, with its ready job.
    let first = RunId(uuid::Uuid::now_v7());
    assert!(start(&mut conn, "t-a", first, thread.id).await);
    assert_eq!(rows_of(&admin, first).await, (1, 1));
    let run = store.get_run(&a, first).await.unwrap();
    assert_eq!(run.thread_id, thread.id);
    assert_eq!(
        store.get_thread(&a, thread.id).await.unwrap().active_run,
        Some(first)
    );

    // The same call sent again passes and writes nothing more.
    assert!(start(&mut conn, "t-a", first, thread.id).await);
    assert_eq!(rows_of(&admin, first).await, (1, 1));

    // A second run finds the thread busy: nothing is written, and admission is the store's.
    let second = RunId(uuid::Uuid::now_v7());
    assert!(!start(&mut conn, "t-a", second, thread.id).await);
    assert_eq!(rows_of(&admin, second).await, (0, 0));
    let queued = store
        .create_run(
            &a,
            NewRun::new(thread.id, agent_ref(), vec![Part::text("next")]),
        )
        .await
        .unwrap();
    assert_eq!(queued.last_seq, 1, "queued behind the active run");
    assert!(
        store.get_run(&b, first).await.is_err(),
        "the run is the tenant's alone"
    );
}

#[tokio::test]
async fn a_thread_sent_again_is_created_once_and_another_tenants_id_is_a_conflict() {
    let (store, url, admin) = crate::fresh(Flavor::Plain, Arc::new(ManualClock::at_2026())).await;
    let mut conn = PgConnection::connect(&url).await.unwrap();
    let id = uuid::Uuid::now_v7();
    let insert = async |conn: &mut PgConnection, tenant: &str, by: &str| {
        sqlx::query("SELECT forge_insert_thread($1, $2, $3, NULL, '{}', '2026-01-01T00:00:00Z')")
            .bind(id)
            .bind(tenant)
            .bind(by)
            .execute(conn)
            .await
    };
    insert(&mut conn, "t-a", "user-1").await.unwrap();
    insert(&mut conn, "t-a", "user-1")
        .await
        .expect("the same thread sent again passes");
    let mut check = PgConnection::connect(&admin).await.unwrap();
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM forge_threads WHERE id = $1")
        .bind(id)
        .fetch_one(&mut check)
        .await
        .unwrap();
    assert_eq!(count, 1);
    for (tenant, by) in [("t-b", "user-1"), ("t-a", "someone else")] {
        let refused = insert(&mut conn, tenant, by)
            .await
            .expect_err("an id taken by another thread is refused");
        let code = refused
            .as_database_error()
            .and_then(|e| e.code().map(|c| c.into_owned()));
        assert_eq!(code.as_deref(), Some("23505"), "{tenant} {by}: {refused}");
    }
    assert!(store.get_thread(&scope("t-a"), ThreadId(id)).await.is_ok());
}

/// The store takes those paths: PostgreSQL counts the functions' calls (`track_functions`), and a
/// thread's creation calls `forge_insert_thread`, and every run's start `forge_start_run` first
/// (a run on a busy thread then falls back to admission under a lock).
#[tokio::test]
async fn the_store_creates_threads_and_starts_runs_through_the_one_trip_functions() {
    let (_fresh, url, admin) = crate::fresh(Flavor::Plain, Arc::new(ManualClock::at_2026())).await;
    let mut conn = PgConnection::connect(&admin).await.unwrap();
    let name: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE \"{name}\" SET track_functions = 'pl'"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    // A store whose connections begin after the setting.
    let store = forge_store_postgres::PostgresStore::connect_with(
        &url,
        forge_store_postgres::Mode::Rls,
        Arc::new(ManualClock::at_2026()),
        Arc::new(forge_core::id::SequentialIds::new()),
    )
    .await
    .unwrap();
    let a = scope("t-a");
    let mut last = None;
    for _ in 0..3 {
        let thread = store.create_thread(&a, NewThread::default()).await.unwrap();
        let new = NewRun::new(thread.id, agent_ref(), vec![Part::text("go")]);
        assert_eq!(store.create_run(&a, new).await.unwrap().last_seq, 0);
        last = Some(thread.id);
    }
    let busy = NewRun::new(last.unwrap(), agent_ref(), vec![Part::text("next")]);
    assert_eq!(store.create_run(&a, busy).await.unwrap().last_seq, 1);
    // An idle backend publishes its counts within PostgreSQL's idle interval (10 s).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let calls: Vec<(String, i64)> = sqlx::query_as(
            "SELECT funcname::text, calls FROM pg_stat_user_functions \
             WHERE funcname IN ('forge_insert_thread', 'forge_start_run') ORDER BY funcname",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        let expected = [
            ("forge_insert_thread".to_owned(), 3),
            ("forge_start_run".to_owned(), 4),
        ];
        if calls == expected {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the functions were called {calls:?} times, not {expected:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// `create_run_leased` on an idle thread writes the run, its job and the thread's active run,
/// and takes the lease, in one transaction (`START_LEASED_SQL`): the rows it wrote and the run
/// row the lease updated carry the same transaction id (`xmin`). Through `create_run` and
/// `lease_run_with_history` they would be two commits. The history is read in the same
/// statement, after the lease.
#[tokio::test]
async fn a_run_created_leased_on_an_idle_thread_is_started_and_leased_in_one_transaction() {
    let (store, _, admin) = crate::fresh(Flavor::Plain, Arc::new(ManualClock::at_2026())).await;
    let a = scope("t-a");
    let thread = store.create_thread(&a, NewThread::default()).await.unwrap();
    let new = NewRun::new(thread.id, agent_ref(), vec![Part::text("go")]);
    let leased = store
        .create_run_leased(&a, new, "w", std::time::Duration::from_secs(30), 10)
        .await
        .unwrap();
    let (read, page) = leased.history.expect("the history read with the lease");
    assert_eq!((read.id, page.len()), (thread.id, 0));
    let mut conn = PgConnection::connect(&admin).await.unwrap();
    let (run, job, active, holder): (String, String, String, Option<String>) = sqlx::query_as(
        "SELECT r.xmin::text, j.xmin::text, t.xmin::text, r.lease_holder \
         FROM forge_runs r JOIN forge_jobs j ON j.run_id = r.id \
         JOIN forge_threads t ON t.active_run = r.id WHERE r.id = $1",
    )
    .bind(leased.run.id.0)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(holder.as_deref(), Some("w"), "the lease is stored");
    assert_eq!(
        (&job, &active),
        (&run, &run),
        "the job, the thread's active run and the leased run row were written by one transaction"
    );
}

/// A run on a new thread (`NewRun::on_new_thread`) is written with its thread by one statement
/// (`START_ON_NEW_THREAD_SQL`, `START_LEASED_ON_NEW_THREAD_SQL`): when the run's job cannot be
/// written (a trigger the administrator added refuses it), the thread is not written either, so
/// a failed start leaves no empty thread behind. Without the trigger the same call creates both,
/// the run active on its thread.
#[tokio::test]
async fn a_run_on_a_new_thread_is_written_with_its_thread_or_not_at_all() {
    let (store, _, admin) = crate::fresh(Flavor::Plain, Arc::new(ManualClock::at_2026())).await;
    let a = scope("t-a");
    let ids = forge_core::id::UuidV7Generator;
    let new = || {
        NewRun::on_new_thread(
            &ids,
            NewThread::default(),
            agent_ref(),
            vec![Part::text("go")],
        )
    };
    let mut conn = PgConnection::connect(&admin).await.unwrap();
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_job() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN RAISE EXCEPTION 'no job today'; END $$; \
         CREATE TRIGGER refuse_job BEFORE INSERT ON forge_jobs \
         FOR EACH ROW EXECUTE FUNCTION refuse_job();",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let threads = |id: ThreadId| {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM forge_threads WHERE id = $1").bind(id.0)
    };
    let ttl = std::time::Duration::from_secs(30);
    for leased in [false, true] {
        let new = new();
        let thread = new.thread_id;
        let refused = if leased {
            store.create_run_leased(&a, new, "w", ttl, 10).await.err()
        } else {
            store.create_run(&a, new).await.err()
        };
        assert!(refused.is_some(), "the job was refused (leased: {leased})");
        assert_eq!(
            threads(thread).fetch_one(&mut conn).await.unwrap(),
            0,
            "no thread is left without its run (leased: {leased})"
        );
    }
    sqlx::raw_sql("DROP TRIGGER refuse_job ON forge_jobs")
        .execute(&mut conn)
        .await
        .unwrap();
    let leased = store
        .create_run_leased(&a, new(), "w", ttl, 10)
        .await
        .unwrap();
    let thread = store.get_thread(&a, leased.run.thread_id).await.unwrap();
    assert_eq!(thread.active_run, Some(leased.run.id));
    assert_eq!(
        leased.history.map(|(t, page)| (t, page.len())),
        Some((thread, 0)),
        "the new thread read with the lease, in the same statement"
    );
}
