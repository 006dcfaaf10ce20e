//! The `forge` command: the composition root that picks concrete adapters, and the operator CLI.

/// mimalloc rather than the platform's malloc: the SQLite store's writer lane allocates the rows
/// it reads on its own thread, and the runtime's threads free them; glibc's malloc makes that
/// cross-thread traffic a measurable part of a durable run's CPU (`forge-bench workload`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod agent_file;
mod audit;
mod builtin;
mod compose;
mod dlq;
mod effects;
mod embedder;
mod eval;
mod exit;
mod files;
mod gate;
mod help;
mod ids;
mod interactions;
mod leases;
mod live;
mod mcp;
mod metering;
mod panics;
mod print;
mod rag;
mod records;
mod report;
mod runs;
mod serve;
mod store;
mod telemetry;
mod threads;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use forge_core::part::Part;
use forge_core::ports::store::{NewRun, NewThread};
use tokio_util::sync::CancellationToken;

/// The version `forge --version` prints: the package's and the commit it was built from.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("FORGE_COMMIT"), ")");

/// Forge: run AI agents durably, inside each tenant's walls.
#[derive(Debug, Parser)]
#[command(
    name = "forge",
    version = VERSION,
    about = "Forge: run AI agents durably, inside each tenant's walls."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the GraphQL API and the web client, with a worker.
    Serve(Box<serve::ServeArgs>),
    /// Print a development bearer token (HS256, the server's secret).
    Token(serve::TokenArgs),
    /// Run one turn of an agent and stream its events.
    Run(RunArgs),
    /// Provision or update the store's schema.
    ///
    /// Safe to run from many processes at once.
    Migrate(MigrateArgs),
    /// Execute queued runs until SIGTERM or Ctrl-C.
    ///
    /// On the signal, the step in progress is finished first.
    Worker(Box<WorkerArgs>),
    /// Queue a run (and its job) for workers to execute.
    Submit(dlq::SubmitArgs),
    /// Inspect, replay or discard dead-lettered jobs.
    #[command(subcommand)]
    Dlq(dlq::DlqCommand),
    /// List, approve, reject or answer what waiting runs need.
    #[command(subcommand)]
    Interactions(interactions::InteractionsCommand),
    /// Model-call usage: a run's calls, rollups, reconciliation.
    Usage(metering::UsageArgs),
    /// List or search the tools a scope may discover.
    #[command(subcommand)]
    Tools(compose::ToolsCommand),
    /// Read the audit trail.
    ///
    /// Decisions, external writes, dead letters, configuration.
    #[command(subcommand)]
    Audit(audit::AuditCommand),
    /// List, show, follow, cancel and erase runs.
    #[command(subcommand)]
    Runs(runs::RunsCommand),
    /// Show a thread, or compact its history.
    #[command(subcommand)]
    Threads(threads::ThreadsCommand),
    /// List, pin and diff the tools of MCP servers.
    #[command(subcommand)]
    Mcp(mcp::McpCommand),
    /// Ingest, list, show, delete and search sources.
    #[command(subcommand)]
    Rag(rag::RagCommand),
    /// Upload, list, get, delete and reference files.
    #[command(subcommand)]
    Files(files::FilesCommand),
    /// Score datasets; list, show and compare scoring runs.
    #[command(subcommand)]
    Eval(eval::EvalCommand),
    /// Gate a release on its scores (exits 1 when it fails).
    ///
    /// Scores are held against the thresholds and the last recorded release; the outcome is
    /// appended to the trend.
    Gate(Box<gate::GateArgs>),
    /// Print the completion script for a shell.
    ///
    /// `source <(forge completions bash)`, or write it where the shell loads completions from
    /// (`forge completions fish > ~/.config/fish/completions/forge.fish`).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, clap::Args)]
