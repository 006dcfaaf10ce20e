//! The engine: registries of agents, models and tools over the storage ports, and the run loop.
//!
//! `parts` is what an `Engine` is made of (five private parts, one concern each); `builder`
//! assembles it; `components` is what it hands the rest of the crate (the process services and
//! the components of a run); `run_loop` runs a run step by step under its lease and commits
//! each step; `abandon` ends a dead-lettered run; `interactions` is the human-in-the-loop API
//! (listing, who may approve, resolving); `discovery` is what a scope may learn of its tools and
//! skills; `config_audit` puts the configuration on record.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use forge_core::agent::{AgentDefinition, AgentRef};
use forge_core::event::RunEventKind;
use forge_core::id::{IdGenerator, MessageId, RunId, ThreadId, UuidV7Generator};
use forge_core::interaction::{
    Decision, Interaction, InteractionRequest, InteractionStatus, Resolve,
};
use forge_core::message::{Message, Role};
use forge_core::metering::{ModelCall, Prices, Quota};
use forge_core::part::Part;
use forge_core::ports::interaction::{InteractionFilter, InteractionStore, Resolved};
use forge_core::ports::model::ModelProvider;
use forge_core::ports::policy::Authorizer;
use forge_core::ports::store::{LeasedRun, NewRun, RunStore, ThreadStore};
use forge_core::ports::tool::{ApprovalRule, Tool};
use forge_core::ports::usage::{CallFilter, UsageLedger};
use forge_core::run::{FailureCode, Run, RunFailure, RunInput, RunLease, RunPurpose, RunStatus};
use forge_core::scope::{PrincipalId, Scope, TenantId};
use forge_core::time::{Clock, SystemClock};
use tokio_util::sync::CancellationToken;

use crate::error::EngineError;
use crate::meter::Quotas;
use crate::observer::RunObserver;
use crate::tools::ToolRegistry;
use parts::{Catalog, Guards, Local, Services, Stores};

mod abandon;
mod builder;
mod components;
mod config_audit;
mod discovery;
mod interactions;
mod keys;
mod parts;
mod run_loop;

pub use config_audit::{CONFIG_ACTION, DEPLOYMENT_TENANT};

pub use builder::EngineBuilder;
pub use keys::KeyedRun;

/// The longest thread title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;

/// A title is text without NUL, at most [`MAX_TITLE_CHARS`] characters.
fn check_title(title: &str) -> Result<(), forge_core::Error> {
    forge_core::input::check_text("the title", title)?;
    if title.chars().count() > MAX_TITLE_CHARS {
        return Err(forge_core::Error::invalid(format!(
            "a title is at most {MAX_TITLE_CHARS} characters"
        )));
    }
    Ok(())
}

/// A thread to create (by [`Engine::create_thread`], or with a run: `NewRun::new_thread`): its
/// title and session state meet the input rules of every store.
fn check_new_thread(new: &forge_core::ports::store::NewThread) -> Result<(), forge_core::Error> {
    if let Some(title) = &new.title {
        check_title(title)?;
    }
    forge_core::input::check("the session state", &new.state)
}

/// How a call to [`Engine::execute`] left the run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// The run's status after the last committed step.
    pub status: RunStatus,
    /// Sequence number of its last committed event.
    pub last_seq: u64,
    /// Why it failed, if it did.
    pub failure: Option<RunFailure>,
    /// Whether the execution's last commit also completed the job it ran under
    /// ([`RunControl::job`]), so that the worker has nothing left to settle.
    pub job_completed: bool,
}

