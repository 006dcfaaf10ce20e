//! What `--json` prints: one JSON document per command — an array for a list (`[]` when there is
//! nothing, never silence), an object for one record — in one shape per kind of record, the
//! README's "Scripting" section documents them. Streams of events (`forge run --json`, `forge
//! runs events --json`) are JSON lines instead, one stream item a line.

use forge_core::interaction::Interaction;
use forge_core::ports::queue::JobInfo;
use forge_core::run::Run;
use forge_core::time::{Clock, SystemClock, Timestamp};
use serde::Serialize;

/// Prints `value` as one JSON document.
pub(crate) fn print_json<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Prints a list: as a JSON array, or a line per item for a person — and `empty` when there is
/// none, so an empty result is said, not left to be guessed from silence.
pub(crate) fn print_list<T: Serialize>(
    json: bool,
    items: &[T],
    empty: &str,
    human: impl Fn(&T) -> String,
) -> anyhow::Result<()> {
    if json {
        return print_json(items);
    }
    if items.is_empty() {
        println!("{empty}");
    }
    for item in items {
        println!("{}", human(item));
    }
    Ok(())
}

/// A run (`forge runs list`, `runs show`, `submit`, `runs cancel`).
#[derive(Debug, Serialize)]
pub(crate) struct RunRecord {
    /// The run's id.
    pub(crate) id: String,
    /// `queued`, `running`, `waiting`, `completed`, `failed` or `cancelled`.
    pub(crate) status: &'static str,
    /// What a waiting run waits for (`approval`, `answer`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) waits_for: Option<&'static str>,
    /// The agent's name.
    pub(crate) agent: String,
    /// The agent's version.
    pub(crate) agent_version: String,
    /// The run's thread.
    pub(crate) thread: String,
    /// Who started it.
    pub(crate) principal: String,
    /// When it was created (RFC 3339).
    pub(crate) created_at: Timestamp,
    /// When it last changed.
    pub(crate) updated_at: Timestamp,
    /// Steps begun.
    pub(crate) step: u32,
    /// The sequence number of its last committed event.
    pub(crate) last_seq: u64,
    /// Whether a cancel was asked for.
    pub(crate) cancel_requested: bool,
    /// Its lease, while a worker holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) lease: Option<LeaseRecord>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) failure: Option<FailureRecord>,
    /// Its interactions (`runs show` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) interactions: Option<Vec<Interaction>>,
}

/// A run's lease.
#[derive(Debug, Serialize)]
pub(crate) struct LeaseRecord {
    /// The worker holding it.
    pub(crate) holder: String,
    /// Until when, unless renewed.
    pub(crate) expires_at: Timestamp,
    /// Its fencing token.
    pub(crate) token: u64,
}

/// Why a run failed.
#[derive(Debug, Serialize)]
pub(crate) struct FailureRecord {
    /// The failure's code (`provider_error`, `step_limit_exceeded`, …).
    pub(crate) code: &'static str,
    /// What happened.
    pub(crate) message: String,
}

impl RunRecord {
    /// `run` as it is shown now.
    pub(crate) fn of(run: &Run) -> Self {
        let status = run.shown_status(SystemClock.now());
        Self {
            id: run.id.to_string(),
            status: status.name(),
            waits_for: match run.status {
                forge_core::run::RunStatus::Waiting(why) => Some(why.name()),
                _ => None,
            },
            agent: run.agent.name.clone(),
            agent_version: run.agent.version.clone(),
            thread: run.thread_id.to_string(),
            principal: run.principal_id.as_str().to_owned(),
            created_at: run.created_at,
            updated_at: run.updated_at,
            step: run.checkpoint.step,
            last_seq: run.last_seq,
            cancel_requested: run.cancel_requested,
            lease: run.lease.as_ref().map(|l| LeaseRecord {
                holder: l.holder.to_string(),
                expires_at: l.expires_at,
                token: l.token,
            }),
            failure: run.failure.as_ref().map(|f| FailureRecord {
                code: f.code.name(),
                message: f.message.clone(),
            }),
            interactions: None,
        }
    }
}

/// A job of the queue (`forge dlq list`, `dlq show`, `dlq replay`, `dlq discard`).
#[derive(Debug, Serialize)]
pub(crate) struct JobRecord {
    /// The job's id.
    pub(crate) id: String,
    /// Its tenant.
    pub(crate) tenant: String,
    /// Its run.
    pub(crate) run: String,
    /// `waiting`, `ready`, `claimed`, `completed`, `dead` or `discarded`.
    pub(crate) state: &'static str,
    /// Claims so far.
    pub(crate) attempts: u32,
    /// Claims allowed.
    pub(crate) max_attempts: u32,
    /// Why the last attempt failed.
    pub(crate) last_error: Option<String>,
}

impl JobRecord {
    /// `job`'s record.
    pub(crate) fn of(job: &JobInfo) -> Self {
        Self {
            id: job.id.to_string(),
            tenant: job.tenant_id.as_str().to_owned(),
            run: job.run_id.to_string(),
            state: job.state.name(),
            attempts: job.attempts,
            max_attempts: job.max_attempts,
            last_error: job.last_error.clone(),
        }
    }
}

/// A decision on an interaction (`forge interactions approve | reject | answer`).
#[derive(Debug, Serialize)]
pub(crate) struct DecisionRecord {
    /// The interaction.
    pub(crate) interaction: String,
    /// Its run.
    pub(crate) run: String,
    /// `approved`, `rejected` or `answered`.
    pub(crate) decision: &'static str,
    /// Whether this repeated an earlier decision under the same key.
    pub(crate) replayed: bool,
    /// Whether the run resumes (no other interaction holds it).
    pub(crate) resumed: bool,
}
