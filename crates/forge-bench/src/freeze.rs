//! `forge-bench freeze`: a worker frozen (SIGSTOP) at spread moments of its steps while it holds
//! runs, another taking them over once their leases lapse, then the first resumed (SIGCONT) —
//! as a VM pause or a long stall does. Counts what the frozen worker did after it lost a run:
//! model calls and tool calls it started for a run after the other worker had acted on it
//! (must be 0); and, for information, the tool calls the new holder made again because the frozen
//! worker had made them but froze before its step committed (the same idempotency key: what a
//! crash mid-step costs too). Then measures how long a takeover waits
//! behind a frozen holder of the run's row (PostgreSQL's `idle_in_transaction_session_timeout`).
//!
//! Each worker is a child process (`freeze-worker`) on one PostgreSQL database: its model (the
//! scripted provider: two tool steps, then text, each turn streamed in chunks 15 ms apart) and its
//! tool record each call in `bench_calls`, with the time it was made (the wall clock the two
//! processes share, read before any wait).

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use async_trait::async_trait;
use forge_core::agent::{AgentDefinition, AgentRef, RunLimits};
use forge_core::message::Role;
use forge_core::part::Part;
use forge_core::ports::model::{ModelError, ModelProvider, ModelRequest, ModelStream};
use forge_core::ports::store::{NewRun, NewThread, RunStore, ThreadStore};
use forge_core::ports::tool::{ToolContext, ToolError};
use forge_core::scope::Scope;
use forge_engine::{Engine, Worker, WorkerConfig, native_tool};
use forge_providers::{Script, ScriptedProvider};
use forge_store_postgres::testing::{Flavor, TestDatabase};
use forge_store_postgres::{Mode, PostgresStore};
use serde_json::json;

/// Two tool steps and an answer, each turn streamed in chunks 15 ms apart.
const SCRIPT: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ name = "record", input = { step = 1 } }]
chunk_delay_ms = 15
[[conversation.turn]]
tool_calls = [{ name = "record", input = { step = 2 } }]
chunk_delay_ms = 15
[[conversation.turn]]
text = ["recorded", " twice"]
chunk_delay_ms = 15
"#;

/// What `freeze` measures.
#[derive(Debug, clap::Args)]
pub(crate) struct FreezeArgs {
    /// Runs held by the frozen worker, in all.
    #[arg(long, default_value_t = 500)]
    trials: usize,
    /// Runs it holds at each freeze (each frozen at another point of its steps).
    #[arg(long, default_value_t = 10)]
    concurrency: usize,
    /// The runs' lease time to live, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    lease_ms: u64,
}

/// A worker child of `freeze`.
#[derive(Debug, clap::Args)]
pub(crate) struct WorkerArgs {
    /// The database.
    #[arg(long)]
    url: String,
    /// The worker's id (`A` is frozen, `B` takes over).
    #[arg(long)]
    name: String,
    /// Runs at once.
    #[arg(long)]
    concurrency: usize,
    /// Lease time to live, in milliseconds.
    #[arg(long)]
    lease_ms: u64,
}

/// Records each call in `bench_calls` before it is made.
#[derive(Clone)]
struct Recorder {
    pool: sqlx::PgPool,
    worker: String,
}

impl Recorder {
    /// Records a call made at `at` (read when the call was made, before any wait: what is
    /// compared is when the worker acted, not when its record reached the database).
    async fn record(
        &self,
        kind: &str,
        at: chrono::DateTime<chrono::Utc>,
        run: uuid::Uuid,
        step: i32,
        token: i64,
    ) {
        // A failed record would hide a call: the worker stops instead.
        if let Err(e) = sqlx::query(
            "INSERT INTO bench_calls (kind, at, worker, run_id, step, token) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(kind)
        .bind(at)
        .bind(&self.worker)
        .bind(run)
        .bind(step)
        .bind(token)
        .execute(&self.pool)
        .await
        {
            eprintln!("recording a call failed: {e}");
            std::process::exit(3);
        }
    }
}

/// The scripted model, recording each call (its run, and its step: the tool results so far).
struct Recorded {
    inner: ScriptedProvider,
    recorder: Recorder,
}

#[async_trait]
impl ModelProvider for Recorded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let at = chrono::Utc::now();
        let run = request
            .messages
            .first()
            .map_or(uuid::Uuid::nil(), |m| m.run_id.0);
        let step = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .count() as i32;
        self.recorder.record("model", at, run, step + 1, 0).await;
        self.inner.stream(request).await
    }
}

