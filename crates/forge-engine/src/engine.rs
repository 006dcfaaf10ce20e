//! The engine: registries of agents, models and tools over the storage ports, and the run loop.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use forge_core::agent::{AgentDefinition, AgentRef};
use forge_core::event::{RunEvent, RunEventKind};
use forge_core::id::{IdGenerator, MessageId, RunId, ThreadId, UuidV7Generator};
use forge_core::interaction::{
    Decision, Interaction, InteractionRequest, InteractionStatus, Resolve,
};
use forge_core::message::{Message, Role};
use forge_core::metering::{ModelCall, Prices, Quota};
use forge_core::part::Part;
use forge_core::ports::audit::AuditRecord;
use forge_core::ports::interaction::{InteractionFilter, InteractionStore, Resolved};
use forge_core::ports::model::ModelProvider;
use forge_core::ports::policy::Authorizer;
use forge_core::ports::store::{NewRun, RunStore, StepCommit, ThreadStore};
use forge_core::ports::tool::{ApprovalRule, Tool};
use forge_core::ports::usage::{CallFilter, UsageLedger};
use forge_core::run::{
    Checkpoint, FailureCode, Run, RunFailure, RunInput, RunLease, RunStatus, transition,
};
use forge_core::scope::{PrincipalId, Scope, TenantId};
use forge_core::time::{Clock, SystemClock};
use tokio_util::sync::CancellationToken;

use crate::error::EngineError;
use crate::observer::RunObserver;
use crate::step::{StepEnd, StepRunner};
use crate::tools::ToolRegistry;

/// How a call to [`Engine::execute`] left the run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// The run's status after the last committed step.
    pub status: RunStatus,
    /// Sequence number of its last committed event.
    pub last_seq: u64,
    /// Why it failed, if it did.
    pub failure: Option<RunFailure>,
}

/// Signals that steer an execution from outside.
#[derive(Debug, Clone, Default)]
pub struct RunControl {
    /// Cancel the run now, mid-stream or mid-tools; it ends `cancelled`.
    pub cancel: CancellationToken,
    /// Stop after the step in progress is committed; the run stays `running` for another worker.
    pub drain: CancellationToken,
}

/// Tenant quotas: a default and per-tenant overrides.
#[derive(Debug, Clone, Default)]
pub(crate) struct Quotas {
    pub(crate) default: Option<Quota>,
    pub(crate) tenants: HashMap<TenantId, Quota>,
}

impl Quotas {
    pub(crate) fn of(&self, tenant: &TenantId) -> Option<Quota> {
        self.tenants.get(tenant).copied().or(self.default)
    }
}

/// Executes runs. Cheap to share behind an `Arc`.
pub struct Engine {
    pub(crate) threads: Arc<dyn ThreadStore>,
    pub(crate) runs: Arc<dyn RunStore>,
    pub(crate) interactions: Arc<dyn InteractionStore>,
    pub(crate) ledger: Arc<dyn UsageLedger>,
    pub(crate) audit: Option<Arc<dyn forge_core::ports::audit::AuditLog>>,
    pub(crate) prices: Prices,
    pub(crate) quotas: Quotas,
    pub(crate) approval_rule: Option<Arc<dyn ApprovalRule>>,
    pub(crate) authorizer: Arc<dyn Authorizer>,
    pub(crate) redactor: forge_core::redact::Redactor,
    /// Whether a person may approve an external write in a run they started.
    pub(crate) allow_self_approval: bool,
    pub(crate) models: HashMap<String, Arc<dyn ModelProvider>>,
    pub(crate) tools: ToolRegistry,
    pub(crate) skills: Arc<crate::skills::SkillLibrary>,
    agents: HashMap<(String, String), Arc<AgentDefinition>>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ids: Arc<dyn IdGenerator>,
    worker_id: String,
    lease_ttl: Duration,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("worker_id", &self.worker_id)
            .field("models", &self.models.keys().collect::<Vec<_>>())
            .field("tools", &self.tools)
            .finish_non_exhaustive()
    }
}