/// Signals that steer an execution from outside.
#[derive(Debug, Clone, Default)]
pub struct RunControl {
    /// Cancel the run now, mid-stream or mid-tools; it ends `cancelled`.
    pub cancel: CancellationToken,
    /// Stop after the step in progress is committed; the run stays `running` for another worker.
    pub drain: CancellationToken,
    /// The span the execution's spans are children of (a worker's claim span; none: the
    /// execution's span starts a trace).
    pub trace: forge_core::telemetry::Span,
    /// The queue's claim the run is executed under (a worker's): the commit that ends or parks
    /// the run completes it in the same write ([`forge_core::ports::store::StepCommit::job`]).
    /// A claim of another run or tenant is ignored.
    pub job: Option<forge_core::ports::queue::ClaimedJob>,
    /// The run's lease, taken with the claim ([`forge_core::ports::queue::Claimed::lease`]), the
    /// run as it stood under it and, when read with them, its history: the execution starts from
    /// these instead of taking the lease itself. A lease of another run is ignored.
    pub leased: Option<forge_core::ports::store::LeasedRun>,
    /// When `leased` was asked for (before the claim's round trip): the execution vouches for
    /// the lease until then plus its time to live, less a margin, and renews it in the store
    /// before acting past that. Without it, the lease is renewed before the first model call.
    pub leased_at: Option<std::time::Instant>,
}

/// The longest range a usage report covers: its calls are read whole, so a range bounds the
/// memory one report (a GraphQL `usage` query) can take.
pub const MAX_USAGE_RANGE: Duration = Duration::from_secs(92 * 24 * 3600);

/// Refuses an empty, reversed or over-long usage range.
fn check_range(
    from: forge_core::time::Timestamp,
    to: forge_core::time::Timestamp,
) -> Result<(), EngineError> {
    if to <= from {
        return Err(forge_core::Error::invalid("the range must end after it starts").into());
    }
    if to > from.plus(MAX_USAGE_RANGE) {
        return Err(forge_core::Error::invalid(format!(
            "a usage range covers at most {} days: ask for it in parts",
            MAX_USAGE_RANGE.as_secs() / 86_400
        ))
        .into());
    }
    Ok(())
}

/// Executes runs. Cheap to share behind an `Arc`. Its parts, one concern each, are in
/// `engine::parts`.
pub struct Engine {
    stores: Stores,
    catalog: Catalog,
    guards: Guards,
    services: Services,
    local: Local,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("worker_id", &self.local.worker_id)
            .field("models", &self.catalog.models.keys().collect::<Vec<_>>())
            .field("tools", &self.catalog.tools)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// The engine of these parts (the builder checks them first).
    fn new(
        stores: Stores,
        catalog: Catalog,
        guards: Guards,
        services: Services,
        local: Local,
    ) -> Self {
        Self {
            stores,
            catalog,
            guards,
            services,
            local,
        }
    }

    /// Starts building an engine.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// The registered agent version.
    pub fn agent(&self, agent: &AgentRef) -> Result<Arc<AgentDefinition>, EngineError> {
        self.catalog
            .agents
            .get(&(agent.name.clone(), agent.version.clone()))
            .cloned()
            .ok_or_else(|| EngineError::UnknownAgent {
                name: agent.name.clone(),
                version: agent.version.clone(),
            })
    }

    /// Asks the policy engine (failing closed): for callers that guard their own resources, such
    /// as a server deciding who may read or run on a thread.
    pub fn authorize(
        &self,
        request: &forge_core::ports::policy::PolicyRequest<'_>,
    ) -> forge_core::ports::policy::PolicyDecision {
        self.guards.authorizer.decide(request)
    }

    /// The engine's clock's time (what leases and deadlines are measured against).
    pub fn now(&self) -> forge_core::time::Timestamp {
        self.services.clock.now()
    }

    /// Every registered agent version, by name then version.
    pub fn agents(&self) -> Vec<Arc<AgentDefinition>> {
        let mut all: Vec<_> = self.catalog.agents.values().cloned().collect();
        all.sort_by(|a, b| {
            a.agent
                .name
                .cmp(&b.agent.name)
                .then_with(|| a.agent.version.cmp(&b.agent.version))
        });
        all
    }

    /// The thread store.
    pub fn threads(&self) -> &Arc<dyn ThreadStore> {
        &self.stores.threads
    }

    /// The price table runs are metered with (its currency names the unit of every cost).
    pub fn prices(&self) -> &forge_core::metering::Prices {
        &self.catalog.prices
    }

    /// Its telemetry.
    pub fn telemetry(&self) -> &forge_core::telemetry::Telemetry {
        &self.services.telemetry
    }

    /// The run store (and event log).
    pub fn runs(&self) -> &Arc<dyn RunStore> {
        &self.stores.runs
    }

