//! The store conformance suite: threads and session state, runs, leases, `commit_step`, the event
//! log (the queue's suite is `queue`). Every scenario panics with a message naming what the
//! adapter got wrong.

use std::sync::Arc;
use std::time::Duration;

use forge_core::event::{RunEvent, RunEventKind};
use forge_core::id::{MessageId, RunId, SequentialIds};
use forge_core::message::{Message, Role};
use forge_core::part::Part;
use forge_core::ports::queue::{ClaimFilter, JobQueue, NewJob};
use forge_core::ports::store::{
    InFlight, NewRun, NewThread, RunQuery, RunStore, StartStrategy, StepCommit, ThreadStore,
};
use forge_core::run::{Checkpoint, Run, RunLease, RunStatus};
use forge_core::scope::{Scope, SystemScope};
use forge_core::time::{Clock, ManualClock};
use forge_core::{Error, ErrorKind};

use crate::StoreFactory;
use crate::fixtures::{agent_ref, scope};

mod filters;
pub use filters::runs_are_filtered_by_agent_time_and_failure;

pub(crate) const TTL: Duration = Duration::from_secs(30);

pub(crate) struct Fixture<F: StoreFactory> {
    pub(crate) store: Arc<F::Store>,
    pub(crate) clock: Arc<ManualClock>,
    pub(crate) scope: Scope,
}

pub(crate) async fn fixture<F: StoreFactory>() -> Fixture<F> {
    let clock = Arc::new(ManualClock::at_2026());
    Fixture {
        store: F::make(clock.clone()).await,
        clock,
        scope: scope("tenant-a"),
    }
}

impl<F: StoreFactory> Fixture<F> {
    pub(crate) async fn run(&self) -> Run {
        let thread = self
            .store
            .create_thread(&self.scope, NewThread::default())
            .await
            .expect("create thread");
        self.store
            .create_run(
                &self.scope,
                NewRun::new(thread.id, agent_ref(), vec![Part::text("hi")]),
            )
            .await
            .expect("create run")
    }

    pub(crate) async fn enqueue(&self, run: RunId, max_attempts: u32) -> forge_core::id::JobId {
        self.store
            .enqueue(
                &self.scope,
                NewJob {
                    run_id: run,
                    not_before: None,
                    max_attempts,
                    traceparent: None,
                },
            )
            .await
            .expect("enqueue")
    }

    pub(crate) fn events(&self, run: RunId, from_seq: u64, n: u64) -> Vec<RunEvent> {
        (from_seq..from_seq + n)
            .map(|seq| RunEvent {
                run_id: run,
                seq,
                at: self.clock.now(),
                kind: RunEventKind::StepStarted { step: seq as u32 },
            })
            .collect()
    }

    pub(crate) fn commit(
        &self,
        run: &Run,
        lease: &RunLease,
        events: Vec<RunEvent>,
        status: RunStatus,
    ) -> StepCommit {
        commit_of(run, lease, events, status)
    }
}

/// A step commit of `run` under `lease` with `events` and nothing else, ending at `status`.
pub(crate) fn commit_of(
    run: &Run,
    lease: &RunLease,
    events: Vec<RunEvent>,
    status: RunStatus,
) -> StepCommit {
    StepCommit {
        run_id: run.id,
        expected_version: run.version,
        lease: lease.clone(),
        events,
        messages: vec![],
        checkpoint: Checkpoint {
            step: run.checkpoint.step + 1,
            ..Checkpoint::default()
        },
        status,
        failure: None,
        interactions: vec![],
        audit: vec![],
        settlements: vec![],
        state: None,
        summary: None,
        job: None,
    }
}

pub(crate) fn expect_kind<T: std::fmt::Debug>(
    r: Result<T, Error>,
    kind: ErrorKind,
    what: &str,
) -> Error {
    match r {
        Err(e) if e.kind() == kind => e,
        other => panic!("{what}: expected a {kind:?} error, got {other:?}"),
    }
}

