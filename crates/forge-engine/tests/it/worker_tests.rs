//! The worker: claims jobs, executes runs, resumes after a drain, honours cancel requests, defers
//! runs still leased by a crashed worker; and one thread's runs never overlap, in every adapter.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use forge_core::agent::RunLimits;
use forge_core::event::{RunEvent, RunEventKind};
use forge_core::id::{RunId, SequentialIds};
use forge_core::part::Part;
use forge_core::ports::queue::{ClaimFilter, ClaimedJob, JobQueue, JobState};
use forge_core::ports::store::{NewRun, NewThread, RunStore, Store, ThreadStore};
use forge_core::run::{Run, RunStatus};
use forge_core::scope::{Scope, SystemScope};
use forge_core::thread::Thread;
use forge_core::time::ManualClock;
use forge_engine::{Engine, JobOutcome, NoopObserver, RunObserver, Worker, WorkerConfig};
use forge_providers::{Script, ScriptedProvider};
use tokio_util::sync::CancellationToken;

use crate::harness::{agent, harness};
use crate::tools_tests::calculator;

const TWO_TOOL_STEPS: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "c1", name = "calculate", input = { op = "add", a = 1, b = 2 } }]
[[conversation.turn]]
tool_calls = [{ id = "c2", name = "calculate", input = { op = "mul", a = 3, b = 4 } }]
[[conversation.turn]]
text = ["done"]
"#;

/// A new thread of `scope`'s tenant in `store`, and a run of `agent` started on it with "go".
async fn go(
    store: &forge_store_memory::MemoryStore,
    scope: &Scope,
    agent: &forge_core::agent::AgentRef,
    engine: &Engine,
) -> (Thread, Run) {
    let thread = store
        .create_thread(scope, NewThread::default())
        .await
        .unwrap();
    let run = engine
        .start_run(scope, thread.id, agent, vec![Part::text("go")])
        .await
        .unwrap();
    (thread, run)
}

fn config() -> WorkerConfig {
    WorkerConfig {
        id: "test-worker".into(),
        poll_interval: Duration::from_millis(5),
        ..WorkerConfig::default()
    }
}

#[tokio::test]
async fn a_worker_executes_a_submitted_run_and_completes_its_job() {
    let h = harness(TWO_TOOL_STEPS, vec![calculator()], RunLimits::default());
    let engine = Arc::new(h.engine);
    let (_, run) = go(&h.store, &h.scope, &h.agent, &engine).await;
    let worker = Worker::new(engine.clone(), h.store.clone(), config());
    let outcome = worker.run_one(&CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, Some(JobOutcome::Finished(RunStatus::Completed)));
    assert_eq!(
        worker.run_one(&CancellationToken::new()).await.unwrap(),
        None,
        "the job is done"
    );
    assert_eq!(
        h.store.get_run(&h.scope, run.id).await.unwrap().status,
        RunStatus::Completed
    );
}

/// The job queue of the harness's store, counting the `complete` calls made on it and noting
/// when each claim was made and whether it found a job, and how many claims each batch asked
/// for; when `history` is set, the leases its claims take carry that history, as if read with
/// them; when `gate` is set, each batch first takes one of its permits.
struct CountingQueue {
    store: Arc<forge_store_memory::MemoryStore>,
    completes: std::sync::atomic::AtomicUsize,
    claims: Mutex<Vec<(Instant, bool)>>,
    batches: Mutex<Vec<usize>>,
    history: Option<(
        forge_core::thread::Thread,
        Vec<forge_core::message::Message>,
    )>,
    gate: Option<tokio::sync::Semaphore>,
}

impl CountingQueue {
    fn new(store: Arc<forge_store_memory::MemoryStore>) -> Self {
        Self {
            store,
            completes: Default::default(),
            claims: Default::default(),
            batches: Default::default(),
            history: None,
            gate: None,
        }
    }

    /// How many claims each batch asked for, in order.
    fn batches(&self) -> Vec<usize> {
        self.batches.lock().unwrap().clone()
    }

    /// When the claims that found a job were made.
    fn found(&self) -> Vec<Instant> {
        let claims = self.claims.lock().unwrap();
        claims.iter().filter(|c| c.1).map(|c| c.0).collect()
    }
}

