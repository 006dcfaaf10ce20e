//! Engine overhead per step, in memory: the scripted provider and the in-memory store, no I/O.
//!
//! The run is the shared workload's shape (`shared/bench/WORKLOAD.md`): a `lookup` tool called in 3
//! steps, then a final answer of 8 text chunks — 4 model calls per run. `cargo bench -p forge-engine`
//! reports time per run; throughput is in steps (model calls) per second.

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use forge_core::agent::{AgentDefinition, AgentRef, RunLimits};
use forge_core::part::Part;
use forge_core::ports::store::{NewThread, ThreadStore};
use forge_core::scope::Scope;
use forge_core::thread::SessionState;
use forge_engine::context::assemble;
use forge_engine::{Engine, NoopObserver, ToolRegistry, native_tool};
use forge_providers::{Script, ScriptedProvider};
use forge_store_memory::MemoryStore;
use tokio_util::sync::CancellationToken;

const SCRIPT: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "call_0", name = "lookup", input = { key = "k0" } }]
[[conversation.turn]]
tool_calls = [{ id = "call_1", name = "lookup", input = { key = "k1" } }]
[[conversation.turn]]
tool_calls = [{ id = "call_2", name = "lookup", input = { key = "k2" } }]
[[conversation.turn]]
text = ["w0 ", "w1 ", "w2 ", "w3 ", "w4 ", "w5 ", "w6 ", "w7 "]
"#;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Lookup {
    #[allow(dead_code)]
    key: String,
}

fn agent() -> AgentDefinition {
    AgentDefinition {
        agent: AgentRef {
            name: "bench".into(),
            version: "1".into(),
        },
        instructions: "You are a benchmark agent.".into(),
        model: "scripted:bench".into(),
        tools: vec!["lookup".into()],
        skills: vec![],
        output_schema: None,
        limits: RunLimits::default(),
        approvals: Default::default(),
        compaction: None,
    }
}

fn lookup() -> Arc<dyn forge_core::ports::tool::Tool> {
    Arc::new(native_tool(
        "lookup",
        "looks a key up",
        |_ctx, _i: Lookup| async { Ok("value") },
    ))
}

fn bench_engine(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let store = Arc::new(MemoryStore::default());
    let engine = Engine::builder()
        .store(store.clone())
        .model(Arc::new(ScriptedProvider::new(
            Script::parse(SCRIPT, "bench").expect("script"),
        )))
        .tool(lookup())
        .expect("tool")
        .agent(agent())
        .build()
        .expect("engine");
    let scope = Scope::parse("bench", "bench", &[]).expect("scope");
    let agent_ref = agent().agent;

    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(4));
    group.bench_function("run_4_steps_in_memory", |b| {
        b.iter(|| {
            rt.block_on(async {
                let thread = store
                    .create_thread(&scope, NewThread::default())
                    .await
                    .expect("thread");
                let run = engine
                    .start_run(&scope, thread.id, &agent_ref, vec![Part::text("go")])
                    .await
                    .expect("start");
                let out = engine
                    .execute(&scope, run.id, &CancellationToken::new(), &NoopObserver)
                    .await
                    .expect("execute");
                assert_eq!(out.status, forge_core::run::RunStatus::Completed);
            })
        })
    });
    group.finish();

    let mut tools = ToolRegistry::new();
    tools.register(lookup()).expect("tool");
    let history = rt.block_on(async {
        let thread = store
            .create_thread(&scope, NewThread::default())
            .await
            .expect("thread");
        let run = engine
            .start_run(&scope, thread.id, &agent_ref, vec![Part::text("go")])
            .await
            .expect("start");
        engine
            .execute(&scope, run.id, &CancellationToken::new(), &NoopObserver)
            .await
            .expect("execute");
        store
            .list_messages(&scope, thread.id)
            .await
            .expect("history")
    });
    let def = agent();
    let state = SessionState::default();
    c.bench_function("context/assemble_8_messages", |b| {
        b.iter(|| {
            assemble(
                &def,
                "bench",
                &state,
                history.clone(),
                tools.descriptors(&def.tools),
            )
        })
    });

    // What one model call of a long, uncompacted thread pays with its history in memory: 10,000
    // messages (the run above, repeated) cloned, assembled into the request and estimated for
    // its reservation. `bench_long_thread` measures it from a store, compacted or not.
    let long: Vec<_> = history.iter().cycle().take(10_000).cloned().collect();
    c.bench_function("context/step_request_10000_messages", |b| {
        b.iter(|| {
            let request = assemble(
                &def,
                "bench",
                &state,
                long.clone(),
                tools.descriptors(&def.tools),
            );
            forge_engine::context::estimate_usage(&request)
        })
    });
}