/// Threads round-trip; session state is versioned and refuses a stale writer.
pub async fn thread_round_trip_and_session_state<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let mut initial = serde_json::Map::new();
    initial.insert("plan".into(), "free".into());
    let t = f
        .store
        .create_thread(
            &f.scope,
            NewThread {
                title: Some("support".into()),
                state: initial.clone(),
                id: None,
            },
        )
        .await
        .expect("create thread");
    let back = f
        .store
        .get_thread(&f.scope, t.id)
        .await
        .expect("get thread");
    assert_eq!(back, t, "a thread must read back as written");
    assert_eq!(back.state.version, 0);
    assert_eq!(back.state.values, initial);

    let mut next = initial.clone();
    next.insert("plan".into(), "pro".into());
    let s = f
        .store
        .put_session_state(&f.scope, t.id, 0, next.clone())
        .await
        .expect("put state");
    assert_eq!(s.version, 1);
    let stale = f.store.put_session_state(&f.scope, t.id, 0, initial).await;
    expect_kind(stale, ErrorKind::Conflict, "a stale session-state write");
    assert_eq!(
        f.store
            .get_thread(&f.scope, t.id)
            .await
            .expect("get")
            .state
            .values,
        next
    );
}

/// Another tenant's thread and run behave exactly like ids that do not exist.
pub async fn tenant_isolation<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let run = f.run().await;
    let lease = f
        .store
        .acquire_lease(&f.scope, run.id, "w", TTL)
        .await
        .expect("lease");
    let other = scope("tenant-b");
    expect_kind(
        f.store.get_thread(&other, run.thread_id).await,
        ErrorKind::NotFound,
        "get_thread across tenants",
    );
    expect_kind(
        f.store.list_messages(&other, run.thread_id).await,
        ErrorKind::NotFound,
        "list_messages across tenants",
    );
    expect_kind(
        f.store.list_runs(&other, run.thread_id).await,
        ErrorKind::NotFound,
        "list_runs across tenants",
    );
    expect_kind(
        f.store.get_run(&other, run.id).await,
        ErrorKind::NotFound,
        "get_run across tenants",
    );
    expect_kind(
        f.store.read_events(&other, run.id, 0, 10).await,
        ErrorKind::NotFound,
        "read_events across tenants",
    );
    expect_kind(
        f.store
            .put_session_state(&other, run.thread_id, 0, serde_json::Map::new())
            .await,
        ErrorKind::NotFound,
        "put_session_state across tenants",
    );
    expect_kind(
        f.store
            .create_run(
                &other,
                NewRun::new(run.thread_id, agent_ref(), vec![Part::text("x")]),
            )
            .await,
        ErrorKind::NotFound,
        "create_run on another tenant's thread",
    );
    expect_kind(
        f.store.acquire_lease(&other, run.id, "w2", TTL).await,
        ErrorKind::NotFound,
        "acquire_lease across tenants",
    );
    expect_kind(
        f.store.renew_lease(&other, &lease, TTL).await,
        ErrorKind::NotFound,
        "renew_lease across tenants",
    );
    expect_kind(
        f.store.release_lease(&other, &lease).await,
        ErrorKind::NotFound,
        "release_lease across tenants",
    );
    // The owner's lease survived both attempts.
    f.store
        .renew_lease(&f.scope, &lease, TTL)
        .await
        .expect("the owner still holds the lease");
    let commit = f.commit(&run, &lease, f.events(run.id, 1, 1), RunStatus::Running);
    expect_kind(
        f.store.commit_step(&other, commit).await,
        ErrorKind::NotFound,
        "commit_step across tenants",
    );
    expect_kind(
        f.store
            .enqueue(
                &other,
                NewJob {
                    run_id: run.id,
                    not_before: None,
                    max_attempts: 3,
                    traceparent: None,
                },
            )
            .await,
        ErrorKind::NotFound,
        "enqueue another tenant's run",
    );
    let missing = RunId::generate(&SequentialIds::new());
    let e = expect_kind(
        f.store.get_run(&f.scope, missing).await,
        ErrorKind::NotFound,
        "a missing run",
    );
    assert!(e.to_string().ends_with("not found"), "{e}");
    // And the owner still sees everything unchanged.
    assert_eq!(
        f.store
            .get_run(&f.scope, run.id)
            .await
            .expect("get run")
            .version,
        0
    );
}