/// `freeze-worker`: executes runs until killed.
pub(crate) async fn worker(args: WorkerArgs) -> anyhow::Result<()> {
    let store = Arc::new(PostgresStore::connect(&args.url, Mode::Rls).await?);
    let recorder = Recorder {
        pool: sqlx::PgPool::connect(&args.url).await?,
        worker: args.name.clone(),
    };
    let model = Recorded {
        inner: ScriptedProvider::empty().with_script("freeze", Script::parse(SCRIPT, "freeze")?),
        recorder: recorder.clone(),
    };
    let tool = native_tool(
        "record",
        "Records one call.",
        move |ctx: ToolContext, input: serde_json::Value| {
            let at = chrono::Utc::now();
            let recorder = recorder.clone();
            async move {
                let step = input["step"].as_i64().unwrap_or(0) as i32;
                let token = i64::try_from(ctx.lease_token).unwrap_or(i64::MAX);
                recorder.record("tool", at, ctx.run_id.0, step, token).await;
                Ok::<_, ToolError>(json!("recorded"))
            }
        },
    );
    let agent = AgentDefinition {
        agent: agent_ref(),
        instructions: "Record twice.".into(),
        model: "scripted:freeze".into(),
        tools: vec!["record".into()],
        skills: vec![],
        output_schema: None,
        limits: RunLimits::default(),
        approvals: Default::default(),
        compaction: None,
    };
    let ttl = Duration::from_millis(args.lease_ms);
    let engine = Engine::builder()
        .store(store.clone())
        .model(Arc::new(model))
        .tool(Arc::new(tool))?
        .agent(agent)
        .worker_id(args.name.clone())
        .lease_ttl(ttl)
        .build()?;
    let worker = Worker::new(
        Arc::new(engine),
        store,
        WorkerConfig {
            id: args.name,
            concurrency: args.concurrency,
            claim_ttl: ttl,
            poll_interval: Duration::from_millis(20),
            ..WorkerConfig::default()
        },
    );
    println!("ready");
    let stop = tokio_util::sync::CancellationToken::new();
    let on_term = stop.clone();
    tokio::spawn(async move {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            term.recv().await;
        }
        on_term.cancel();
    });
    worker.run(stop).await;
    Ok(())
}

fn agent_ref() -> AgentRef {
    AgentRef {
        name: "freeze".into(),
        version: "1".into(),
    }
}

/// A worker child, started and ready.
struct Child(tokio::process::Child);

impl Child {
    async fn spawn(url: &str, name: &str, args: &FreezeArgs) -> anyhow::Result<Self> {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new(std::env::current_exe()?)
            .args(["freeze-worker", "--url", url, "--name", name])
            .args(["--concurrency", &args.concurrency.to_string()])
            .args(["--lease-ms", &args.lease_ms.to_string()])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting a worker")?;
        let stdout = child.stdout.take().context("the worker's stdout")?;
        let ready = tokio::io::BufReader::new(stdout)
            .lines()
            .next_line()
            .await?;
        anyhow::ensure!(
            ready.as_deref() == Some("ready"),
            "worker {name} did not start"
        );
        Ok(Self(child))
    }

    fn signal(&self, sig: &str) -> anyhow::Result<()> {
        let pid = self.0.id().context("the worker has exited")?;
        let ok = std::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()?
            .success();
        anyhow::ensure!(ok, "kill {sig} {pid} failed");
        Ok(())
    }

