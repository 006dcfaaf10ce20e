//! `crm`: the CRM's command line.
//!
//! - `crm serve`: the server (Forge's GraphQL API and web client, the CRM's API), a worker, and
//!   the CRM's MCP server as a child process; SQLite in `./crm-data`, or PostgreSQL with
//!   `--postgres`; development sign-in only with `--dev-sign-in`.
//! - `crm mcp --db PATH | --memory`: the CRM's MCP server on stdio (what `serve` starts, and what
//!   `forge gate` and `forge mcp pin` start from `mcp/crm.toml`).
//! - `crm token`: a token for the API.
//! - `crm` alone: a demonstration in a temporary directory (a rep's pipeline, a cited note, an
//!   update approved by a manager), then exit.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use crm::{CrmDb, Options, Running, StoreChoice};
use forge::core::interaction::{Decision, Resolve};
use forge::core::part::Part;
use forge::core::ports::store::{NewRun, NewThread};
use forge::core::scope::Scope;

#[derive(Parser)]
#[command(
    name = "crm",
    version,
    about = "A small CRM whose data reaches agents over MCP, on Forge"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the server, a worker and the MCP server.
    Serve {
        /// The CRM's files.
        #[arg(long, default_value = "crm-data")]
        data: PathBuf,
        /// Keep Forge's runs in PostgreSQL: a superuser's URL (the CRM creates its own role and
        /// database there and connects as that role).
        #[arg(long, env = "CRM_POSTGRES")]
        postgres: Option<String>,
        /// The PostgreSQL database to create and use.
        #[arg(long, default_value = "crm")]
        database: String,
        /// Development sign-in.
        #[command(flatten)]
        dev: crm::DevSignInArgs,
        /// Where the server listens.
        #[arg(long, default_value = "127.0.0.1:8095")]
        listen: SocketAddr,
    },
    /// Serves the CRM's records over MCP on stdio.
    Mcp {
        /// The CRM database.
        #[arg(long, conflicts_with = "memory")]
        db: Option<PathBuf>,
        /// A seeded database in memory, gone at exit.
        #[arg(long)]
        memory: bool,
    },
    /// Measures each workflow: latency per run (submitted to completed; an update also to
    /// awaiting approval and approval to completed) and metered tokens and cost per run.
    Bench {
        /// Runs per workflow.
        #[arg(long, default_value_t = 20)]
        runs: usize,
    },
    /// Prints a token (signed with CRM_JWT_SECRET).
    Token {
        /// The tenant.
        #[arg(long, default_value = "acme")]
        tenant: String,
        /// The principal.
        #[arg(long)]
        principal: String,
        /// Roles, comma separated (sales, manager).
        #[arg(long, value_delimiter = ',')]
        roles: Vec<String>,
    },
}

const DEV_SECRET: &str = "crm-development-secret-0123456789abcdef";

fn secret() -> Vec<u8> {
    std::env::var("CRM_JWT_SECRET")
        .unwrap_or_else(|_| DEV_SECRET.to_owned())
        .into_bytes()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Some(Command::Serve {
            data,
            postgres,
            database,
            dev,
            listen,
        }) => {
            let store = match postgres {
                Some(admin_url) => StoreChoice::Postgres {
                    admin_url,
                    database,
                },
                None => StoreChoice::Sqlite,
            };
            let running = Running::start(Options {
                data,
                store,
                listen,
                crm_command: std::env::current_exe()?,
                secret: secret(),
                dev_sign_in: dev.dev_sign_in,
                dev_sign_in_anywhere: dev.dev_sign_in_anywhere,
            })
            .await?;
            eprintln!(
                "crm: listening on {url}/ (web client{signin}), {url}/graphql, {url}/crm/…",
                url = running.url,
                signin = if dev.dev_sign_in {
                    ", development sign-in on"
                } else {
                    ""
                },
            );
            // Ctrl-C or SIGTERM: the worker drains (runs in flight reach a checkpoint) and the
            // server answers what it has in flight before the process exits.
            forge::shutdown_signal().await;
            running.stop().await;
            eprintln!("crm: stopped");
            Ok(())
        }
        Some(Command::Mcp { db, memory }) => {
            if db.is_none() && !memory {
                bail!("give --db PATH or --memory");
            }
            let db = CrmDb::open(db.as_deref()).await?;
            crm::mcp::serve_stdio(db).await?;
            Ok(())
        }
        Some(Command::Token {
            tenant,
            principal,
            roles,
        }) => {
            let roles: Vec<&str> = roles.iter().map(String::as_str).collect();
            let scope = Scope::parse(&tenant, &principal, &roles)?;
            let now = chrono::Utc::now().timestamp();
            println!(
                "{}",
                forge::server::auth::sign_hs256(&secret(), &scope, 3600, now)?
            );
            Ok(())
        }
        Some(Command::Bench { runs }) => bench(runs).await,
        None => demo().await,
    }
}

/// The median and the 95th percentile of `samples`.
fn percentiles(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.95))
}