/// Assembles an [`Engine`].
#[derive(Default)]
pub struct EngineBuilder {
    threads: Option<Arc<dyn ThreadStore>>,
    runs: Option<Arc<dyn RunStore>>,
    interactions: Option<Arc<dyn InteractionStore>>,
    ledger: Option<Arc<dyn UsageLedger>>,
    audit: Option<Arc<dyn forge_core::ports::audit::AuditLog>>,
    prices: Prices,
    quotas: Quotas,
    approval_rule: Option<Arc<dyn ApprovalRule>>,
    authorizer: Option<Arc<dyn Authorizer>>,
    redactor: Option<forge_core::redact::Redactor>,
    allow_self_approval: bool,
    models: HashMap<String, Arc<dyn ModelProvider>>,
    tools: ToolRegistry,
    skills: crate::skills::SkillLibrary,
    agents: Vec<AgentDefinition>,
    clock: Option<Arc<dyn Clock>>,
    ids: Option<Arc<dyn IdGenerator>>,
    worker_id: Option<String>,
    lease_ttl: Option<Duration>,
}

impl EngineBuilder {
    /// Uses one adapter for thread, run, interaction and usage storage.
    pub fn store<
        S: ThreadStore
            + RunStore
            + InteractionStore
            + UsageLedger
            + forge_core::ports::audit::AuditLog
            + 'static,
    >(
        mut self,
        store: Arc<S>,
    ) -> Self {
        self.threads = Some(store.clone());
        self.runs = Some(store.clone());
        self.interactions = Some(store.clone());
        self.audit = Some(store.clone());
        self.ledger = Some(store);
        self
    }

    /// Uses a configuration-chosen store for thread, run and interaction storage.
    pub fn dyn_store(mut self, store: Arc<dyn forge_core::ports::store::Store>) -> Self {
        self.threads = Some(store.clone());
        self.runs = Some(store.clone());
        self.interactions = Some(store.clone());
        self.audit = Some(store.clone());
        self.ledger = Some(store);
        self
    }

    /// Prices model calls (default: none — calls are metered in tokens and cost nothing).
    pub fn prices(mut self, prices: Prices) -> Self {
        self.prices = prices;
        self
    }

    /// A quota every tenant without its own is held to (default: none).
    pub fn quota(mut self, quota: Quota) -> Self {
        self.quotas.default = Some(quota);
        self
    }

    /// `tenant`'s own quota.
    pub fn tenant_quota(mut self, tenant: TenantId, quota: Quota) -> Self {
        self.quotas.tenants.insert(tenant, quota);
        self
    }

    /// Scrubs these secret values (and the built-in credential patterns, which apply anyway) from
    /// every tool result before it reaches the model, the store or an observer.
    pub fn redactor(mut self, redactor: forge_core::redact::Redactor) -> Self {
        self.redactor = Some(redactor);
        self
    }

    /// Lets a person approve an external write in a run they started themselves (off by default:
    /// separation of duties).
    pub fn allow_self_approval(mut self, allow: bool) -> Self {
        self.allow_self_approval = allow;
        self
    }

    /// Sets the skills agents may load (and whether their scripts may run).
    pub fn skills(mut self, skills: crate::skills::SkillLibrary) -> Self {
        self.skills = skills;
        self
    }

    /// Sets the policy engine asked before discovery and before execution (default:
    /// [`forge_core::ports::policy::AllowAll`], where the agent's tool list is the only limit).
    pub fn authorizer(mut self, authorizer: Arc<dyn Authorizer>) -> Self {
        self.authorizer = Some(authorizer);
        self
    }

    /// Decides approval for tools whose policy is [`forge_core::ports::tool::ApprovalPolicy::Policy`]
    /// (without one, such calls always need approval).
    pub fn approval_rule(mut self, rule: Arc<dyn ApprovalRule>) -> Self {
        self.approval_rule = Some(rule);
        self
    }

    /// Adds a model provider, found by its [`ModelProvider::name`].
    pub fn model(mut self, provider: Arc<dyn ModelProvider>) -> Self {
        self.models.insert(provider.name().to_owned(), provider);
        self
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Result<Self, EngineError> {
        self.tools.register(tool)?;
        Ok(self)
    }

    /// Registers an agent version.
    pub fn agent(mut self, agent: AgentDefinition) -> Self {
        self.agents.push(agent);
        self
    }

    /// Sets the clock (default: the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Sets the id generator (default: random UUIDv7).
    pub fn ids(mut self, ids: Arc<dyn IdGenerator>) -> Self {
        self.ids = Some(ids);
        self
    }

    /// Names this worker in the leases it takes (default: `worker-<uuid>`).
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = Some(id.into());
        self
    }

