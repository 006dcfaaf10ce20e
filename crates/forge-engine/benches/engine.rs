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
        b.iter(|| assemble(&def, "bench", &state, history.clone(), &tools))
    });
}

criterion_group!(benches, bench_engine);
criterion_main!(benches);