/// Two concurrent commits from the same version: exactly one wins, the other conflicts.
pub async fn commit_step_single_writer<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let run = f.run().await;
    let lease = f
        .store
        .acquire_lease(&f.scope, run.id, "w", TTL)
        .await
        .expect("lease");
    let a = f.commit(&run, &lease, f.events(run.id, 1, 2), RunStatus::Running);
    let b = f.commit(&run, &lease, f.events(run.id, 1, 3), RunStatus::Running);
    let (s1, s2) = (f.store.clone(), f.store.clone());
    let (sc1, sc2) = (f.scope.clone(), f.scope.clone());
    let (ra, rb) = tokio::join!(
        tokio::spawn(async move { s1.commit_step(&sc1, a).await }),
        tokio::spawn(async move { s2.commit_step(&sc2, b).await }),
    );
    let results = [ra.expect("join"), rb.expect("join")];
    let wins = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(
        wins, 1,
        "exactly one of two same-version commits must win: {results:?}"
    );
    let loser = results.into_iter().find(|r| r.is_err()).expect("one loser");
    expect_kind(loser, ErrorKind::Conflict, "the losing commit");
    let stored = f.store.get_run(&f.scope, run.id).await.expect("get run");
    assert_eq!(stored.version, 1);
    let log = f
        .store
        .read_events(&f.scope, run.id, 0, 100)
        .await
        .expect("read");
    assert_eq!(
        log.len() as u64,
        stored.last_seq,
        "the log holds exactly the winner's events"
    );
}

/// A commit under a replaced or expired lease is refused.
pub async fn commit_step_fencing<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let run = f.run().await;
    let old = f
        .store
        .acquire_lease(&f.scope, run.id, "w1", TTL)
        .await
        .expect("lease");
    f.clock.advance(TTL + Duration::from_secs(1));
    let new = f
        .store
        .acquire_lease(&f.scope, run.id, "w2", TTL)
        .await
        .expect("lease after expiry");
    assert!(
        new.token > old.token,
        "a new holder must get a higher fencing token"
    );
    let stale = f.commit(&run, &old, f.events(run.id, 1, 1), RunStatus::Running);
    expect_kind(
        f.store.commit_step(&f.scope, stale).await,
        ErrorKind::Conflict,
        "a commit with a stale lease token",
    );
    expect_kind(
        f.store.renew_lease(&f.scope, &old, TTL).await,
        ErrorKind::Conflict,
        "renewing a stale lease",
    );

    let ok = f.commit(&run, &new, f.events(run.id, 1, 1), RunStatus::Running);
    f.store
        .commit_step(&f.scope, ok)
        .await
        .expect("the current holder commits");

    // An expired lease that nobody took over is still not good enough to commit with.
    let run = f.store.get_run(&f.scope, run.id).await.expect("get");
    f.clock.advance(TTL + Duration::from_secs(1));
    let late = f.commit(&run, &new, f.events(run.id, 2, 1), RunStatus::Running);
    expect_kind(
        f.store.commit_step(&f.scope, late).await,
        ErrorKind::Conflict,
        "a commit with an expired lease",
    );
}

/// A refused commit leaves run, log and history exactly as they were.
pub async fn refused_commit_writes_nothing<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let run = f.run().await;
    let lease = f
        .store
        .acquire_lease(&f.scope, run.id, "w", TTL)
        .await
        .expect("lease");
    let before_msgs = f
        .store
        .list_messages(&f.scope, run.thread_id)
        .await
        .expect("messages");
    let message = Message {
        id: MessageId::generate(&SequentialIds::new()),
        run_id: run.id,
        role: Role::Assistant,
        parts: vec![Part::text("partial")],
        created_at: f.clock.now(),
    };
    // A gap in the sequence numbers.
    let mut bad = f.commit(&run, &lease, f.events(run.id, 2, 1), RunStatus::Running);
    bad.messages = vec![message];
    expect_kind(
        f.store.commit_step(&f.scope, bad).await,
        ErrorKind::Invalid,
        "a commit whose events skip a sequence",
    );
    // Events that start right after the log but leave a gap further on.
    let mut gapped = f.events(run.id, 1, 3);
    gapped.remove(1);
    expect_kind(
        f.store
            .commit_step(&f.scope, f.commit(&run, &lease, gapped, RunStatus::Running))
            .await,
        ErrorKind::Invalid,
        "a commit whose events skip a sequence after the first",
    );
    // A message of another run, in a step that is otherwise in order.
    let mut foreign = f.commit(&run, &lease, f.events(run.id, 1, 1), RunStatus::Running);
    foreign.messages = vec![Message {
        id: MessageId::generate(&SequentialIds::new()),
        run_id: forge_core::id::RunId(uuid::Uuid::from_u128(7)),
        role: Role::Assistant,
        parts: vec![Part::text("not this run's")],
        created_at: f.clock.now(),
    }];
    expect_kind(
        f.store.commit_step(&f.scope, foreign).await,
        ErrorKind::Invalid,
        "a commit of another run's message",
    );
    // A wrong expected version.
    let mut stale = f.commit(&run, &lease, f.events(run.id, 1, 1), RunStatus::Running);
    stale.expected_version = 7;
    expect_kind(
        f.store.commit_step(&f.scope, stale).await,
        ErrorKind::Conflict,
        "a commit at the wrong version",
    );

    let after = f.store.get_run(&f.scope, run.id).await.expect("get");
    assert_eq!(
        (after.version, after.last_seq, after.status),
        (0, 0, RunStatus::Queued)
    );
    assert!(
        f.store
            .read_events(&f.scope, run.id, 0, 10)
            .await
            .expect("read")
            .is_empty()
    );
    assert_eq!(
        f.store
            .list_messages(&f.scope, run.thread_id)
            .await
            .expect("messages"),
        before_msgs
    );
}

