//! Conformance: a thread's history, its runs and the tenant's pending interactions read in pages
//! whose cursors hold (under concurrent appends too), and a thread's summary committed with the
//! step that wrote it, once, building on the current one; and the history a run's lease reads
//! with it.

use std::collections::BTreeSet;

use forge_core::Error;
use forge_core::ErrorKind;
use forge_core::id::{MessageId, UuidV7Generator};
use forge_core::message::{Message, Role};
use forge_core::part::Part;
use forge_core::ports::queue::{ClaimFilter, JobQueue, LeaseRequest};
use forge_core::ports::store::{LeasedRun, MessageWindow, NewRun, RunStore, ThreadStore};
use forge_core::run::{Run, RunLease, RunStatus};
use forge_core::scope::SystemScope;
use forge_core::thread::{THREAD_SUMMARY, ThreadSummary};
use forge_core::time::Clock;

use crate::StoreFactory;
use crate::fixtures::{agent_ref, scope};
use crate::store::{Fixture, TTL, expect_kind, fixture};

fn message(f: &Fixture<impl StoreFactory>, run: &Run, text: String) -> Message {
    Message {
        id: MessageId::generate(&UuidV7Generator),
        run_id: run.id,
        role: Role::User,
        parts: vec![Part::text(text)],
        created_at: f.clock.now(),
    }
}

/// Commits one step carrying `messages`; returns the run after it.
async fn append<F: StoreFactory>(
    f: &Fixture<F>,
    run: &Run,
    lease: &RunLease,
    messages: Vec<Message>,
) -> Run {
    let mut commit = f.commit(
        run,
        lease,
        f.events(run.id, run.last_seq + 1, 1),
        RunStatus::Running,
    );
    commit.messages = messages;
    f.store.commit_step(&f.scope, commit).await.expect("commit");
    f.store.get_run(&f.scope, run.id).await.expect("run")
}

/// What a run begins with: the thread as `get_thread` reads it, and the first `limit` messages
/// after its summary, which must be `expected`.
async fn expect_start<F: StoreFactory>(
    f: &Fixture<F>,
    thread: forge_core::id::ThreadId,
    limit: usize,
    expected: &[Message],
) {
    let (read, page) = f
        .store
        .thread_with_history(&f.scope, thread, limit)
        .await
        .expect("the thread and its history");
    let alone = f.store.get_thread(&f.scope, thread).await.expect("thread");
    assert_eq!(read, alone, "the thread as get_thread reads it");
    assert_eq!(
        page.iter().map(|m| m.id).collect::<Vec<_>>(),
        expected.iter().map(|m| m.id).collect::<Vec<_>>(),
        "the first page after the summary"
    );
}

fn summary(run: &Run, version: u64, through: MessageId, covered: u64) -> ThreadSummary {
    ThreadSummary {
        version,
        text: format!("summary {version}"),
        through,
        covered,
        run_id: run.id,
        model: "scripted:summary".into(),
        created_at: forge_core::time::Timestamp::from_unix_millis(1_767_225_600_000)
            .expect("a valid time"),
    }
}

