//! The shared benchmark workload (`shared/bench/WORKLOAD.md`) against an OpenAI-compatible server:
//! Forge in memory, on SQLite and on PostgreSQL, and a bare HTTP loop making the same model calls
//! as the floor.
//!
//! `forge-bench workload` starts the mock model server as its own process (unless `--base-url`
//! names a server), then measures each mode in a fresh child process, so that CPU time and peak
//! RSS belong to that mode alone:
//!
//! - latency: median and p95 ms per run, `--runs` sequential runs after `--warmup`;
//! - throughput: runs/s with `--in-flight` runs executing at once (workers claiming from the
//!   queue for the Forge modes; concurrent tasks for the bare loop);
//! - CPU: user + system ms per run of the measuring process during the throughput phase, and for
//!   PostgreSQL the server's processes separately;
//! - peak RSS of the measuring process;
//! - time to first token: a streamed `K=0` run (8 text chunks, 1 ms apart), from starting the run
//!   to the first text chunk an observer receives;
//! - for PostgreSQL, what the server counted per run of the throughput phase (`pgstats`):
//!   transactions, rows, WAL records, bytes and flushes, and each of Forge's functions' calls and
//!   time.
//!
//! Prints a table, and one JSON line per mode on stderr. A mode named more than once is measured
//! that many times, and gets a row (and a JSON line) of the median of each figure.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use forge_core::agent::{AgentDefinition, AgentRef, RunLimits};
use forge_core::event::{RunEvent, RunEventKind};
use forge_core::id::UuidV7Generator;
use forge_core::part::Part;
use forge_core::ports::queue::{ClaimFilter, JobQueue};
use forge_core::ports::store::{NewRun, NewThread};
use forge_core::scope::{Scope, SystemScope};
use forge_engine::{
    Engine, NoopObserver, RunControl, RunObserver, Worker, WorkerConfig, native_tool,
};
use forge_providers::http::{HttpProvider, HttpSettings, Timeouts};
use forge_providers::{BodyOptions, Dialect};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;

use crate::runs::{cpu_ms, postgres_cpu_ms};

/// Settings of one measurement.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WorkloadArgs {
    /// An OpenAI-compatible base URL (default: a mock server started for the run).
    #[arg(long)]
    base_url: Option<String>,
    /// Modes, comma separated: bare, memory, sqlite, postgres.
    #[arg(
        long,
        default_value = "bare,memory,sqlite,postgres",
        value_delimiter = ','
    )]
    modes: Vec<String>,
    /// Sequential runs measured for latency.
    #[arg(long, default_value_t = 200)]
    runs: usize,
    /// Sequential runs before measuring.
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// Runs executing at once in the throughput phase.
    #[arg(long, default_value_t = 50)]
    in_flight: usize,
    /// Runs in the throughput phase.
    #[arg(long, default_value_t = 1000)]
    throughput_runs: usize,
    /// Feed every event of the throughput phase to a live tail, as `forge serve` does.
    #[arg(long)]
    live_tail: bool,
    /// Record spans, metrics and logs through `forge-otel` and export them over OTLP/HTTP to a
    /// real receiver started for the measurement (its CPU is not counted).
    #[arg(long)]
    otel: bool,
    /// Compare each durable mode's CPU per run, as a ratio to the bare loop's, with this
    /// committed baseline (`benches/workload-baseline.json`) and fail when one grew by more
    /// than `--max-growth`.
    #[arg(long)]
    baseline: Option<std::path::PathBuf>,
    /// Write the measured ratios as a baseline to this file.
    #[arg(long)]
    write_baseline: Option<std::path::PathBuf>,
    /// How much a ratio may grow over the baseline's before `--baseline` fails (1.5: by half).
    #[arg(long, default_value_t = 1.5)]
    max_growth: f64,
}

/// The build profile ratios are measured in: a debug build's engine costs more next to the
/// database than a release build's, so ratios compare only within one profile.
const PROFILE: &str = if cfg!(debug_assertions) {
    "debug"
} else {
    "release"
};

