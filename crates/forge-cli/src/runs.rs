//! `forge runs list | show | events | erase`: what an operator needs to see a run without SQL — a
//! tenant's runs by state and thread, one run's detail (lease, job, interactions, failure), and its
//! committed events, printed as `forge run` prints them (or as JSON lines) — and to erase an
//! ended run or a whole thread (`forge_core::ports::erasure`), audited.

use std::process::ExitCode;

use forge_core::id::{RunId, ThreadId};
use forge_core::ports::interaction::InteractionFilter;
use forge_core::ports::store::RunQuery;
use forge_core::scope::{PrincipalId, Scope, TenantId};
use forge_core::stream::StreamItem;

use crate::ids::IdPrefix;
use crate::records::{RunRecord, print_json, print_list};
use crate::store::{self, StoreArgs};

/// `forge runs` subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum RunsCommand {
    /// A tenant's runs, newest first.
    List {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        tenant: TenantArg,
        /// Only runs in this state: queued, running, waiting, completed, failed or cancelled.
        #[arg(long)]
        status: Option<String>,
        /// Only runs of this thread.
        #[arg(long)]
        thread: Option<ThreadId>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// As a JSON array of runs.
        #[arg(long)]
        json: bool,
    },
    /// One run: its state, agent, lease, failure and interactions.
    Show {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        tenant: TenantArg,
        /// The run (its id, or the id's unique beginning).
        run: IdPrefix,
        /// As a JSON run.
        #[arg(long)]
        json: bool,
    },
    /// A run's committed events, as `forge run` prints them.
    Events {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        tenant: TenantArg,
        /// The run (its id, or the id's unique beginning).
        run: IdPrefix,
        /// Only events after this sequence number.
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// Print events as JSON lines.
        #[arg(long)]
        json: bool,
        /// Keep printing as the run goes on, until it ends (as `forge run` prints it; from
        /// another process's worker, each committed step).
        #[arg(long)]
        follow: bool,
    },
    /// Asks a run to cancel: a queued or waiting run ends `cancelled` when a worker next takes
    /// it up, a running one when its worker next checks (within its cancel poll). An ended run
    /// is left as it is.
    Cancel {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        tenant: TenantArg,
        /// The run (its id, or the id's unique beginning).
        run: IdPrefix,
        /// As the JSON run, after the request.
        #[arg(long)]
        json: bool,
    },
    /// Erases an ended run, or with `--thread` a thread and all its runs: messages, events,
    /// approvals, questions, jobs (and the thread's session state). Model calls stay in the
    /// tenant's usage, unlinked. Audited as `run.erased` / `thread.erased` by `--actor`.
    Erase {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        tenant: TenantArg,
        /// The run (its id, or the id's unique beginning).
        #[arg(required_unless_present = "thread", conflicts_with = "thread")]
        run: Option<IdPrefix>,
        /// The thread, instead of one run.
        #[arg(long)]
        thread: Option<ThreadId>,
        /// Who erases, for the audit trail.
        #[arg(long, default_value = "operator")]
        actor: String,
        /// Print what was removed as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Whose runs: operators read one tenant at a time.
#[derive(Debug, clap::Args)]
pub(crate) struct TenantArg {
    /// The tenant.
    #[arg(long, default_value = "local", env = "FORGE_TENANT")]
    tenant: String,
}

impl TenantArg {
    fn scope(&self) -> anyhow::Result<Scope> {
        self.scope_of("operator")
    }

    fn scope_of(&self, principal: &str) -> anyhow::Result<Scope> {
        Ok(Scope::new(
            TenantId::new(self.tenant.clone())?,
            PrincipalId::new(principal)?,
            vec![],
        ))
    }
}

fn row(run: &RunRecord) -> String {
    format!(
        "{}  {:<9}  {}@{}  thread {}  {}",
        run.id, run.status, run.agent, run.agent_version, run.thread, run.created_at
    )
}

/// Runs one `forge runs` subcommand.
pub(crate) async fn runs(command: RunsCommand) -> anyhow::Result<ExitCode> {
    match command {
        RunsCommand::List {
            store,
            tenant,
            status,
            thread,
            limit,
            json,
        } => {
            let store = store::open(&store).await?.store;
            let mut query = RunQuery::newest(limit);
            if let Some(status) = status {
                query = query.status(&status)?;
            }
            query.thread_id = thread;
            let found = store.query_runs(&tenant.scope()?, &query).await?;
            let records: Vec<RunRecord> = found.iter().map(RunRecord::of).collect();
            print_list(json, &records, "no runs", row)?;
        }
        RunsCommand::Show {
            store,
            tenant,
            run,
            json,
        } => {
            let store = store::open(&store).await?.store;
            let scope = tenant.scope()?;
            let run = crate::ids::run(store.as_ref(), &scope, &run).await?;
            let run = store.get_run(&scope, run).await?;
            if json {
                let mut record = RunRecord::of(&run);
                record.interactions = Some(
                    store
                        .list_interactions(&scope, InteractionFilter::Run(run.id))
                        .await?,
                );
                print_json(&record)?;
                return Ok(ExitCode::SUCCESS);
            }
            println!("run       {}", run.id);
            println!(
                "status    {}",
                run.shown_status(forge_core::time::Clock::now(&forge_core::time::SystemClock))
                    .name()
            );
            if let forge_core::run::RunStatus::Waiting(why) = run.status {
                println!("waits for {}", why.name());
            }
            println!("agent     {}@{}", run.agent.name, run.agent.version);
            println!("thread    {}", run.thread_id);
            println!("principal {}", run.principal_id.as_str());
            println!("created   {}", run.created_at);
            println!("updated   {}", run.updated_at);
            println!(
                "step      {} (events 1..={})",
                run.checkpoint.step, run.last_seq
            );
            match &run.lease {
                Some(l) => println!(
                    "lease     {} until {} (token {})",
                    l.holder, l.expires_at, l.token
                ),
                None => println!("lease     -"),
            }
            if run.cancel_requested {
                println!("cancel    requested");
            }
            if let Some(f) = &run.failure {
                println!("failure   {}: {}", f.code.name(), f.message);
            }
            for i in store
                .list_interactions(&scope, InteractionFilter::Run(run.id))
                .await?
            {
                println!(
                    "interaction {} {} (expires {})",
                    i.id,
                    i.status.name(),
                    i.expires_at
                );
            }
        }
        RunsCommand::Events {
            store,
            tenant,
            run,
            after,
            json,
            follow,
        } => {
            let reach = crate::print::Reach::of(&store.url, &store.pg_mode, &tenant.tenant);
            let store = store::open(&store).await?.store;
            let scope = tenant.scope()?;
            let run = crate::ids::run(store.as_ref(), &scope, &run).await?;
            let printer = crate::print::Printer::new(json).reach(reach);
            if follow {
                follow_events(store, scope, run, after, &printer).await?;
            } else {
                let mut from = after;
                loop {
                    let page = store.read_events(&scope, run, from, 500).await?;
                    let Some(last) = page.last() else { break };
                    from = last.seq;
                    for event in page {
                        printer.item(&StreamItem::Committed { event });
                    }
                }
            }
            printer.finish();
        }
        RunsCommand::Cancel {
            store,
            tenant,
            run,
            json,
        } => {
            let store = store::open(&store).await?.store;
            let scope = tenant.scope()?;
            let run = crate::ids::run(store.as_ref(), &scope, &run).await?;
            let found = store.get_run(&scope, run).await?;
            let asked = store.request_cancel(&scope, run).await?;
            if json {
                let now = store.get_run(&scope, run).await.unwrap_or(found);
                print_json(&RunRecord::of(&now))?;
            } else if asked {
                println!(
                    "asked run {run} to cancel: a queued or waiting run ends when a worker \
                     next takes it up, a running one at its worker's next check"
                );
            } else {
                let now = store.get_run(&scope, run).await.unwrap_or(found);
                println!(
                    "run {run} is {}: nothing to cancel",
                    now.shown_status(forge_core::time::Clock::now(&forge_core::time::SystemClock))
                        .name()
                );
            }
        }
        RunsCommand::Erase {
            store,
            tenant,
            run,
            thread,
            actor,
            json,
        } => {
            use forge_core::ports::erasure::Erase;
            let reach = crate::print::Reach::of(&store.url, &store.pg_mode, &tenant.tenant);
            let store = store::open(&store).await?.store;
            let target = match (run, thread) {
                (Some(run), _) => {
                    Erase::Run(crate::ids::run(store.as_ref(), &tenant.scope()?, &run).await?)
                }
                (None, Some(thread)) => Erase::Thread(thread),
                (None, None) => anyhow::bail!("name a run, or a thread with --thread"),
            };
            let erased = match store.erase(&tenant.scope_of(&actor)?, target, &actor).await {
                Err(e @ forge_core::Error::ThreadBusy { .. }) => {
                    let forge_core::Error::ThreadBusy { active, .. } = &e else {
                        unreachable!("matched above")
                    };
                    let cancel = match reach {
                        crate::print::Reach::Flags(flags) => {
                            format!("`forge runs cancel {active}{flags}`")
                        }
                        crate::print::Reach::Nowhere => "`forge runs cancel`".into(),
                    };
                    let why = format!(
                        "run {active} has not ended, and only what has ended is erased: cancel \
                         it with {cancel}, then erase once it has ended"
                    );
                    // The busy thread stays in the chain: a conflict's exit status.
                    return Err(anyhow::Error::new(e).context(why));
                }
                other => other?,
            };
            if json {
                println!("{}", serde_json::to_string(&erased)?);
            } else {
                println!(
                    "erased {}: {} runs, {} messages, {} events, {} interactions, {} jobs; \
                     {} model calls kept in the usage totals, unlinked",
                    target.subject(),
                    erased.runs,
                    erased.messages,
                    erased.events,
                    erased.interactions,
                    erased.jobs,
                    erased.model_calls_unlinked
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints `run`'s committed events after `after` as they are committed, until it ends.
async fn follow_events(
    store: std::sync::Arc<dyn forge_core::ports::store::Store>,
    scope: Scope,
    run: RunId,
    after: u64,
    printer: &crate::print::Printer,
) -> anyhow::Result<()> {
    use futures_util::StreamExt as _;

    let cx = forge_live::StreamContext {
        runs: store,
        cache: std::sync::Arc::new(forge_live::LogCache::default()),
        tail: None,
        // No wake-ups reach this process from the one executing the run: read every 250 ms.
        settings: forge_live::StreamSettings {
            poll: std::time::Duration::from_millis(250),
            ..Default::default()
        },
        shutdown: tokio_util::sync::CancellationToken::new(),
    };
    let bus = forge_live::EventBus::default();
    let events = forge_live::run_events(cx, &bus, scope, run, after);
    let mut events = std::pin::pin!(events);
    while let Some(item) = events.next().await {
        let item = item?;
        let ended = matches!(&item, StreamItem::Committed { event } if event.kind.is_terminal());
        printer.item(&item);
        if ended {
            break;
        }
    }
    Ok(())
}