    /// How long a run lease lasts between commits (default: 60 s).
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = Some(ttl);
        self
    }

    /// Checks every agent against the registered models and tools and builds the engine.
    pub fn build(mut self) -> Result<Engine, EngineError> {
        if !self.tools.contains(crate::hitl::ASK_USER) {
            self.tools.register(crate::hitl::ask_user_tool())?;
        }
        if !self.skills.is_empty() {
            self.tools.register(crate::skills::load_skill_tool())?;
            if self.skills.scripts_enabled() {
                self.tools
                    .register(crate::skills::run_skill_script_tool())?;
            }
        }
        let mut agents = HashMap::new();
        for agent in self.agents {
            let name = agent.agent.name.clone();
            let invalid = |reason: String| EngineError::InvalidAgent {
                name: name.clone(),
                reason,
            };
            agent.validate().map_err(|e| invalid(e.to_string()))?;
            let (provider, _) = agent.model_parts().map_err(|e| invalid(e.to_string()))?;
            if !self.models.contains_key(provider) {
                return Err(invalid(format!(
                    "model provider {provider} is not configured"
                )));
            }
            if let Some(missing) = agent.tools.iter().find(|t| !self.tools.contains(t)) {
                return Err(invalid(format!("tool {missing} is not registered")));
            }
            if let Some(missing) = agent.skills.iter().find(|s| !self.skills.contains(s)) {
                return Err(invalid(format!(
                    "skill {missing} is not in the skill library"
                )));
            }
            let key = (agent.agent.name.clone(), agent.agent.version.clone());
            if agents.insert(key, Arc::new(agent)).is_some() {
                return Err(invalid("the same version is registered twice".into()));
            }
        }
        let ids = self.ids.unwrap_or_else(|| Arc::new(UuidV7Generator));
        Ok(Engine {
            threads: self
                .threads
                .ok_or(EngineError::Incomplete("thread store"))?,
            runs: self.runs.ok_or(EngineError::Incomplete("run store"))?,
            interactions: self
                .interactions
                .ok_or(EngineError::Incomplete("interaction store"))?,
            ledger: self.ledger.ok_or(EngineError::Incomplete("usage ledger"))?,
            prices: self.prices,
            quotas: self.quotas,
            approval_rule: self.approval_rule,
            authorizer: self
                .authorizer
                .unwrap_or_else(|| Arc::new(forge_core::ports::policy::AllowAll)),
            redactor: self.redactor.unwrap_or_default(),
            allow_self_approval: self.allow_self_approval,
            audit: self.audit,
            models: self.models,
            tools: self.tools,
            skills: Arc::new(self.skills),
            agents,
            clock: self.clock.unwrap_or_else(|| Arc::new(SystemClock)),
            worker_id: self
                .worker_id
                .unwrap_or_else(|| format!("worker-{}", ids.next_uuid())),
            ids,
            lease_ttl: self.lease_ttl.unwrap_or(Duration::from_secs(60)),
        })
    }
}

/// Why separation of duties refuses an approval.
const SELF_APPROVAL: &str = "a person may not approve an external write in a run they started";

/// The run being executed: its position in the log and the step's pending writes.
pub(crate) struct Cursor<'a> {
    pub(crate) run: Run,
    pub(crate) lease: RunLease,
    pub(crate) status: RunStatus,
    pub(crate) checkpoint: Checkpoint,
    pending: Vec<RunEvent>,
    pub(crate) messages: Vec<Message>,
    /// Interactions the step raised, created by its commit.
    pub(crate) interactions: Vec<Interaction>,
    /// Audit entries of the step (external writes), written by its commit.
    pub(crate) audit: Vec<AuditRecord>,
    /// The step's model calls, settled, recorded by its commit.
    pub(crate) settlements: Vec<ModelCall>,
    /// The thread's committed history, read once when the execution began and extended by each
    /// commit of this execution.
    pub(crate) history: Vec<Message>,
    /// The thread's session state, read when the execution began.
    pub(crate) state: forge_core::thread::SessionState,
    next_seq: u64,
    clock: &'a dyn Clock,
    observer: &'a dyn RunObserver,
}