/// Each mode's CPU per run (PostgreSQL's server CPU included) over the bare loop's. Each
/// measurement is divided by the mean of the bare measurements that bracket it (the nearest one
/// before it and the nearest one after it, or the one there is), so that a shared machine getting
/// faster or slower during the check moves the divisor with the measurement; a mode measured more
/// than once counts with the median of its ratios, so that one noisy sample does not decide a
/// regression check.
fn cpu_ratios(results: &[Value]) -> anyhow::Result<serde_json::Map<String, Value>> {
    let total = |r: &Value| {
        r["cpu_ms_per_run"].as_f64().unwrap_or(f64::NAN)
            + r["postgres_cpu_ms_per_run"].as_f64().unwrap_or(0.0)
    };
    let bare: Vec<(usize, f64)> = results
        .iter()
        .enumerate()
        .filter(|(_, r)| r["mode"] == "bare")
        .map(|(i, r)| (i, total(r)))
        .collect();
    anyhow::ensure!(
        !bare.is_empty(),
        "ratios need the bare mode: add bare to --modes"
    );
    anyhow::ensure!(
        bare.iter().all(|(_, cpu)| *cpu > 0.0),
        "the bare loop measured no CPU"
    );
    let divisor = |at: usize| {
        let before = bare
            .iter()
            .rev()
            .find(|(i, _)| *i < at)
            .map(|(_, cpu)| *cpu);
        let after = bare.iter().find(|(i, _)| *i > at).map(|(_, cpu)| *cpu);
        match (before, after) {
            (Some(b), Some(a)) => (b + a) / 2.0,
            (Some(one), None) | (None, Some(one)) => one,
            (None, None) => f64::NAN,
        }
    };
    let mut by_mode: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for (at, r) in results.iter().enumerate() {
        match r["mode"].as_str() {
            Some("bare") | None => {}
            Some(mode) => by_mode
                .entry(mode)
                .or_default()
                .push(total(r) / divisor(at)),
        }
    }
    Ok(by_mode
        .into_iter()
        .map(|(mode, ratios)| (mode.to_owned(), json!(median(ratios))))
        .collect())
}

/// The median of `values` (the mean of the middle two for an even count; NaN for none).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The figures a mode's row shows, and the lines under it: its JSON line's `step_commit_p50_ms`
/// and what creating a run cost.
const ROW_FIGURES: [&str; 10] = [
    "p50_ms",
    "p95_ms",
    "runs_per_s",
    "cpu_ms_per_run",
    "postgres_cpu_ms_per_run",
    "peak_rss_mib",
    "ttft_ms",
    "step_commit_p50_ms",
    "create_cpu_ms_per_run",
    "create_postgres_cpu_ms_per_run",
];

/// For each mode measured more than once, in the order modes were first measured: the median of
/// each of its row's figures (those its results have), and how many measurements they are of.
/// One measurement on a shared machine can be a third off the next; the median of a few is the
/// figure to compare.
fn medians(results: &[Value]) -> Vec<Value> {
    let mut modes: Vec<&str> = Vec::new();
    for r in results {
        if let Some(mode) = r["mode"].as_str()
            && !modes.contains(&mode)
        {
            modes.push(mode);
        }
    }
    modes
        .into_iter()
        .filter_map(|mode| {
            let of: Vec<&Value> = results.iter().filter(|r| r["mode"] == mode).collect();
            if of.len() < 2 {
                return None;
            }
            let mut line =
                json!({ "bench": "workload-median", "mode": mode, "median_of": of.len() });
            for figure in ROW_FIGURES {
                let values: Vec<f64> = of.iter().filter_map(|r| r[figure].as_f64()).collect();
                if !values.is_empty() {
                    line[figure] = json!(median(values));
                }
            }
            Some(line)
        })
        .collect()
}

/// Checks `measured` ratios against a baseline file: every mode both name may grow by at most
/// `max_growth`; a baseline of another build profile is refused rather than compared.
fn check_baseline(
    measured: &serde_json::Map<String, Value>,
    path: &std::path::Path,
    max_growth: f64,
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the baseline {}", path.display()))?;
    let baseline: Value = serde_json::from_str(&text)
        .with_context(|| format!("the baseline {} is not JSON", path.display()))?;
    let profile = baseline["profile"].as_str().unwrap_or("?");
    anyhow::ensure!(
        profile == PROFILE,
        "the baseline {} was measured in a {profile} build and this is a {PROFILE} build",
        path.display()
    );
    let mut grown = Vec::new();
    for (mode, ratio) in measured {
        let (Some(now), Some(then)) = (ratio.as_f64(), baseline["ratios"][mode].as_f64()) else {
            continue;
        };
        let growth = now / then;
        println!(
            "{mode:<9} CPU per run {now:.2}× bare (baseline {then:.2}×): {growth:.2}× the baseline"
        );
        if growth > max_growth || now.is_nan() {
            grown.push(format!("{mode} {growth:.2}×"));
        }
    }
    anyhow::ensure!(
        grown.is_empty(),
        "CPU per durable run grew past {max_growth}× the baseline: {}",
        grown.join(", ")
    );
    Ok(())
}