/// Pages forward and backward return exactly the window asked for, oldest first; a cursor taken
/// before messages were appended still names the same place after (appends land after every
/// cursor), so paging while a run writes neither repeats nor skips a message. An unknown
/// cursor, or another tenant's thread, is `NotFound`; a thread with no messages yet pages as
/// empty from either end.
pub async fn message_pages_are_stable_under_concurrent_appends<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let mut run = f.run().await;
    for window in [
        MessageWindow::after(None, 3),
        MessageWindow::before(None, 3),
    ] {
        let empty = f
            .store
            .page_messages(&f.scope, run.thread_id, &window)
            .await
            .expect("a page of a thread with no messages yet");
        assert!(empty.is_empty(), "{window:?}");
        expect_kind(
            f.store
                .page_messages(&scope("tenant-b"), run.thread_id, &window)
                .await,
            ErrorKind::NotFound,
            "another tenant's empty thread",
        );
    }
    let lease = f
        .store
        .acquire_lease(&f.scope, run.id, "w", TTL)
        .await
        .expect("lease");
    let first: Vec<Message> = (0..7).map(|i| message(&f, &run, format!("m{i}"))).collect();
    run = append(&f, &run, &lease, first.clone()).await;
    let thread = run.thread_id;
    let text = |page: &[Message]| page.iter().map(Message::text).collect::<Vec<_>>();

    let page = f
        .store
        .page_messages(&f.scope, thread, &MessageWindow::after(None, 3))
        .await
        .expect("first page");
    assert_eq!(text(&page), ["m0", "m1", "m2"]);
    let last = f
        .store
        .page_messages(&f.scope, thread, &MessageWindow::before(None, 3))
        .await
        .expect("last page");
    assert_eq!(text(&last), ["m4", "m5", "m6"], "the newest, oldest first");
    let between = f
        .store
        .page_messages(
            &f.scope,
            thread,
            &MessageWindow {
                after: Some(first[1].id),
                before: Some(first[5].id),
                limit: 10,
                from_end: false,
            },
        )
        .await
        .expect("between");
    assert_eq!(text(&between), ["m2", "m3", "m4"]);
    let before = f
        .store
        .page_messages(
            &f.scope,
            thread,
            &MessageWindow::before(Some(first[3].id), 2),
        )
        .await
        .expect("before a cursor");
    assert_eq!(text(&before), ["m1", "m2"]);

    // A reader pages forward two at a time while the run keeps appending.
    let writer = {
        let f2 = Fixture::<F> {
            store: f.store.clone(),
            clock: f.clock.clone(),
            scope: f.scope.clone(),
        };
        let (mut run, lease) = (run.clone(), lease.clone());
        tokio::spawn(async move {
            for batch in 0..5 {
                let messages = (0..3)
                    .map(|i| message(&f2, &run, format!("n{batch}.{i}")))
                    .collect();
                run = append(&f2, &run, &lease, messages).await;
                tokio::task::yield_now().await;
            }
        })
    };
    let mut seen: Vec<String> = Vec::new();
    let mut cursor = None;
    for reads in 0.. {
        assert!(reads < 100_000, "paging never ends");
        let page = f
            .store
            .page_messages(&f.scope, thread, &MessageWindow::after(cursor, 2))
            .await
            .expect("page");
        if page.is_empty() {
            if writer.is_finished() {
                break;
            }
            tokio::task::yield_now().await;
            continue;
        }
        cursor = page.last().map(|m| m.id);
        seen.extend(text(&page));
    }
    writer.await.expect("writer");
    // Whatever the writer appended after the reader's last empty page is read now.
    for pages in 0.. {
        assert!(pages < 100, "paging never ends: a cursor repeats its page");
        let page = f
            .store
            .page_messages(&f.scope, thread, &MessageWindow::after(cursor, 2))
            .await
            .expect("page");
        let Some(last) = page.last() else { break };
        cursor = Some(last.id);
        seen.extend(text(&page));
    }
    let all = f
        .store
        .list_messages(&f.scope, thread)
        .await
        .expect("history");
    assert_eq!(all.len(), 22);
    assert_eq!(
        seen,
        text(&all),
        "pages read during appends are the history, once each"
    );
    assert_eq!(
        seen.iter().collect::<BTreeSet<_>>().len(),
        seen.len(),
        "no message read twice"
    );

    let stranger = MessageId::generate(&UuidV7Generator);
    expect_kind(
        f.store
            .page_messages(&f.scope, thread, &MessageWindow::after(Some(stranger), 2))
            .await,
        ErrorKind::NotFound,
        "a cursor that is no message of the thread",
    );
    expect_kind(
        f.store
            .page_messages(&scope("tenant-b"), thread, &MessageWindow::after(None, 2))
            .await,
        ErrorKind::NotFound,
        "another tenant's thread",
    );
}