    /// Asks a run to cancel ([`RunStore::request_cancel`]): a step in flight in this process
    /// stops at once (its model stream and tool calls are abandoned, the usage reported so far
    /// is settled) and the run ends `cancelled`; one executing in another process stops within
    /// that engine's cancel poll. Returns whether this call asked: `false` when the run had
    /// ended or was already asked.
    pub async fn request_cancel(&self, scope: &Scope, run: RunId) -> Result<bool, EngineError> {
        let asked = self.stores.runs.request_cancel(scope, run).await?;
        self.local.cancels.fire(run);
        Ok(asked)
    }

    /// Creates a queued run of a registered agent on a thread, with the user's input, enqueued
    /// behind any active run of the thread.
    pub async fn start_run(
        &self,
        scope: &Scope,
        thread_id: ThreadId,
        agent: &AgentRef,
        input: Vec<Part>,
    ) -> Result<Run, EngineError> {
        self.submit(scope, NewRun::new(thread_id, agent.clone(), input))
            .await
    }

    /// Creates a thread; its title and session state meet the input rules of every store.
    pub async fn create_thread(
        &self,
        scope: &Scope,
        new: forge_core::ports::store::NewThread,
    ) -> Result<forge_core::thread::Thread, EngineError> {
        check_new_thread(&new)?;
        Ok(self.stores.threads.create_thread(scope, new).await?)
    }

    /// Retitles, archives or restores a thread. A title is at most [`MAX_TITLE_CHARS`]
    /// characters of text without NUL.
    pub async fn update_thread(
        &self,
        scope: &Scope,
        thread: forge_core::id::ThreadId,
        change: &forge_core::thread::ThreadChange,
    ) -> Result<forge_core::thread::Thread, EngineError> {
        if let Some(Some(title)) = &change.title {
            check_title(title)?;
        }
        Ok(self
            .stores
            .threads
            .update_thread(scope, thread, change)
            .await?)
    }

    /// Replaces a thread's session state if it is still at `expected_version`, the version
    /// the caller read: a stale version is a conflict (`VersionConflict` for
    /// [`SESSION_STATE`](forge_core::ports::store::SESSION_STATE)), never a lost update. A run
    /// in flight on the thread sees the new state from its next step (a step computed from the
    /// old state is refused at its commit and computed again).
    pub async fn update_thread_state(
        &self,
        scope: &Scope,
        thread: forge_core::id::ThreadId,
        expected_version: u64,
        values: serde_json::Map<String, serde_json::Value>,
    ) -> Result<forge_core::thread::SessionState, EngineError> {
        forge_core::input::check("the session state", &values)?;
        Ok(self
            .stores
            .threads
            .put_session_state(scope, thread, expected_version, values)
            .await?)
    }

    /// Compacts a thread on request: queues a run of `agent` with purpose
    /// [`RunPurpose::Compaction`] behind any active run of the thread (so it never writes while
    /// another run does). The run summarises all but the agent's `compaction.keep_recent`
    /// newest messages with its summary model, metered like any model call, emits
    /// `thread.compacted` and completes; it adds no message to the thread.
    pub async fn compact_thread(
        &self,
        scope: &Scope,
        thread: ThreadId,
        agent: &AgentRef,
    ) -> Result<Run, EngineError> {
        let mut new = NewRun::new(
            thread,
            agent.clone(),
            vec![Part::text("Compact this thread's history.")],
        );
        new.purpose = RunPurpose::Compaction;
        self.submit(scope, new).await
    }

    /// Creates a run (and its job) of a registered agent, with the given start strategy.
    ///
    /// What a caller sends is input, never a grant: files and any tool results in it are marked
    /// untrusted whatever the caller claimed. Secrets in its text are scrubbed before it is
    /// stored or shown to a model.
    ///
    /// A run given its id (`new.id`, an idempotency key's claim, [`Engine::claim_run_key`]) is
    /// answered as stored: a racing request with the key may have made it first.
    pub async fn submit(&self, scope: &Scope, new: NewRun) -> Result<Run, EngineError> {
        let Some(id) = new.id else {
            return Ok(self.admit(scope, new, false).await?.0);
        };
        let created = self.admit(scope, new, false).await;
        match self.stores.runs.get_run(scope, id).await {
            Ok(run) => Ok(run),
            Err(e) => Err(created.err().unwrap_or_else(|| e.into())),
        }
    }