/// `commit_step` enforces the run state machine: a terminal run never changes.
pub async fn illegal_status_change_is_refused<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let run = f.run().await;
    let lease = f
        .store
        .acquire_lease(&f.scope, run.id, "w", TTL)
        .await
        .expect("lease");
    // One step may hold several transitions: a one-step run goes from queued to completed.
    let done = f.commit(&run, &lease, f.events(run.id, 1, 2), RunStatus::Completed);
    f.store
        .commit_step(&f.scope, done)
        .await
        .expect("queued to completed in one step");
    // The ending commit gave the lease up; a holder that leases the ended run still cannot
    // change it.
    let lease = f
        .store
        .acquire_lease(&f.scope, run.id, "w", TTL)
        .await
        .expect("lease of an ended run");
    let run = f.store.get_run(&f.scope, run.id).await.expect("get");
    for to in [
        RunStatus::Running,
        RunStatus::Cancelled,
        RunStatus::Completed,
    ] {
        let revive = f.commit(&run, &lease, f.events(run.id, 3, 1), to);
        expect_kind(
            f.store.commit_step(&f.scope, revive).await,
            ErrorKind::Invalid,
            "a terminal run changing",
        );
    }
    assert_eq!(
        f.store
            .read_events(&f.scope, run.id, 0, 10)
            .await
            .expect("read")
            .len(),
        2
    );
}

