//! How long a cancel request takes to end a run whose step is streaming, from the request to the
//! run's `cancelled` commit, on a SQLite file store.
//!
//! - `here`: the request goes through the engine executing the run (a server with its worker).
//! - `elsewhere`: the request goes through a second engine on the same database file, which does
//!   not execute the run (a `forge serve --no-worker` beside a `forge worker`); the executing
//!   engine learns of it from its cancel poll (the default, 500 ms).
//!
//! Each trial streams an answer of 200 chunks 25 ms apart (5 s) and asks at the first chunk.
//! `cargo bench -p forge-engine --bench cancel` prints p50, p99 and the largest over 100 trials of
//! each; `cargo test` runs 3 of each, so a broken benchmark fails the test run.

use std::sync::Arc;
use std::time::Instant;

use forge_core::agent::{AgentDefinition, AgentRef, RunLimits};
use forge_core::event::{RunEvent, RunEventKind};
use forge_core::id::RunId;
use forge_core::part::Part;
use forge_core::ports::store::{NewThread, RunStore, ThreadStore};
use forge_core::run::RunStatus;
use forge_core::scope::Scope;
use forge_engine::{Engine, RunObserver};
use forge_providers::{Script, ScriptedProvider};
use forge_store_sqlite::SqliteStore;
use tokio_util::sync::CancellationToken;

fn agent() -> AgentDefinition {
    AgentDefinition {
        agent: AgentRef {
            name: "bench".into(),
            version: "1".into(),
        },
        instructions: "Answer at length.".into(),
        model: "scripted:cancel".into(),
        tools: vec![],
        skills: vec![],
        output_schema: None,
        limits: RunLimits::default(),
        approvals: Default::default(),
        compaction: None,
    }
}

fn script(trials: usize) -> Script {
    let chunks = vec!["w "; 200]
        .into_iter()
        .map(|c| format!("{c:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let turn = format!(
        "[[conversation]]\n[[conversation.turn]]\nchunk_delay_ms = 25\ntext = [{chunks}]\n"
    );
    Script::parse(&turn.repeat(trials), "cancel").expect("the script parses")
}

fn engine(store: Arc<SqliteStore>, trials: usize) -> Arc<Engine> {
    let built = Engine::builder()
        .store(store)
        .model(Arc::new(ScriptedProvider::new(script(trials))))
        .agent(agent())
        .build()
        .expect("the engine builds");
    Arc::new(built)
}

/// Signals the first streamed part.
struct FirstChunk(tokio::sync::Notify);

impl RunObserver for FirstChunk {
    fn on_event(&self, e: &RunEvent) {
        if matches!(e.kind, RunEventKind::PartAdded { .. }) {
            self.0.notify_one();
        }
    }
}

/// Milliseconds from the request to the `cancelled` commit, for each trial.
async fn trials(elsewhere: bool, n: usize) -> Vec<f64> {
    let dir = std::env::temp_dir().join(format!("forge-cancel-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let url = format!("sqlite://{}", dir.join(format!("{elsewhere}.db")).display());
    let _ = std::fs::remove_file(dir.join(format!("{elsewhere}.db")));
    let store = Arc::new(SqliteStore::open(&url).await.expect("the store opens"));
    let executing = engine(store.clone(), n);
    let asking = if elsewhere {
        engine(
            Arc::new(SqliteStore::open(&url).await.expect("the store opens")),
            n,
        )
    } else {
        executing.clone()
    };
    let scope = Scope::parse("acme", "alice", &["member"]).expect("a scope");
    let mut took = Vec::with_capacity(n);
    for _ in 0..n {
        let thread = store
            .create_thread(&scope, NewThread::default())
            .await
            .expect("a thread");
        let run = executing
            .start_run(&scope, thread.id, &agent().agent, vec![Part::text("go")])
            .await
            .expect("a run");
        let first = Arc::new(FirstChunk(tokio::sync::Notify::new()));
        let execution = {
            let (engine, scope, first) = (executing.clone(), scope.clone(), first.clone());
            tokio::spawn(async move {
                engine
                    .execute(&scope, run.id, &CancellationToken::new(), first.as_ref())
                    .await
            })
        };
        first.0.notified().await;
        let asked = Instant::now();
        assert!(
            asking
                .request_cancel(&scope, run.id)
                .await
                .expect("the request")
        );
        let outcome = execution
            .await
            .expect("the execution task")
            .expect("the execution");
        took.push(asked.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(outcome.status, RunStatus::Cancelled);
        check_cancelled(store.as_ref(), &scope, run.id).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    took
}

async fn check_cancelled(store: &SqliteStore, scope: &Scope, run: RunId) {
    let stored = store.get_run(scope, run).await.expect("the run");
    assert_eq!(stored.status, RunStatus::Cancelled);
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at]
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test` does not.
    let n = if std::env::args().any(|a| a == "--bench") {
        100
    } else {
        3
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    for (name, elsewhere) in [("here", false), ("elsewhere", true)] {
        let mut took = rt.block_on(trials(elsewhere, n));
        took.sort_by(f64::total_cmp);
        println!(
            "cancel {name:<9} n={n:<4} p50 {:>7.1} ms  p99 {:>7.1} ms  max {:>7.1} ms",
            percentile(&took, 0.5),
            percentile(&took, 0.99),
            took[took.len() - 1],
        );
    }
}