struct WorkerArgs {
    #[command(flatten)]
    store: store::StoreArgs,
    /// Agent files whose runs this worker executes (repeatable).
    #[arg(long = "agent", required = true)]
    agents: Vec<PathBuf>,
    #[command(flatten)]
    providers: agent_file::ProviderArgs,
    #[command(flatten)]
    metering: metering::MeteringArgs,
    #[command(flatten)]
    access: compose::AccessArgs,
    #[command(flatten)]
    live: live::LiveArgs,
    #[command(flatten)]
    leases: leases::LeaseArgs,
    #[command(flatten)]
    files: files::FilesArgs,
    #[command(flatten)]
    telemetry: telemetry::TelemetryArgs,
    /// Runs executed at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Life of a job claim and run lease between heartbeats, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    lease_ttl_ms: u64,
    /// Pause between polls of an empty queue (by one idle claim loop at a time), in milliseconds.
    #[arg(long, default_value_t = 200)]
    poll_ms: u64,
    /// Delay before the first retry of a failed job, in milliseconds (doubles each attempt).
    #[arg(long, default_value_t = 1000)]
    backoff_ms: u64,
    /// Enables the example `record_effect` tool, writing to this PostgreSQL database.
    #[arg(long, env = "FORGE_EFFECTS_DB")]
    effects_db: Option<String>,
}

#[derive(Debug, clap::Args)]
struct MigrateArgs {
    #[command(flatten)]
    store: store::StoreArgs,
    /// PostgreSQL (RLS mode): a superuser's URL of the same database. Provisions, as that
    /// administrator, the role `forge_system` and the functions through which alone Forge works
    /// across tenants, and the role `forge_owner`, which owns the schema and applies the
    /// migrations; the store URL's role is granted rows, sequences and functions only, so it can
    /// change no table, policy or function. Needed before the first start and after each upgrade.
    #[arg(long, env = "FORGE_ADMIN_DATABASE_URL")]
    admin_url: Option<String>,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The agent file (TOML).
    #[arg(long)]
    agent: PathBuf,
    #[command(flatten)]
    store: store::StoreArgs,
    #[command(flatten)]
    providers: agent_file::ProviderArgs,
    #[command(flatten)]
    metering: metering::MeteringArgs,
    #[command(flatten)]
    access: compose::AccessArgs,
    #[command(flatten)]
    scope: compose::ScopeArgs,
    /// Print events as JSON lines instead of for a person.
    #[arg(long)]
    json: bool,
    /// The user's message.
    message: String,
}

fn main() -> ExitCode {
    panics::install();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", report::message(&e));
            exit::status_of(&e)
        }
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve(args) => serve::serve(*args).await,
        Command::Token(args) => serve::token(args),
        Command::Run(args) => run(args).await,
        Command::Migrate(args) => migrate(args).await,
        Command::Worker(args) => worker(*args).await,
        Command::Submit(args) => dlq::submit(args).await,
        Command::Dlq(command) => dlq::dlq(command).await,
        Command::Interactions(command) => interactions::interactions(command).await,
        Command::Usage(args) => metering::usage(args).await,
        Command::Audit(command) => audit::audit(command).await,
        Command::Runs(command) => runs::runs(command).await,
        Command::Threads(command) => threads::threads(command).await,
        Command::Mcp(command) => mcp::run(command).await,
        Command::Rag(command) => rag::run(command).await,
        Command::Files(command) => files::run(command).await,
        Command::Eval(command) => eval::run(command).await,
        Command::Gate(args) => gate::gate(*args).await,
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            // Generated into memory, then printed: a closed stdout (`| head`) then ends the
            // command as every other (status 141), where the generator's own writes panic.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "forge", &mut script);
            print!("{}", String::from_utf8_lossy(&script));
            Ok(ExitCode::SUCCESS)
        }
        Command::Tools(command) => compose::tools(command).await,
    }
}