/// Starts the mock in a child process; returns it and its base URL.
async fn spawn_mock() -> anyhow::Result<(tokio::process::Child, String)> {
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .args(["mock", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("failed to start the mock model server")?;
    let stdout = child.stdout.take().context("the mock's stdout")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let url = lines
        .next_line()
        .await?
        .context("the mock server printed no URL")?;
    Ok((child, url))
}

/// Runs the mock model server until killed.
pub(crate) async fn mock(addr: &str) -> anyhow::Result<()> {
    let mut server = forge_testkit::mock_model::MockModelServer::start_on(addr, false).await?;
    println!("{}", server.base_url());
    server.wait().await;
    Ok(())
}

/// Measures every mode, each in its own process, and prints the table.
pub(crate) async fn workload(args: WorkloadArgs) -> anyhow::Result<()> {
    let (_mock, base_url) = match &args.base_url {
        Some(url) => (None, url.clone()),
        None => {
            let (child, url) = spawn_mock().await?;
            (Some(child), url)
        }
    };
    let receiver = args.otel.then(forge_testkit::otlp::Receiver::start);
    println!(
        "{:<9} {:>9} {:>9} {:>9} {:>11} {:>10} {:>9} {:>9}",
        "mode", "p50 ms", "p95 ms", "runs/s", "cpu ms/run", "pg ms/run", "rss MiB", "ttft ms"
    );
    let mut results = Vec::new();
    for mode in &args.modes {
        let out = tokio::process::Command::new(std::env::current_exe()?)
            .args([
                "workload-one",
                "--mode",
                mode,
                "--base-url",
                &base_url,
                "--runs",
                &args.runs.to_string(),
                "--warmup",
                &args.warmup.to_string(),
                "--in-flight",
                &args.in_flight.to_string(),
                "--throughput-runs",
                &args.throughput_runs.to_string(),
            ])
            .args(args.live_tail.then_some("--live-tail"))
            .args(args.otel.then_some("--otel"))
            .envs(receiver.iter().flat_map(|r| {
                [
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", r.http_endpoint()),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_owned()),
                ]
            }))
            .output()
            .await?;
        if !out.status.success() {
            bail!(
                "mode {mode} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let line: Value = serde_json::from_slice(&out.stdout)
            .with_context(|| format!("mode {mode} printed no result"))?;
        println!("{}", row(mode, &line));
        if let Some(commit) = line["step_commit_p50_ms"].as_f64() {
            println!("  step commit p50 {commit:.2} ms (sequential runs, from the engine's side)");
        }
        if let Some(create) = creation(&line) {
            println!("{create}");
        }
        if !line["postgres_per_run"].is_null() {
            println!("{}", crate::pgstats::describe(&line["postgres_per_run"]));
        }
        eprintln!("{line}");
        results.push(line);
    }
    let medians = medians(&results);
    if !medians.is_empty() {
        println!("medians of the modes measured more than once:");
        for line in &medians {
            let mode = line["mode"].as_str().unwrap_or("?");
            println!("{}  (of {})", row(mode, line), line["median_of"]);
            if let Some(create) = creation(line) {
                println!("{create}");
            }
            eprintln!("{line}");
        }
    }
    if let (Some(bare), Some(memory)) = (
        results.iter().find(|r| r["mode"] == "bare"),
        results.iter().find(|r| r["mode"] == "memory"),
    ) {
        let ratio =
            |k: &str| memory[k].as_f64().unwrap_or(f64::NAN) / bare[k].as_f64().unwrap_or(f64::NAN);
        println!(
            "memory / bare: latency {:.2}×, CPU per run {:.2}×",
            ratio("p50_ms"),
            ratio("cpu_ms_per_run")
        );
    }
    if args.baseline.is_some() || args.write_baseline.is_some() {
        let ratios = cpu_ratios(&results)?;
        if let Some(path) = &args.write_baseline {
            let body = json!({ "profile": PROFILE, "in_flight": args.in_flight, "ratios": ratios });
            std::fs::write(path, format!("{}\n", serde_json::to_string_pretty(&body)?))
                .with_context(|| format!("writing {}", path.display()))?;
        }
        if let Some(path) = &args.baseline {
            check_baseline(&ratios, path, args.max_growth)?;
        }
    }
    Ok(())
}

/// What creating a throughput run cost, measured apart from the throughput phase (the runs are
/// created before its clock starts), as a line under the mode's row: `None` for the bare loop,
/// which creates none.
fn creation(line: &Value) -> Option<String> {
    let cpu = line["create_cpu_ms_per_run"].as_f64()?;
    let pg = line["create_postgres_cpu_ms_per_run"]
        .as_f64()
        .map_or_else(String::new, |pg| format!(", {pg:.2} ms PostgreSQL's"));
    Some(format!(
        "  creating a run (before the throughput clock): {cpu:.2} ms CPU{pg}"
    ))
}

/// One row of the table: `label`, then `line`'s figures.
fn row(label: &str, line: &Value) -> String {
    let f = |k: &str| line[k].as_f64().unwrap_or(f64::NAN);
    let pg = line["postgres_cpu_ms_per_run"]
        .as_f64()
        .map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
    format!(
        "{label:<9} {:>9.2} {:>9.2} {:>9.1} {:>11.2} {pg:>10} {:>9.1} {:>9.2}",
        f("p50_ms"),
        f("p95_ms"),
        f("runs_per_s"),
        f("cpu_ms_per_run"),
        f("peak_rss_mib"),
        f("ttft_ms")
    )
}

/// One mode's settings (the child process's arguments).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct OneArgs {
    /// bare, memory, sqlite or postgres.
    #[arg(long)]
    mode: String,
    /// The model server.
    #[arg(long)]
    base_url: String,
    #[arg(long)]
    runs: usize,
    #[arg(long)]
    warmup: usize,
    #[arg(long)]
    in_flight: usize,
    #[arg(long)]
    throughput_runs: usize,
    #[arg(long)]
    live_tail: bool,
    #[arg(long)]
    otel: bool,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default().as_secs_f64() * 1e3
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Measures one mode in this process and prints its JSON line on stdout.
pub(crate) async fn one(args: OneArgs) -> anyhow::Result<()> {
    let result = if args.mode == "bare" {
        bare(&args).await?
    } else {
        forge(&args).await?
    };
    println!("{result}");
    Ok(())
}

fn agent(model: &str) -> AgentDefinition {
    AgentDefinition {
        agent: AgentRef {
            name: "workload".into(),
            version: "1".into(),
        },
        instructions: "You look keys up with the lookup tool, then answer.".into(),
        model: format!("openai-compatible:{model}"),
        tools: vec!["lookup".into()],
        skills: vec![],
        output_schema: None,
        limits: RunLimits::default(),
        approvals: Default::default(),
        compaction: None,
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Lookup {
    #[allow(dead_code)]
    key: String,
}

/// A [`Watch`] that also feeds a live tail.
struct WithTail {
    watch: Arc<Watch>,
    live: forge_engine::LiveObserver,
}

impl RunObserver for WithTail {
    fn on_event(&self, e: &RunEvent) {
        self.watch.on_event(e);
    }

    fn on_emitted(&self, e: &forge_engine::Emitted<'_>) {
        self.watch.on_event(e.event);
        self.live.on_emitted(e);
    }

    fn on_commit(&self, c: &forge_engine::Commit<'_>) {
        self.live.on_commit(c);
    }
}

/// Counts finished runs; records when the first text of a run arrives.
struct Watch {
    ended: AtomicUsize,
    first_text: parking_lot::Mutex<Option<Instant>>,
}

impl RunObserver for Watch {
    fn on_event(&self, e: &RunEvent) {
        match &e.kind {
            k if k.is_terminal() => {
                self.ended.fetch_add(1, Ordering::Relaxed);
            }
            RunEventKind::PartAdded {
                part: Part::Text(_),
                ..
            } => {
                let mut first = self.first_text.lock();
                first.get_or_insert_with(Instant::now);
            }
            _ => {}
        }
    }
}

/// The step commit times the engine records (`StepCommitDuration`), in ms, until taken.
#[derive(Default)]
struct CommitTimes(parking_lot::Mutex<Vec<f64>>);

impl forge_core::telemetry::Meter for CommitTimes {
    fn record(
        &self,
        instrument: forge_core::telemetry::Instrument,
        value: f64,
        _: &[(&'static str, &str)],
    ) {
        if instrument == forge_core::telemetry::Instrument::StepCommitDuration {
            self.0.lock().push(value);
        }
    }
}

impl CommitTimes {
    /// The times recorded since the last take.
    fn take(&self) -> Vec<f64> {
        std::mem::take(&mut *self.0.lock())
    }
}

async fn forge(args: &OneArgs) -> anyhow::Result<Value> {
    let (store, guard) = crate::open(&args.mode).await?;
    let provider = HttpProvider::new(HttpSettings {
        name: "openai-compatible".into(),
        dialect: Dialect::OpenAiChat,
        base_url: args.base_url.clone(),
        api_key: None,
        headers: vec![],
        body: BodyOptions::default(),
        timeouts: Timeouts::default(),
    })?;
    let workload = agent("mock-steps-3");
    let streamed = {
        let mut a = agent("mock-steps-0-chunks-8-cdelayus-1000");
        a.agent.version = "ttft".into();
        a
    };
    let otel = if args.otel {
        Some(forge_otel::Otel::otlp("forge-bench", None)?)
    } else {
        None
    };
    let mut builder = Engine::builder();
    let commits = Arc::new(CommitTimes::default());
    if let Some(otel) = &otel {
        builder = builder.telemetry(otel.telemetry());
    } else {
        builder = builder.telemetry(forge_core::telemetry::Telemetry {
            meter: commits.clone(),
            ..Default::default()
        });
    }
    let engine = Arc::new(
        builder
            .dyn_store(store.clone())
            .model(Arc::new(provider))
            .tool(Arc::new(native_tool(
                "lookup",
                "Looks a key up.",
                |_ctx, _i: Lookup| async { Ok("value") },
            )))?
            .agent(workload.clone())
            .agent(streamed.clone())
            .build()?,
    );
    let scope = Scope::parse("bench", "bench", &[])?;
    // A run on a new thread, started and executed here (as an embedding application would):
    // created with its thread and leased, so its first model call follows one commit.
    let run_inline =
        async |def: &AgentDefinition,
               observer: &dyn RunObserver|
               -> anyhow::Result<(forge_core::id::RunId, forge_engine::RunOutcome)> {
            let new = NewRun::on_new_thread(
                &UuidV7Generator,
                NewThread::default(),
                def.agent.clone(),
                vec![Part::text("Look three keys up.")],
            );
            Ok(engine
                .submit_and_execute(&scope, new, &RunControl::default(), observer)
                .await?)
        };

    // Latency: sequential runs.
    let mut latencies = Vec::with_capacity(args.runs);
    for i in 0..args.warmup + args.runs {
        let started = Instant::now();
        let (run, outcome) = run_inline(&workload, &NoopObserver).await?;
        anyhow::ensure!(outcome.status.is_terminal(), "run {run} did not finish");
        if i >= args.warmup {
            latencies.push(started.elapsed());
        } else {
            commits.take();
        }
    }
    latencies.sort();
    // How long each step's commit took, from the engine's side, in the sequential runs.
    let commit_ms = commits.take();
    let step_commit_p50_ms = (!commit_ms.is_empty()).then(|| median(commit_ms));

    // Time to first token.
    let mut ttft = Vec::new();
    for _ in 0..20 {
        let watch = Watch {
            ended: AtomicUsize::new(0),
            first_text: Default::default(),
        };
        let started = Instant::now();
        run_inline(&streamed, &watch).await?;
        let first = watch.first_text.lock().context("no text arrived")?;
        ttft.push(first - started);
    }
    ttft.sort();

    // The runs above were executed directly, and their jobs are still ready: a worker would claim
    // them, find their runs ended and complete them. Settled here, so that the throughput phase
    // claims its own runs only and its figures per run count no one else's work.
    let system = SystemScope::new("forge-bench settles the jobs of the runs it executed directly");
    let mut settled = 0;
    while let Some(job) = store
        .claim(
            &system,
            "forge-bench",
            Duration::from_secs(60),
            &ClaimFilter::any(),
        )
        .await?
    {
        store.complete(&system, &job).await?;
        settled += 1;
    }
    anyhow::ensure!(
        settled == args.warmup + args.runs + ttft.len(),
        "{settled} jobs were left by the {} runs executed directly",
        args.warmup + args.runs + ttft.len()
    );

    // Throughput: the queue and workers, `in_flight` runs at once. The runs are created first,
    // one at a time, outside the measurement; what creating them cost is measured on its own
    // (`create_cpu_ms_per_run`), so that a run's whole cost, creation included, can be compared
    // with a peer's that creates its thread inside its run.
    let (create_cpu0, create_pg0) = (cpu_ms("self").unwrap_or(0.0), postgres_cpu_ms());
    for _ in 0..args.throughput_runs {
        let new = NewRun::on_new_thread(
            &UuidV7Generator,
            NewThread::default(),
            workload.agent.clone(),
            vec![Part::text("go")],
        );
        store.create_run(&scope, new).await?;
    }
    let created = args.throughput_runs.max(1) as f64;
    let create_cpu = (cpu_ms("self").unwrap_or(0.0) - create_cpu0) / created;
    let create_pg = (postgres_cpu_ms() - create_pg0) / created;
    let watch = Arc::new(Watch {
        ended: AtomicUsize::new(0),
        first_text: Default::default(),
    });
    let queue: Arc<dyn JobQueue> = store.clone();
    let worker = Worker::new(
        engine.clone(),
        queue,
        WorkerConfig {
            concurrency: args.in_flight,
            poll_interval: Duration::from_millis(1),
            claim_batch: crate::claim_batch()?.unwrap_or(usize::MAX),
            ..WorkerConfig::default()
        },
    )
    .with_observer(if args.live_tail {
        let tail = Arc::new(forge_live::LiveTail::new(forge_live::EventBus::default()));
        Arc::new(WithTail {
            watch: watch.clone(),
            live: forge_engine::LiveObserver::default().with(tail),
        }) as Arc<dyn RunObserver>
    } else {
        watch.clone()
    });
    let counters0 = match guard.database() {
        Some(db) => Some(crate::pgstats::snapshot(db.admin_url(), db.name()).await?),
        None => None,
    };
    let (cpu0, pg0, started) = (
        cpu_ms("self").unwrap_or(0.0),
        postgres_cpu_ms(),
        Instant::now(),
    );
    let lane0 = guard.lane_stats();
    let groups0 = guard.step_groups();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let target = args.throughput_runs;
    let counting = watch.clone();
    let watcher = tokio::spawn(async move {
        while counting.ended.load(Ordering::Relaxed) < target {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        stop.cancel();
    });
    worker.run(shutdown).await;
    watcher.await?;
    // What the runs recorded is exported inside the measurement (blocking, so off the runtime).
    if let Some(otel) = otel {
        tokio::task::spawn_blocking(move || otel.shutdown()).await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = (cpu_ms("self").unwrap_or(0.0) - cpu0) / target as f64;
    let pg = (postgres_cpu_ms() - pg0) / target as f64;
    // What PostgreSQL counted meanwhile (its backends publish once idle).
    let postgres_per_run = match (guard.database(), counters0) {
        (Some(db), Some(before)) => {
            let after = crate::pgstats::snapshot(db.admin_url(), db.name()).await?;
            Some(crate::pgstats::per_run(&before, &after, target))
        }
        _ => None,
    };
    // SQLite: how many of the lane's operations each of its transactions committed, on average.
    let ops_per_group = match (lane0, guard.lane_stats()) {
        (Some(before), Some(after)) if after.groups > before.groups => Some(
            (after.operations - before.operations) as f64 / (after.groups - before.groups) as f64,
        ),
        _ => None,
    };
    // PostgreSQL: how many steps each group commit wrote, and what share of the steps went so.
    let steps_per_group = match (groups0, guard.step_groups()) {
        (Some(before), Some(after)) if after.groups > before.groups => Some(json!({
            "steps_per_group": (after.steps - before.steps) as f64 / (after.groups - before.groups) as f64,
            "grouped_steps_per_run": (after.steps - before.steps) as f64 / target as f64,
        })),
        _ => None,
    };
    Ok(json!({
        "bench": "workload", "mode": args.mode, "runs": args.runs,
        "p50_ms": percentile(&latencies, 0.5), "p95_ms": percentile(&latencies, 0.95),
        "step_commit_p50_ms": step_commit_p50_ms,
        "in_flight": args.in_flight, "throughput_runs": target,
        "runs_per_s": target as f64 / elapsed, "cpu_ms_per_run": cpu,
        "postgres_cpu_ms_per_run": (args.mode == "postgres").then_some(pg),
        "create_cpu_ms_per_run": create_cpu,
        "create_postgres_cpu_ms_per_run": (args.mode == "postgres").then_some(create_pg),
        "peak_rss_mib": peak_rss_mib(), "ttft_ms": percentile(&ttft, 0.5),
        "live_tail": args.live_tail, "otel": args.otel,
        "sqlite_ops_per_group": ops_per_group,
        "postgres_step_groups": steps_per_group,
        "postgres_per_run": postgres_per_run,
    }))
}

/// The floor: the same four model calls per run with no framework — reqwest, the SSE read to the
/// end with each `data:` line parsed as JSON, and the conversation grown by hand.
async fn bare(args: &OneArgs) -> anyhow::Result<Value> {
    // The same TLS provider Forge installs (ring), though the mock is plain HTTP.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", args.base_url.trim_end_matches('/'));
    let one_run = async |model: &str| -> anyhow::Result<Option<Duration>> {
        let started = Instant::now();
        let mut first_text = None;
        let mut messages = vec![
            json!({"role": "system", "content": "You look keys up with the lookup tool, then answer."}),
            json!({"role": "user", "content": "Look three keys up."}),
        ];
        loop {
            let body = json!({
                "model": model, "messages": messages, "stream": true,
                "stream_options": {"include_usage": true},
                "tools": [{"type": "function", "function": {"name": "lookup", "description": "Looks a key up.",
                    "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}}],
            });
            let response = client.post(&url).json(&body).send().await?;
            let mut stream = response.bytes_stream();
            let mut buffer = Vec::new();
            let (mut call_id, mut arguments, mut text) = (None, String::new(), String::new());
            while let Some(chunk) = stream.next().await {
                buffer.extend_from_slice(&chunk?);
                while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
                    let event: Vec<u8> = buffer.drain(..end + 2).collect();
                    let Some(data) = event.strip_prefix(b"data: ") else {
                        continue;
                    };
                    let data = &data[..data.len() - 2];
                    if data == b"[DONE]" {
                        continue;
                    }
                    let v: Value = serde_json::from_slice(data)?;
                    let delta = &v["choices"][0]["delta"];
                    if let Some(t) = delta["content"].as_str().filter(|t| !t.is_empty()) {
                        first_text.get_or_insert_with(|| started.elapsed());
                        text.push_str(t);
                    }
                    if let Some(call) = delta["tool_calls"].get(0) {
                        if let Some(id) = call["id"].as_str() {
                            call_id = Some(id.to_owned());
                        }
                        arguments.push_str(call["function"]["arguments"].as_str().unwrap_or(""));
                    }
                }
            }
            match call_id {
                Some(id) => {
                    messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
                        {"id": id, "type": "function", "function": {"name": "lookup", "arguments": arguments}}]}));
                    messages
                        .push(json!({"role": "tool", "tool_call_id": id, "content": "\"value\""}));
                }
                None => return Ok(first_text),
            }
        }
    };
    let mut latencies = Vec::with_capacity(args.runs);
    for i in 0..args.warmup + args.runs {
        let started = Instant::now();
        one_run("mock-steps-3").await?;
        if i >= args.warmup {
            latencies.push(started.elapsed());
        }
    }
    latencies.sort();
    let mut ttft = Vec::new();
    for _ in 0..20 {
        ttft.push(
            one_run("mock-steps-0-chunks-8-cdelayus-1000")
                .await?
                .context("no text arrived")?,
        );
    }
    ttft.sort();
    let (cpu0, started) = (cpu_ms("self").unwrap_or(0.0), Instant::now());
    let next = Arc::new(AtomicUsize::new(0));
    let target = args.throughput_runs;
    let lanes = (0..args.in_flight).map(|_| {
        let next = next.clone();
        let one_run = &one_run;
        async move {
            while next.fetch_add(1, Ordering::Relaxed) < target {
                one_run("mock-steps-3").await?;
            }
            anyhow::Ok(())
        }
    });
    for r in futures_util::future::join_all(lanes).await {
        r?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = (cpu_ms("self").unwrap_or(0.0) - cpu0) / target as f64;
    Ok(json!({
        "bench": "workload", "mode": "bare", "runs": args.runs,
        "p50_ms": percentile(&latencies, 0.5), "p95_ms": percentile(&latencies, 0.95),
        "in_flight": args.in_flight, "throughput_runs": target,
        "runs_per_s": target as f64 / elapsed, "cpu_ms_per_run": cpu,
        "postgres_cpu_ms_per_run": null,
        "peak_rss_mib": peak_rss_mib(), "ttft_ms": percentile(&ttft, 0.5),
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn result(mode: &str, cpu: f64, pg: Option<f64>) -> Value {
        json!({ "mode": mode, "cpu_ms_per_run": cpu, "postgres_cpu_ms_per_run": pg })
    }

    /// A baseline file, removed when dropped.
    struct Baseline(std::path::PathBuf);

    impl Drop for Baseline {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn baseline_file(profile: &str, sqlite: f64, postgres: f64) -> Baseline {
        let path = std::env::temp_dir().join(format!(
            "forge-bench-baseline-{}-{profile}-{sqlite}.json",
            std::process::id()
        ));
        let body =
            json!({ "profile": profile, "ratios": { "sqlite": sqlite, "postgres": postgres } });
        std::fs::write(&path, body.to_string()).unwrap();
        Baseline(path)
    }

    #[test]
    fn ratios_count_the_database_server_and_divide_by_the_bare_loop() {
        let ratios = cpu_ratios(&[
            result("bare", 0.5, None),
            result("sqlite", 4.0, None),
            result("postgres", 2.0, Some(3.0)),
        ])
        .unwrap();
        assert_eq!(ratios["sqlite"], json!(8.0));
        assert_eq!(ratios["postgres"], json!(10.0));
        assert!(!ratios.contains_key("bare"));
        assert!(cpu_ratios(&[result("sqlite", 4.0, None)]).is_err());
    }

    #[test]
    fn each_measurement_is_divided_by_the_bare_loop_around_it_and_a_mode_counts_with_its_median() {
        let ratios = cpu_ratios(&[
            result("bare", 0.5, None),
            result("memory", 2.0, None),
            result("sqlite", 3.0, None),
            result("bare", 2.0, None),
            result("memory", 4.0, None),
            result("sqlite", 6.0, None),
            result("bare", 1.0, None),
            result("memory", 1.0, None),
        ])
        .unwrap();
        // sqlite: 3.0 / mean(0.5, 2.0) = 2.4 and 6.0 / mean(2.0, 1.0) = 4.0; their mean.
        assert_eq!(ratios["sqlite"], json!(3.2));
        // memory: 2.0 / 1.25 = 1.6, 4.0 / 1.5 = 2.67 and, after the last bare, 1.0 / 1.0.
        assert_eq!(ratios["memory"], json!(1.6), "three samples: their median");
    }

    #[test]
    fn a_machine_slowing_down_during_the_check_moves_the_divisor_with_it() {
        let ratios = cpu_ratios(&[
            result("bare", 1.0, None),
            result("postgres", 3.0, Some(1.0)),
            result("bare", 1.0, None),
            result("postgres", 6.0, Some(2.0)),
            result("bare", 3.0, None),
        ])
        .unwrap();
        assert_eq!(
            ratios["postgres"],
            json!(4.0),
            "4 / 1 and 8 / 2: {ratios:?}"
        );
    }

    #[test]
    fn a_mode_measured_more_than_once_gets_the_median_of_each_figure() {
        let run = |mode: &str, runs_per_s: f64, cpu: f64, pg: Option<f64>| {
            json!({ "mode": mode, "runs_per_s": runs_per_s, "cpu_ms_per_run": cpu,
                "postgres_cpu_ms_per_run": pg, "p50_ms": cpu * 2.0 })
        };
        let lines = medians(&[
            run("postgres", 356.0, 1.1, Some(3.1)),
            run("sqlite", 1300.0, 1.0, None),
            run("postgres", 474.0, 0.8, Some(2.2)),
            run("postgres", 376.0, 1.0, Some(3.0)),
        ]);
        assert_eq!(lines.len(), 1, "sqlite was measured once: {lines:?}");
        let pg = &lines[0];
        assert_eq!(pg["mode"], "postgres");
        assert_eq!(pg["median_of"], 3);
        assert_eq!(pg["runs_per_s"], json!(376.0));
        assert_eq!(pg["cpu_ms_per_run"], json!(1.0));
        assert_eq!(pg["postgres_cpu_ms_per_run"], json!(3.0));
        assert_eq!(pg["p50_ms"], json!(2.0));
        assert!(pg["ttft_ms"].is_null(), "no run had it: {pg}");
    }

    #[test]
    fn what_creating_a_run_cost_is_shown_under_its_mode_and_in_its_median() {
        let run = |cpu: f64, pg: Option<f64>| {
            json!({ "mode": "postgres", "cpu_ms_per_run": 1.0,
                "create_cpu_ms_per_run": cpu, "create_postgres_cpu_ms_per_run": pg })
        };
        let lines = medians(&[
            run(0.1, Some(0.4)),
            run(0.3, Some(0.2)),
            run(0.2, Some(0.3)),
        ]);
        assert_eq!(lines[0]["create_cpu_ms_per_run"], json!(0.2));
        assert_eq!(lines[0]["create_postgres_cpu_ms_per_run"], json!(0.3));
        let shown = creation(&lines[0]).unwrap();
        assert!(
            shown.contains("0.20 ms CPU, 0.30 ms PostgreSQL's"),
            "{shown}"
        );
        let sqlite = json!({ "mode": "sqlite", "create_cpu_ms_per_run": 0.05,
            "create_postgres_cpu_ms_per_run": null });
        let shown = creation(&sqlite).unwrap();
        assert!(shown.ends_with("0.05 ms CPU"), "{shown}");
        assert!(creation(&json!({ "mode": "bare" })).is_none());
    }

    #[test]
    fn growth_within_the_margin_passes_and_past_it_fails() {
        let baseline = baseline_file(PROFILE, 8.0, 10.0);
        let path = &baseline.0;
        let ratios = cpu_ratios(&[
            result("bare", 1.0, None),
            result("sqlite", 11.0, None),
            result("postgres", 4.0, Some(4.0)),
        ])
        .unwrap();
        check_baseline(&ratios, path, 1.5).unwrap();
        let worse = cpu_ratios(&[
            result("bare", 1.0, None),
            result("sqlite", 12.5, None),
            result("postgres", 4.0, Some(4.0)),
        ])
        .unwrap();
        let err = check_baseline(&worse, path, 1.5).unwrap_err().to_string();
        assert!(err.contains("sqlite 1.56×"), "{err}");
        assert!(!err.contains("postgres"), "{err}");
    }

    #[test]
    fn a_baseline_of_another_profile_is_refused() {
        let other = if PROFILE == "debug" {
            "release"
        } else {
            "debug"
        };
        let baseline = baseline_file(other, 8.0, 10.0);
        let ratios = cpu_ratios(&[result("bare", 1.0, None), result("sqlite", 8.0, None)]).unwrap();
        let err = check_baseline(&ratios, &baseline.0, 1.5)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!(
                "measured in a {other} build and this is a {PROFILE} build"
            )),
            "{err}"
        );
    }
}
