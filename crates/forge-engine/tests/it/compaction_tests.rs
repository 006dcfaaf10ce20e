//! Thread compaction: long threads stay under the agent's budget, tool calls keep their results,
//! the summary is written once with its step (also across a crash mid-summary), it is metered,
//! and a compaction can be asked for.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use forge_core::agent::{CompactionConfig, RunLimits};
use forge_core::event::RunEventKind;
use forge_core::id::ThreadId;
use forge_core::message::Message;
use forge_core::metering::{CallStatus, Quota, QuotaPeriod};
use forge_core::part::Part;
use forge_core::ports::model::{ModelError, ModelProvider, ModelRequest, ModelStream};
use forge_core::ports::store::{NewThread, RunStore, ThreadStore};
use forge_core::run::RunStatus;
use forge_engine::NoopObserver;
use forge_engine::compaction::SUMMARY_INSTRUCTIONS;
use forge_engine::context::estimate_usage;
use forge_providers::{Script, ScriptedProvider};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::harness::{Harness, agent, harness_built};
use crate::tools_tests::calculator;

/// Summarising calls get the first conversation (their prompt always begins with these words);
/// each turn of the chat asks for one product and answers with it.
const CHAT: &str = r#"
[[conversation]]
when_user = "summarise the conversation below"
[[conversation.turn]]
text = ["So far the user asked for products of small numbers and got each one."]

[[conversation]]
[[conversation.turn]]
text = ["Working it out."]
tool_calls = [{ name = "calculate", input = { op = "mul", a = 6, b = 7 } }]
[[conversation.turn]]
text = ["It is {{tool_result.result}}."]
"#;

const BUDGET: u64 = 260;

fn compacting(config: CompactionConfig) -> forge_core::agent::AgentDefinition {
    let mut def = agent(&["calculate"], RunLimits::default());
    def.compaction = Some(config);
    def
}

fn config(keep_recent: usize) -> CompactionConfig {
    CompactionConfig {
        max_tokens: BUDGET,
        keep_recent,
        model: None,
    }
}

async fn thread(h: &Harness) -> ThreadId {
    h.store
        .create_thread(&h.scope, NewThread::default())
        .await
        .unwrap()
        .id
}

fn status_name(s: CallStatus) -> &'static str {
    match s {
        CallStatus::Reserved => "reserved",
        CallStatus::Settled => "settled",
        CallStatus::Released => "released",
        _ => "other",
    }
}

fn is_summary_call(r: &ModelRequest) -> bool {
    r.system == SUMMARY_INSTRUCTIONS
}

/// Every tool result a request carries follows the call it answers, in the same request.
fn pairs_intact(r: &ModelRequest) -> bool {
    let mut open: Vec<&str> = Vec::new();
    for p in r.messages.iter().flat_map(|m: &Message| &m.parts) {
        match p {
            Part::ToolCall(c) => open.push(c.tool_call_id.0.as_str()),
            Part::ToolResult(res) => {
                let Some(at) = open.iter().rposition(|id| *id == res.tool_call_id.0) else {
                    return false;
                };
                open.remove(at);
            }
            _ => {}
        }
    }
    true
}

#[tokio::test]
async fn a_long_thread_stays_under_budget_and_keeps_every_call_with_its_result() {
    let h = harness_built(CHAT, vec![calculator()], compacting(config(2)), |b| b);
    let t = thread(&h).await;
    let never = CancellationToken::new();
    let mut compactions = Vec::new();
    for turn in 0..12 {
        let f = h
            .run_on(
                t,
                &format!("turn {turn}: what is 6 times 7?"),
                &never,
                &|_| {},
            )
            .await;
        assert_eq!(f.outcome.status, RunStatus::Completed, "{}", f.log);
        compactions.extend(f.events.iter().filter_map(|e| match &e.kind {
            RunEventKind::ThreadCompacted {
                version, covered, ..
            } => Some((*version, *covered)),
            _ => None,
        }));
    }
    let requests = h.model.requests.lock().unwrap().clone();
    let (summaries, asks): (Vec<_>, Vec<_>) = requests.iter().partition(|r| is_summary_call(r));
    assert!(!summaries.is_empty(), "the thread was never compacted");
    for (i, r) in asks.iter().enumerate() {
        let tokens = estimate_usage(r).input_tokens;
        assert!(tokens <= BUDGET, "request {i} carries ~{tokens} tokens");
        assert!(
            pairs_intact(r),
            "request {i} splits a tool call from its result"
        );
    }
    // Versions count up by one; each summary covers more of the thread than the last.
    assert_eq!(
        compactions.iter().map(|c| c.0).collect::<Vec<_>>(),
        (1..=compactions.len() as u64).collect::<Vec<_>>()
    );
    assert!(compactions.windows(2).all(|w| w[0].1 < w[1].1));
    // A later summary is built on the one before it.
    assert!(
        summaries[1..].iter().all(|r| r.messages[0]
            .text()
            .contains("Summary of what came before it:\nSo far the user asked")),
        "a summarising call did not carry the previous summary"
    );
    // The store still holds every message: 4 per turn.
    let stored = h.store.list_messages(&h.scope, t).await.unwrap();
    assert_eq!(stored.len(), 48);
    let thread = h.store.get_thread(&h.scope, t).await.unwrap();
    let summary = thread.summary.unwrap();
    assert_eq!(summary.version, compactions.len() as u64);
    assert_eq!(
        stored[summary.covered as usize - 1].id,
        summary.through,
        "the summary covers the thread's first messages up to `through`"
    );
    // The last request shows the summary then the messages after it, the stored ones verbatim.
    let last = asks.last().unwrap();
    assert!(last.messages[0].text().starts_with(&format!(
        "[Summary of the {} earlier messages",
        summary.covered
    )));
}

