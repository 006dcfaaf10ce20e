//! `forge-bench runs`: durable throughput of the 3-step workload through the queue and a worker.
//!
//! The agent is the shared workload's (`shared/bench/WORKLOAD.md`): a `lookup` tool called in 3
//! steps, then 8 text chunks, 4 model calls a run, here from the scripted provider (no HTTP). Runs
//! are submitted up front, each on its own thread; a worker with C claim loops executes them.
//! Reported: runs/s, CPU ms per run of this process (user + system), and for PostgreSQL the CPU
//! of the server's processes separately; and the latency of `claim` alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use forge_core::agent::{AgentDefinition, AgentRef, RunLimits};
use forge_core::event::RunEvent;
use forge_core::part::Part;
use forge_core::ports::queue::JobQueue;
use forge_core::ports::store::{NewRun, NewThread, Store};
use forge_core::scope::{Scope, SystemScope};
use forge_engine::{Engine, RunObserver, Worker, WorkerConfig, native_tool};
use forge_providers::{Script, ScriptedProvider};
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

/// CPU time (user + system) of a process, from `/proc/<pid>/stat`, in milliseconds.
pub(crate) fn cpu_ms(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks * 1000.0 / 100.0) // USER_HZ is 100 on Linux
}

/// CPU of every process named `postgres` on this machine, in milliseconds.
pub(crate) fn postgres_cpu_ms() -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_string_lossy().into_owned();
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            if comm.trim() == "postgres" {
                cpu_ms(&pid)
            } else {
                None
            }
        })
        .sum()
}

struct CountEnds(AtomicUsize);

impl RunObserver for CountEnds {
    fn on_event(&self, e: &RunEvent) {
        if e.kind.is_terminal() {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Submits `runs` runs and executes them with `in_flight` claim loops; prints one result line.
pub(crate) async fn durable(
    kind: &str,
    store: Arc<dyn Store>,
    runs: usize,
    in_flight: usize,
) -> anyhow::Result<()> {
    let lookup = native_tool("lookup", "looks a key up", |_ctx, _i: Lookup| async {
        Ok("value")
    });
    let engine = Arc::new(
        Engine::builder()
            .dyn_store(store.clone())
            .model(Arc::new(ScriptedProvider::new(Script::parse(
                SCRIPT, "bench",
            )?)))
            .tool(Arc::new(lookup))?
            .agent(agent())
            .build()?,
    );
    let scope = Scope::parse("bench", "bench", &[])?;
    for i in 0..runs {
        let thread = store.create_thread(&scope, NewThread::default()).await?;
        store
            .create_run(
                &scope,
                NewRun::new(
                    thread.id,
                    agent().agent,
                    vec![Part::text(format!("go {i}"))],
                ),
            )
            .await?;
    }
    let ends = Arc::new(CountEnds(AtomicUsize::new(0)));
    let config = WorkerConfig {
        concurrency: in_flight,
        poll_interval: Duration::from_millis(1),
        ..WorkerConfig::default()
    };
    let queue: Arc<dyn JobQueue> = store.clone();
    let worker = Worker::new(engine, queue, config).with_observer(ends.clone());
    let (cpu0, pg0, start) = (
        cpu_ms("self").unwrap_or(0.0),
        postgres_cpu_ms(),
        Instant::now(),
    );
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let watch = ends.clone();
    let watcher = tokio::spawn(async move {
        while watch.0.load(Ordering::Relaxed) < runs {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        stop.cancel();
    });
    worker.run(shutdown).await;
    watcher.await?;
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = (cpu_ms("self").unwrap_or(0.0) - cpu0) / runs as f64;
    let pg = (postgres_cpu_ms() - pg0) / runs as f64;
    let rate = runs as f64 / elapsed;
    let pg_text = if kind == "postgres" {
        format!("{pg:>9.2}")
    } else {
        format!("{:>9}", "-")
    };
    println!("{kind:<9} {in_flight:>9} {runs:>6} {rate:>9.1} {cpu:>12.2} {pg_text}");
    eprintln!(
        "{}",
        serde_json::json!({"bench": "durable_runs", "store": kind, "in_flight": in_flight, "runs": runs,
            "runs_per_s": rate, "cpu_ms_per_run": cpu, "postgres_cpu_ms_per_run": if kind == "postgres" { Some(pg) } else { None }})
    );
    Ok(())
}

/// Times `claim` alone over `jobs` ready jobs (each completed right after), one claimer.
pub(crate) async fn claim_latency(
    kind: &str,
    store: Arc<dyn Store>,
    jobs: usize,
) -> anyhow::Result<()> {
    let scope = Scope::parse("bench", "bench", &[])?;
    for i in 0..jobs {
        let thread = store.create_thread(&scope, NewThread::default()).await?;
        store
            .create_run(
                &scope,
                NewRun::new(thread.id, agent().agent, vec![Part::text(format!("c {i}"))]),
            )
            .await?;
    }
    let sys = SystemScope::new("benchmark claims");
    let mut latencies = Vec::with_capacity(jobs);
    loop {
        let start = Instant::now();
        let Some(job) = store
            .claim(
                &sys,
                "bench",
                Duration::from_secs(60),
                &forge_core::ports::queue::ClaimFilter::any(),
            )
            .await?
        else {
            break;
        };
        latencies.push(start.elapsed());
        store.complete(&sys, &job).await?;
    }
    latencies.sort();
    let p = |q: f64| {
        latencies[((latencies.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3
    };
    println!(
        "{kind:<9} claim p50 {:.3} ms  p99 {:.3} ms  over {} claims",
        p(0.5),
        p(0.99),
        latencies.len()
    );
    eprintln!(
        "{}",
        serde_json::json!({"bench": "claim", "store": kind, "p50_ms": p(0.5), "p99_ms": p(0.99), "claims": latencies.len()})
    );
    Ok(())
}
