//! `shareflow`: the application's command line.
//!
//! - `shareflow serve`: the server (Forge's GraphQL API and web client, ShareFlow's API), a worker
//!   and the bundled publishing service, on SQLite in `./shareflow-data` (or PostgreSQL with
//!   `--postgres`); development sign-in only with `--dev-sign-in`.
//! - `shareflow token`: a token for the API.
//! - `shareflow` alone: a demonstration in a temporary directory that drops the sample documents
//!   on both workflows, approves as a reviewer, rolls the flag back, prints the deliveries and
//!   exits (what CI runs against the packaged crates).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use forge::core::interaction::{Decision, Resolve};
use forge::core::scope::Scope;
use shareflow::{NewDocument, Options, Running, StoreChoice, Workflow};

#[derive(Parser)]
#[command(
    name = "shareflow",
    version,
    about = "Documents to cited, reviewed posts, on Forge"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the server, a worker and the bundled publishing service.
    Serve {
        /// ShareFlow's files (its database, the publisher's, SQLite's forge.db).
        #[arg(long, default_value = "shareflow-data")]
        data: PathBuf,
        /// Keep Forge's runs in PostgreSQL: a superuser's URL (ShareFlow creates its own role
        /// and database there and connects as that role).
        #[arg(long, env = "SHAREFLOW_POSTGRES")]
        postgres: Option<String>,
        /// The PostgreSQL database to create and use.
        #[arg(long, default_value = "shareflow")]
        database: String,
        /// Development sign-in.
        #[command(flatten)]
        dev: shareflow::DevSignInArgs,
        /// Where the server listens.
        #[arg(long, default_value = "127.0.0.1:8090")]
        listen: SocketAddr,
        /// Where the bundled publishing service listens.
        #[arg(long, default_value = "127.0.0.1:8091")]
        publisher_listen: SocketAddr,
        /// Use this publishing service instead of the bundled one.
        #[arg(long)]
        publisher_url: Option<String>,
        /// Seconds before a run this process was executing when it died (a draft, a flag's
        /// rollback) is taken over by a worker.
        #[arg(long, default_value_t = shareflow::run::TAKEOVER_AFTER.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
        takeover_after: u64,
    },
    /// Measures each workflow: latency per post (drop to published; on the agent workflow also
    /// drop to review and approval to published) and metered tokens and cost per post.
    Bench {
        /// Documents per workflow.
        #[arg(long, default_value_t = 20)]
        documents: usize,
    },
    /// Prints a token for the API (signed with SHAREFLOW_JWT_SECRET).
    Token {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// The principal.
        #[arg(long)]
        principal: String,
        /// Roles, comma separated (editor, reviewer, admin).
        #[arg(long, value_delimiter = ',')]
        roles: Vec<String>,
    },
}

fn secret() -> Vec<u8> {
    std::env::var("SHAREFLOW_JWT_SECRET")
        .unwrap_or_else(|_| shareflow::DEV_SECRET.to_owned())
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
            publisher_listen,
            publisher_url,
            takeover_after,
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
                publisher_listen,
                publisher_url,
                secret: secret(),
                dev_sign_in: dev.dev_sign_in,
                dev_sign_in_anywhere: dev.dev_sign_in_anywhere,
                takeover_after: Duration::from_secs(takeover_after),
            })
            .await?;
            eprintln!(
                "shareflow: listening on {url}/ (web client{signin}), {url}/graphql, {url}/app/…; publisher at {}",
                running.publisher_url,
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
            eprintln!("shareflow: stopped");
            Ok(())
        }
        Some(Command::Token {
            tenant,
            principal,
            roles,
        }) => {
            let roles: Vec<&str> = roles.iter().map(String::as_str).collect();
            println!(
                "{}",
                Running::token(&secret(), &tenant, &principal, &roles)?
            );
            Ok(())
        }
        Some(Command::Bench { documents }) => bench(documents).await,
        None => demo().await,
    }
}

/// The median and the 95th percentile of `samples`, in milliseconds.
fn percentiles(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.95))
}