impl Cursor<'_> {
    /// Adds an event to the step, numbering it, and shows it to the observer at once.
    pub(crate) fn emit(&mut self, kind: RunEventKind) {
        let event = RunEvent {
            run_id: self.run.id,
            seq: self.next_seq,
            at: self.clock.now(),
            kind,
        };
        self.next_seq += 1;
        self.observer.on_emitted(&crate::observer::Emitted {
            tenant_id: &self.run.tenant_id,
            thread_id: self.run.thread_id,
            attempt: self.lease.token,
            event: &event,
        });
        self.pending.push(event);
    }

    pub(crate) fn apply(&mut self, input: RunInput) -> Result<(), EngineError> {
        self.status = transition(self.status, input).map_err(forge_core::Error::from)?;
        Ok(())
    }
}

impl Engine {
    /// Starts building an engine.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// The registered agent version.
    pub fn agent(&self, agent: &AgentRef) -> Result<Arc<AgentDefinition>, EngineError> {
        self.agents
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
        self.authorizer.decide(request)
    }

    /// One approval or question of the scope's tenant.
    pub async fn interaction(
        &self,
        scope: &Scope,
        id: forge_core::id::InteractionId,
    ) -> Result<Interaction, EngineError> {
        Ok(self.interactions.get_interaction(scope, id).await?)
    }

    /// Every registered agent version, by name then version.
    pub fn agents(&self) -> Vec<Arc<AgentDefinition>> {
        let mut all: Vec<_> = self.agents.values().cloned().collect();
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
        &self.threads
    }

    /// The run store (and event log).
    pub fn runs(&self) -> &Arc<dyn RunStore> {
        &self.runs
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
        if let Some(title) = &new.title {
            forge_core::input::check_text("the title", title)?;
        }
        forge_core::input::check("the session state", &new.state)?;
        Ok(self.threads.create_thread(scope, new).await?)
    }

    /// Creates a run (and its job) of a registered agent, with the given start strategy.
    ///
    /// What a caller sends is input, never a grant: files and any tool results in it are marked
    /// untrusted whatever the caller claimed. Secrets in its text are scrubbed before it is
    /// stored or shown to a model.
    pub async fn submit(&self, scope: &Scope, mut new: NewRun) -> Result<Run, EngineError> {
        self.agent(&new.agent)?;
        forge_core::input::check("the run's input", &new.input)?;
        for part in &mut new.input {
            match part {
                Part::File(f) => f.trust = forge_core::part::Trust::Untrusted,
                Part::ToolResult(r) => {
                    r.trust = forge_core::part::Trust::Untrusted;
                    self.redactor.redact_json(&mut r.output);
                }
                Part::Text(t) => {
                    if let std::borrow::Cow::Owned(scrubbed) = self.redactor.redact(&t.text) {
                        t.text = scrubbed;
                    }
                }
                _ => {}
            }
        }
        Ok(self.runs.create_run(scope, new).await?)
    }

    /// Executes a run from its last checkpoint until it ends (or `cancel` fires), committing each
    /// step under a lease. Events reach `observer` as they are produced.
    pub async fn execute(
        &self,
        scope: &Scope,
        run_id: RunId,
        cancel: &CancellationToken,
        observer: &dyn RunObserver,
    ) -> Result<RunOutcome, EngineError> {
        let control = RunControl {
            cancel: cancel.clone(),
            drain: CancellationToken::new(),
        };
        self.execute_with(scope, run_id, &control, observer).await
    }

    /// Like [`Engine::execute`], and when `control.drain` fires, stops after the step in progress
    /// is committed, leaving the run `running` at its checkpoint for another worker to resume.
    pub async fn execute_with(
        &self,
        scope: &Scope,
        run_id: RunId,
        control: &RunControl,
        observer: &dyn RunObserver,
    ) -> Result<RunOutcome, EngineError> {
        self.leased(scope, run_id, |_| Ok(scope.clone()), control, observer)
            .await
    }

    /// Executes a queued run of `tenant` as the principal who started it, as a worker does. A run
    /// whose agent version is not registered here is left untouched (`UnknownAgent`), for a worker
    /// that has the version.
    pub async fn execute_job(
        &self,
        tenant: &TenantId,
        run_id: RunId,
        control: &RunControl,
        observer: &dyn RunObserver,
    ) -> Result<RunOutcome, EngineError> {
        // Store access needs only the tenant; the run itself says who it acts for.
        let reader = Scope::new(
            tenant.clone(),
            PrincipalId::new(self.worker_id.clone())?,
            vec![],
        );
        let derive = |run: &Run| {
            self.agent(&run.agent)?;
            Ok(Scope::new(
                run.tenant_id.clone(),
                run.principal_id.clone(),
                run.role_ids.clone(),
            ))
        };
        self.leased(&reader, run_id, derive, control, observer)
            .await
    }