async fn worker(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let loaded = args
        .agents
        .iter()
        .map(|a| agent_file::load(a))
        .collect::<anyhow::Result<Vec<_>>>()?;
    agent_file::note_scripted(&loaded);
    let telemetry = args.telemetry.start("forge-worker")?;
    let opened = store::open(&args.store).await?;
    let sweep_leases = args.leases.sweep_leases(opened.postgres.clone()).await?;
    let store = opened.store;
    let ttl = std::time::Duration::from_millis(args.lease_ttl_ms);
    let id = forge_store_sqlite::holder::this_process("worker");
    let mcp = mcp::start(args.access.mcp.as_deref(), Some(store.clone())).await?;
    let settings = compose::EngineSettings {
        agents: &loaded,
        providers: &args.providers,
        metering: &args.metering,
        access: &args.access,
        mcp: mcp.as_ref(),
        sources: Some(opened.sources.clone()),
    };
    // The files runs are given are read from where `forge serve` keeps them.
    let files = args
        .files
        .files(opened.files.clone(), store.clone(), None)?
        .with_telemetry(telemetry.telemetry())
        .with_authorizer(args.access.authorizer()?);
    let mut builder = compose::builder(store.clone(), &settings)?
        .settings(compose::process_settings(&args.access, &args.files, None)?)
        .worker_id(id.clone())
        .lease_ttl(ttl)
        .telemetry(telemetry.telemetry())
        .files(std::sync::Arc::new(files));
    if let Some(url) = &args.effects_db {
        builder = builder.tool(effects::record_effect(url).await?)?;
    }
    let engine = std::sync::Arc::new(builder.build().context("failed to build the engine")?);
    let engine_for_audit = engine.clone();
    let config = forge_engine::WorkerConfig {
        id,
        claim_ttl: ttl,
        poll_interval: std::time::Duration::from_millis(args.poll_ms),
        concurrency: args.concurrency,
        backoff_base: std::time::Duration::from_millis(args.backoff_ms),
        ..forge_engine::WorkerConfig::default()
    };
    let shutdown = CancellationToken::new();
    // The publisher ends after the worker has drained: it is stopped separately.
    let live_stop = CancellationToken::new();
    let live = args.live.publisher(&live_stop).await?;
    let mut worker = forge_engine::Worker::new(engine, store, config);
    if let Some(leases) = sweep_leases {
        worker = worker.with_sweep_leases(leases);
    }
    if let Some((publisher, _)) = &live {
        worker = worker.with_observer(std::sync::Arc::new(forge_engine::LiveObserver::new(vec![
            publisher.clone(),
        ])));
    }
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        on_signal.cancel();
    });
    let metrics_at = args.telemetry.metrics_at(false)?;
    telemetry
        .serve_metrics(&metrics_at, "forge worker", live_stop.clone())
        .await?;
    engine_for_audit
        .audit_configuration(&format!("forge worker (pid {})", std::process::id()))
        .await
        .context("failed to record the configuration in the audit trail")?;
    eprintln!(
        "worker {} started: {} agent(s), concurrency {}",
        std::process::id(),
        loaded.len(),
        args.concurrency
    );
    args.access
        .spawn_retention(opened.sources.clone(), shutdown.clone())?;
    // On the runtime's threads, as `forge serve` runs it: here on the main thread, each of the
    // claim loops' round trips would be a hand-off from the thread that read its socket.
    let report = tokio::spawn(async move { worker.run(shutdown).await })
        .await
        .context("the worker's task failed")?;
    live_stop.cancel();
    if let Some((_, task)) = live {
        let _ = task.await;
    }
    telemetry.shutdown().await;
    eprintln!(
        "worker stopped: {} finished, {} released, {} failed",
        report.finished, report.released, report.failed
    );
    Ok(ExitCode::SUCCESS)
}