/// Runs `n` documents through each workflow on SQLite and prints latency and cost per post.
async fn bench(n: usize) -> anyhow::Result<()> {
    if n == 0 {
        bail!("--documents must be at least 1");
    }
    let data = std::env::temp_dir().join(format!("shareflow-bench-{}", std::process::id()));
    let running = Running::start(Options {
        data: data.clone(),
        store: StoreChoice::Sqlite,
        listen: "127.0.0.1:0".parse()?,
        publisher_listen: "127.0.0.1:0".parse()?,
        publisher_url: None,
        secret: secret(),
        dev_sign_in: false,
        dev_sign_in_anywhere: false,
        takeover_after: shareflow::run::TAKEOVER_AFTER,
    })
    .await?;
    let outcome = bench_steps(&running, n).await;
    running.stop().await;
    std::fs::remove_dir_all(&data).ok();
    outcome
}

/// The sample documents (`documents/`), compiled in: the demo and the benchmark read nothing
/// from the machine the binary was built on.
const SAMPLES: [(&str, &str); 4] = [
    (
        "globex-merger",
        include_str!("../../documents/globex-merger.md"),
    ),
    (
        "holiday-hours",
        include_str!("../../documents/holiday-hours.md"),
    ),
    (
        "recycled-packaging",
        include_str!("../../documents/recycled-packaging.md"),
    ),
    (
        "spring-launch",
        include_str!("../../documents/spring-launch.md"),
    ),
];

fn sample_document(id: &str) -> anyhow::Result<&'static str> {
    SAMPLES
        .iter()
        .find(|(name, _)| *name == id)
        .map(|(_, text)| *text)
        .with_context(|| format!("no sample document {id}"))
}