/// 32 concurrent appenders, each retrying on conflict: the log ends gapless and unique.
pub async fn event_log_gapless_under_concurrent_appenders<F: StoreFactory>() {
    const WRITERS: u64 = 32;
    const EACH: u64 = 4;
    let f = fixture::<F>().await;
    let run = f.run().await;
    let lease = f
        .store
        .acquire_lease(&f.scope, run.id, "w", Duration::from_secs(3600))
        .await
        .expect("lease");
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (store, scope, lease, clock) = (
            f.store.clone(),
            f.scope.clone(),
            lease.clone(),
            f.clock.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            while done < EACH {
                let current = store.get_run(&scope, run.id).await.expect("get run");
                let status = RunStatus::Running;
                let commit = StepCommit {
                    run_id: run.id,
                    expected_version: current.version,
                    lease: lease.clone(),
                    events: vec![RunEvent {
                        run_id: run.id,
                        seq: current.last_seq + 1,
                        at: clock.now(),
                        kind: RunEventKind::StepStarted {
                            step: (w * 100 + done) as u32,
                        },
                    }],
                    messages: vec![],
                    checkpoint: Checkpoint::default(),
                    status,
                    failure: None,
                    interactions: vec![],
                    audit: vec![],
                    settlements: vec![],
                    state: None,
                    summary: None,
                    job: None,
                };
                match store.commit_step(&scope, commit).await {
                    Ok(_) => done += 1,
                    Err(e) if e.kind() == ErrorKind::Conflict || e.kind() == ErrorKind::Invalid => {
                        tokio::task::yield_now().await
                    }
                    Err(e) => panic!("unexpected commit error: {e}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("appender");
    }
    let log = f
        .store
        .read_events(&f.scope, run.id, 0, 10_000)
        .await
        .expect("read");
    assert_eq!(log.len() as u64, WRITERS * EACH);
    for (i, e) in log.iter().enumerate() {
        assert_eq!(
            e.seq,
            i as u64 + 1,
            "sequence numbers must be gapless and unique"
        );
    }
    let mut steps: Vec<_> = log
        .iter()
        .map(|e| match e.kind {
            RunEventKind::StepStarted { step } => step,
            _ => u32::MAX,
        })
        .collect();
    steps.sort_unstable();
    steps.dedup();
    assert_eq!(
        steps.len() as u64,
        WRITERS * EACH,
        "every appended event is present exactly once"
    );
}

/// Reading after sequence N returns exactly the events after N, in order, honouring the limit.
pub async fn read_events_after_sequence<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let run = f.run().await;
    let lease = f
        .store
        .acquire_lease(&f.scope, run.id, "w", TTL)
        .await
        .expect("lease");
    let events = f.events(run.id, 1, 10);
    f.store
        .commit_step(
            &f.scope,
            f.commit(&run, &lease, events.clone(), RunStatus::Running),
        )
        .await
        .expect("commit");
    for after in [0u64, 1, 5, 9, 10, 11, 1000] {
        let got = f
            .store
            .read_events(&f.scope, run.id, after, 100)
            .await
            .expect("read");
        let want: Vec<_> = events.iter().filter(|e| e.seq > after).cloned().collect();
        assert_eq!(got, want, "events after {after}");
    }
    let page = f
        .store
        .read_events(&f.scope, run.id, 3, 2)
        .await
        .expect("read");
    assert_eq!(page.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![4, 5]);
}

/// Two concurrent session-state writers from the same version: exactly one wins.
pub async fn session_state_single_writer<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let t = f
        .store
        .create_thread(&f.scope, NewThread::default())
        .await
        .expect("create thread");
    let write = |value: &str| {
        let (store, scope) = (f.store.clone(), f.scope.clone());
        let mut values = serde_json::Map::new();
        values.insert("writer".into(), value.into());
        tokio::spawn(async move { store.put_session_state(&scope, t.id, 0, values).await })
    };
    let (a, b) = tokio::join!(write("a"), write("b"));
    let results = [a.expect("join"), b.expect("join")];
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        1,
        "exactly one writer wins: {results:?}"
    );
    let loser = results.iter().find(|r| r.is_err()).expect("a loser");
    assert!(
        matches!(
            loser,
            Err(Error::VersionConflict {
                expected: 0,
                actual: 1,
                ..
            })
        ),
        "{loser:?}"
    );
    let winner = results.into_iter().find_map(Result::ok).expect("a winner");
    let stored = f.store.get_thread(&f.scope, t.id).await.expect("get").state;
    assert_eq!(stored, winner, "the stored state is the winner's");
}

/// Runs read back as written (input included) and list oldest first; the history holds only
/// committed messages, in commit order.
pub async fn run_round_trip_and_history<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let first = f.run().await;
    let second = f
        .store
        .create_run(
            &f.scope,
            NewRun::new(first.thread_id, agent_ref(), vec![Part::text("again")]),
        )
        .await
        .expect("create second run");
    assert_eq!(
        f.store.get_run(&f.scope, first.id).await.expect("get"),
        first,
        "a run reads back as created"
    );
    assert_eq!(first.status, RunStatus::Queued);
    assert_eq!(
        first.role_ids,
        f.scope.role_ids(),
        "a run keeps the roles it was started with: its tool calls are authorized with them"
    );
    assert_eq!((first.version, first.last_seq, first.fence), (0, 0, 0));
    assert_eq!(
        first.input,
        vec![Part::text("hi")],
        "the run keeps its input"
    );
    assert!(
        f.store
            .list_messages(&f.scope, first.thread_id)
            .await
            .expect("history")
            .is_empty(),
        "a run's input joins the history only when the run starts"
    );
    let listed: Vec<RunId> = f
        .store
        .list_runs(&f.scope, first.thread_id)
        .await
        .expect("list")
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(listed, [first.id, second.id]);

    let lease = f
        .store
        .acquire_lease(&f.scope, first.id, "w", TTL)
        .await
        .expect("lease");
    let ids = SequentialIds::new();
    let reply = Message {
        id: MessageId::generate(&ids),
        run_id: first.id,
        role: Role::Assistant,
        parts: vec![Part::text("hello"), Part::text(" there")],
        created_at: f.clock.now(),
    };
    let mut commit = f.commit(&first, &lease, f.events(first.id, 1, 2), RunStatus::Running);
    let input = Message {
        id: MessageId::generate(&ids),
        run_id: first.id,
        role: Role::User,
        parts: first.input.clone(),
        created_at: f.clock.now(),
    };
    commit.messages = vec![input, reply.clone()];
    commit.checkpoint.usage.input_tokens = 42;
    let done = f.store.commit_step(&f.scope, commit).await.expect("commit");
    assert_eq!((done.version, done.last_seq), (1, 2));
    let run = f.store.get_run(&f.scope, first.id).await.expect("get");
    assert_eq!(
        (
            run.status,
            run.checkpoint.step,
            run.checkpoint.usage.input_tokens
        ),
        (RunStatus::Running, 1, 42)
    );

    let history = f
        .store
        .list_messages(&f.scope, first.thread_id)
        .await
        .expect("history");
    let summary: Vec<(Role, String)> = history.iter().map(|m| (m.role, m.text())).collect();
    assert_eq!(
        summary,
        [
            (Role::User, "hi".to_owned()),
            (Role::Assistant, "hello there".to_owned())
        ]
    );
    assert_eq!(history[1], reply, "a committed message reads back exactly");
}