/// Runs each workflow `n` times on SQLite and prints latency and cost per run.
async fn bench(n: usize) -> anyhow::Result<()> {
    use std::time::Instant;
    if n == 0 {
        bail!("--runs must be at least 1");
    }
    let data = std::env::temp_dir().join(format!("crm-bench-{}", std::process::id()));
    let running = Running::start(Options {
        data: data.clone(),
        store: StoreChoice::Sqlite,
        listen: "127.0.0.1:0".parse()?,
        crm_command: std::env::current_exe()?,
        secret: secret(),
        dev_sign_in: false,
        dev_sign_in_anywhere: false,
    })
    .await?;
    let alice = Scope::parse("acme", "alice", &["sales"])?;
    let carol = Scope::parse("acme", "carol", &["manager"])?;
    let outcome = async {
        println!("workflow                          p50 ms   p95 ms   tokens  cost  ({n} runs each, SQLite)");
        for (name, message) in [
            ("pipeline over MCP", "Show my pipeline"),
            ("cited note", "What do the notes say about the Initech renewal?"),
        ] {
            let (mut took, mut tokens) = (vec![], vec![]);
            for _ in 0..n {
                let started = Instant::now();
                let run = ask(&running, &alice, message).await?;
                let done = settled(&running, &alice, &run, false).await?;
                took.push(started.elapsed().as_secs_f64() * 1e3);
                let u = done.checkpoint.usage;
                tokens.push((u.input_tokens + u.output_tokens) as f64);
            }
            let ((p50, p95), (t50, _)) = (percentiles(&mut took), percentiles(&mut tokens));
            println!("{name:<32} {p50:>8.1} {p95:>8.1} {t50:>8.0}     0");
        }
        let (mut to_approval, mut to_done, mut tokens) = (vec![], vec![], vec![]);
        for i in 0..n {
            let started = Instant::now();
            let run = ask(&running, &alice, "Please mark opp-1 won").await?;
            settled(&running, &alice, &run, true).await?;
            to_approval.push(started.elapsed().as_secs_f64() * 1e3);
            let pending = running.crm.engine().pending_interactions(&carol).await?;
            let approval = pending.first().context("no approval")?;
            let approved = Instant::now();
            approve(running.crm.engine(), &carol, approval.id, format!("bench-{i}")).await?;
            let done = settled(&running, &alice, &run, false).await?;
            to_done.push(approved.elapsed().as_secs_f64() * 1e3);
            let u = done.checkpoint.usage;
            tokens.push((u.input_tokens + u.output_tokens) as f64);
        }
        let (a50, a95) = percentiles(&mut to_approval);
        let (d50, d95) = percentiles(&mut to_done);
        let (t50, _) = percentiles(&mut tokens);
        println!("update: submitted -> approval     {a50:>8.1} {a95:>8.1}");
        println!("update: approval -> applied       {d50:>8.1} {d95:>8.1} {t50:>8.0}     0");
        anyhow::Ok(())
    }
    .await;
    running.stop().await;
    std::fs::remove_dir_all(&data).ok();
    outcome
}

/// A rep's pipeline, a cited note, and an update a manager approves.
async fn demo() -> anyhow::Result<()> {
    let data = std::env::temp_dir().join(format!("crm-demo-{}", std::process::id()));
    let running = Running::start(Options {
        data: data.clone(),
        store: StoreChoice::Sqlite,
        listen: "127.0.0.1:0".parse()?,
        crm_command: std::env::current_exe()?,
        secret: secret(),
        dev_sign_in: false,
        dev_sign_in_anywhere: false,
    })
    .await?;
    let outcome = demo_steps(&running).await;
    running.stop().await;
    std::fs::remove_dir_all(&data).ok();
    outcome
}

async fn ask(
    running: &Running,
    scope: &Scope,
    message: &str,
) -> anyhow::Result<forge::core::run::Run> {
    let engine = running.crm.engine();
    let thread = engine.create_thread(scope, NewThread::default()).await?;
    let run = engine
        .submit(
            scope,
            NewRun::new(
                thread.id,
                crm::app::assistant().agent,
                vec![Part::text(message)],
            ),
        )
        .await?;
    Ok(run)
}

/// Waits until the run ended, or (with `waiting`) until it waits for a person.
async fn settled(
    running: &Running,
    scope: &Scope,
    run: &forge::core::run::Run,
    waiting: bool,
) -> anyhow::Result<forge::core::run::Run> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = running.crm.engine().runs().get_run(scope, run.id).await?;
        if now.status.is_terminal() || (waiting && format!("{:?}", now.status).contains("Waiting"))
        {
            return Ok(now);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("run {} did not settle within 30 s", run.id);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn demo_steps(running: &Running) -> anyhow::Result<()> {
    let alice = Scope::parse("acme", "alice", &["sales"])?;
    let carol = Scope::parse("acme", "carol", &["manager"])?;
    for message in [
        "Show my pipeline",
        "What do the notes say about the Initech renewal?",
    ] {
        let run = ask(running, &alice, message).await?;
        let done = settled(running, &alice, &run, false).await?;
        println!("{message} -> {:?}", done.status);
    }
    let run = ask(running, &alice, "Please mark opp-1 won").await?;
    settled(running, &alice, &run, true).await?;
    let pending = running.crm.engine().pending_interactions(&carol).await?;
    let approval = pending.first().context("no approval reached the manager")?;
    approve(running.crm.engine(), &carol, approval.id, "demo").await?;
    let done = settled(running, &alice, &run, false).await?;
    let opp = running.crm.db().opportunities(Some("alice")).await?;
    println!(
        "mark opp-1 won -> {:?}; opp-1 is {}",
        done.status, opp[0].stage
    );
    if opp[0].stage != "won" {
        bail!("the approved update did not apply");
    }
    Ok(())
}

/// Approves `id` as `reviewer`, once per `key`.
async fn approve(
    engine: &forge::engine::Engine,
    reviewer: &Scope,
    id: forge::core::id::InteractionId,
    key: impl Into<String>,
) -> anyhow::Result<()> {
    let decision = Resolve {
        id,
        decision: Decision::Approve,
        actor: reviewer.principal_id().as_str().to_owned(),
        key: key.into(),
        input_hash: None,
    };
    engine.resolve_interaction(reviewer, decision).await?;
    Ok(())
}