/// Resolves on SIGTERM or Ctrl-C.
pub(crate) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn migrate(args: MigrateArgs) -> anyhow::Result<ExitCode> {
    // RLS mode: the administrator applies the migrations (as `forge_owner`); the application
    // role, opening the store below, only checks them.
    let mut applied = 0;
    if let Some(admin) = &args.admin_url {
        let (role, migrated) = store::provision_system(&args.store, admin).await?;
        println!("provisioned forge_system and forge_owner for role {role}");
        applied = migrated;
    }
    let opened = store::open(&args.store).await?;
    println!(
        "applied {} migration(s); schema at version {}",
        applied + opened.applied,
        opened
            .versions
            .last()
            .map_or_else(|| "none".to_owned(), i64::to_string)
    );
    Ok(ExitCode::SUCCESS)
}

async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let loaded = agent_file::load(&args.agent)?;
    let scope = args.scope.scope()?;
    let opened = store::open(&args.store).await?;
    let store = opened.store.clone();
    let mcp = mcp::start(args.access.mcp.as_deref(), Some(store.clone())).await?;
    let settings = compose::EngineSettings {
        agents: std::slice::from_ref(&loaded),
        providers: &args.providers,
        metering: &args.metering,
        access: &args.access,
        mcp: mcp.as_ref(),
        sources: Some(opened.sources.clone()),
    };
    // Named so that a later process on this host can tell it died (forge_store_sqlite::holder).
    let holder = forge_store_sqlite::holder::this_process("forge-run");
    let worker = forge_engine::WorkerConfig {
        id: holder,
        concurrency: 1,
        poll_interval: std::time::Duration::from_millis(20),
        ..forge_engine::WorkerConfig::default()
    };
    // The CLI's engine (built-in tools, metering, policies, MCP) in the facade's deployment; its
    // worker starts once the run is queued, for that run only.
    let mut forge = forge::Forge::builder()
        .stores(opened)
        .base(compose::builder(store, &settings)?)
        .worker(worker.clone())
        .without_worker()
        .streams(forge_live::StreamSettings {
            poll: std::time::Duration::from_millis(250),
            ..Default::default()
        })
        .build()
        .await
        .context("failed to build the engine")?;
    agent_file::note_scripted(std::slice::from_ref(&loaded));

    // The run and its thread are created together (no empty thread is left if it is refused).
    let run = forge
        .submit(
            &scope,
            NewRun::on_new_thread(
                &forge_core::id::UuidV7Generator,
                NewThread::default(),
                loaded.definition.agent.clone(),
                vec![Part::text(args.message)],
            ),
        )
        .await?;

    // Executed by the deployment's worker through the queue, like any other run: if this process
    // is killed, the next `forge run` (or a `forge worker`) on the same store resumes it. Printed
    // through the same live stream a GraphQL subscriber reads.
    forge.start_worker(forge_engine::WorkerConfig {
        only_run: Some(run.id()),
        ..worker
    })?;
    let printer = print::Printer::new(args.json)
        .redactor(args.providers.redactor())
        .reach(print::Reach::of(
            &args.store.url,
            &args.store.pg_mode,
            &args.scope.tenant,
        ));
    let (cancel_engine, cancel_scope, run_id) = (forge.engine().clone(), scope.clone(), run.id());
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            // Durable: the step in flight stops (here at once, in another process within its
            // cancel poll); a run waiting for a person is woken to be cancelled.
            let _ = cancel_engine.request_cancel(&cancel_scope, run_id).await;
        }
    });
    let mut items = run.subscribe();
    while let Some(item) = futures_util::StreamExt::next(&mut items).await {
        printer.item(&item.context("failed to read the run's events")?);
    }
    let outcome = run.wait().await?;
    forge.shutdown().await;
    printer.finish();
    Ok(match outcome {
        forge::Outcome::Completed { .. } => ExitCode::SUCCESS,
        forge::Outcome::Cancelled { .. } => ExitCode::from(exit::INTERRUPTED),
        _ => ExitCode::from(exit::FAILED),
    })
}