/// A step's summary is written with it only when it builds on the thread's current summary: the
/// same compaction committed twice (a step repeated after a crash, or two writers) lands once,
/// and the refused commit writes nothing at all. A summary naming another run is refused. What a
/// run begins with (`thread_with_history`) is the thread and the first page after its summary.
pub async fn a_step_commits_its_summary_once_building_on_the_current_one<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let mut run = f.run().await;
    let lease = f
        .store
        .acquire_lease(&f.scope, run.id, "w", TTL)
        .await
        .expect("lease");
    // A thread without messages begins with none.
    expect_start(&f, run.thread_id, 3, &[]).await;
    let messages: Vec<Message> = (0..4).map(|i| message(&f, &run, format!("m{i}"))).collect();
    run = append(&f, &run, &lease, messages.clone()).await;
    // Without a summary, a run begins with the first page from the start.
    expect_start(&f, run.thread_id, 3, &messages[..3]).await;

    let mut compacting = f.commit(
        &run,
        &lease,
        f.events(run.id, run.last_seq + 1, 1),
        RunStatus::Running,
    );
    compacting.summary = Some(summary(&run, 1, messages[1].id, 2));
    f.store
        .commit_step(&f.scope, compacting)
        .await
        .expect("a first summary");
    let thread = f
        .store
        .get_thread(&f.scope, run.thread_id)
        .await
        .expect("thread");
    assert_eq!(thread.summary, Some(summary(&run, 1, messages[1].id, 2)));
    // With one, the first page after it.
    expect_start(&f, run.thread_id, 3, &messages[2..]).await;
    expect_start(&f, run.thread_id, 1, &messages[2..3]).await;
    run = f.store.get_run(&f.scope, run.id).await.expect("run");

    // The same compaction again (version 1 on top of version 1) is refused whole.
    let mut again = f.commit(
        &run,
        &lease,
        f.events(run.id, run.last_seq + 1, 1),
        RunStatus::Running,
    );
    again.summary = Some(summary(&run, 1, messages[2].id, 3));
    let refused = f.store.commit_step(&f.scope, again).await;
    assert!(
        matches!(
            &refused,
            Err(Error::VersionConflict { entity, expected: 0, actual: 1, .. }) if *entity == THREAD_SUMMARY
        ),
        "{refused:?}"
    );
    let after = f.store.get_run(&f.scope, run.id).await.expect("run");
    assert_eq!(
        (after.version, after.last_seq),
        (run.version, run.last_seq),
        "nothing of the refused step was written"
    );

    // Another run's summary is not this step's to write.
    let mut foreign = f.commit(
        &run,
        &lease,
        f.events(run.id, run.last_seq + 1, 1),
        RunStatus::Running,
    );
    let mut other = summary(&run, 2, messages[2].id, 3);
    other.run_id = forge_core::id::RunId::generate(&UuidV7Generator);
    foreign.summary = Some(other);
    expect_kind(
        f.store.commit_step(&f.scope, foreign).await,
        ErrorKind::Invalid,
        "a summary of another run",
    );

    // Building on version 1, version 2 lands.
    let mut next = f.commit(
        &run,
        &lease,
        f.events(run.id, run.last_seq + 1, 1),
        RunStatus::Running,
    );
    next.summary = Some(summary(&run, 2, messages[2].id, 3));
    f.store
        .commit_step(&f.scope, next)
        .await
        .expect("a second summary");
    let thread = f
        .store
        .get_thread(&f.scope, run.thread_id)
        .await
        .expect("thread");
    assert_eq!(
        thread.summary.map(|s| (s.version, s.through)),
        Some((2, messages[2].id))
    );
    expect_start(&f, run.thread_id, 3, &messages[3..]).await;
    expect_kind(
        f.store
            .thread_with_history(&scope("globex"), run.thread_id, 3)
            .await,
        ErrorKind::NotFound,
        "another tenant's thread and history",
    );
    let history = f
        .store
        .list_messages(&f.scope, run.thread_id)
        .await
        .expect("history");
    assert_eq!(
        history.len(),
        4,
        "compaction never shortens the stored history"
    );
}

/// What a lease read with it (`lease_run_with_history`, or a claim asking for history): nothing
/// from a store that reads it apart, else the thread as `get_thread` reads it now and `expected`
/// exactly, the first page after its summary.
async fn expect_leased_history<F: StoreFactory>(
    f: &Fixture<F>,
    leased: &LeasedRun,
    expected: &[Message],
    what: &str,
) {
    let Some((thread, page)) = &leased.history else {
        assert!(
            !F::READS_HISTORY_WITH_LEASE,
            "{what}: the store reads the history with the lease, and read none"
        );
        return;
    };
    let now = f
        .store
        .get_thread(&f.scope, leased.run.thread_id)
        .await
        .expect("thread");
    assert_eq!(thread, &now, "{what}: the thread as get_thread reads it");
    assert_eq!(page, expected, "{what}: the first page after the summary");
}

/// Releases `lease` and leases its run again for `holder`, reading the first three messages.
async fn relet<F: StoreFactory>(f: &Fixture<F>, lease: &RunLease, holder: &str) -> LeasedRun {
    f.store
        .release_lease(&f.scope, lease)
        .await
        .expect("release");
    f.store
        .lease_run_with_history(&f.scope, lease.run_id, holder, TTL, 3)
        .await
        .expect("lease with history")
}