#[tokio::test]
async fn without_compaction_the_whole_history_is_sent() {
    let h = harness_built(
        CHAT,
        vec![calculator()],
        agent(&["calculate"], RunLimits::default()),
        |b| b,
    );
    let t = thread(&h).await;
    let never = CancellationToken::new();
    for turn in 0..4 {
        h.run_on(t, &format!("turn {turn}: 6 times 7?"), &never, &|_| {})
            .await;
    }
    let requests = h.model.requests.lock().unwrap().clone();
    assert!(!requests.iter().any(is_summary_call));
    // The last turn's second call carries all 15 messages before it.
    assert_eq!(requests.last().unwrap().messages.len(), 15);
}

/// A provider for summaries whose first call hangs until the test lets it go, announcing that it
/// was reached: the worker is killed in the middle of it.
struct Hanging {
    inner: ScriptedProvider,
    reached: Notify,
    calls: Mutex<usize>,
}

#[async_trait]
impl ModelProvider for Hanging {
    fn name(&self) -> &str {
        "summariser"
    }
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let first = {
            let mut calls = self.calls.lock().unwrap();
            *calls += 1;
            *calls == 1
        };
        if first {
            self.reached.notify_one();
            std::future::pending::<()>().await;
        }
        self.inner.stream(request).await
    }
}

/// A turn's run on an engine of its own: the agent compacts through the `summariser`
/// provider, whose first call hangs (announcing it was reached) so the worker can be killed in
/// the middle of it; later calls answer. Tenants are under a quota, so every call is reserved
/// durably before it is made.
fn compacting_engine(h: &Harness, summariser: Arc<Hanging>) -> Arc<forge_engine::Engine> {
    let mut def = compacting(CompactionConfig {
        model: Some("summariser:small".into()),
        ..config(2)
    });
    def.limits.max_steps = 4;
    let quota = Quota {
        period: QuotaPeriod::Day,
        max_tokens: Some(1_000_000),
        max_cost_micros: None,
    };
    Arc::new(
        forge_engine::Engine::builder()
            .store(h.store.clone())
            .model(h.model.clone())
            .model(summariser)
            .clock(h.clock.clone())
            .ids(Arc::new(forge_core::id::UuidV7Generator))
            .worker_id("w2")
            .agent(def)
            .quota(quota)
            .tool(calculator())
            .unwrap()
            .build()
            .unwrap(),
    )
}