/// Operators list a tenant's runs (issue 17, item 7): newest first, by state and by thread,
/// limited, never another tenant's; an unknown state name is refused before any query. The runs
/// in flight (queued or running) are counted per tenant, up to a limit (issue 63).
pub async fn runs_are_queried_by_status_and_thread_newest_first<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let first = f.run().await;
    f.clock.advance(Duration::from_secs(1));
    let second = f.run().await;
    f.clock.advance(Duration::from_secs(1));
    let third = f.run().await;
    let other = scope("tenant-b");
    let thread = f
        .store
        .create_thread(&other, NewThread::default())
        .await
        .expect("thread");
    f.store
        .create_run(
            &other,
            NewRun::new(thread.id, agent_ref(), vec![Part::text("hi")]),
        )
        .await
        .expect("run");
    // The second one starts running.
    let lease = f
        .store
        .acquire_lease(&f.scope, second.id, "w", TTL)
        .await
        .expect("lease");
    let commit = f.commit(
        &second,
        &lease,
        f.events(second.id, 1, 1),
        RunStatus::Running,
    );
    f.store.commit_step(&f.scope, commit).await.expect("commit");

    let ids = |runs: Vec<Run>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let all = f
        .store
        .query_runs(&f.scope, &RunQuery::newest(10))
        .await
        .expect("query");
    assert_eq!(
        ids(all),
        [third.id, second.id, first.id],
        "newest first, own tenant only"
    );
    let limited = f
        .store
        .query_runs(&f.scope, &RunQuery::newest(2))
        .await
        .expect("query");
    assert_eq!(ids(limited), [third.id, second.id]);
    let queued = RunQuery::newest(10).status("queued").expect("a state");
    assert_eq!(
        ids(f.store.query_runs(&f.scope, &queued).await.expect("query")),
        [third.id, first.id]
    );
    let running = RunQuery::newest(10).status("running").expect("a state");
    assert_eq!(
        ids(f.store.query_runs(&f.scope, &running).await.expect("query")),
        [second.id]
    );
    let on_thread = RunQuery {
        thread_id: Some(first.thread_id),
        ..RunQuery::newest(10)
    };
    assert_eq!(
        ids(f
            .store
            .query_runs(&f.scope, &on_thread)
            .await
            .expect("query")),
        [first.id]
    );
    let foreign = RunQuery {
        thread_id: Some(thread.id),
        ..RunQuery::newest(10)
    };
    assert!(
        f.store
            .query_runs(&f.scope, &foreign)
            .await
            .expect("query")
            .is_empty(),
        "another tenant's thread shows nothing"
    );
    assert!(RunQuery::newest(1).status("sleeping").is_err());

    // In flight: the tenant's queued and running runs, and its principal's, counted up to the
    // limit asked.
    let bob = Scope::parse(f.scope.tenant_id().as_str(), "bob", &[]).expect("scope");
    let bobs = f
        .store
        .create_thread(&bob, NewThread::default())
        .await
        .expect("thread");
    f.store
        .create_run(
            &bob,
            NewRun::new(bobs.id, agent_ref(), vec![Part::text("hi")]),
        )
        .await
        .expect("run");
    let in_flight = |n| f.store.runs_in_flight(&f.scope, n);
    let counted = |tenant, principal| InFlight { tenant, principal };
    assert_eq!(in_flight(10).await.expect("count"), counted(4, 3));
    assert_eq!(
        f.store.runs_in_flight(&bob, 10).await.expect("count"),
        counted(4, 1),
        "each principal its own"
    );
    assert_eq!(
        in_flight(2).await.expect("count").tenant,
        2,
        "counted up to at most"
    );
    assert_eq!(
        f.store.runs_in_flight(&other, 10).await.expect("count"),
        counted(1, 1),
        "each tenant its own"
    );
    let second = f.store.get_run(&f.scope, second.id).await.expect("run");
    let commit = f.commit(
        &second,
        &lease,
        f.events(second.id, 2, 1),
        RunStatus::Completed,
    );
    f.store.commit_step(&f.scope, commit).await.expect("commit");
    assert_eq!(
        in_flight(10).await.expect("count"),
        counted(3, 2),
        "an ended run is not"
    );
}