/// The oldest ready job, claimed by "worker" with `request`'s lease of its run.
async fn claim<F: StoreFactory>(
    f: &Fixture<F>,
    request: &LeaseRequest,
) -> forge_core::ports::queue::Claimed {
    f.store
        .claim_leased(
            &SystemScope::new("conformance"),
            "worker",
            TTL,
            &ClaimFilter::any(),
            request,
        )
        .await
        .expect("claim")
        .expect("a ready job")
}

/// A run's lease taken with what it begins with (issue 28: one round trip fewer per run) reads
/// the same as `lease_run` then `thread_with_history` would, on both paths (a worker's claim and
/// a direct lease): the run under the new lease, its thread, and at most `limit` messages from
/// the start, or after the summary when the thread has one (read apart, under the run's tenant,
/// on a claim too). A lease another holds is refused and reads nothing; another tenant's run is
/// `NotFound`.
pub async fn a_lease_reads_the_history_its_run_begins_with<F: StoreFactory>() {
    let f = fixture::<F>().await;
    let run = f.run().await;
    let request = LeaseRequest {
        holder: "w1".into(),
        ttl: TTL,
        history: Some(3),
    };
    let claimed = claim(&f, &request).await;
    let leased = claimed.lease.expect("a free lease is taken with the claim");
    expect_leased_history(&f, &leased, &[], "a claim, no messages yet").await;

    let messages: Vec<Message> = (0..4).map(|i| message(&f, &run, format!("m{i}"))).collect();
    let run = append(&f, &leased.run, &leased.lease, messages.clone()).await;
    let leased = relet(&f, &leased.lease, "w2").await;
    let stored = f.store.get_run(&f.scope, run.id).await.expect("run");
    assert_eq!(leased.run, stored, "the run as it stands under the lease");
    assert_eq!(stored.lease.as_ref(), Some(&leased.lease), "the lease");
    expect_leased_history(&f, &leased, &messages[..3], "the first page").await;

    let mut compacting = f.commit(
        &leased.run,
        &leased.lease,
        f.events(run.id, stored.last_seq + 1, 1),
        RunStatus::Running,
    );
    compacting.summary = Some(summary(&stored, 1, messages[1].id, 2));
    f.store
        .commit_step(&f.scope, compacting)
        .await
        .expect("a summary");
    let leased = relet(&f, &leased.lease, "w3").await;
    expect_leased_history(&f, &leased, &messages[2..], "after the summary").await;

    expect_kind(
        f.store
            .lease_run_with_history(&f.scope, run.id, "w4", TTL, 3)
            .await,
        ErrorKind::Conflict,
        "a lease another holds",
    );
    expect_kind(
        f.store
            .lease_run_with_history(&scope("globex"), run.id, "w4", TTL, 3)
            .await,
        ErrorKind::NotFound,
        "another tenant's run",
    );

    // The thread's next run, claimed, begins after the summary as well.
    let ended = f.commit(
        &leased.run,
        &leased.lease,
        f.events(run.id, leased.run.last_seq + 1, 1),
        RunStatus::Completed,
    );
    f.store
        .commit_step(&f.scope, ended)
        .await
        .expect("the run ends");
    let next = f
        .store
        .create_run(
            &f.scope,
            NewRun::new(run.thread_id, agent_ref(), vec![Part::text("next")]),
        )
        .await
        .expect("the thread's next run");
    let claimed = claim(&f, &request).await;
    assert_eq!(claimed.job.run_id, next.id, "the next run's job is claimed");
    let leased = claimed.lease.expect("a free lease is taken with the claim");
    expect_leased_history(&f, &leased, &messages[2..], "a claim after the summary").await;
}