#[tokio::test]
async fn a_worker_killed_mid_summary_is_resumed_into_one_summary_and_one_charge() {
    // Six turns without compaction make a history well over the budget.
    let h = harness_built(
        CHAT,
        vec![calculator()],
        agent(&["calculate"], RunLimits::default()),
        |b| b,
    );
    let t = thread(&h).await;
    let never = CancellationToken::new();
    for turn in 0..6 {
        h.run_on(t, &format!("turn {turn}: 6 times 7?"), &never, &|_| {})
            .await;
    }
    let summariser = Arc::new(Hanging {
        inner: ScriptedProvider::new(Script::parse(CHAT, "inline").unwrap()),
        reached: Notify::new(),
        calls: Mutex::new(0),
    });
    let engine = compacting_engine(&h, summariser.clone());
    let run = engine
        .start_run(
            &h.scope,
            t,
            &h.agent,
            vec![Part::text("and 6 times 7 again?")],
        )
        .await
        .unwrap();
    let killed = {
        let (engine, scope) = (engine.clone(), h.scope.clone());
        tokio::spawn(async move {
            engine
                .execute(&scope, run.id, &CancellationToken::new(), &NoopObserver)
                .await
        })
    };
    tokio::time::timeout(Duration::from_secs(30), summariser.reached.notified())
        .await
        .expect("the run never asked for a summary");
    killed.abort();
    assert!(killed.await.unwrap_err().is_cancelled());
    // Killed mid-summary: nothing of the step is written, its reservation is held.
    let thread = h.store.get_thread(&h.scope, t).await.unwrap();
    assert_eq!(thread.summary, None);
    let before = h.store.get_run(&h.scope, run.id).await.unwrap();
    assert_eq!(before.last_seq, 0);
    let calls = engine.run_usage(&h.scope, run.id).await.unwrap();
    assert_eq!(
        calls
            .iter()
            .map(|c| (c.model.as_str(), c.status))
            .collect::<Vec<_>>(),
        [("summariser:small", CallStatus::Reserved)]
    );

    // Another execution, once the dead one's lease has run out, resumes the run.
    h.clock.advance(Duration::from_secs(120));
    let outcome = engine
        .execute(&h.scope, run.id, &CancellationToken::new(), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    let log = h
        .store
        .read_events(&h.scope, run.id, 0, 1000)
        .await
        .unwrap();
    let compacted: Vec<_> = log
        .iter()
        .filter(|e| matches!(e.kind, RunEventKind::ThreadCompacted { .. }))
        .collect();
    assert_eq!(compacted.len(), 1, "one compaction in the log");
    let thread = h.store.get_thread(&h.scope, t).await.unwrap();
    let summary = thread.summary.unwrap();
    assert_eq!((summary.version, summary.run_id), (1, run.id));
    assert_eq!(summary.model, "summariser:small");
    // The dead execution's reservation is released (charging nothing); the resumed one's
    // summarising call and the agent's calls are settled.
    let calls = engine.run_usage(&h.scope, run.id).await.unwrap();
    let mut by: HashMap<(String, &str), usize> = HashMap::new();
    for c in &calls {
        *by.entry((c.model.clone(), status_name(c.status)))
            .or_default() += 1;
    }
    assert_eq!(by.get(&("summariser:small".into(), "released")), Some(&1));
    assert_eq!(by.get(&("summariser:small".into(), "settled")), Some(&1));
    assert_eq!(by.get(&("scripted:inline".into(), "settled")), Some(&2));
    assert_eq!(calls.len(), 4, "{calls:?}");
    // The summarising call's usage counts in the run's.
    let run = h.store.get_run(&h.scope, run.id).await.unwrap();
    let settled: u64 = calls
        .iter()
        .filter(|c| c.status == CallStatus::Settled)
        .map(|c| c.actual.unwrap_or(c.estimate).total_tokens())
        .sum();
    assert_eq!(run.checkpoint.usage.total_tokens(), settled);
}

#[tokio::test]
async fn a_compaction_asked_for_waits_its_turn_folds_once_and_adds_no_message() {
    let h = harness_built(
        CHAT,
        vec![calculator()],
        agent(&["calculate"], RunLimits::default()),
        |b| b,
    );
    let t = thread(&h).await;
    let never = CancellationToken::new();
    for turn in 0..4 {
        h.run_on(t, &format!("turn {turn}: 6 times 7?"), &never, &|_| {})
            .await;
    }
    // Behind a run that has not finished, the compaction waits (the thread's single writer).
    let ahead = h
        .engine
        .start_run(&h.scope, t, &h.agent, vec![Part::text("6 times 7?")])
        .await
        .unwrap();
    let compaction = h
        .engine
        .compact_thread(&h.scope, t, &h.agent)
        .await
        .unwrap();
    let queued = h
        .store
        .read_events(&h.scope, compaction.id, 0, 10)
        .await
        .unwrap();
    assert!(matches!(
        &queued[0].kind,
        RunEventKind::RunQueued { behind, .. } if *behind == ahead.id
    ));
    for id in [ahead.id, compaction.id] {
        h.engine
            .execute(&h.scope, id, &never, &NoopObserver)
            .await
            .unwrap();
    }
    let log = h
        .store
        .read_events(&h.scope, compaction.id, 0, 100)
        .await
        .unwrap();
    let kinds: Vec<&str> = log.iter().map(|e| e.kind.type_name()).collect();
    assert_eq!(
        kinds,
        [
            "run.queued",
            "run.started",
            "step.started",
            "usage.updated",
            "thread.compacted",
            "run.completed"
        ]
    );
    // 20 messages, the 8 newest kept: the summary covers 12, and no message was added.
    let thread = h.store.get_thread(&h.scope, t).await.unwrap();
    let summary = thread.summary.clone().unwrap();
    assert_eq!((summary.version, summary.covered), (1, 12));
    assert_eq!(h.store.list_messages(&h.scope, t).await.unwrap().len(), 20);
    let calls = h.engine.run_usage(&h.scope, compaction.id).await.unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].status, CallStatus::Settled);

    // Asked again with nothing new to fold, it changes nothing.
    let again = h
        .engine
        .compact_thread(&h.scope, t, &h.agent)
        .await
        .unwrap();
    let outcome = h
        .engine
        .execute(&h.scope, again.id, &never, &NoopObserver)
        .await
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    let log = h
        .store
        .read_events(&h.scope, again.id, 0, 100)
        .await
        .unwrap();
    assert!(matches!(
        &log.last().unwrap().kind,
        RunEventKind::RunCompleted { text, .. } if text == "Nothing to compact."
    ));
    assert_eq!(
        h.store.get_thread(&h.scope, t).await.unwrap().summary,
        Some(summary)
    );
    assert!(
        h.engine
            .run_usage(&h.scope, again.id)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_summarising_call_is_in_the_token_and_duration_metrics_like_any_call() {
    use forge_core::telemetry::{Instrument, Telemetry};
    let meters = Arc::new(crate::harness::Metrics::default());
    let mut def = agent(&["calculate"], RunLimits::default());
    def.compaction = Some(CompactionConfig {
        model: Some("summariser:small".into()),
        ..config(8)
    });
    let summariser = Arc::new(Hanging {
        inner: ScriptedProvider::new(Script::parse(CHAT, "inline").unwrap()),
        reached: Notify::new(),
        // Past its first call: it answers at once.
        calls: Mutex::new(1),
    });
    let telemetry = Telemetry {
        meter: meters.clone(),
        ..Telemetry::default()
    };
    let h = harness_built(CHAT, vec![calculator()], def, |b| {
        b.model(summariser.clone()).telemetry(telemetry)
    });
    let t = thread(&h).await;
    let never = CancellationToken::new();
    for turn in 0..3 {
        h.run_on(t, &format!("turn {turn}: 6 times 7?"), &never, &|_| {})
            .await;
    }
    let run = h
        .engine
        .compact_thread(&h.scope, t, &h.agent)
        .await
        .unwrap();
    h.engine
        .execute(&h.scope, run.id, &never, &NoopObserver)
        .await
        .unwrap();
    let of = |instrument: Instrument| {
        meters
            .of(instrument)
            .iter()
            .filter(|r| r.attr("model") == "summariser:small")
            .count()
    };
    assert!(
        of(Instrument::ModelTokens) > 0,
        "{:?}",
        meters.of(Instrument::ModelTokens)
    );
    assert_eq!(of(Instrument::ModelCost), 1);
    assert_eq!(of(Instrument::ModelCallDuration), 1);
}

/// A history longer than a page is read whole and in order: the first page as a run begins
/// (`thread_with_history`), then page after page (`continue_history`), as `read_history` reads it.
#[tokio::test]
async fn a_history_of_more_than_two_pages_is_read_whole_in_order() {
    use forge_core::id::{MessageId, UuidV7Generator};
    use forge_core::message::Role;
    use forge_core::time::{Clock, SystemClock};
    use forge_engine::compaction::{HISTORY_PAGE, continue_history, read_history};
    use forge_store_memory::MemoryStore;

    let store = MemoryStore::default();
    let scope = forge_testkit::fixtures::scope("acme");
    let run = forge_testkit::fixtures::run_on_new_thread(&store, &scope).await;
    let thread = store.get_thread(&scope, run.thread_id).await.unwrap();
    let lease = store
        .acquire_lease(&scope, run.id, "w", Duration::from_secs(30))
        .await
        .unwrap();
    let at = SystemClock.now();
    let messages: Vec<Message> = (0..2 * HISTORY_PAGE + 3)
        .map(|i| Message {
            id: MessageId::generate(&UuidV7Generator),
            run_id: run.id,
            role: Role::User,
            parts: vec![Part::text(format!("m{i}"))],
            created_at: at,
        })
        .collect();
    let commit = forge_testkit::fixtures::step(&run, &lease, 1, messages.clone(), at);
    store.commit_step(&scope, commit).await.unwrap();

    let ids = |m: &[Message]| m.iter().map(|m| m.id).collect::<Vec<_>>();
    let (_, first) = store
        .thread_with_history(&scope, thread.id, HISTORY_PAGE)
        .await
        .unwrap();
    assert_eq!(ids(&first), ids(&messages[..HISTORY_PAGE]));
    let whole = continue_history(&store, &scope, thread.id, None, first)
        .await
        .unwrap();
    assert_eq!(ids(&whole), ids(&messages));
    let read = read_history(&store, &scope, thread.id, None).await.unwrap();
    assert_eq!(ids(&read), ids(&messages));
}