/// A thread runs one run at a time: the first is active, the next waits behind it (`run.queued`,
/// its job held back), `Reject` is refused, and the active run's end promotes the next.
pub async fn thread_admission_and_promotion<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let sys = SystemScope::new("conformance");
    let thread = f
        .store
        .create_thread(&f.scope, NewThread::default())
        .await
        .expect("thread");
    let new = |text: &str| NewRun::new(thread.id, agent_ref(), vec![Part::text(text)]);
    let first = f
        .store
        .create_run(&f.scope, new("one"))
        .await
        .expect("first");
    assert_eq!(
        f.store
            .get_thread(&f.scope, thread.id)
            .await
            .expect("thread")
            .active_run,
        Some(first.id)
    );
    assert_eq!(first.last_seq, 0, "an admitted run has no events yet");
    let second = f
        .store
        .create_run(&f.scope, new("two"))
        .await
        .expect("second");
    assert_eq!(second.last_seq, 1);
    let queued = f
        .store
        .read_events(&f.scope, second.id, 0, 10)
        .await
        .expect("events");
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].seq, 1);
    assert_eq!(
        queued[0].kind,
        RunEventKind::RunQueued {
            thread_id: thread.id,
            behind: first.id
        }
    );
    let busy = f
        .store
        .create_run(&f.scope, new("three").strategy(StartStrategy::Reject))
        .await;
    let busy = expect_kind(busy, ErrorKind::Conflict, "Reject on a busy thread");
    assert!(matches!(busy, Error::ThreadBusy { .. }), "{busy:?}");
    assert_eq!(
        f.store
            .list_runs(&f.scope, thread.id)
            .await
            .expect("runs")
            .len(),
        2,
        "a rejected run is not created"
    );

    let job = f
        .store
        .claim(&sys, "w", TTL, &ClaimFilter::any())
        .await
        .expect("claim")
        .expect("the active run's job");
    assert_eq!(job.run_id, first.id);
    assert!(
        f.store
            .claim(&sys, "w", TTL, &ClaimFilter::any())
            .await
            .expect("claim")
            .is_none(),
        "the queued run's job is held back"
    );

    let lease = f
        .store
        .acquire_lease(&f.scope, first.id, "w", TTL)
        .await
        .expect("lease");
    let start = f.commit(&first, &lease, f.events(first.id, 1, 1), RunStatus::Running);
    f.store.commit_step(&f.scope, start).await.expect("start");
    assert!(
        f.store
            .claim(&sys, "w", TTL, &ClaimFilter::any())
            .await
            .expect("claim")
            .is_none(),
        "still held back while the first runs"
    );
    let running = f.store.get_run(&f.scope, first.id).await.expect("get");
    let done = f.commit(
        &running,
        &lease,
        f.events(first.id, 2, 1),
        RunStatus::Completed,
    );
    f.store.commit_step(&f.scope, done).await.expect("complete");
    assert_eq!(
        f.store
            .get_thread(&f.scope, thread.id)
            .await
            .expect("thread")
            .active_run,
        Some(second.id)
    );
    let next = f
        .store
        .claim(&sys, "w", TTL, &ClaimFilter::any())
        .await
        .expect("claim")
        .expect("the promoted run's job");
    assert_eq!(next.run_id, second.id);
}