    /// Creates a run as [`Engine::submit`] does and executes it here, as
    /// [`Engine::execute_with`] would right after: for an application that runs its agents
    /// inline rather than through workers. The run is leased as it is created, where the store
    /// can in the same transaction (PostgreSQL: one commit fewer before the first model call),
    /// so no worker can take it between the two. Its job stays in the queue as `submit` leaves
    /// it: a worker that claims it later finds the run ended and completes it, or resumes the run
    /// if this process died executing it. Returns the run's id with its outcome.
    pub async fn submit_and_execute(
        &self,
        scope: &Scope,
        new: NewRun,
        control: &RunControl,
        observer: &dyn RunObserver,
    ) -> Result<(RunId, RunOutcome), EngineError> {
        let asked = std::time::Instant::now();
        let (run, leased) = self.admit(scope, new, true).await?;
        let control = RunControl {
            leased,
            leased_at: Some(asked),
            ..control.clone()
        };
        let outcome = self.execute_with(scope, run.id, &control, observer).await?;
        Ok((run.id, outcome))
    }

    /// Checks and creates `new` (see [`Engine::submit`]); with `lease`, through
    /// [`RunStore::create_run_leased`] for this engine, giving the run under its lease.
    async fn admit(
        &self,
        scope: &Scope,
        mut new: NewRun,
        lease: bool,
    ) -> Result<(Run, Option<LeasedRun>), EngineError> {
        self.agent(&new.agent)?;
        let interrupts = new.strategy == forge_core::ports::store::StartStrategy::Interrupt;
        if let Some(thread) = &new.new_thread {
            check_new_thread(thread)?;
        }
        forge_core::input::check("the run's input", &new.input)?;
        for part in &mut new.input {
            match part {
                Part::File(f) => {
                    // The store's description, never the caller's: a file the tenant does not
                    // have is refused, and its name, type and size are what inspection found.
                    let files = self.catalog.files.as_ref().ok_or_else(|| {
                        forge_core::Error::invalid("this deployment does not accept files")
                    })?;
                    *f = files.describe(scope, &f.file_id).await?;
                    f.trust = forge_core::part::Trust::Untrusted;
                }
                Part::ToolResult(r) => {
                    r.trust = forge_core::part::Trust::Untrusted;
                    self.services.redactor.redact_json(&mut r.output);
                }
                Part::Text(t) => {
                    if let std::borrow::Cow::Owned(scrubbed) =
                        self.services.redactor.redact(&t.text)
                    {
                        t.text = scrubbed;
                    }
                }
                _ => {}
            }
        }
        // The enqueue is a producer span, child of the caller's (`new.traceparent`); the job keeps
        // its context, so the worker's claim continues this trace. Without a tracer the caller's
        // context is kept as it came.
        let parent = new
            .traceparent
            .as_deref()
            .and_then(forge_core::telemetry::TraceContext::parse);
        // Without a caller's traceparent, the span the caller runs in (a server's request).
        let span = self.services.telemetry.span(
            forge_core::telemetry::SpanName::RunEnqueue,
            match &parent {
                Some(remote) => forge_core::telemetry::Parent::Remote(Some(remote)),
                None => forge_core::telemetry::Parent::Current,
            },
        );
        span.set("agent", new.agent.name.as_str().into());
        if let Some(ctx) = span.context() {
            new.traceparent = Some(ctx.traceparent());
        }
        let created = if lease {
            // Held apart from this process's worker: its claim of the run's job (which may take
            // the lease in the same write) must find the lease another's, not its own to take
            // again, which would fence this execution mid-step.
            let holder = format!("{}/inline", self.local.worker_id);
            self.stores
                .runs
                .create_run_leased(
                    scope,
                    new,
                    &holder,
                    self.local.lease_ttl,
                    crate::compaction::HISTORY_PAGE,
                )
                .await
                .map(|leased| (leased.run.clone(), Some(leased)))
        } else {
            self.stores
                .runs
                .create_run(scope, new)
                .await
                .map(|run| (run, None))
        };
        match &created {
            Ok((run, leased)) => {
                span.set("run_id", run.id.to_string().into());
                // The store asked the thread's runs to cancel; those executing here stop now.
                if interrupts {
                    self.local.cancels.fire_thread(run.thread_id, run.id);
                }
                // A run leased here is executed here: no worker is woken to find it held.
                if leased.is_none() {
                    self.local.work.notify_one();
                }
            }
            Err(e) => span.fail(forge_core::telemetry::error_code(e)),
        }
        span.end();
        Ok(created?)
    }

