//! `forge threads compact | show`: ask for a thread's compaction (a queued run of purpose
//! `compaction`, executed by a worker like any run), and see a thread — its session state, its
//! summary and its newest messages, read one page, however long the thread.

use std::process::ExitCode;

use anyhow::Context;
use forge_core::id::ThreadId;
use forge_core::part::Part;
use forge_core::ports::store::{MessageWindow, NewRun};
use forge_core::run::RunPurpose;
use forge_core::scope::Scope;

use crate::store::{self, StoreArgs};

/// `forge threads` subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ThreadsCommand {
    /// Queue a compaction of a thread: a worker summarises all but the agent's
    /// `compaction.keep_recent` newest messages (8 by default) with its summary model, metered
    /// like any model call. It waits behind the thread's active run and adds no message.
    Compact {
        #[command(flatten)]
        store: StoreArgs,
        /// The agent file (TOML) whose model (or `compaction.model`) writes the summary.
        #[arg(long)]
        agent: std::path::PathBuf,
        /// Tenant of the thread.
        #[arg(long, default_value = "local", env = "FORGE_TENANT")]
        tenant: String,
        /// Principal asking.
        #[arg(long, default_value = "cli", env = "FORGE_PRINCIPAL")]
        principal: String,
        /// The thread.
        thread: ThreadId,
    },
    /// A thread: its session state, its summary and its newest messages.
    Show {
        #[command(flatten)]
        store: StoreArgs,
        /// Tenant of the thread.
        #[arg(long, default_value = "local", env = "FORGE_TENANT")]
        tenant: String,
        /// How many of the newest messages to print.
        #[arg(long, default_value_t = 10)]
        last: usize,
        /// Print one JSON object instead of lines for a person.
        #[arg(long)]
        json: bool,
        /// The thread.
        thread: ThreadId,
    },
}

/// Runs a `forge threads` subcommand.
pub(crate) async fn threads(command: ThreadsCommand) -> anyhow::Result<ExitCode> {
    match command {
        ThreadsCommand::Compact {
            store,
            agent,
            tenant,
            principal,
            thread,
        } => {
            let loaded = crate::agent_file::load(&agent)?;
            let store = store::open(&store).await?.store;
            let scope = Scope::parse(&tenant, &principal, &[])
                .context("failed to build the caller's scope")?;
            let mut new = NewRun::new(
                thread,
                loaded.definition.agent.clone(),
                vec![Part::text("Compact this thread's history.")],
            );
            new.purpose = RunPurpose::Compaction;
            let run = store.create_run(&scope, new).await?;
            let admission = if run.last_seq == 0 {
                "a worker runs it next"
            } else {
                "queued behind the thread's active run"
            };
            println!("compaction run {} on thread {thread} ({admission})", run.id);
            Ok(ExitCode::SUCCESS)
        }
        ThreadsCommand::Show {
            store,
            tenant,
            last,
            json,
            thread,
        } => {
            let store = store::open(&store).await?.store;
            let scope = Scope::parse(&tenant, "operator", &[])
                .context("failed to build the caller's scope")?;
            let t = store.get_thread(&scope, thread).await?;
            let newest = store
                .page_messages(&scope, thread, &MessageWindow::before(None, last))
                .await?;
            if json {
                println!(
                    "{}",
                    serde_json::json!({
                        "thread": t,
                        "newest_messages": newest,
                    })
                );
                return Ok(ExitCode::SUCCESS);
            }
            println!("thread {}  created {}", t.id, t.created_at);
            println!(
                "session state v{}: {}",
                t.state.version,
                serde_json::Value::Object(t.state.values.clone())
            );
            match &t.summary {
                Some(s) => println!(
                    "summary v{} by {} covers the first {} messages (through {}):\n  {}",
                    s.version, s.model, s.covered, s.through, s.text
                ),
                None => println!("no summary"),
            }
            for m in &newest {
                println!("[{}] {}", m.role.name(), m.text());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
