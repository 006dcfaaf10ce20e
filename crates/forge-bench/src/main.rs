//! `forge-bench`: measurements that are not tests.
//!
//! `forge-bench commit-step --store <memory|sqlite|postgres> [--writers 1,32] [--commits N]`
//! measures `commit_step` latency (p50, p99) and commits per second with W concurrent writers, each
//! committing N steps of 8 events and one message to its own run (the shape of one agent step).
//! `--store postgres` creates a fresh database through `FORGE_TEST_DATABASE_URL` (or the local
//! server) and drops it afterwards. Prints a table and one JSON line per configuration.
//!
//! `forge-bench workload` runs the shared benchmark workload against an OpenAI-compatible server
//! (the mock from `forge-testkit`, started as its own process, by default) in every mode; see
//! [`workload`].

use std::sync::Arc;
use std::time::{Duration, Instant};

/// The allocator `forge` ships with (see forge-cli), so that the figures are the shipped binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod files;
mod freeze;
mod pgstats;
mod rag;
mod runs;
mod subscribers;
mod workload;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use forge_core::agent::AgentRef;
use forge_core::event::{RunEvent, RunEventKind};
use forge_core::id::{MessageId, UuidV7Generator};
use forge_core::message::{Message, Role};
use forge_core::part::{Part, PartUpdate};
use forge_core::ports::store::{NewRun, NewThread, StepCommit, Store};
use forge_core::run::{Checkpoint, RunStatus};
use forge_core::scope::Scope;
use forge_core::time::{Clock, SystemClock};

#[derive(Debug, Parser)]
#[command(name = "forge-bench", about = "Forge benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Durable runs/s and CPU per run of the 3-step workload, and claim latency.
    Runs {
        /// sqlite, postgres or memory.
        #[arg(long)]
        store: String,
        /// Runs per configuration.
        #[arg(long, default_value_t = 300)]
        runs: usize,
        /// Claim loops (runs in flight), comma separated.
        #[arg(long, default_value = "1,50", value_delimiter = ',')]
        in_flight: Vec<usize>,
    },
    /// A worker frozen (SIGSTOP) while it holds runs, taken over, then resumed: what it still
    /// did after losing them (must be nothing), and a takeover behind a frozen row lock.
    Freeze(freeze::FreezeArgs),
    /// A worker of `freeze` (spawned by it).
    #[command(hide = true)]
    FreezeWorker(freeze::WorkerArgs),
    /// Retrieval: ingestion chunks/s and query latency at 10k and 100k chunks.
    Rag(rag::RagArgs),
    /// Files: upload throughput through inspection and storage, and clamd's scan latency.
    Files(files::FilesArgs),
    /// The shared workload against an OpenAI-compatible server: Forge in memory, SQLite and
    /// PostgreSQL, and a bare HTTP loop as the floor.
    Workload(workload::WorkloadArgs),
    /// One mode of `workload`, measured in this process (spawned by `workload`).
    #[command(hide = true)]
    WorkloadOne(workload::OneArgs),
    /// The workload's mock model server: prints its base URL, serves until killed.
    Mock {
        /// Address to listen on.
        #[arg(default_value = "127.0.0.1:8089")]
        addr: String,
    },
    /// N GraphQL subscribers on one server while runs execute: delivery latency and server RSS.
    Subscribers(subscribers::SubscribersArgs),
    /// The server of `subscribers` (spawned by it).
    #[command(hide = true)]
    SubscribersServer(subscribers::ServerArgs),
    /// The worker of `subscribers --cross-process` (spawned by it).
    #[command(hide = true)]
    SubscribersWorker(subscribers::ServerArgs),
    /// `commit_step` latency and throughput.
    CommitStep {
        /// memory, sqlite or postgres.
        #[arg(long)]
        store: String,
        /// Concurrent writers, comma separated.
        #[arg(long, default_value = "1,32", value_delimiter = ',')]
        writers: Vec<usize>,
        /// Commits per writer.
        #[arg(long, default_value_t = 500)]
        commits: usize,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("failed to start the runtime")?;
    // The command runs in a task of its own, on the runtime's workers, as an application's
    // handlers do. A future that `block_on` drives sits on the main thread instead, outside the
    // workers that poll the sockets: each of its wake-ups is a hand-off from a worker to it (a
    // futex wake per round trip), which no server built on Forge pays.
    rt.block_on(async {
        tokio::spawn(command(cli.command))
            .await
            .context("the command's task panicked")?
    })
}