    /// Takes the run's lease, then reads the run (so the read cannot be older than the lease),
    /// and executes it under the scope `derive` gives, renewing the lease alongside; releases it.
    async fn leased(
        &self,
        scope: &Scope,
        run_id: RunId,
        derive: impl FnOnce(&Run) -> Result<Scope, EngineError>,
        control: &RunControl,
        observer: &dyn RunObserver,
    ) -> Result<RunOutcome, EngineError> {
        let (lease, run) = self
            .runs
            .lease_run(scope, run_id, &self.worker_id, self.lease_ttl)
            .await?;
        let result = async {
            if run.status.is_terminal() {
                return Ok(RunOutcome {
                    status: run.status,
                    last_seq: run.last_seq,
                    failure: run.failure,
                });
            }
            let run_scope = derive(&run)?;
            // Losing the lease stops the run where it is.
            tokio::select! {
                r = self.execute_leased(&run_scope, run, lease.clone(), control, observer) => r,
                e = self.keep_lease(scope, lease.clone()) => Err(e),
            }
        }
        .await;
        // Best effort: an unreleased lease simply expires.
        let _ = self.runs.release_lease(scope, &lease).await;
        result
    }

    /// Ends a run that will not be executed (an operator discarded its dead-lettered job): commits
    /// `run.failed` with `dead_lettered` and `message`, which frees its thread for the next run.
    pub async fn abandon(
        &self,
        scope: &Scope,
        run_id: RunId,
        message: &str,
    ) -> Result<RunOutcome, EngineError> {
        let lease = self
            .runs
            .acquire_lease(scope, run_id, &self.worker_id, self.lease_ttl)
            .await?;
        let run = match self.runs.get_run(scope, run_id).await {
            Ok(run) if !run.status.is_terminal() => run,
            read => {
                let _ = self.runs.release_lease(scope, &lease).await;
                let run = read?;
                return Ok(RunOutcome {
                    status: run.status,
                    last_seq: run.last_seq,
                    failure: run.failure,
                });
            }
        };
        let observer = crate::observer::NoopObserver;
        let mut cur = Cursor {
            status: run.status,
            checkpoint: run.checkpoint.clone(),
            next_seq: run.last_seq + 1,
            run,
            lease: lease.clone(),
            pending: Vec::new(),
            messages: Vec::new(),
            interactions: Vec::new(),
            audit: Vec::new(),
            settlements: Vec::new(),
            history: Vec::new(),
            state: Default::default(),
            clock: self.clock.as_ref(),
            observer: &observer,
        };
        let failure = RunFailure {
            code: FailureCode::DeadLettered,
            message: message.to_owned(),
        };
        cur.apply(RunInput::Fail)?;
        cur.emit(RunEventKind::RunFailed {
            failure: failure.clone(),
        });
        let result = self
            .commit(scope, &mut cur, Some(failure))
            .await
            .map(|(outcome, _)| outcome);
        let _ = self.runs.release_lease(scope, &lease).await;
        result
    }

    /// One run's metered model calls (reservation, settlement, cost), oldest first.
    pub async fn run_usage(
        &self,
        scope: &Scope,
        run: RunId,
    ) -> Result<Vec<ModelCall>, EngineError> {
        Ok(self.ledger.model_calls(scope, CallFilter::Run(run)).await?)
    }

    /// The tenant's calls in `[from, to)` rolled up per UTC day and model.
    pub async fn rollups(
        &self,
        scope: &Scope,
        from: forge_core::time::Timestamp,
        to: forge_core::time::Timestamp,
    ) -> Result<Vec<forge_core::metering::Rollup>, EngineError> {
        let calls = self
            .ledger
            .model_calls(scope, CallFilter::Between(from, to))
            .await?;
        Ok(forge_core::metering::rollup(&calls))
    }