#[async_trait::async_trait]
impl JobQueue for CountingQueue {
    async fn enqueue(
        &self,
        scope: &Scope,
        job: forge_core::ports::queue::NewJob,
    ) -> Result<forge_core::id::JobId, forge_core::Error> {
        self.store.enqueue(scope, job).await
    }
    async fn claim(
        &self,
        system: &SystemScope,
        worker: &str,
        ttl: Duration,
        filter: &ClaimFilter,
    ) -> Result<Option<ClaimedJob>, forge_core::Error> {
        self.store.claim(system, worker, ttl, filter).await
    }
    async fn claim_leased(
        &self,
        system: &SystemScope,
        worker: &str,
        ttl: Duration,
        filter: &ClaimFilter,
        lease: &forge_core::ports::queue::LeaseRequest,
    ) -> Result<Option<forge_core::ports::queue::Claimed>, forge_core::Error> {
        let mut claimed = self
            .store
            .claim_leased(system, worker, ttl, filter, lease)
            .await?;
        self.claims
            .lock()
            .unwrap()
            .push((Instant::now(), claimed.is_some()));
        if let Some(leased) = claimed.as_mut().and_then(|c| c.lease.as_mut())
            && self.history.is_some()
        {
            assert_eq!(
                lease.history,
                Some(forge_engine::compaction::HISTORY_PAGE),
                "the worker asks for the history with the lease"
            );
            leased.history = self.history.clone();
        }
        Ok(claimed)
    }
    async fn claim_leased_batch(
        &self,
        system: &SystemScope,
        worker: &str,
        ttl: Duration,
        filter: &ClaimFilter,
        lease: &forge_core::ports::queue::LeaseRequest,
        max: usize,
    ) -> Result<Vec<forge_core::ports::queue::Claimed>, forge_core::Error> {
        self.batches.lock().unwrap().push(max);
        if let Some(gate) = &self.gate {
            gate.acquire().await.unwrap().forget();
        }
        forge_core::ports::queue::claim_leased_each(self, system, worker, ttl, filter, lease, max)
            .await
    }
    async fn heartbeat(
        &self,
        system: &SystemScope,
        job: &ClaimedJob,
        ttl: Duration,
    ) -> Result<ClaimedJob, forge_core::Error> {
        self.store.heartbeat(system, job, ttl).await
    }
    async fn complete(
        &self,
        system: &SystemScope,
        job: &ClaimedJob,
    ) -> Result<(), forge_core::Error> {
        self.completes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.store.complete(system, job).await
    }
    async fn fail(
        &self,
        system: &SystemScope,
        job: &ClaimedJob,
        retry_in: Duration,
        reason: &str,
    ) -> Result<JobState, forge_core::Error> {
        self.store.fail(system, job, retry_in, reason).await
    }
    async fn dead_jobs(
        &self,
        system: &SystemScope,
        limit: usize,
    ) -> Result<Vec<forge_core::ports::queue::JobInfo>, forge_core::Error> {
        self.store.dead_jobs(system, limit).await
    }
    async fn job_counts(
        &self,
        system: &SystemScope,
    ) -> Result<std::collections::BTreeMap<&'static str, u64>, forge_core::Error> {
        self.store.job_counts(system).await
    }
    async fn job(
        &self,
        system: &SystemScope,
        id: forge_core::id::JobId,
    ) -> Result<forge_core::ports::queue::JobInfo, forge_core::Error> {
        self.store.job(system, id).await
    }
    async fn operate(
        &self,
        system: &SystemScope,
        id: forge_core::id::JobId,
        actor: &str,
        operation: forge_core::ports::queue::DeadJob,
    ) -> Result<forge_core::ports::queue::JobInfo, forge_core::Error> {
        self.store.operate(system, id, actor, operation).await
    }
    async fn release(
        &self,
        system: &SystemScope,
        job: &ClaimedJob,
        not_before: forge_core::time::Timestamp,
    ) -> Result<(), forge_core::Error> {
        self.store.release(system, job, not_before).await
    }
}

/// The run's lease is taken with its claim and the step that ends the run completes the job it
/// ran under, in the same write (issue 28): the worker takes no lease and makes no `complete`
/// call of its own, and the run is executed and its job done all the same.
#[tokio::test]
async fn the_claim_leases_the_run_and_its_last_step_completes_the_job() {
    let h = harness(TWO_TOOL_STEPS, vec![calculator()], RunLimits::default());
    let engine = Arc::new(h.engine);
    let (_, run) = go(&h.store, &h.scope, &h.agent, &engine).await;
    let queue = Arc::new(CountingQueue::new(h.store.clone()));
    let worker = Worker::new(engine.clone(), queue.clone(), config());
    let outcome = worker.run_one(&CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, Some(JobOutcome::Finished(RunStatus::Completed)));
    let ended = h.store.get_run(&h.scope, run.id).await.unwrap();
    assert_eq!(ended.status, RunStatus::Completed);
    assert_eq!(
        ended.fence, 1,
        "the lease taken with the claim is the only one issued"
    );
    let counts = h.store.job_counts(&SystemScope::new("test")).await.unwrap();
    assert_eq!(
        counts.into_iter().collect::<Vec<_>>(),
        vec![("completed", 1)],
        "the run's one job is completed"
    );
    assert_eq!(
        queue.completes.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the run's last commit completed the job"
    );
}

/// A worker of `concurrency` loops polling every `interval`, running until the token is cancelled.
fn started(
    engine: Engine,
    queue: Arc<CountingQueue>,
    concurrency: usize,
    interval: Duration,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<forge_engine::WorkerReport>,
) {
    let config = WorkerConfig {
        concurrency,
        poll_interval: interval,
        ..config()
    };
    let worker = Worker::new(Arc::new(engine), queue, config);
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let stop = stop.clone();
        async move { worker.run(stop).await }
    });
    (stop, running)
}

/// `n` runs of `agent`, each on a new thread, queued straight into `store` (as another
/// process's server would).
async fn queued(
    store: &forge_store_memory::MemoryStore,
    scope: &Scope,
    agent: &forge_core::agent::AgentRef,
    n: usize,
) -> Vec<RunId> {
    let mut runs = Vec::new();
    for _ in 0..n {
        let thread = store
            .create_thread(scope, NewThread::default())
            .await
            .unwrap();
        let new = NewRun::new(thread.id, agent.clone(), vec![Part::text("go")]);
        runs.push(store.create_run(scope, new).await.unwrap().id);
    }
    runs
}