/// One agent step's commit: 8 events and one message, fenced and versioned, on memory and on a
/// SQLite file (PostgreSQL: `forge-bench commit-step`, which needs a server); and the cost of
/// encoding one streamed event, which every append and every subscriber pays.
fn bench_commit(c: &mut Criterion) {
    use forge_core::event::{RunEvent, RunEventKind};
    use forge_core::id::MessageId;
    use forge_core::message::{Message, Role};
    use forge_core::part::PartUpdate;
    use forge_core::ports::store::{NewRun, StepCommit, Store};
    use forge_core::run::{Checkpoint, RunStatus};
    use forge_core::time::{Clock, SystemClock};

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = std::env::temp_dir().join(format!("forge-bench-commit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let sqlite = rt
        .block_on(forge_store_sqlite::SqliteStore::open(&format!(
            "sqlite://{}",
            dir.join("bench.db").display()
        )))
        .expect("sqlite");
    let stores: Vec<(&str, Arc<dyn Store>)> = vec![
        ("memory", Arc::new(MemoryStore::default())),
        ("sqlite", Arc::new(sqlite)),
    ];
    let scope = Scope::parse("bench", "bench", &[]).expect("scope");
    let mut group = c.benchmark_group("commit_step");
    group.throughput(Throughput::Elements(8));
    for (name, store) in stores {
        let (run, lease) = rt.block_on(async {
            let thread = store
                .create_thread(&scope, NewThread::default())
                .await
                .expect("thread");
            let run = store
                .create_run(
                    &scope,
                    NewRun::new(thread.id, agent().agent, vec![Part::text("go")]),
                )
                .await
                .expect("run");
            let lease = store
                .acquire_lease(
                    &scope,
                    run.id,
                    "bench",
                    std::time::Duration::from_secs(3600),
                )
                .await
                .expect("lease");
            (run, lease)
        });
        let (mut version, mut seq) = (run.version, run.last_seq);
        group.bench_function(format!("8_events_1_message/{name}"), |b| {
            b.iter(|| {
                let message_id = MessageId::generate(&forge_core::id::UuidV7Generator);
                let events = (0..8u32)
                    .map(|i| {
                        seq += 1;
                        RunEvent {
                            run_id: run.id,
                            seq,
                            at: SystemClock.now(),
                            kind: RunEventKind::PartUpdated {
                                message_id,
                                index: 0,
                                update: PartUpdate::TextDelta {
                                    text: format!("w{i} "),
                                },
                            },
                        }
                    })
                    .collect();
                let commit = StepCommit {
                    run_id: run.id,
                    expected_version: version,
                    lease: lease.clone(),
                    events,
                    messages: vec![Message {
                        id: message_id,
                        run_id: run.id,
                        role: Role::Assistant,
                        parts: vec![Part::text("w0 w1 w2 w3 w4 w5 w6 w7 ")],
                        created_at: SystemClock.now(),
                    }],
                    checkpoint: Checkpoint::default(),
                    status: RunStatus::Running,
                    failure: None,
                    interactions: vec![],
                    audit: vec![],
                    settlements: vec![],
                    state: None,
                    summary: None,
                    job: None,
                };
                version = rt
                    .block_on(store.commit_step(&scope, commit))
                    .expect("commit")
                    .version;
            })
        });
    }
    group.finish();
    let event = RunEvent {
        run_id: forge_core::id::RunId::generate(&forge_core::id::UuidV7Generator),
        seq: 42,
        at: SystemClock.now(),
        kind: RunEventKind::PartUpdated {
            message_id: MessageId::generate(&forge_core::id::UuidV7Generator),
            index: 0,
            update: PartUpdate::TextDelta { text: "w3 ".into() },
        },
    };
    c.bench_function("event/encode_text_delta", |b| {
        b.iter(|| serde_json::to_vec(&event).expect("encode"))
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Context assembly of one model call on a 10,000-message thread stored in SQLite, the way the
/// engine did it before compaction (the whole history read, assembled and estimated) and the way
/// it does now for a compacted thread (the thread, its summary and the 8 messages after it,
/// read a page at a time; the summary at the head of the request).
fn bench_long_thread(c: &mut Criterion) {
    use forge_core::id::{MessageId, UuidV7Generator};
    use forge_core::message::{Message, Role};
    use forge_core::ports::store::{NewRun, RunStore, StepCommit};
    use forge_core::run::{Checkpoint, RunStatus};
    use forge_core::thread::ThreadSummary;
    use forge_core::time::{Clock, SystemClock};
    use forge_engine::compaction::{read_history, with_summary};

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = std::env::temp_dir().join(format!("forge-bench-long-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let store = rt
        .block_on(forge_store_sqlite::SqliteStore::open(&format!(
            "sqlite://{}",
            dir.join("long.db").display()
        )))
        .expect("sqlite");
    let scope = Scope::parse("bench", "bench", &[]).expect("scope");
    let def = agent();
    let mut tools = ToolRegistry::new();
    tools.register(lookup()).expect("tool");
    let state = SessionState::default();
    // The workload's turn (user, three tool calls and results, an answer), repeated.
    let turn = |run| {
        let call = |i: usize| {
            Part::ToolCall(forge_core::part::ToolCallPart {
                tool_call_id: forge_core::id::ToolCallId(format!("call_{i}")),
                tool_name: "lookup".into(),
                input: serde_json::json!({"key": format!("k{i}")}),
            })
        };
        let result = |i: usize| {
            Part::ToolResult(forge_core::part::ToolResultPart {
                tool_call_id: forge_core::id::ToolCallId(format!("call_{i}")),
                tool_name: "lookup".into(),
                output: serde_json::json!("value"),
                is_error: false,
                trust: forge_core::part::Trust::Untrusted,
                tool_version: Some("1".into()),
            })
        };
        let mut parts = vec![(Role::User, Part::text("go"))];
        for i in 0..3 {
            parts.push((Role::Assistant, call(i)));
            parts.push((Role::Tool, result(i)));
        }
        parts.push((Role::Assistant, Part::text("w0 w1 w2 w3 w4 w5 w6 w7 ")));
        parts
            .into_iter()
            .map(|(role, part)| Message {
                id: MessageId::generate(&UuidV7Generator),
                run_id: run,
                role,
                parts: vec![part],
                created_at: SystemClock.now(),
            })
            .collect::<Vec<_>>()
    };
    let thread = rt.block_on(async {
        let thread = store
            .create_thread(&scope, NewThread::default())
            .await
            .expect("thread");
        let run = store
            .create_run(
                &scope,
                NewRun::new(thread.id, def.agent.clone(), vec![Part::text("go")]),
            )
            .await
            .expect("run");
        let lease = store
            .acquire_lease(
                &scope,
                run.id,
                "bench",
                std::time::Duration::from_secs(3600),
            )
            .await
            .expect("lease");
        let mut all = Vec::new();
        while all.len() < 10_000 {
            all.extend(turn(run.id));
        }
        all.truncate(10_000);
        let commit = |version, messages, summary| StepCommit {
            run_id: run.id,
            expected_version: version,
            lease: lease.clone(),
            events: vec![],
            messages,
            checkpoint: Checkpoint::default(),
            status: RunStatus::Running,
            failure: None,
            interactions: vec![],
            audit: vec![],
            settlements: vec![],
            state: None,
            summary,
            job: None,
        };
        let mut version = 0;
        for batch in all.chunks(500) {
            version = store
                .commit_step(&scope, commit(version, batch.to_vec(), None))
                .await
                .expect("commit")
                .version;
        }
        // Compacted as `keep_recent = 8` leaves it: the summary covers all but the newest 8.
        let summary = ThreadSummary {
            version: 1,
            text: "Earlier: the user asked for lookups of k0, k1 and k2, 1,250 times.".into(),
            through: all[10_000 - 9].id,
            covered: 10_000 - 8,
            run_id: run.id,
            model: "scripted:bench".into(),
            created_at: SystemClock.now(),
        };
        store
            .commit_step(&scope, commit(version, vec![], Some(summary)))
            .await
            .expect("summary");
        thread.id
    });
    let mut group = c.benchmark_group("context");
    group.sample_size(20);
    group.bench_function("sqlite_10000_messages/whole_history", |b| {
        b.iter(|| {
            rt.block_on(async {
                let history = store.list_messages(&scope, thread).await.expect("history");
                let request = assemble(
                    &def,
                    "bench",
                    &state,
                    history,
                    tools.descriptors(&def.tools),
                );
                forge_engine::context::estimate_usage(&request)
            })
        })
    });
    group.bench_function("sqlite_10000_messages/compacted", |b| {
        b.iter(|| {
            rt.block_on(async {
                let t = store.get_thread(&scope, thread).await.expect("thread");
                let history = read_history(&store, &scope, thread, t.summary.as_ref())
                    .await
                    .expect("history");
                assert_eq!(history.len(), 8);
                let request = assemble(
                    &def,
                    "bench",
                    &state,
                    with_summary(t.summary.as_ref(), history),
                    tools.descriptors(&def.tools),
                );
                forge_engine::context::estimate_usage(&request)
            })
        })
    });
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench_engine, bench_commit, bench_long_thread);
criterion_main!(benches);