/// A thread's runs page newest first below a cursor (runs created in the same instant ordered by
/// id), and the tenant's pending interactions oldest first after one, so no page repeats or
/// skips an entry; a cursor of another tenant is `NotFound`.
pub async fn runs_and_pending_interactions_page_by_cursor<F: StoreFactory>() {
    use forge_core::interaction::InteractionRequest;
    use forge_core::ports::interaction::{InteractionFilter, InteractionStore};
    use forge_core::ports::store::{NewRun, NewThread, RunQuery};

    let f = fixture::<F>().await;
    let thread = f
        .store
        .create_thread(&f.scope, NewThread::default())
        .await
        .expect("thread");
    let mut created = Vec::new();
    for i in 0..5 {
        if i % 2 == 0 {
            f.clock.advance(std::time::Duration::from_secs(1));
        }
        let run = f
            .store
            .create_run(
                &f.scope,
                NewRun::new(
                    thread.id,
                    crate::fixtures::agent_ref(),
                    vec![Part::text("hi")],
                ),
            )
            .await
            .expect("run");
        created.push(run.id);
    }
    let mut newest_first = Vec::new();
    let mut before = None;
    for pages in 0.. {
        assert!(
            pages < 10,
            "paging runs never ends: a cursor repeats its page"
        );
        let query = RunQuery {
            thread_id: Some(thread.id),
            before,
            ..RunQuery::newest(2)
        };
        let page = f.store.query_runs(&f.scope, &query).await.expect("page");
        let Some(last) = page.last() else { break };
        before = Some(last.id);
        newest_first.extend(page.iter().map(|r| r.id));
    }
    let mut expected = f
        .store
        .list_runs(&f.scope, thread.id)
        .await
        .expect("runs")
        .into_iter()
        .map(|r| (r.created_at, r.id))
        .collect::<Vec<_>>();
    expected.sort();
    expected.reverse();
    assert_eq!(
        newest_first,
        expected.iter().map(|r| r.1).collect::<Vec<_>>(),
        "pages of two, newest first, each run once"
    );
    assert_eq!(newest_first.len(), created.len());
    let foreign = RunQuery {
        before: Some(created[0]),
        ..RunQuery::newest(2)
    };
    expect_kind(
        f.store.query_runs(&scope("tenant-b"), &foreign).await,
        ErrorKind::NotFound,
        "another tenant's run as a cursor",
    );

    // One run parks with three questions raised in the same instant.
    let run = f.store.get_run(&f.scope, created[0]).await.expect("run");
    let lease = f
        .store
        .acquire_lease(&f.scope, run.id, "w", TTL)
        .await
        .expect("lease");
    let raised: Vec<_> = (0..3)
        .map(|i| {
            crate::interactions::interaction(
                &run,
                InteractionRequest::Question {
                    tool_call_id: forge_core::id::ToolCallId(format!("call_{i}")),
                    prompt: format!("question {i}"),
                    answer_schema: serde_json::json!({"type": "string"}),
                },
                f.clock.now(),
            )
        })
        .collect();
    let mut park = f.commit(
        &run,
        &lease,
        f.events(run.id, run.last_seq + 1, 1),
        RunStatus::Waiting(forge_core::run::WaitReason::Question),
    );
    park.interactions = raised.clone();
    f.store.commit_step(&f.scope, park).await.expect("park");
    let mut seen = Vec::new();
    let mut after = None;
    for pages in 0.. {
        assert!(
            pages < 10,
            "paging interactions never ends: a cursor repeats its page"
        );
        let page = f
            .store
            .list_interactions(&f.scope, InteractionFilter::PendingPage { after, limit: 2 })
            .await
            .expect("page");
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        seen.extend(page.iter().map(|i| i.id));
    }
    let mut ids: Vec<_> = raised.iter().map(|i| i.id).collect();
    ids.sort();
    assert_eq!(seen, ids, "oldest first, ties by id, each once");
    expect_kind(
        f.store
            .list_interactions(
                &scope("tenant-b"),
                InteractionFilter::PendingPage {
                    after: Some(ids[0]),
                    limit: 2,
                },
            )
            .await,
        ErrorKind::NotFound,
        "another tenant's interaction as a cursor",
    );
}