/// Waits until each of `runs` has ended, failing at `deadline`.
async fn ended(
    store: &forge_store_memory::MemoryStore,
    scope: &Scope,
    runs: &[RunId],
    deadline: Instant,
) {
    for id in runs {
        while !store
            .get_run(scope, *id)
            .await
            .unwrap()
            .status
            .is_terminal()
        {
            assert!(Instant::now() < deadline, "run {id} never ended");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Each of `runs` (of [`ONE_RENDEZVOUS`]) completed, and its rendezvous tool's result, not its
/// failure, went back to the model: a run completes either way, since the scripted model answers
/// the tool's error too.
async fn met(store: &forge_store_memory::MemoryStore, scope: &Scope, runs: &[RunId]) {
    for id in runs {
        let run = store.get_run(scope, *id).await.unwrap();
        assert_eq!(run.status, RunStatus::Completed);
        let events = store.read_events(scope, *id, 0, 1000).await.unwrap();
        let log = serde_json::to_string(&events).unwrap();
        assert!(
            log.contains("met run") && !log.contains("never arrived"),
            "run {id}'s tool waited alone: {log}"
        );
    }
}

/// Waits (up to 20 s) until each of `runs` (of [`ONE_RENDEZVOUS`]) has ended, stops the worker,
/// and checks that it finished all of them and that each met its siblings ([`met`]).
async fn stop_once_met(
    store: &forge_store_memory::MemoryStore,
    scope: &Scope,
    runs: &[RunId],
    stop: CancellationToken,
    running: tokio::task::JoinHandle<forge_engine::WorkerReport>,
) {
    ended(store, scope, runs, Instant::now() + Duration::from_secs(20)).await;
    stop.cancel();
    assert_eq!(running.await.unwrap().finished, runs.len() as u64);
    met(store, scope, runs).await;
}

const ONE_RENDEZVOUS: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "r1", name = "rendezvous", input = { label = "run" } }]
[[conversation.turn]]
text = ["met"]
"#;

/// An idle worker polls the queue once per poll interval, not once per claim loop (issue 28:
/// its loops' empty claims were most of PostgreSQL's claims): eight loops idle for 30 intervals
/// claim at most 8 + 30 times (their first claims are one batch), where each polling on its own
/// made 8 + 240.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_polls_once_an_interval_however_many_loops_it_runs() {
    let h = harness(TWO_TOOL_STEPS, vec![calculator()], RunLimits::default());
    let queue = Arc::new(CountingQueue::new(h.store.clone()));
    let interval = Duration::from_millis(10);
    let (stop, idle) = started(h.engine, queue.clone(), 8, interval);
    let since = Instant::now();
    tokio::time::sleep(interval * 30).await;
    stop.cancel();
    idle.await.unwrap();
    // Sleeps only overrun, so a loaded machine makes fewer polls, never more.
    let intervals = (since.elapsed().as_millis() / interval.as_millis()) as usize;
    let claims = queue.claims.lock().unwrap().len();
    assert!(
        claims > 0 && claims <= 8 + intervals + 2,
        "{claims} claims in {intervals} intervals: one poll an interval after the loops' first"
    );
}

/// Jobs another process queued (so no wake-up from this one) are found by one poll, and the
/// loop that found one wakes the next idle loop, which claims at once: four runs that can only
/// end together are claimed within much less than a poll interval, not one an interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_queued_elsewhere_is_claimed_by_every_idle_loop_after_one_poll() {
    let h = harness(
        ONE_RENDEZVOUS,
        vec![crate::tools_tests::rendezvous(4)],
        RunLimits::default(),
    );
    let queue = Arc::new(CountingQueue::new(h.store.clone()));
    let interval = Duration::from_millis(1500);
    let (stop, running) = started(h.engine, queue.clone(), 4, interval);
    // The four loops' first claims (one batch, finding nothing); then they idle.
    while queue.claims.lock().unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Queued straight into the store, as another process's server would.
    let runs = queued(&h.store, &h.scope, &h.agent, 4).await;
    stop_once_met(&h.store, &h.scope, &runs, stop, running).await;
    let found = queue.found();
    let spread = found
        .iter()
        .max()
        .unwrap()
        .duration_since(*found.iter().min().unwrap());
    assert!(
        found.len() == 4 && spread < interval / 3,
        "{} jobs claimed over {spread:?}: the loop that found the first should wake the next",
        found.len()
    );
}

/// A worker's runs execute each in a task of its own, on all of the runtime's threads: two
/// runs whose tools block their thread until both are in (as CPU-bound work would) both
/// complete. Executed inside the claim loops' one task, they shared a thread, and the first
/// waited alone until its tool gave up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_runs_execute_on_every_thread_of_the_runtime() {
    let h = harness(
        ONE_RENDEZVOUS,
        vec![crate::tools_tests::thread_rendezvous(2)],
        RunLimits::default(),
    );
    let runs = queued(&h.store, &h.scope, &h.agent, 2).await;
    let queue = Arc::new(CountingQueue::new(h.store.clone()));
    let (stop, running) = started(h.engine, queue, 2, Duration::from_millis(5));
    stop_once_met(&h.store, &h.scope, &runs, stop, running).await;
}