/// Runs `command`.
async fn command(command: Command) -> anyhow::Result<()> {
    {
        match command {
            Command::Workload(args) => workload::workload(args).await,
            Command::Rag(args) => rag::run(args).await,
            Command::Freeze(args) => freeze::run(args).await,
            Command::FreezeWorker(args) => freeze::worker(args).await,
            Command::Files(args) => files::run(args).await,
            Command::Subscribers(args) => subscribers::run(args).await,
            Command::SubscribersServer(args) => subscribers::server(args).await,
            Command::SubscribersWorker(args) => subscribers::worker(args).await,
            Command::WorkloadOne(args) => workload::one(args).await,
            Command::Mock { addr } => workload::mock(&addr).await,
            Command::CommitStep {
                store,
                writers,
                commits,
            } => commit_step(&store, &writers, commits).await,
            Command::Runs {
                store,
                runs,
                in_flight,
            } => {
                println!(
                    "{:<9} {:>9} {:>6} {:>9} {:>12} {:>9}",
                    "store", "in flight", "runs", "runs/s", "cpu ms/run", "pg ms/run"
                );
                for c in in_flight {
                    let (opened, _guard) = open(&store).await?;
                    runs::durable(&store, opened, runs, c).await?;
                }
                let (opened, _guard) = open(&store).await?;
                runs::claim_latency(&store, opened, runs).await
            }
        }
    }
}

/// Holds whatever must live as long as the store (a temporary directory or database).
pub(crate) enum Guard {
    None,
    /// A SQLite store's directory, and the store (for its lane's counts).
    Sqlite(std::path::PathBuf, Arc<forge_store_sqlite::SqliteStore>),
    /// A PostgreSQL database made for the measurement, and the store (for its step groups).
    Db(
        forge_store_postgres::testing::TestDatabase,
        Arc<forge_store_postgres::PostgresStore>,
    ),
}

impl Guard {
    /// The SQLite store's writer-lane counts, for a SQLite store.
    pub(crate) fn lane_stats(&self) -> Option<forge_store_sqlite::LaneStats> {
        match self {
            Guard::Sqlite(_, store) => Some(store.lane_stats()),
            _ => None,
        }
    }

    /// The PostgreSQL database made for the measurement, for a PostgreSQL store.
    pub(crate) fn database(&self) -> Option<&forge_store_postgres::testing::TestDatabase> {
        match self {
            Guard::Db(db, _) => Some(db),
            _ => None,
        }
    }