/// `Interrupt` asks the active run and those queued before it to cancel, and queues itself.
pub async fn interrupt_requests_cancellation<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let thread = f
        .store
        .create_thread(&f.scope, NewThread::default())
        .await
        .expect("thread");
    let new = |text: &str| NewRun::new(thread.id, agent_ref(), vec![Part::text(text)]);
    let first = f
        .store
        .create_run(&f.scope, new("one"))
        .await
        .expect("first");
    let second = f
        .store
        .create_run(&f.scope, new("two"))
        .await
        .expect("second");
    let third = f
        .store
        .create_run(
            &f.scope,
            new("stop, do this").strategy(StartStrategy::Interrupt),
        )
        .await
        .expect("third");
    for (run, want) in [(first.id, true), (second.id, true), (third.id, false)] {
        assert_eq!(
            f.store
                .get_run(&f.scope, run)
                .await
                .expect("get")
                .cancel_requested,
            want
        );
    }
    let events = f
        .store
        .read_events(&f.scope, third.id, 0, 10)
        .await
        .expect("events");
    assert_eq!(
        events[0].kind,
        RunEventKind::RunQueued {
            thread_id: thread.id,
            behind: first.id
        }
    );
    // The executing worker learns of it from its next commit.
    let lease = f
        .store
        .acquire_lease(&f.scope, first.id, "w", TTL)
        .await
        .expect("lease");
    let step = f.commit(&first, &lease, f.events(first.id, 1, 1), RunStatus::Running);
    assert!(
        f.store
            .commit_step(&f.scope, step)
            .await
            .expect("commit")
            .cancel_requested
    );
}

/// A cancel request flags a live run and reports whether this call asked: a second request, or one
/// for an ended run, answers `false` (issue 16, item 10).
pub async fn request_cancel_flags_live_runs_only<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let run = f.run().await;
    let other = f.run().await;
    let both = [run.id, other.id];
    let asked = |scope: Scope| {
        let store = f.store.clone();
        async move {
            store
                .cancels_requested(&scope, &both)
                .await
                .expect("cancels requested")
        }
    };
    assert_eq!(asked(f.scope.clone()).await, [], "nobody asked yet");
    assert!(
        f.store
            .request_cancel(&f.scope, run.id)
            .await
            .expect("cancel")
    );
    assert!(
        !f.store
            .request_cancel(&f.scope, run.id)
            .await
            .expect("cancel again"),
        "the second request asks nothing new"
    );
    let flagged = f.store.get_run(&f.scope, run.id).await.expect("get");
    assert!(flagged.cancel_requested);
    assert_eq!(asked(f.scope.clone()).await, [run.id], "the asked run only");
    assert_eq!(
        asked(scope("tenant-b")).await,
        [],
        "another tenant's runs are not found"
    );
    let lease = f
        .store
        .acquire_lease(&f.scope, run.id, "w", TTL)
        .await
        .expect("lease");
    let done = f.commit(
        &flagged,
        &lease,
        f.events(run.id, 1, 1),
        RunStatus::Cancelled,
    );
    f.store.commit_step(&f.scope, done).await.expect("cancel");
    assert!(
        !f.store
            .request_cancel(&f.scope, run.id)
            .await
            .expect("cancel"),
        "an ended run is not live"
    );
    assert_eq!(
        asked(f.scope.clone()).await,
        [],
        "an ended run has nothing left to cancel"
    );
    expect_kind(
        f.store.request_cancel(&scope("tenant-b"), run.id).await,
        ErrorKind::NotFound,
        "cancel across tenants",
    );
}

/// A new run without input or attempts, and a job without attempts, are refused as `Invalid`
/// before anything is written.
pub async fn runs_and_jobs_without_input_or_attempts_are_refused<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let thread = f
        .store
        .create_thread(&f.scope, NewThread::default())
        .await
        .expect("create thread");
    expect_kind(
        f.store
            .create_run(&f.scope, NewRun::new(thread.id, agent_ref(), vec![]))
            .await,
        ErrorKind::Invalid,
        "a run without input",
    );
    let mut no_attempts = NewRun::new(thread.id, agent_ref(), vec![Part::text("hi")]);
    no_attempts.max_attempts = 0;
    expect_kind(
        f.store.create_run(&f.scope, no_attempts).await,
        ErrorKind::Invalid,
        "a run without attempts",
    );
    assert!(
        f.store
            .list_runs(&f.scope, thread.id)
            .await
            .expect("runs")
            .is_empty(),
        "a refused run wrote nothing"
    );
    let run = f.run().await;
    expect_kind(
        f.store
            .enqueue(
                &f.scope,
                NewJob {
                    run_id: run.id,
                    not_before: None,
                    max_attempts: 0,
                    traceparent: None,
                },
            )
            .await,
        ErrorKind::Invalid,
        "a job without attempts",
    );
}