    async fn stop(mut self) -> anyhow::Result<()> {
        self.signal("-TERM")?;
        self.0.wait().await?;
        Ok(())
    }
}

async fn scalar(pool: &sqlx::PgPool, sql: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await?)
}

/// Waits until `sql` counts `want`; fails after `within`.
async fn until(pool: &sqlx::PgPool, sql: &str, want: i64, within: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    while scalar(pool, sql).await? < want {
        anyhow::ensure!(started.elapsed() < within, "waited {within:?} for: {sql}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// `freeze`.
pub(crate) async fn run(args: FreezeArgs) -> anyhow::Result<()> {
    let db = TestDatabase::create(Flavor::Plain)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let admin = sqlx::PgPool::connect(db.admin_url()).await?;
    sqlx::raw_sql(
        "CREATE TABLE bench_calls (kind text NOT NULL, worker text NOT NULL, run_id uuid NOT NULL, \
         step int NOT NULL, token bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp()); \
         GRANT SELECT, INSERT ON bench_calls TO PUBLIC;",
    )
    .execute(&admin)
    .await?;
    let store = PostgresStore::connect(db.url(), Mode::Rls).await?;
    let scope = Scope::parse("freeze-tenant", "freeze-user", &[])?;
    let a = Child::spawn(db.url(), "A", &args).await?;
    let lease = Duration::from_millis(args.lease_ms);
    let mut created = 0usize;
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let started = Instant::now();
    while created < args.trials {
        let batch = args.concurrency.min(args.trials - created);
        for _ in 0..batch {
            let thread = store.create_thread(&scope, NewThread::default()).await?;
            let new = NewRun::new(thread.id, agent_ref(), vec![Part::text("go")]);
            store.create_run(&scope, new).await?;
        }
        created += batch;
        // A holds every run of the batch, then runs on for a spread while before it freezes.
        until(
            &admin,
            "SELECT count(*) FROM forge_runs WHERE lease_holder = 'A' AND status <> 'completed'",
            batch as i64,
            Duration::from_secs(30),
        )
        .await?;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        tokio::time::sleep(Duration::from_millis(rng % 150)).await;
        a.signal("-STOP")?;
        // Its leases lapse; B takes the runs over and completes them.
        tokio::time::sleep(lease + Duration::from_millis(100)).await;
        let b = Child::spawn(db.url(), "B", &args).await?;
        until(
            &admin,
            "SELECT count(*) FROM forge_runs WHERE status = 'completed'",
            created as i64,
            Duration::from_secs(60),
        )
        .await?;
        b.stop().await?;
        // A wakes to find its runs taken over.
        a.signal("-CONT")?;
        tokio::time::sleep(lease / 2).await;
    }
    let elapsed = started.elapsed();
    a.stop().await?;

    let after_loss = |kind: &'static str| {
        format!(
            "SELECT count(*) FROM bench_calls a WHERE a.worker = 'A' AND a.kind = '{kind}' AND a.at > \
             (SELECT min(b.at) FROM bench_calls b WHERE b.worker = 'B' AND b.run_id = a.run_id)"
        )
    };
    let model_after = scalar(&admin, &after_loss("model")).await?;
    let tool_after = scalar(&admin, &after_loss("tool")).await?;
    let twice = scalar(
        &admin,
        "SELECT coalesce(sum(n - 1), 0)::bigint FROM (SELECT count(*) AS n FROM bench_calls \
         WHERE kind = 'tool' GROUP BY run_id, step) d",
    )
    .await?;
    let taken_over = scalar(
        &admin,
        "SELECT count(DISTINCT run_id) FROM bench_calls WHERE worker = 'B'",
    )
    .await?;
    let completed = scalar(
        &admin,
        "SELECT count(*) FROM forge_runs WHERE status = 'completed'",
    )
    .await?;
    if model_after + tool_after > 0 {
        let rows: Vec<(String, String, uuid::Uuid, i32, i64, String)> = sqlx::query_as(
            "SELECT kind, worker, run_id, step, token, to_char(at, 'HH24:MI:SS.US') FROM bench_calls              WHERE run_id IN (SELECT run_id FROM bench_calls WHERE kind = 'tool'              GROUP BY run_id, step HAVING count(*) > 1 UNION SELECT a.run_id FROM bench_calls a              WHERE a.worker = 'A' AND a.at > (SELECT min(b.at) FROM bench_calls b              WHERE b.worker = 'B' AND b.run_id = a.run_id)) ORDER BY run_id, at",
        )
        .fetch_all(&admin)
        .await?;
        for r in rows {
            println!("  {r:?}");
        }
    }
    let frozen_holder = takeover_behind_a_frozen_holder(&args, &db, &admin, &store, &scope).await?;
    println!(
        "{} trials in {:.0} s: {taken_over} taken over while frozen, {completed} completed",
        args.trials,
        elapsed.as_secs_f64()
    );
    println!("model calls started by the frozen worker after the takeover: {model_after}");
    println!("tool calls started by the frozen worker after the takeover:  {tool_after}");
    println!(
        "tool calls made again by the new holder (the frozen worker made them, then froze before \
         its step committed; one idempotency key): {twice}"
    );
    println!(
        "takeover behind a frozen holder of the run's row: {:.1} s after its lease lapsed \
         (lease {} ms; idle_in_transaction_session_timeout {} s)",
        frozen_holder.as_secs_f64(),
        args.lease_ms,
        forge_store_postgres::IDLE_IN_TRANSACTION.as_secs()
    );
    eprintln!(
        "{}",
        json!({
            "bench": "freeze", "trials": args.trials, "taken_over": taken_over,
            "completed": completed, "model_calls_after_loss": model_after,
            "tool_calls_after_loss": tool_after, "tool_calls_of_uncommitted_steps_again": twice,
            "frozen_holder_takeover_s": frozen_holder.as_secs_f64(),
        })
    );
    store.close().await;
    admin.close().await;
    anyhow::ensure!(
        model_after == 0 && tool_after == 0,
        "the frozen worker acted after losing its runs"
    );
    Ok(())
}

/// A worker frozen inside a transaction on a run's row (its session set up as the store sets its
/// own): how long after the run's lease lapsed another worker takes it over.
async fn takeover_behind_a_frozen_holder(
    args: &FreezeArgs,
    db: &TestDatabase,
    admin: &sqlx::PgPool,
    store: &PostgresStore,
    scope: &Scope,
) -> anyhow::Result<Duration> {
    use sqlx::Connection;
    let thread = store.create_thread(scope, NewThread::default()).await?;
    let run = store
        .create_run(
            scope,
            NewRun::new(thread.id, agent_ref(), vec![Part::text("go")]),
        )
        .await?;
    // The frozen worker's lease and its open transaction on the row.
    store
        .acquire_lease(scope, run.id, "A", Duration::from_millis(args.lease_ms))
        .await?;
    let lapses = Instant::now() + Duration::from_millis(args.lease_ms);
    let mut frozen = sqlx::PgConnection::connect(db.admin_url()).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "SET idle_in_transaction_session_timeout = '{}ms'; BEGIN; \
         SELECT 1 FROM forge_runs WHERE id = '{}' FOR UPDATE;",
        forge_store_postgres::IDLE_IN_TRANSACTION.as_millis(),
        run.id.0
    )))
    .execute(&mut frozen)
    .await?;
    let b = Child::spawn(db.url(), "B", args).await?;
    let sql = format!(
        "SELECT count(*) FROM bench_calls WHERE worker = 'B' AND run_id = '{}'",
        run.id.0
    );
    until(admin, &sql, 1, Duration::from_secs(120)).await?;
    let delay = Instant::now().saturating_duration_since(lapses);
    b.stop().await?;
    drop(frozen);
    Ok(delay)
}