/// Loops that want a job at the same time claim together, in one batch of the queue (issue 28:
/// one claim write per group of runs that ended together, not one per run): four runs queued
/// before a worker of four loops starts are claimed by its first batch, and the four all
/// complete, having met (their tools return only once all four are in).
#[tokio::test]
async fn loops_that_want_a_job_together_claim_in_one_batch() {
    let h = harness(
        ONE_RENDEZVOUS,
        vec![crate::tools_tests::rendezvous(4)],
        RunLimits::default(),
    );
    let engine = Arc::new(h.engine);
    let mut runs = Vec::new();
    for _ in 0..4 {
        runs.push(go(&h.store, &h.scope, &h.agent, &engine).await.1.id);
    }
    let queue = Arc::new(CountingQueue::new(h.store.clone()));
    let config = WorkerConfig {
        concurrency: 4,
        ..config()
    };
    let worker = Arc::new(Worker::new(engine, queue.clone(), config));
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (worker, stop) = (worker.clone(), stop.clone());
        async move { worker.run(stop).await }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while queue.found().len() < 4 {
        assert!(
            Instant::now() < deadline,
            "the four jobs were never claimed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let first = queue.batches()[0];
    assert_eq!(first, 4, "the loops' first claims are one batch of four");
    let found_by_first = queue
        .claims
        .lock()
        .unwrap()
        .iter()
        .take(4)
        .all(|(_, found)| *found);
    assert!(found_by_first, "that batch claimed the four jobs");
    stop_once_met(&h.store, &h.scope, &runs, stop, running).await;
}

/// A job claimed for a loop that stopped waiting (its `run_one` dropped while the batch was in
/// flight) is not lost: the next loop that asks gets it, without a claim of its own.
#[tokio::test]
async fn a_claim_made_for_a_loop_that_stopped_waiting_goes_to_the_next_loop() {
    let h = harness(TWO_TOOL_STEPS, vec![calculator()], RunLimits::default());
    let engine = Arc::new(h.engine);
    let (_, first) = go(&h.store, &h.scope, &h.agent, &engine).await;
    let (_, second) = go(&h.store, &h.scope, &h.agent, &engine).await;
    let queue = Arc::new(CountingQueue {
        gate: Some(tokio::sync::Semaphore::new(0)),
        ..CountingQueue::new(h.store.clone())
    });
    let worker = Arc::new(Worker::new(engine, queue.clone(), config()));
    let one = |worker: Arc<Worker>| {
        tokio::spawn(async move { worker.run_one(&CancellationToken::new()).await.unwrap() })
    };
    // The first loop's batch waits at the gate; the second loop waits for the next batch.
    let waiting = one(worker.clone());
    while queue.batches().is_empty() {
        tokio::task::yield_now().await;
    }
    let gone = one(worker.clone());
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    gone.abort();
    assert!(gone.await.unwrap_err().is_cancelled());
    // A permit more than the two batches need, so a third is not kept waiting at the gate.
    queue.gate.as_ref().unwrap().add_permits(3);
    assert_eq!(
        waiting.await.unwrap(),
        Some(JobOutcome::Finished(RunStatus::Completed))
    );
    while queue.batches().len() < 2 || queue.claims.lock().unwrap().len() < 2 {
        tokio::task::yield_now().await;
    }
    assert_eq!(queue.batches(), [1, 1], "a batch for each loop");
    let next = worker.run_one(&CancellationToken::new()).await.unwrap();
    assert_eq!(next, Some(JobOutcome::Finished(RunStatus::Completed)));
    assert_eq!(queue.batches(), [1, 1], "the spare claim needed no batch");
    for run in [first.id, second.id] {
        assert_eq!(
            h.store.get_run(&h.scope, run).await.unwrap().status,
            RunStatus::Completed
        );
    }
}

/// A run begins with the history its lease was read with (issue 28: one round trip fewer per
/// run), not a second read of its own; a history read with the lease of another thread is not
/// this run's, and the run reads its own.
#[tokio::test]
async fn a_run_begins_with_the_history_read_with_its_lease() {
    for (same_thread, expected) in [(true, "read with the lease"), (false, "go")] {
        let h = harness(TWO_TOOL_STEPS, vec![calculator()], RunLimits::default());
        let engine = Arc::new(h.engine);
        let (thread, run) = go(&h.store, &h.scope, &h.agent, &engine).await;
        let mut read = thread.clone();
        if !same_thread {
            read.id = forge_core::id::ThreadId::generate(&forge_core::id::UuidV7Generator);
        }
        let earlier = forge_core::message::Message {
            id: forge_core::id::MessageId::generate(&SequentialIds::new()),
            run_id: run.id,
            role: forge_core::message::Role::User,
            parts: vec![Part::text("read with the lease")],
            created_at: thread.created_at,
        };
        let queue = Arc::new(CountingQueue {
            history: Some((read, vec![earlier])),
            ..CountingQueue::new(h.store.clone())
        });
        let worker = Worker::new(engine.clone(), queue, config());
        let outcome = worker.run_one(&CancellationToken::new()).await.unwrap();
        assert_eq!(outcome, Some(JobOutcome::Finished(RunStatus::Completed)));
        let requests = h.model.requests.lock().unwrap();
        let first: Vec<String> = requests[0].messages.iter().map(|m| m.text()).collect();
        assert_eq!(
            first.first().map(String::as_str),
            Some(expected),
            "same thread: {same_thread}; the first request's messages: {first:?}"
        );
    }
}

/// On PostgreSQL, a run reads what it begins with in the statement that takes its lease (issue
/// 28), both executed directly and claimed by a worker: PostgreSQL counts the functions' calls
/// (`track_functions`), and the two runs call `forge_thread_start` once each, and neither the
/// separate thread read (`forge_thread_row`) nor a page read (`forge_message_page`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_run_reads_its_history_with_its_lease() {
    use forge_store_postgres::testing::{Flavor, TestDatabase};
    use sqlx::Connection;
    let db = TestDatabase::create(Flavor::Plain)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut admin = sqlx::PgConnection::connect(db.admin_url()).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE \"{}\" SET track_functions = 'pl'",
        db.name()
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    // A store whose connections begin after the setting.
    let clock = Arc::new(ManualClock::at_2026());
    let url = db.url().to_owned();
    let store = Arc::new(
        forge_store_postgres::PostgresStore::connect_with(
            &url,
            forge_store_postgres::Mode::Rls,
            clock.clone(),
            Arc::new(SequentialIds::new()),
        )
        .await
        .unwrap()
        .with_guard(db),
    );
    let def = agent(&["calculate"], RunLimits::default());
    let agent_ref = def.agent.clone();
    let engine = Arc::new(
        Engine::builder()
            .store(store.clone())
            .model(Arc::new(ScriptedProvider::new(
                Script::parse(TWO_TOOL_STEPS, "inline").unwrap(),
            )))
            .clock(clock)
            .worker_id("w1")
            .agent(def)
            .tool(calculator())
            .unwrap()
            .build()
            .unwrap(),
    );
    let scope = Scope::parse("acme", "alice", &["member"]).unwrap();
    let mut runs = vec![];
    for _ in 0..2 {
        let thread = store
            .create_thread(&scope, NewThread::default())
            .await
            .unwrap();
        runs.push(
            engine
                .start_run(&scope, thread.id, &agent_ref, vec![Part::text("go")])
                .await
                .unwrap(),
        );
    }
    let direct = engine
        .execute(&scope, runs[0].id, &CancellationToken::new(), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(direct.status, RunStatus::Completed);
    let worker = Worker::new(engine.clone(), store.clone(), config());
    let claimed = worker.run_one(&CancellationToken::new()).await.unwrap();
    assert_eq!(claimed, Some(JobOutcome::Finished(RunStatus::Completed)));
    // An idle backend publishes its counts within PostgreSQL's idle interval (10 s).
    let expected = [("forge_thread_start".to_owned(), 2)];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let calls: Vec<(String, i64)> = sqlx::query_as(
            "SELECT funcname::text, calls FROM pg_stat_user_functions WHERE funcname IN \
             ('forge_thread_start', 'forge_thread_row', 'forge_message_page') ORDER BY funcname",
        )
        .fetch_all(&mut admin)
        .await
        .unwrap();
        if calls == expected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the functions were called {calls:?} times, not {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A worker leaves alone the runs of agent versions it does not have (issue 17, item 1): in a
/// rolling deploy the old fleet neither fails nor dead-letters the new version's runs.
#[tokio::test]
async fn a_worker_does_not_claim_runs_of_agent_versions_it_lacks() {
    let h = harness(TWO_TOOL_STEPS, vec![calculator()], RunLimits::default());
    let engine = Arc::new(h.engine);
    let thread = h
        .store
        .create_thread(&h.scope, NewThread::default())
        .await
        .unwrap();
    let next = forge_core::agent::AgentRef {
        name: h.agent.name.clone(),
        version: "2".into(),
    };
    let mut new = NewRun::new(thread.id, next, vec![Part::text("go")]);
    new.max_attempts = 1;
    let run = h.store.create_run(&h.scope, new).await.unwrap();
    let worker = Worker::new(engine.clone(), h.store.clone(), config());
    for _ in 0..3 {
        assert_eq!(
            worker.run_one(&CancellationToken::new()).await.unwrap(),
            None
        );
    }
    let jobs = h
        .store
        .dead_jobs(&forge_core::scope::SystemScope::new("test"), 10)
        .await
        .unwrap();
    assert!(jobs.is_empty(), "nothing dead-lettered: {jobs:?}");
    assert_eq!(
        h.store.get_run(&h.scope, run.id).await.unwrap().status,
        RunStatus::Queued,
        "the run waits for a worker that has its version"
    );
}

/// Drains after the first event of step 2 is produced (so step 1 is committed, step 2 is not).
struct DrainAt {
    drain: CancellationToken,
}

impl RunObserver for DrainAt {
    fn on_event(&self, e: &RunEvent) {
        if matches!(e.kind, RunEventKind::StepStarted { step: 2 }) {
            self.drain.cancel();
        }
    }
}

#[tokio::test]
async fn a_drained_run_checkpoints_and_another_worker_resumes_it_without_gaps() {
    let h = harness(TWO_TOOL_STEPS, vec![calculator()], RunLimits::default());
    let engine = Arc::new(h.engine);
    let (_, run) = go(&h.store, &h.scope, &h.agent, &engine).await;
    let drain = CancellationToken::new();
    let first =
        Worker::new(engine.clone(), h.store.clone(), config()).with_observer(Arc::new(DrainAt {
            drain: drain.clone(),
        }));
    let outcome = first.run_one(&drain).await.unwrap();
    assert_eq!(
        outcome,
        Some(JobOutcome::Paused(RunStatus::Running)),
        "stopped after a committed step"
    );
    let parked = h.store.get_run(&h.scope, run.id).await.unwrap();
    assert_eq!(
        (
            parked.status,
            parked.checkpoint.step,
            parked.lease.is_none()
        ),
        (RunStatus::Running, 2, true)
    );

    let second = Worker::new(engine.clone(), h.store.clone(), config());
    let outcome = second.run_one(&CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, Some(JobOutcome::Finished(RunStatus::Completed)));
    let events = h
        .store
        .read_events(&h.scope, run.id, 0, 1000)
        .await
        .unwrap();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1);
    }
    let starts = events
        .iter()
        .filter(|e| matches!(e.kind, RunEventKind::RunStarted { .. }))
        .count();
    assert_eq!(starts, 1, "a resumed run does not start again");
    let steps: Vec<u32> = events
        .iter()
        .filter_map(|e| {
            if let RunEventKind::StepStarted { step } = e.kind {
                Some(step)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(
        steps,
        [1, 2, 3],
        "the resumed run continues at the next step"
    );
}

#[tokio::test]
async fn a_cancel_request_stops_the_run_after_its_step_and_starts_the_next() {
    let h = harness(TWO_TOOL_STEPS, vec![calculator()], RunLimits::default());
    let engine = Arc::new(h.engine);
    let thread = h
        .store
        .create_thread(&h.scope, NewThread::default())
        .await
        .unwrap();
    let first = engine
        .start_run(&h.scope, thread.id, &h.agent, vec![Part::text("one")])
        .await
        .unwrap();
    let second = engine
        .start_run(&h.scope, thread.id, &h.agent, vec![Part::text("two")])
        .await
        .unwrap();
    // Ask the first run to cancel while its first step runs.
    struct CancelOnFirstTool {
        store: Arc<forge_store_memory::MemoryStore>,
        scope: Scope,
        run: RunId,
    }
    impl RunObserver for CancelOnFirstTool {
        fn on_event(&self, e: &RunEvent) {
            if e.run_id == self.run && matches!(e.kind, RunEventKind::StepStarted { step: 1 }) {
                let (store, scope, run) = (self.store.clone(), self.scope.clone(), self.run);
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .build()
                        .unwrap();
                    assert!(rt.block_on(store.request_cancel(&scope, run)).unwrap());
                })
                .join()
                .unwrap();
            }
        }
    }
    let observer = CancelOnFirstTool {
        store: h.store.clone(),
        scope: h.scope.clone(),
        run: first.id,
    };
    let worker =
        Worker::new(engine.clone(), h.store.clone(), config()).with_observer(Arc::new(observer));
    assert_eq!(
        worker.run_one(&CancellationToken::new()).await.unwrap(),
        Some(JobOutcome::Finished(RunStatus::Cancelled))
    );
    let events = h
        .store
        .read_events(&h.scope, first.id, 0, 100)
        .await
        .unwrap();
    let last = events.last().unwrap();
    assert_eq!(
        last.kind,
        RunEventKind::RunCancelled {
            reason: Some("cancel requested".into())
        }
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e.kind, RunEventKind::RunCheckpointed { step: 1, .. })),
        "step 1 finished first"
    );
    // The next run of the thread is promoted and runs.
    assert_eq!(
        worker.run_one(&CancellationToken::new()).await.unwrap(),
        Some(JobOutcome::Finished(RunStatus::Completed))
    );
    assert_eq!(
        h.store.get_run(&h.scope, second.id).await.unwrap().status,
        RunStatus::Completed
    );
}

#[tokio::test]
async fn a_run_still_leased_by_a_crashed_worker_is_deferred_until_the_lease_lapses() {
    let h = harness(TWO_TOOL_STEPS, vec![calculator()], RunLimits::default());
    let engine = Arc::new(h.engine);
    let (_, run) = go(&h.store, &h.scope, &h.agent, &engine).await;
    // A worker took the run and died holding its lease.
    let dead = h
        .store
        .acquire_lease(&h.scope, run.id, "dead-worker", Duration::from_secs(30))
        .await
        .unwrap();
    let worker = Worker::new(engine.clone(), h.store.clone(), config());
    assert_eq!(
        worker.run_one(&CancellationToken::new()).await.unwrap(),
        Some(JobOutcome::Deferred)
    );
    assert_eq!(
        worker.run_one(&CancellationToken::new()).await.unwrap(),
        None,
        "not before the lease lapses"
    );
    h.clock.advance(Duration::from_secs(31));
    assert_eq!(
        worker.run_one(&CancellationToken::new()).await.unwrap(),
        Some(JobOutcome::Finished(RunStatus::Completed))
    );
    let run = h.store.get_run(&h.scope, run.id).await.unwrap();
    assert!(
        run.fence > dead.token,
        "the new execution was fenced above the dead worker"
    );
    // Its model calls name the lease holder that took over (the engine's worker id), and its
    // attempt.
    let calls = engine.run_usage(&h.scope, run.id).await.unwrap();
    assert!(!calls.is_empty());
    for call in calls {
        assert_eq!(call.holder.as_deref(), Some("w1"));
        assert!(call.attempt > dead.token);
    }
}

/// Records when each run's execution started and ended, by the wall clock.
#[derive(Default)]
struct Spans {
    spans: Mutex<Vec<(RunId, Instant, Option<Instant>)>>,
}

impl RunObserver for Spans {
    fn on_event(&self, e: &RunEvent) {
        let mut spans = self.spans.lock().unwrap();
        match e.kind {
            RunEventKind::RunStarted { .. } => spans.push((e.run_id, Instant::now(), None)),
            ref k if k.is_terminal() => {
                if let Some(s) = spans.iter_mut().find(|s| s.0 == e.run_id) {
                    s.2 = Some(Instant::now());
                }
            }
            _ => {}
        }
    }
}

/// 50 runs started at once on one thread, executed by 4 concurrent claim loops: they never overlap
/// and run in the order they were admitted.
async fn fifty_starts_on_one_thread_never_overlap(store: Arc<dyn Store>, clock: Arc<ManualClock>) {
    let script =
        "[[conversation]]\n[[conversation.turn]]\ntext = [\"a\", \"b\"]\nchunk_delay_ms = 2\n";
    let def = agent(&[], RunLimits::default());
    let engine = Arc::new(
        Engine::builder()
            .dyn_store(store.clone())
            .model(Arc::new(ScriptedProvider::new(
                Script::parse(script, "inline").unwrap(),
            )))
            .clock(clock)
            .ids(Arc::new(SequentialIds::new()))
            .agent(def.clone())
            .build()
            .unwrap(),
    );
    let scope = Scope::parse("acme", "alice", &["member"]).unwrap();
    let thread = store
        .create_thread(&scope, NewThread::default())
        .await
        .unwrap();
    let starts = (0..50).map(|i| {
        let (engine, scope, agent) = (engine.clone(), scope.clone(), def.agent.clone());
        tokio::spawn(async move {
            engine
                .submit(
                    &scope,
                    NewRun::new(thread.id, agent, vec![Part::text(format!("m{i}"))]),
                )
                .await
        })
    });
    let mut admitted = Vec::new();
    for s in starts {
        admitted.push(s.await.unwrap().unwrap().id);
    }
    let spans = Arc::new(Spans::default());
    let queue: Arc<dyn JobQueue> = store.clone();
    let worker = Worker::new(
        engine,
        queue,
        WorkerConfig {
            concurrency: 4,
            ..config()
        },
    )
    .with_observer(spans.clone());
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let (store2, scope2) = (store.clone(), scope.clone());
    let watcher = tokio::spawn(async move {
        for _ in 0..3000 {
            let runs = store2.list_runs(&scope2, thread.id).await.unwrap();
            if runs.len() == 50 && runs.iter().all(|r| r.status.is_terminal()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        stop.cancel();
    });
    worker.run(shutdown).await;
    watcher.await.unwrap();
    let runs = store.list_runs(&scope, thread.id).await.unwrap();
    let not_done: Vec<String> = runs
        .iter()
        .filter(|r| r.status != RunStatus::Completed)
        .map(|r| format!("{} {:?} {:?}", r.id, r.status, r.failure))
        .collect();
    assert!(
        not_done.is_empty(),
        "every run completed; {} did not: {not_done:?}",
        not_done.len()
    );
    let mut spans = spans.spans.lock().unwrap().clone();
    assert_eq!(spans.len(), 50, "each run started exactly once");
    spans.sort_by_key(|s| s.1);
    for pair in spans.windows(2) {
        let end = pair[0].2.expect("ended");
        assert!(
            end <= pair[1].1,
            "run {} started before run {} ended",
            pair[1].0,
            pair[0].0
        );
    }
    // Admission order is creation order within the thread.
    let by_creation: Vec<RunId> = runs.iter().map(|r| r.id).collect();
    let executed: Vec<RunId> = spans.iter().map(|s| s.0).collect();
    assert_eq!(executed, by_creation);
    let mut sorted_admitted = admitted.clone();
    sorted_admitted.sort();
    let mut sorted_executed = executed.clone();
    sorted_executed.sort();
    assert_eq!(sorted_admitted, sorted_executed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordering_memory() {
    let clock = Arc::new(ManualClock::at_2026());
    let store = Arc::new(forge_store_memory::MemoryStore::new(
        clock.clone(),
        Arc::new(SequentialIds::new()),
    ));
    fifty_starts_on_one_thread_never_overlap(store, clock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordering_sqlite() {
    let clock = Arc::new(ManualClock::at_2026());
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ordering-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("ordering.db").display());
    let _ = std::fs::remove_file(dir.join("ordering.db"));
    let store = forge_store_sqlite::SqliteStore::open_with(
        &url,
        clock.clone(),
        Arc::new(SequentialIds::new()),
    )
    .await
    .unwrap();
    fifty_starts_on_one_thread_never_overlap(Arc::new(store), clock).await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordering_postgres() {
    use forge_store_postgres::testing::{Flavor, TestDatabase};
    let clock = Arc::new(ManualClock::at_2026());
    let db = TestDatabase::create(Flavor::Plain)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let store = forge_store_postgres::PostgresStore::connect_with(
        db.url(),
        forge_store_postgres::Mode::Rls,
        clock.clone(),
        Arc::new(SequentialIds::new()),
    )
    .await
    .unwrap()
    .with_guard(db);
    fifty_starts_on_one_thread_never_overlap(Arc::new(store), clock).await;
}

/// How many sweeps a worker has made: each records the queue's depth once.
fn sweeps(metrics: &crate::harness::Metrics) -> usize {
    metrics
        .of(forge_core::telemetry::Instrument::QueueDepth)
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_of_a_fleet_sweeps_and_another_takes_over_when_it_stops() {
    use forge_core::telemetry::Telemetry;
    let clock = Arc::new(ManualClock::at_2026());
    let store = Arc::new(forge_store_memory::MemoryStore::new(
        clock.clone(),
        Arc::new(SequentialIds::new()),
    ));
    let make = |id: &str, metrics: Arc<crate::harness::Metrics>| {
        let engine = Engine::builder()
            .store(store.clone())
            .clock(clock.clone())
            .telemetry(Telemetry {
                meter: metrics,
                ..Telemetry::noop()
            })
            .build()
            .unwrap();
        let config = WorkerConfig {
            id: id.into(),
            poll_interval: Duration::from_millis(5),
            sweep_interval: Duration::from_millis(10),
            ..WorkerConfig::default()
        };
        Worker::new(Arc::new(engine), store.clone(), config).with_sweep_leases(store.clone())
    };
    let (a_sweeps, b_sweeps) = (
        Arc::new(crate::harness::Metrics::default()),
        Arc::new(crate::harness::Metrics::default()),
    );
    let (a, b) = (make("a", a_sweeps.clone()), make("b", b_sweeps.clone()));
    let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
    let ta = tokio::spawn({
        let stop = stop_a.clone();
        async move { a.run(stop).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let tb = tokio::spawn({
        let stop = stop_b.clone();
        async move { b.run(stop).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        sweeps(&a_sweeps) >= 5,
        "the leader sweeps: {}",
        sweeps(&a_sweeps)
    );
    assert_eq!(sweeps(&b_sweeps), 0, "the other worker does not");
    stop_a.cancel();
    ta.await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        sweeps(&b_sweeps) >= 5,
        "the leader's release hands the sweeps over: {}",
        sweeps(&b_sweeps)
    );
    stop_b.cancel();
    tb.await.unwrap();
}

/// A tool that panics with the text it was given in the panic's message, as a slicing bug on a
/// document would.
fn panicking_tool() -> Arc<dyn forge_core::ports::tool::Tool> {
    Arc::new(forge_engine::native_tool(
        "calculate",
        "panics, quoting its input",
        |_ctx, w: crate::tools_tests::Wait| async move {
            if !w.label.is_empty() {
                panic!("cannot cut {}", w.label);
            }
            Ok::<_, forge_core::ports::tool::ToolError>(String::new())
        },
    ))
}

#[tokio::test]
async fn a_panic_in_a_run_fails_its_job_without_its_message() {
    let script = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "c1", name = "calculate", input = { label = "DOCUMENT-TEXT-7f3a" } }]
[[conversation.turn]]
text = ["done"]
"#;
    let h = harness(script, vec![panicking_tool()], RunLimits::default());
    let engine = Arc::new(h.engine);
    let (_, run) = go(&h.store, &h.scope, &h.agent, &engine).await;
    let config = WorkerConfig {
        backoff_base: Duration::ZERO,
        backoff_max: Duration::ZERO,
        ..config()
    };
    let worker = Worker::new(engine.clone(), h.store.clone(), config);
    // Before the fix the panic went on through `run_one` and took the worker's loop with it.
    // Each attempt fails the job, until it is dead-lettered.
    loop {
        match worker.run_one(&CancellationToken::new()).await.unwrap() {
            Some(JobOutcome::Failed(JobState::Dead)) => break,
            Some(JobOutcome::Failed(_)) => continue,
            other => panic!("a panic fails the job: {other:?}"),
        }
    }
    let dead = h
        .store
        .dead_jobs(&SystemScope::new("test"), 10)
        .await
        .unwrap();
    assert_eq!(dead[0].run_id, run.id);
    let reason = dead[0].last_error.clone().unwrap_or_default();
    assert!(reason.contains("panicked"), "{reason}");
    assert!(!reason.contains("DOCUMENT-TEXT"), "{reason}");
}

/// One step streaming fifty chunks, 100 ms apart (five seconds), then done.
const LONG_ANSWER: &str = r#"
[[conversation]]
[[conversation.turn]]
chunk_delay_ms = 100
text = ["w ", "w ", "w ", "w ", "w ", "w ", "w ", "w ", "w ", "w ",
        "w ", "w ", "w ", "w ", "w ", "w ", "w ", "w ", "w ", "w ",
        "w ", "w ", "w ", "w ", "w ", "w ", "w ", "w ", "w ", "w ",
        "w ", "w ", "w ", "w ", "w ", "w ", "w ", "w ", "w ", "w ",
        "w ", "w ", "w ", "w ", "w ", "w ", "w ", "w ", "w ", "last"]
[[conversation]]
[[conversation.turn]]
text = ["second"]
"#;

/// How a test asks the streaming run to cancel once its first chunk is out.
#[derive(Clone, Copy, Debug)]
enum Ask {
    /// Through the engine of the process that executes it.
    Engine,
    /// Through the store alone, as another process (a server without a worker) does.
    Store,
    /// By starting a run with the `Interrupt` strategy on its thread, through the engine.
    Interrupt,
}

/// Counts the streamed parts and, at the first, asks the run to cancel as `ask` says.
struct CancelOnFirstChunk {
    engine: std::sync::OnceLock<Arc<Engine>>,
    store: Arc<forge_store_memory::MemoryStore>,
    scope: Scope,
    agent: forge_core::agent::AgentRef,
    ask: Ask,
    run: RunId,
    thread: forge_core::id::ThreadId,
    streamed: std::sync::atomic::AtomicUsize,
}

impl RunObserver for CancelOnFirstChunk {
    fn on_event(&self, e: &RunEvent) {
        if e.run_id != self.run
            || !matches!(
                e.kind,
                RunEventKind::PartAdded { .. } | RunEventKind::PartUpdated { .. }
            )
        {
            return;
        }
        if self
            .streamed
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            > 0
        {
            return;
        }
        let (engine, store, scope, run, ask) = (
            self.engine.get().unwrap().clone(),
            self.store.clone(),
            self.scope.clone(),
            self.run,
            self.ask,
        );
        let (agent, thread) = (self.agent.clone(), self.thread);
        tokio::spawn(async move {
            match ask {
                Ask::Engine => assert!(engine.request_cancel(&scope, run).await.unwrap()),
                Ask::Store => assert!(store.request_cancel(&scope, run).await.unwrap()),
                Ask::Interrupt => {
                    let mut new = NewRun::new(thread, agent, vec![Part::text("instead")]);
                    new.strategy = forge_core::ports::store::StartStrategy::Interrupt;
                    engine.submit(&scope, new).await.unwrap();
                }
            }
        });
    }
}

/// Cancelling a run whose one step streams a long answer stops the stream: the run ends
/// `cancelled`, with far fewer chunks than the answer had, and the usage of the cut call is
/// settled (a `usage.updated` before the end).
async fn a_streaming_step_stops_when(ask: Ask) {
    let h =
        crate::harness::harness_built(LONG_ANSWER, vec![], agent(&[], RunLimits::default()), |b| {
            b.cancel_poll(Duration::from_millis(20))
        });
    let engine = Arc::new(h.engine);
    let (thread, run) = go(&h.store, &h.scope, &h.agent, &engine).await;
    let observer = Arc::new(CancelOnFirstChunk {
        engine: std::sync::OnceLock::new(),
        store: h.store.clone(),
        scope: h.scope.clone(),
        agent: h.agent.clone(),
        ask,
        run: run.id,
        thread: thread.id,
        streamed: Default::default(),
    });
    observer.engine.set(engine.clone()).unwrap();
    let worker =
        Worker::new(engine.clone(), h.store.clone(), config()).with_observer(observer.clone());
    assert_eq!(
        worker.run_one(&CancellationToken::new()).await.unwrap(),
        Some(JobOutcome::Finished(RunStatus::Cancelled)),
        "{ask:?}"
    );
    let streamed = observer.streamed.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        streamed < 25,
        "{ask:?}: {streamed} of 50 chunks streamed after the cancel"
    );
    let events = h.store.read_events(&h.scope, run.id, 0, 500).await.unwrap();
    assert!(
        matches!(
            events.last().unwrap().kind,
            RunEventKind::RunCancelled { .. }
        ),
        "{ask:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e.kind, RunEventKind::UsageUpdated { step: 1, .. })),
        "{ask:?}: the cut call's usage is settled"
    );
    if let Ask::Interrupt = ask {
        // The interrupting run goes next, and runs.
        assert_eq!(
            worker.run_one(&CancellationToken::new()).await.unwrap(),
            Some(JobOutcome::Finished(RunStatus::Completed))
        );
        let runs = h.store.list_runs(&h.scope, thread.id).await.unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[1].status, RunStatus::Completed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_through_the_engine_stops_a_streaming_step() {
    a_streaming_step_stops_when(Ask::Engine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_from_another_process_stops_a_streaming_step() {
    a_streaming_step_stops_when(Ask::Store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupting_run_stops_a_streaming_step_and_goes_next() {
    a_streaming_step_stops_when(Ask::Interrupt).await;
}