    /// Erases a thread or a run of the caller's tenant with everything recorded about it,
    /// audited with the caller as actor (`forge_core::ports::erasure`). Who may erase is the
    /// caller's to decide (the server asks for the role `admin`).
    pub async fn erase(
        &self,
        scope: &Scope,
        target: forge_core::ports::erasure::Erase,
    ) -> Result<forge_core::ports::erasure::Erased, EngineError> {
        Ok(self
            .stores
            .erasure
            .erase(scope, target, scope.principal_id().as_str())
            .await?)
    }

    /// One run's metered model calls (reservation, settlement, cost), oldest first.
    pub async fn run_usage(
        &self,
        scope: &Scope,
        run: RunId,
    ) -> Result<Vec<ModelCall>, EngineError> {
        Ok(self
            .stores
            .ledger
            .model_calls(scope, CallFilter::Run(run))
            .await?)
    }

    /// The tenant's calls in `[from, to)` rolled up per UTC day and model.
    pub async fn rollups(
        &self,
        scope: &Scope,
        from: forge_core::time::Timestamp,
        to: forge_core::time::Timestamp,
    ) -> Result<Vec<forge_core::metering::Rollup>, EngineError> {
        let calls = self.calls_between(scope, from, to).await?;
        Ok(forge_core::metering::rollup(&calls))
    }

    /// The tenant's calls reserved in `[from, to)`, a range [`check_range`] allows.
    async fn calls_between(
        &self,
        scope: &Scope,
        from: forge_core::time::Timestamp,
        to: forge_core::time::Timestamp,
    ) -> Result<Vec<ModelCall>, EngineError> {
        check_range(from, to)?;
        Ok(self
            .stores
            .ledger
            .model_calls(scope, CallFilter::Between(from, to))
            .await?)
    }

    /// The tenant's calls reserved in `[from, to)` summed per run, the most expensive run first.
    pub async fn run_totals(
        &self,
        scope: &Scope,
        from: forge_core::time::Timestamp,
        to: forge_core::time::Timestamp,
    ) -> Result<Vec<forge_core::metering::RunTotal>, EngineError> {
        let calls = self.calls_between(scope, from, to).await?;
        Ok(forge_core::metering::per_run(&calls))
    }

    /// The tenant's quota and how much of it the current period has used (what a reservation
    /// is checked against); `None` when the tenant has no quota.
    pub async fn quota_use(
        &self,
        scope: &Scope,
    ) -> Result<Option<forge_core::metering::QuotaUse>, EngineError> {
        let Some(quota) = self.catalog.quotas.of(scope.tenant_id()) else {
            return Ok(None);
        };
        let now = self.services.clock.now();
        let period_start = quota.period.start(now);
        // Calls count in the period they were reserved in; the period's are reserved in it.
        let until = now.plus(std::time::Duration::from_secs(1));
        let calls = self.calls_between(scope, period_start, until).await?;
        let (tokens, cost_micros) =
            forge_core::metering::charged_in_period(&calls, scope.tenant_id(), period_start);
        Ok(Some(forge_core::metering::QuotaUse {
            quota,
            period_start,
            tokens,
            cost_micros,
        }))
    }

    /// The reconciliation report for the tenant's calls in `[from, to)`: each estimate against
    /// the provider's actual.
    pub async fn reconciliation(
        &self,
        scope: &Scope,
        from: forge_core::time::Timestamp,
        to: forge_core::time::Timestamp,
    ) -> Result<Vec<forge_core::metering::Drift>, EngineError> {
        let calls = self.calls_between(scope, from, to).await?;
        Ok(forge_core::metering::reconcile(&calls))
    }
}
