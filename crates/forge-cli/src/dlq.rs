//! `forge submit` and `forge dlq`: putting runs on the queue, and handling the ones that died.

use std::process::ExitCode;

use anyhow::{Context, bail};
use forge_core::id::{JobId, ThreadId};
use forge_core::part::Part;
use forge_core::ports::queue::JobState;
use forge_core::ports::store::{NewRun, NewThread, StartStrategy};
use forge_core::scope::{PrincipalId, Scope, SystemScope};
use forge_engine::Engine;

use crate::records::{JobRecord, RunRecord, print_json, print_list};
use crate::store::{self, StoreArgs};

/// Arguments of `forge submit`.
#[derive(Debug, clap::Args)]
pub(crate) struct SubmitArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The agent file (TOML); only its name and version are recorded on the run.
    #[arg(long)]
    agent: std::path::PathBuf,
    /// Run on this thread (default: a new thread).
    #[arg(long)]
    thread: Option<ThreadId>,
    /// What to do if the thread is busy: enqueue, reject or interrupt.
    #[arg(long, default_value = "enqueue")]
    strategy: String,
    /// Claims allowed before the run's job is dead-lettered.
    #[arg(long, default_value_t = 5)]
    max_attempts: u32,
    /// Tenant to run as.
    #[arg(long, default_value = "local", env = "FORGE_TENANT")]
    tenant: String,
    /// Principal to run as.
    #[arg(long, default_value = "cli", env = "FORGE_PRINCIPAL")]
    principal: String,
    /// As the JSON run created.
    #[arg(long)]
    json: bool,
    /// The user's message.
    message: String,
}

/// `forge dlq` subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum DlqCommand {
    /// List dead-lettered jobs.
    List {
        #[command(flatten)]
        store: StoreArgs,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// As a JSON array of jobs.
        #[arg(long)]
        json: bool,
    },
    /// Show one job, its run and its audit trail.
    Show {
        #[command(flatten)]
        store: StoreArgs,
        /// The job.
        job: JobId,
        /// As JSON: `{job, run, audit}`.
        #[arg(long)]
        json: bool,
    },
    /// Make dead jobs ready again with a fresh attempt budget (audited).
    Replay {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        which: Which,
    },
    /// Give dead jobs up; their runs end failed (`dead_lettered`) (audited).
    Discard {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        which: Which,
        /// Why, recorded on the failed run.
        #[arg(long, default_value = "discarded by an operator")]
        reason: String,
    },
}

/// Which dead jobs an operation applies to, and who does it.
#[derive(Debug, clap::Args)]
pub(crate) struct Which {
    /// The jobs.
    jobs: Vec<JobId>,
    /// Every dead job instead.
    #[arg(long, conflicts_with = "jobs")]
    all: bool,
    /// Who is acting, for the audit trail (default: $FORGE_ACTOR, then $USER).
    #[arg(long)]
    actor: Option<String>,
    /// As a JSON array of the jobs acted on.
    #[arg(long)]
    json: bool,
}

fn system() -> SystemScope {
    SystemScope::new("operator handles dead letters across tenants")
}

fn actor(which: &Which) -> String {
    which
        .actor
        .clone()
        .or_else(|| std::env::var("FORGE_ACTOR").ok())
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "operator".into())
}

pub(crate) async fn submit(args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let loaded = crate::agent_file::load(&args.agent)?;
    let strategy = match args.strategy.as_str() {
        "enqueue" => StartStrategy::Enqueue,
        "reject" => StartStrategy::Reject,
        "interrupt" => StartStrategy::Interrupt,
        other => bail!("--strategy must be enqueue, reject or interrupt, not {other:?}"),
    };
    if args.store.url == "memory" {
        bail!(
            "the memory store ends with this command, and the run with it: submit to a store a \
             worker reads (--store sqlite://PATH or postgres://…)"
        );
    }
    let store = store::open(&args.store).await?.store;
    let scope = Scope::parse(&args.tenant, &args.principal, &[])
        .context("failed to build the run's scope")?;
    let (agent, input) = (
        loaded.definition.agent.clone(),
        vec![Part::text(args.message)],
    );
    // Without a thread, the run is created with one of its own, in the same transaction.
    let mut new = match args.thread {
        Some(t) => NewRun::new(t, agent, input),
        None => NewRun::on_new_thread(
            &forge_core::id::UuidV7Generator,
            NewThread::default(),
            agent,
            input,
        ),
    }
    .strategy(strategy);
    let thread = new.thread_id;
    new.max_attempts = args.max_attempts;
    let run = store.create_run(&scope, new).await?;
    if args.json {
        print_json(&RunRecord::of(&run))?;
        return Ok(ExitCode::SUCCESS);
    }
    let admission = if run.last_seq == 0 {
        "active"
    } else {
        "queued behind the thread's active run"
    };
    println!("run {} on thread {} ({admission})", run.id, thread);
    Ok(ExitCode::SUCCESS)
}