    /// The reconciliation report for the tenant's calls in `[from, to)`: each estimate against
    /// the provider's actual.
    pub async fn reconciliation(
        &self,
        scope: &Scope,
        from: forge_core::time::Timestamp,
        to: forge_core::time::Timestamp,
    ) -> Result<Vec<forge_core::metering::Drift>, EngineError> {
        let calls = self
            .ledger
            .model_calls(scope, CallFilter::Between(from, to))
            .await?;
        Ok(forge_core::metering::reconcile(&calls))
    }

    /// The scope's tenant's pending approvals and questions, oldest first.
    /// The tenant's pending interactions this caller may act on: every question, and the
    /// approvals [`Engine::may_approve`] allows.
    pub async fn pending_interactions(
        &self,
        scope: &Scope,
    ) -> Result<Vec<Interaction>, EngineError> {
        let pending = self
            .interactions
            .list_interactions(scope, InteractionFilter::Pending)
            .await?;
        let mut mine = Vec::with_capacity(pending.len());
        for i in pending {
            if !matches!(i.request, InteractionRequest::Approval { .. })
                || self.may_approve(scope, &i).await?.is_allowed()
            {
                mine.push(i);
            }
        }
        Ok(mine)
    }

    /// Whether the caller may approve this interaction: not an external write in a run they
    /// started (unless self-approval is allowed), and the policies allow `approve` on it (with
    /// the thread's creator and the run's initiator). Questions are answered, not approved:
    /// always allowed here.
    pub async fn may_approve(
        &self,
        scope: &Scope,
        interaction: &Interaction,
    ) -> Result<forge_core::ports::policy::PolicyDecision, EngineError> {
        use forge_core::ports::policy::{
            PolicyAction, PolicyDecision, PolicyRequest, PolicyResource,
        };
        use forge_core::ports::tool::ToolClassification;
        let InteractionRequest::Approval { tool_name, .. } = &interaction.request else {
            return Ok(PolicyDecision::Allow);
        };
        let run = self.runs.get_run(scope, interaction.run_id).await?;
        let thread = self
            .threads
            .get_thread(scope, interaction.thread_id)
            .await?;
        // A tool this process does not know counts as the riskiest kind.
        let classification = self
            .tools
            .get(tool_name)
            .map_or(ToolClassification::ExternalWrite, |t| {
                t.tool.spec().classification
            });
        if classification == ToolClassification::ExternalWrite
            && !self.allow_self_approval
            && run.principal_id == *scope.principal_id()
        {
            return Ok(PolicyDecision::Deny {
                reason: SELF_APPROVAL.into(),
            });
        }
        let id = interaction.id.to_string();
        let thread_id = thread.id.to_string();
        Ok(self.authorizer.decide(&PolicyRequest {
            scope,
            action: PolicyAction::Approve,
            resource: PolicyResource::Approval {
                id: &id,
                thread: &thread_id,
                thread_created_by: thread.created_by.as_str(),
                run_initiator: run.principal_id.as_str(),
                tool_name,
                classification,
            },
            input: None,
        }))
    }

    /// Every approval and question of one run.
    pub async fn run_interactions(
        &self,
        scope: &Scope,
        run: RunId,
    ) -> Result<Vec<Interaction>, EngineError> {
        Ok(self
            .interactions
            .list_interactions(scope, InteractionFilter::Run(run))
            .await?)
    }

    /// Resolves an approval or a question exactly once (see
    /// [`forge_core::ports::interaction`]). An answer is checked against the question's schema
    /// first: an answer that does not fit is refused and nothing is stored.
    pub async fn resolve_interaction(
        &self,
        scope: &Scope,
        req: Resolve,
    ) -> Result<Resolved, EngineError> {
        forge_core::input::check("the decision", &req.decision)?;
        forge_core::input::check_text("the key", &req.key)?;
        if let Decision::Approve = &req.decision {
            let current = self.interactions.get_interaction(scope, req.id).await?;
            if let forge_core::ports::policy::PolicyDecision::Deny { reason } =
                self.may_approve(scope, &current).await?
            {
                // A policy's reason names policies: for operators, not for the caller.
                let shown = if reason == SELF_APPROVAL {
                    reason
                } else {
                    "the policies do not let this caller approve it".to_owned()
                };
                return Err(forge_core::Error::Forbidden(shown).into());
            }
        }
        if let Decision::Answer { answer } = &req.decision {
            let current = self.interactions.get_interaction(scope, req.id).await?;
            if let InteractionRequest::Question { answer_schema, .. } = &current.request {
                let problems = crate::hitl::schema_violations(answer_schema, answer);
                if !problems.is_empty() {
                    return Err(forge_core::Error::invalid(format!(
                        "the answer does not match the question's schema: {}",
                        problems.join("; ")
                    ))
                    .into());
                }
            }
        }
        Ok(self.interactions.resolve_interaction(scope, req).await?)
    }