    /// The PostgreSQL store's step groups so far, for a PostgreSQL store.
    pub(crate) fn step_groups(&self) -> Option<forge_store_postgres::StepGroups> {
        match self {
            Guard::Db(_, store) => Some(store.step_groups()),
            _ => None,
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Guard::Sqlite(d, _) = self {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// A fresh store of `kind`, as the run store and as the retrieval-source store, and what keeps
/// its file or database alive.
pub(crate) async fn open_both(
    kind: &str,
) -> anyhow::Result<(Arc<dyn Store>, Arc<dyn forge_rag::SourceStore>, Guard)> {
    Ok(match kind {
        "memory" => {
            let store = Arc::new(forge_store_memory::MemoryStore::default());
            (store.clone(), store, Guard::None)
        }
        "sqlite" => {
            let dir = std::env::temp_dir().join(format!("forge-bench-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir)?;
            let url = format!("sqlite://{}", dir.join("bench.db").display());
            let store = Arc::new(forge_store_sqlite::SqliteStore::open(&url).await?);
            (store.clone(), store.clone(), Guard::Sqlite(dir, store))
        }
        "postgres" => {
            let db = forge_store_postgres::testing::TestDatabase::create(
                forge_store_postgres::testing::Flavor::Plain,
            )
            .await
            .map_err(anyhow::Error::msg)?;
            // Before Forge connects, so that its sessions count their function calls.
            pgstats::track_functions(db.admin_url(), db.name()).await?;
            let store = forge_store_postgres::PostgresStore::connect(
                db.url(),
                forge_store_postgres::Mode::Rls,
            )
            .await?;
            let store = Arc::new(match step_writers()? {
                Some(n) => store.with_step_writers(n),
                None => store,
            });
            (store.clone(), store.clone(), Guard::Db(db, store))
        }
        "pgvector" => {
            let server =
                forge_store_postgres::testing::pgvector_admin_url().map_err(anyhow::Error::msg)?;
            let db = forge_store_postgres::testing::TestDatabase::create_with_pgvector_on(&server)
                .await
                .map_err(anyhow::Error::msg)?;
            let store = Arc::new(
                forge_store_postgres::PostgresStore::connect(
                    db.url(),
                    forge_store_postgres::Mode::Rls,
                )
                .await?,
            );
            anyhow::ensure!(store.uses_pgvector(), "the store did not see pgvector");
            (store.clone(), store.clone(), Guard::Db(db, store))
        }
        other => bail!("--store must be memory, sqlite, postgres or pgvector, not {other:?}"),
    })
}

/// `FORGE_BENCH_STEP_WRITERS`: how many step statements the PostgreSQL store may have in flight
/// (its default when unset), for measuring group commit at other settings.
fn step_writers() -> anyhow::Result<Option<usize>> {
    count_from_env("FORGE_BENCH_STEP_WRITERS")
}

/// `FORGE_BENCH_CLAIM_BATCH`: the most claims a worker makes in one write (`1`: each claim
/// loop claims alone), for measuring claims made together; the worker's default when unset.
fn claim_batch() -> anyhow::Result<Option<usize>> {
    count_from_env("FORGE_BENCH_CLAIM_BATCH")
}

/// The number the environment variable `name` holds, if set.
fn count_from_env(name: &str) -> anyhow::Result<Option<usize>> {
    match std::env::var(name) {
        Ok(n) => Ok(Some(n.parse().map_err(|_| {
            anyhow::anyhow!("{name} must be a number, not {n:?}")
        })?)),
        Err(_) => Ok(None),
    }
}

async fn open(kind: &str) -> anyhow::Result<(Arc<dyn Store>, Guard)> {
    let (store, _, guard) = open_both(kind).await?;
    Ok((store, guard))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

/// One writer: its own thread and run, `commits` steps of 8 events and a message each.
async fn writer(
    store: Arc<dyn Store>,
    scope: Scope,
    commits: usize,
) -> anyhow::Result<Vec<Duration>> {
    let ids = UuidV7Generator;
    let clock = SystemClock;
    let thread = store.create_thread(&scope, NewThread::default()).await?;
    let agent = AgentRef {
        name: "bench".into(),
        version: "1".into(),
    };
    let run = store
        .create_run(
            &scope,
            NewRun::new(thread.id, agent, vec![Part::text("go")]),
        )
        .await?;
    let lease = store
        .acquire_lease(&scope, run.id, "bench", Duration::from_secs(3600))
        .await?;
    let (mut version, mut seq) = (0u64, 0u64);
    let mut latencies = Vec::with_capacity(commits);
    for step in 0..commits {
        let message_id = MessageId::generate(&ids);
        let mut events = Vec::with_capacity(8);
        for i in 0..8u32 {
            seq += 1;
            let kind = if i == 0 {
                RunEventKind::PartAdded {
                    message_id,
                    role: Role::Assistant,
                    index: 0,
                    part: Part::text("w0 "),
                }
            } else {
                RunEventKind::PartUpdated {
                    message_id,
                    index: 0,
                    update: PartUpdate::TextDelta {
                        text: format!("w{i} "),
                    },
                }
            };
            events.push(RunEvent {
                run_id: run.id,
                seq,
                at: clock.now(),
                kind,
            });
        }
        let message = Message {
            id: message_id,
            run_id: run.id,
            role: Role::Assistant,
            parts: vec![Part::text("w0 w1 w2 w3 w4 w5 w6 w7 ")],
            created_at: clock.now(),
        };
        let commit = StepCommit {
            run_id: run.id,
            expected_version: version,
            lease: lease.clone(),
            events,
            messages: vec![message],
            checkpoint: Checkpoint {
                step: step as u32 + 1,
                ..Checkpoint::default()
            },
            status: RunStatus::Running,
            failure: None,
            interactions: vec![],
            audit: vec![],
            settlements: vec![],
            state: None,
            summary: None,
            job: None,
        };
        let start = Instant::now();
        let done = store.commit_step(&scope, commit).await?;
        latencies.push(start.elapsed());
        version = done.version;
    }
    Ok(latencies)
}

async fn commit_step(kind: &str, writers: &[usize], commits: usize) -> anyhow::Result<()> {
    println!(
        "{:<9} {:>7} {:>9} {:>10} {:>10} {:>12}",
        "store", "writers", "commits", "p50 ms", "p99 ms", "commits/s"
    );
    for &w in writers {
        let (store, _guard) = open(kind).await?;
        let start = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..w {
            let scope = Scope::parse(&format!("tenant-{}", i % 4), "bench", &[])?;
            tasks.push(tokio::spawn(writer(store.clone(), scope, commits)));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await??);
        }
        let elapsed = start.elapsed();
        all.sort();
        let (p50, p99) = (percentile(&all, 0.50), percentile(&all, 0.99));
        let rate = all.len() as f64 / elapsed.as_secs_f64();
        println!(
            "{kind:<9} {w:>7} {:>9} {:>10.3} {:>10.3} {rate:>12.0}",
            all.len(),
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3
        );
        let line = serde_json::json!({
            "bench": "commit_step", "store": kind, "writers": w, "commits": all.len(),
            "p50_ms": p50.as_secs_f64() * 1e3, "p99_ms": p99.as_secs_f64() * 1e3, "commits_per_s": rate,
        });
        eprintln!("{line}");
    }
    Ok(())
}