async fn bench_steps(running: &Running, n: usize) -> anyhow::Result<()> {
    use std::time::Instant;
    let app = &running.app;
    let sample = sample_document("spring-launch")?.to_owned();
    let doc = || NewDocument {
        id: "spring-launch".into(),
        title: "Spring launch".into(),
        body: sample.clone(),
        publish_at: None,
    };
    // A tenant per post: each is the first post about its document, as in production.
    let (mut legacy, mut to_review, mut to_published) = (vec![], vec![], vec![]);
    let (mut tokens, mut cost) = (vec![], 0u64);
    for i in 0..n {
        let editor = Scope::parse(&format!("legacy{i}"), "eve", &["editor"])?;
        let started = Instant::now();
        let d = app.drop_document(&editor, doc()).await?;
        if d.status != "published" {
            bail!("legacy post {i} is {}", d.status);
        }
        legacy.push(started.elapsed().as_secs_f64() * 1e3);
    }
    for i in 0..n {
        let tenant = format!("agent{i}");
        let editor = Scope::parse(&tenant, "eve", &["editor"])?;
        let reviewer = Scope::parse(&tenant, "rita", &["reviewer"])?;
        app.set_workflow(&Scope::parse(&tenant, "ada", &["admin"])?, Workflow::Agent)
            .await?;
        let started = Instant::now();
        app.drop_document(&editor, doc()).await?;
        let pending = loop {
            let p = app.engine().pending_interactions(&reviewer).await?;
            if let Some(p) = p.into_iter().next() {
                break p;
            }
            if started.elapsed() > Duration::from_secs(30) {
                bail!("post {i} did not reach review");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        to_review.push(started.elapsed().as_secs_f64() * 1e3);
        let approved = Instant::now();
        approve(app.engine(), &reviewer, pending.id, format!("bench-{i}")).await?;
        let run = loop {
            let d = app
                .db()
                .document(&tenant, "spring-launch")
                .await?
                .context("the document")?;
            if d.status == "published" {
                break d.run_id.context("the run")?;
            }
            if approved.elapsed() > Duration::from_secs(30) {
                bail!("post {i} was not published after approval");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        to_published.push(approved.elapsed().as_secs_f64() * 1e3);
        let run = loop {
            let r = app.engine().runs().get_run(&editor, run.parse()?).await?;
            if r.status.is_terminal() {
                break r;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let usage = run.checkpoint.usage;
        tokens.push((usage.input_tokens + usage.output_tokens) as f64);
        cost += run.checkpoint.cost_micros;
    }
    let (l50, l95) = percentiles(&mut legacy);
    let (r50, r95) = percentiles(&mut to_review);
    let (p50, p95) = percentiles(&mut to_published);
    let (t50, _) = percentiles(&mut tokens);
    println!("workflow  step                      p50 ms   p95 ms  ({n} documents each, SQLite)");
    println!("legacy    drop -> published       {l50:>8.1} {l95:>8.1}");
    println!("agent     drop -> awaiting review {r50:>8.1} {r95:>8.1}");
    println!("agent     approval -> published   {p50:>8.1} {p95:>8.1}");
    println!(
        "agent     tokens per post (median) {t50:.0}; cost {} micro-units per post (scripted model)",
        cost / n as u64
    );
    Ok(())
}

/// Drops the sample documents, approves, rolls back, prints what was published.
async fn demo() -> anyhow::Result<()> {
    let data = std::env::temp_dir().join(format!("shareflow-demo-{}", std::process::id()));
    let running = Running::start(Options {
        data: data.clone(),
        store: StoreChoice::Sqlite,
        listen: "127.0.0.1:0".parse()?,
        publisher_listen: "127.0.0.1:0".parse()?,
        publisher_url: None,
        secret: secret(),
        dev_sign_in: false,
        dev_sign_in_anywhere: false,
        takeover_after: shareflow::run::TAKEOVER_AFTER,
    })
    .await?;
    let result = demo_steps(&running).await;
    let app = running.app.clone();
    let admin = Scope::parse("acme", "ada", &["admin"])?;
    let posts = app.posts(&admin).await;
    running.stop().await;
    std::fs::remove_dir_all(&data).ok();
    result?;
    let posts = posts?;
    for p in &posts {
        println!(
            "{} [{}] via {}: {}",
            p.post.document, p.status, p.post.via, p.post.text
        );
    }
    if posts.len() != 3 {
        bail!(
            "expected one post per document (3), the publisher has {}",
            posts.len()
        );
    }
    Ok(())
}

async fn demo_steps(running: &Running) -> anyhow::Result<()> {
    let app = &running.app;
    let editor = Scope::parse("acme", "eve", &["editor"])?;
    let reviewer = Scope::parse("acme", "rita", &["reviewer"])?;
    let admin = Scope::parse("acme", "ada", &["admin"])?;
    let read = |id: &str| -> anyhow::Result<NewDocument> {
        let body = sample_document(id)?.to_owned();
        let title = body
            .lines()
            .next()
            .unwrap_or(id)
            .trim_start_matches("# ")
            .to_owned();
        Ok(NewDocument {
            id: id.to_owned(),
            title,
            body,
            publish_at: None,
        })
    };

    // Legacy first (every tenant starts there): published at once.
    let legacy = app
        .drop_document(&editor, read("recycled-packaging")?)
        .await?;
    println!("legacy: {} is {}", legacy.id, legacy.status);

    // The agent workflow: a cited draft waits for the reviewer.
    app.set_workflow(&admin, Workflow::Agent).await?;
    app.drop_document(&editor, read("spring-launch")?).await?;
    app.drop_document(&editor, read("holiday-hours")?).await?;
    let pending = wait_for_approvals(running, &reviewer, 2).await?;
    let first = pending.first().context("no approval")?;
    approve(running.app.engine(), &reviewer, first.id, "demo-approve").await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let published = app
            .documents(&editor)
            .await?
            .iter()
            .filter(|d| d.status == "published")
            .count();
        if published == 2 {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the approved post was not published within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Roll back with one draft still waiting: it is cancelled and published the legacy way.
    let change = app.set_workflow(&admin, Workflow::Legacy).await?;
    println!(
        "rolled back: cancelled {:?}, republished {:?}",
        change.cancelled, change.republished
    );
    Ok(())
}

async fn wait_for_approvals(
    running: &Running,
    reviewer: &Scope,
    n: usize,
) -> anyhow::Result<Vec<forge::core::interaction::Interaction>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let pending = running.app.engine().pending_interactions(reviewer).await?;
        if pending.len() >= n {
            return Ok(pending);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("{} of {n} drafts reached review within 30 s", pending.len());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