    /// Renews the run's lease every third of its time to live; returns only when renewal fails.
    async fn keep_lease(&self, scope: &Scope, mut lease: RunLease) -> EngineError {
        loop {
            tokio::time::sleep(self.lease_ttl / 3).await;
            match self.runs.renew_lease(scope, &lease, self.lease_ttl).await {
                Ok(renewed) => lease = renewed,
                Err(e) => return e.into(),
            }
        }
    }

    async fn execute_leased(
        &self,
        scope: &Scope,
        run: Run,
        lease: RunLease,
        control: &RunControl,
        observer: &dyn RunObserver,
    ) -> Result<RunOutcome, EngineError> {
        let cancel = &control.cancel;
        let mut cancel_requested = run.cancel_requested;
        let mut cur = Cursor {
            status: run.status,
            checkpoint: run.checkpoint.clone(),
            next_seq: run.last_seq + 1,
            run,
            lease,
            pending: Vec::new(),
            messages: Vec::new(),
            interactions: Vec::new(),
            audit: Vec::new(),
            settlements: Vec::new(),
            history: Vec::new(),
            state: Default::default(),
            clock: self.clock.as_ref(),
            observer,
        };
        let agent = match self.agent(&cur.run.agent) {
            Ok(a) => a,
            Err(_) => {
                let failure = RunFailure {
                    code: FailureCode::AgentVersionUnavailable,
                    message: format!(
                        "agent {} version {} is not registered on this worker",
                        cur.run.agent.name, cur.run.agent.version
                    ),
                };
                cur.apply(RunInput::Fail)?;
                cur.emit(RunEventKind::RunFailed {
                    failure: failure.clone(),
                });
                return self
                    .commit(scope, &mut cur, Some(failure))
                    .await
                    .map(|(outcome, _)| outcome);
            }
        };
        if cancel_requested {
            cur.apply(RunInput::Cancel)?;
            cur.emit(RunEventKind::RunCancelled {
                reason: Some("cancel requested".into()),
            });
            return self
                .commit(scope, &mut cur, None)
                .await
                .map(|(outcome, _)| outcome);
        }
        if cur.status == RunStatus::Queued {
            cur.apply(RunInput::Start)?;
            // The input joins the thread's history now, in the first step's commit: a run queued
            // behind another never shows its message to the run ahead of it.
            cur.messages.push(Message {
                id: MessageId::generate(self.ids.as_ref()),
                run_id: cur.run.id,
                role: Role::User,
                parts: cur.run.input.clone(),
                created_at: self.clock.now(),
            });
            cur.emit(RunEventKind::RunStarted {
                thread_id: cur.run.thread_id,
                agent: cur.run.agent.clone(),
                model: agent.model.clone(),
            });
        }
        let thread = self.threads.get_thread(scope, cur.run.thread_id).await?;
        cur.state = thread.state;
        cur.history = self.threads.list_messages(scope, cur.run.thread_id).await?;
        if let RunStatus::Waiting(_) = cur.status {
            let raised: Vec<Interaction> = self
                .interactions
                .list_interactions(scope, InteractionFilter::Run(cur.run.id))
                .await?
                .into_iter()
                .filter(|i| i.step == cur.checkpoint.step)
                .collect();
            if raised
                .iter()
                .any(|i| i.status == InteractionStatus::Pending)
            {
                // Woken early: the run keeps waiting; nothing to commit.
                return Ok(RunOutcome {
                    status: cur.status,
                    last_seq: cur.run.last_seq,
                    failure: None,
                });
            }
            if let Some(other) = raised.iter().find(|i| i.agent != cur.run.agent) {
                return Err(EngineError::InvalidAgent {
                    name: other.agent.name.clone(),
                    reason: format!(
                        "interaction {} was raised under version {}, not the run's {}",
                        other.id, other.agent.version, cur.run.agent.version
                    ),
                });
            }
            cur.apply(RunInput::Resume)?;
            let end = StepRunner {
                engine: self,
                scope,
                agent: &agent,
                cancel,
            }
            .resume(&mut cur, &raised)
            .await?;
            match end {
                StepEnd::Cancelled => {
                    cur.apply(RunInput::Cancel)?;
                    cur.emit(RunEventKind::RunCancelled {
                        reason: Some("cancelled by request".into()),
                    });
                    return self
                        .commit(scope, &mut cur, None)
                        .await
                        .map(|(outcome, _)| outcome);
                }
                _ => {
                    let version = cur.run.version + 1;
                    cur.emit(RunEventKind::RunCheckpointed {
                        step: cur.checkpoint.step,
                        version,
                    });
                    let (outcome, requested) = self.commit(scope, &mut cur, None).await?;
                    if control.drain.is_cancelled() {
                        return Ok(outcome);
                    }
                    cancel_requested = requested;
                }
            }
        }
        loop {
            if cancel_requested {
                cur.apply(RunInput::Cancel)?;
                cur.emit(RunEventKind::RunCancelled {
                    reason: Some("cancel requested".into()),
                });
                return self
                    .commit(scope, &mut cur, None)
                    .await
                    .map(|(outcome, _)| outcome);
            }
            let end = StepRunner {
                engine: self,
                scope,
                agent: &agent,
                cancel,
            }
            .run(&mut cur)
            .await?;
            let failure = match end {
                StepEnd::Continue => {
                    let version = cur.run.version + 1;
                    cur.emit(RunEventKind::RunCheckpointed {
                        step: cur.checkpoint.step,
                        version,
                    });
                    None
                }
                StepEnd::Completed { text } => {
                    cur.apply(RunInput::Complete)?;
                    cur.emit(RunEventKind::RunCompleted {
                        text,
                        usage: cur.checkpoint.usage,
                    });
                    None
                }
                StepEnd::Cancelled => {
                    cur.apply(RunInput::Cancel)?;
                    cur.emit(RunEventKind::RunCancelled {
                        reason: Some("cancelled by request".into()),
                    });
                    None
                }
                StepEnd::Failed(failure) => {
                    cur.apply(RunInput::Fail)?;
                    cur.emit(RunEventKind::RunFailed {
                        failure: failure.clone(),
                    });
                    Some(failure)
                }
                StepEnd::Parked(reason) => {
                    cur.apply(RunInput::Park(reason))?;
                    None
                }
            };
            let (outcome, requested) = self.commit(scope, &mut cur, failure).await?;
            // A run asked to cancel while its step was parking is cancelled now, not left waiting
            // (the request found it still running, so nobody will wake it).
            if outcome.status.is_terminal()
                || (matches!(outcome.status, RunStatus::Waiting(_)) && !requested)
                || control.drain.is_cancelled()
            {
                return Ok(outcome);
            }
            cancel_requested = requested;
        }
    }