fn describe(j: &JobRecord) -> String {
    format!(
        "{}  tenant {}  run {}  {}  attempts {}/{}  {}",
        j.id,
        j.tenant,
        j.run,
        j.state,
        j.attempts,
        j.max_attempts,
        j.last_error.as_deref().unwrap_or("-")
    )
}

pub(crate) async fn dlq(command: DlqCommand) -> anyhow::Result<ExitCode> {
    let sys = system();
    match command {
        DlqCommand::List { store, limit, json } => {
            let store = store::open(&store).await?.store;
            let dead = store.dead_jobs(&sys, limit).await?;
            let records: Vec<JobRecord> = dead.iter().map(JobRecord::of).collect();
            print_list(json, &records, "no dead-lettered jobs", describe)?;
        }
        DlqCommand::Show { store, job, json } => {
            let store = store::open(&store).await?.store;
            let j = store.job(&sys, job).await?;
            if json {
                let reader = Scope::new(j.tenant_id.clone(), PrincipalId::new("operator")?, vec![]);
                let run = store.get_run(&reader, j.run_id).await?;
                let subject = format!("job {}", j.id);
                let audit: Vec<_> = store
                    .list_audit(&reader, 1000)
                    .await?
                    .into_iter()
                    .rev()
                    .filter(|a| a.subject == subject)
                    .collect();
                print_json(&serde_json::json!({
                    "job": JobRecord::of(&j),
                    "run": RunRecord::of(&run),
                    "audit": audit,
                }))?;
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "job      {}\nstate    {}\nattempts {}/{}",
                j.id,
                j.state.name(),
                j.attempts,
                j.max_attempts
            );
            println!("error    {}", j.last_error.as_deref().unwrap_or("-"));
            let reader = Scope::new(j.tenant_id.clone(), PrincipalId::new("operator")?, vec![]);
            let run = store.get_run(&reader, j.run_id).await?;
            println!(
                "run      {} ({}) agent {}@{}",
                run.id,
                run.status.name(),
                run.agent.name,
                run.agent.version
            );
            if let Some(f) = &run.failure {
                println!("failure  {}", f.message);
            }
            let subject = format!("job {}", j.id);
            for a in store
                .list_audit(&reader, 1000)
                .await?
                .iter()
                .rev()
                .filter(|a| a.subject == subject)
            {
                println!("audit    {} {} by {}", a.at, a.action, a.actor);
            }
        }
        DlqCommand::Replay { store, which } => {
            let store = store::open(&store).await?.store;
            let ids = targets(store.as_ref(), &which).await?;
            let who = actor(&which);
            let mut done = Vec::new();
            for (i, id) in ids.iter().enumerate() {
                let j = store
                    .replay(&sys, *id, &who)
                    .await
                    .with_context(|| format!("failed to replay job {id}"))?;
                done.push(JobRecord::of(&j));
                if which.json {
                    continue;
                }
                println!(
                    "replayed {}/{}: job {} (run {}) is ready again",
                    i + 1,
                    ids.len(),
                    j.id,
                    j.run_id
                );
            }
            if which.json {
                print_json(&done)?;
            }
        }
        DlqCommand::Discard {
            store,
            which,
            reason,
        } => {
            let opened = store::open(&store).await?;
            let store = opened.store;
            let engine = Engine::builder()
                .dyn_store(store.clone())
                .worker_id("forge-dlq")
                .build()?;
            let ids = targets(store.as_ref(), &which).await?;
            let who = actor(&which);
            let mut done = Vec::new();
            for (i, id) in ids.iter().enumerate() {
                let j = store
                    .discard(&sys, *id, &who)
                    .await
                    .with_context(|| format!("failed to discard job {id}"))?;
                let reader =
                    Scope::new(j.tenant_id.clone(), PrincipalId::new(who.clone())?, vec![]);
                let out = engine.abandon(&reader, j.run_id, &reason).await?;
                done.push(JobRecord::of(&j));
                if which.json {
                    continue;
                }
                println!(
                    "discarded {}/{}: job {}; run {} {}",
                    i + 1,
                    ids.len(),
                    j.id,
                    j.run_id,
                    out.status.name()
                );
            }
            if which.json {
                print_json(&done)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn targets(
    store: &dyn forge_core::ports::store::Store,
    which: &Which,
) -> anyhow::Result<Vec<JobId>> {
    if which.all {
        return Ok(store
            .dead_jobs(&system(), usize::MAX)
            .await?
            .into_iter()
            .map(|j| j.id)
            .collect());
    }
    if which.jobs.is_empty() {
        bail!("name the jobs to act on, or pass --all");
    }
    for id in &which.jobs {
        let j = store.job(&system(), *id).await?;
        if j.state != JobState::Dead {
            bail!("job {id} is {}, not dead", j.state.name());
        }
    }
    Ok(which.jobs.clone())
}