/// A tenant's threads page newest first below a cursor (threads created in the same instant
/// ordered by id, so no page repeats or skips one); archived threads are listed only when asked
/// for and stay readable; a retitle or an archive changes the thread for every reader; another
/// tenant lists none of them and may change none (`NotFound`, its cursor too).
pub async fn threads_page_newest_first_and_archive<F: StoreFactory>() {
    use forge_core::ports::store::NewThread;
    use forge_core::thread::{ThreadChange, ThreadWindow};

    let f = fixture::<F>().await;
    let mut created = Vec::new();
    for i in 0..7 {
        if i % 3 == 0 {
            f.clock.advance(std::time::Duration::from_secs(1));
        }
        let t = f
            .store
            .create_thread(
                &f.scope,
                NewThread {
                    title: Some(format!("thread {i}")),
                    ..NewThread::default()
                },
            )
            .await
            .expect("thread");
        created.push(t);
    }
    let mut newest_first = created.clone();
    newest_first.sort_by_key(|t| std::cmp::Reverse((t.created_at, t.id)));
    let window = |before, limit, archived| ThreadWindow {
        before,
        limit,
        archived,
        created_by: None,
    };
    // Pages of 3 cover every thread once, newest first.
    let mut seen = Vec::new();
    let mut cursor = None;
    for _ in 0..5 {
        let page = f
            .store
            .page_threads(&f.scope, &window(cursor, 3, false))
            .await
            .expect("page");
        if page.is_empty() {
            break;
        }
        cursor = page.last().map(|t| t.id);
        seen.extend(page);
    }
    assert_eq!(
        seen, newest_first,
        "every thread once, newest first, ties by id"
    );

    // Archive one and retitle another.
    f.clock.advance(std::time::Duration::from_secs(1));
    let archived = f
        .store
        .update_thread(
            &f.scope,
            created[2].id,
            &ThreadChange {
                archived: Some(true),
                ..ThreadChange::default()
            },
        )
        .await
        .expect("archive");
    assert_eq!(archived.archived_at, Some(f.clock.now()));
    let renamed = f
        .store
        .update_thread(
            &f.scope,
            created[4].id,
            &ThreadChange {
                title: Some(Some("renamed".into())),
                ..ThreadChange::default()
            },
        )
        .await
        .expect("retitle");
    assert_eq!(renamed.title.as_deref(), Some("renamed"));
    let read = f
        .store
        .get_thread(&f.scope, created[4].id)
        .await
        .expect("read");
    assert_eq!(read, renamed, "the change is stored");
    let listed = f
        .store
        .page_threads(&f.scope, &window(None, 50, false))
        .await
        .expect("page");
    assert_eq!(listed.len(), 6);
    assert!(
        listed.iter().all(|t| t.id != created[2].id),
        "archived: not listed"
    );
    let all = f
        .store
        .page_threads(&f.scope, &window(None, 50, true))
        .await
        .expect("page");
    assert_eq!(all.len(), 7, "unless asked for");
    assert_eq!(
        f.store
            .get_thread(&f.scope, created[2].id)
            .await
            .expect("still readable")
            .archived_at,
        archived.archived_at
    );
    // An archived thread is a cursor like any other; archiving again keeps the first time.
    let below = f
        .store
        .page_threads(&f.scope, &window(Some(created[2].id), 50, false))
        .await
        .expect("page below an archived cursor");
    assert!(
        below
            .iter()
            .all(|t| (t.created_at, t.id) < (created[2].created_at, created[2].id))
    );
    f.clock.advance(std::time::Duration::from_secs(1));
    let again = f
        .store
        .update_thread(
            &f.scope,
            created[2].id,
            &ThreadChange {
                archived: Some(true),
                ..ThreadChange::default()
            },
        )
        .await
        .expect("archive again");
    assert_eq!(again.archived_at, archived.archived_at);
    let restored = f
        .store
        .update_thread(
            &f.scope,
            created[2].id,
            &ThreadChange {
                archived: Some(false),
                title: Some(None),
            },
        )
        .await
        .expect("restore");
    assert_eq!((restored.archived_at, restored.title), (None, None));

    // Only one principal's threads.
    let bob = forge_core::scope::Scope::parse("tenant-a", "bob", &[]).expect("scope");
    let bobs = f
        .store
        .create_thread(&bob, NewThread::default())
        .await
        .expect("bob's thread");
    let only_bob = f
        .store
        .page_threads(
            &f.scope,
            &ThreadWindow {
                created_by: Some(bob.principal_id().clone()),
                ..window(None, 50, true)
            },
        )
        .await
        .expect("page");
    assert_eq!(only_bob, vec![bobs]);
    assert_eq!(
        f.store
            .page_threads(&f.scope, &window(None, 50, true))
            .await
            .expect("page")
            .len(),
        8
    );

    // Another tenant.
    let other = scope("tenant-b");
    assert!(
        f.store
            .page_threads(&other, &window(None, 50, true))
            .await
            .expect("page")
            .is_empty()
    );
    expect_kind(
        f.store
            .page_threads(&other, &window(Some(created[0].id), 50, true))
            .await
            .map(|_| ()),
        ErrorKind::NotFound,
        "another tenant's cursor",
    );
    expect_kind(
        f.store
            .update_thread(&other, created[0].id, &ThreadChange::default())
            .await
            .map(|_| ()),
        ErrorKind::NotFound,
        "another tenant's thread",
    );
}