    async fn commit(
        &self,
        scope: &Scope,
        cur: &mut Cursor<'_>,
        failure: Option<RunFailure>,
    ) -> Result<(RunOutcome, bool), EngineError> {
        let messages = std::mem::take(&mut cur.messages);
        let commit = StepCommit {
            run_id: cur.run.id,
            expected_version: cur.run.version,
            lease: cur.lease.clone(),
            events: std::mem::take(&mut cur.pending),
            messages: messages.clone(),
            checkpoint: cur.checkpoint.clone(),
            status: cur.status,
            failure: failure.clone(),
            interactions: std::mem::take(&mut cur.interactions),
            audit: std::mem::take(&mut cur.audit),
            settlements: std::mem::take(&mut cur.settlements),
        };
        let committed = self.runs.commit_step(scope, commit).await?;
        cur.observer.on_commit(&crate::observer::Commit {
            tenant_id: &cur.run.tenant_id,
            run_id: cur.run.id,
            thread_id: cur.run.thread_id,
            last_seq: committed.last_seq,
        });
        cur.history.extend(messages);
        cur.run.version = committed.version;
        cur.run.last_seq = committed.last_seq;
        cur.run.status = cur.status;
        let outcome = RunOutcome {
            status: cur.status,
            last_seq: committed.last_seq,
            failure,
        };
        Ok((outcome, committed.cancel_requested))
    }
}
