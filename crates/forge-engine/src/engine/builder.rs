//! Assembling an [`Engine`].

use super::*;

/// Assembles an [`Engine`].
#[derive(Default)]
pub struct EngineBuilder {
    threads: Option<Arc<dyn ThreadStore>>,
    runs: Option<Arc<dyn RunStore>>,
    interactions: Option<Arc<dyn InteractionStore>>,
    ledger: Option<Arc<dyn UsageLedger>>,
    audit: Option<Arc<dyn forge_core::ports::audit::AuditLog>>,
    erasure: Option<Arc<dyn forge_core::ports::erasure::DataErasure>>,
    keys: Option<Arc<dyn forge_core::ports::keys::RequestKeys>>,
    prices: Prices,
    quotas: Quotas,
    approval_rule: Option<Arc<dyn ApprovalRule>>,
    authorizer: Option<Arc<dyn Authorizer>>,
    redactor: Option<forge_core::redact::Redactor>,
    allow_self_approval: bool,
    models: HashMap<String, Arc<dyn ModelProvider>>,
    tools: ToolRegistry,
    skills: crate::skills::SkillLibrary,
    citations: Option<Arc<dyn forge_core::ports::citation::CitationCheck>>,
    files: Option<Arc<dyn forge_core::ports::files::FileContents>>,
    telemetry: Option<forge_core::telemetry::Telemetry>,
    agents: Vec<AgentDefinition>,
    clock: Option<Arc<dyn Clock>>,
    ids: Option<Arc<dyn IdGenerator>>,
    worker_id: Option<String>,
    lease_ttl: Option<Duration>,
    cancel_poll: Option<Duration>,
    settings: serde_json::Value,
}

impl EngineBuilder {
    /// Uses one adapter for thread, run, interaction and usage storage, erasure and request keys.
    pub fn store<
        S: ThreadStore
            + RunStore
            + InteractionStore
            + UsageLedger
            + forge_core::ports::audit::AuditLog
            + forge_core::ports::erasure::DataErasure
            + forge_core::ports::keys::RequestKeys
            + 'static,
    >(
        mut self,
        store: Arc<S>,
    ) -> Self {
        self.erasure = Some(store.clone());
        self.keys = Some(store.clone());
        self.threads = Some(store.clone());
        self.runs = Some(store.clone());
        self.interactions = Some(store.clone());
        self.audit = Some(store.clone());
        self.ledger = Some(store);
        self
    }

    /// Uses a configuration-chosen store for thread, run and interaction storage.
    pub fn dyn_store(mut self, store: Arc<dyn forge_core::ports::store::Store>) -> Self {
        self.erasure = Some(store.clone());
        self.keys = Some(store.clone());
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

    /// Checks citations with `check` and offers the built-in [`crate::CITE`] tool to agents that
    /// list it.
    pub fn citations(mut self, check: Arc<dyn forge_core::ports::citation::CitationCheck>) -> Self {
        self.citations = Some(check);
        self
    }

    /// Lets runs be given stored files: their parts are checked against `files` at submission,
    /// and their text shown to the model, as untrusted data, in each step's request.
    pub fn files(mut self, files: Arc<dyn forge_core::ports::files::FileContents>) -> Self {
        self.files = Some(files);
        self
    }

    /// Records spans, metrics and logs through `telemetry` (by default, nothing).
    pub fn telemetry(mut self, telemetry: forge_core::telemetry::Telemetry) -> Self {
        self.telemetry = Some(telemetry);
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

    /// Binds the argument `name` of the tool `tool` (added already) to the caller
    /// ([`Argument`](crate::tools::Argument)): the engine fills it from the run's scope before
    /// the call is validated, authorized, approved or executed.
    pub fn tool_argument(
        mut self,
        tool: &str,
        name: &str,
        argument: crate::tools::Argument,
    ) -> Result<Self, EngineError> {
        self.tools.bind_argument(tool, name, argument)?;
        Ok(self)
    }

    /// Gives the tool `tool` (added already, native or imported) a previewer: what a person
    /// asked to approve one of its calls sees beside the call's input (see
    /// [`ApprovalPreviewer`](forge_core::ports::tool::ApprovalPreviewer); [`preview_fn`](crate::preview_fn)
    /// makes one from an async function).
    pub fn approval_preview(
        mut self,
        tool: &str,
        previewer: Arc<dyn forge_core::ports::tool::ApprovalPreviewer>,
    ) -> Result<Self, EngineError> {
        self.tools.preview(tool, previewer)?;
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

    /// The process's own settings that decide what it accepts and exposes (sign-in, CORS, egress,
    /// file inspection, retention…), recorded with the engine's configuration in the audit
    /// trail (`settings`): no secret may be in it.
    pub fn settings(mut self, settings: serde_json::Value) -> Self {
        self.settings = settings;
        self
    }

    /// How often an executing run asks the store whether a cancel was requested through another
    /// process (default [`DEFAULT_CANCEL_POLL`](crate::DEFAULT_CANCEL_POLL)): the longest a
    /// step in flight goes on after such a request, plus one read. A request through this
    /// engine stops the step at once.
    pub fn cancel_poll(mut self, every: Duration) -> Self {
        self.cancel_poll = Some(every);
        self
    }

    /// Checks every agent against the registered models and tools and builds the engine.
    pub fn build(mut self) -> Result<Engine, EngineError> {
        let skills = Arc::new(std::mem::take(&mut self.skills));
        self.register_built_ins(&skills)?;
        let mut agents = HashMap::new();
        // Every agent's every problem, in one refusal.
        let mut names = Vec::new();
        let mut reasons = Vec::new();
        for agent in &self.agents {
            let problems = self.agent_problems(agent, &skills);
            if !problems.is_empty() {
                names.push(agent.agent.name.clone());
                reasons.push(problems.join("; "));
            }
        }
        if !names.is_empty() {
            let reason = match names.len() {
                1 => reasons.join(""),
                _ => names
                    .iter()
                    .zip(&reasons)
                    .map(|(name, reason)| format!("{name}: {reason}"))
                    .collect::<Vec<_>>()
                    .join("; "),
            };
            return Err(EngineError::InvalidAgent {
                name: names.join(", "),
                reason,
            });
        }
        for agent in std::mem::take(&mut self.agents) {
            let name = agent.agent.name.clone();
            let key = (name.clone(), agent.agent.version.clone());
            if agents.insert(key, Arc::new(agent)).is_some() {
                return Err(EngineError::InvalidAgent {
                    name,
                    reason: "the same version is registered twice".into(),
                });
            }
        }
        let ids = self.ids.unwrap_or_else(|| Arc::new(UuidV7Generator));
        let stores = Stores {
            threads: self
                .threads
                .ok_or(EngineError::Incomplete("thread store"))?,
            runs: self.runs.ok_or(EngineError::Incomplete("run store"))?,
            interactions: self
                .interactions
                .ok_or(EngineError::Incomplete("interaction store"))?,
            ledger: self.ledger.ok_or(EngineError::Incomplete("usage ledger"))?,
            erasure: self.erasure.ok_or(EngineError::Incomplete("erasure"))?,
            keys: self.keys,
            audit: self.audit,
        };
        let catalog = Catalog {
            agents,
            models: self.models,
            tools: self.tools,
            skills,
            citations: self.citations,
            files: self.files,
            prices: self.prices,
            quotas: self.quotas,
        };
        let guards = Guards {
            authorizer: self
                .authorizer
                .unwrap_or_else(|| Arc::new(forge_core::ports::policy::AllowAll)),
            approval_rule: self.approval_rule,
            allow_self_approval: self.allow_self_approval,
        };
        let local = Local {
            worker_id: self
                .worker_id
                .unwrap_or_else(|| format!("worker-{}", ids.next_uuid())),
            lease_ttl: self.lease_ttl.unwrap_or(Duration::from_secs(60)),
            cancel_poll: self
                .cancel_poll
                .unwrap_or(crate::cancels::DEFAULT_CANCEL_POLL),
            settings: self.settings,
            cancels: Default::default(),
            work: Arc::default(),
        };
        let services = Services {
            clock: self.clock.unwrap_or_else(|| Arc::new(SystemClock)),
            ids,
            redactor: self.redactor.unwrap_or_default(),
            telemetry: self.telemetry.unwrap_or_default(),
        };
        Ok(Engine::new(stores, catalog, guards, services, local))
    }

    /// Registers the built-in tools the configuration calls for: `ask_user` and session state
    /// always (unless replaced), `cite` with a citation check, the skill tools with a library.
    fn register_built_ins(
        &mut self,
        skills: &Arc<crate::skills::SkillLibrary>,
    ) -> Result<(), EngineError> {
        if !self.tools.contains(crate::hitl::ASK_USER) {
            self.tools.register(crate::hitl::ask_user_tool())?;
        }
        if !self.tools.contains(crate::state::UPDATE_STATE) {
            self.tools
                .register(Arc::new(crate::state::UpdateState::new()))?;
        }
        // With citations checked, `cite` is the engine's: a passed call becomes a citation.
        if let Some(check) = &self.citations {
            if self.tools.contains(crate::cite::CITE) {
                return Err(EngineError::InvalidTool {
                    name: crate::cite::CITE.into(),
                    reason: "the name is the built-in citation tool's when citations are checked"
                        .into(),
                });
            }
            self.tools
                .register(Arc::new(crate::cite::Cite::new(check.clone())))?;
        }
        if !skills.is_empty() {
            self.tools
                .register(Arc::new(crate::skills::LoadSkill::new(skills.clone())))?;
            if skills.scripts_enabled() {
                self.tools
                    .register(Arc::new(crate::skills::RunSkillScript::new(skills.clone())))?;
            }
        }
        Ok(())
    }

    /// What makes an agent unrunnable as configured — an invalid definition, a model provider,
    /// tools or skills it lacks, an unusable output schema, an unpriced model under a cost
    /// ceiling or quota — every one of them, so a configuration is mended in one go.
    fn agent_problems(
        &self,
        agent: &AgentDefinition,
        skills: &crate::skills::SkillLibrary,
    ) -> Vec<String> {
        if let Err(e) = agent.validate() {
            return vec![e.to_string()];
        }
        let mut problems = Vec::new();
        match agent.model_parts() {
            Err(e) => problems.push(e.to_string()),
            Ok((provider, _)) if !self.models.contains_key(provider) => {
                problems.push(format!("model provider {provider} is not configured"));
            }
            Ok(_) => {}
        }
        if let Some(schema) = &agent.output_schema
            && let Err(e) = jsonschema::validator_for(schema)
        {
            problems.push(format!("output_schema is not a valid JSON Schema: {e}"));
        }
        for missing in agent.tools.iter().filter(|t| !self.tools.contains(t)) {
            problems.push(format!("tool {missing} is not registered"));
        }
        for missing in agent.skills.iter().filter(|s| !skills.contains(s)) {
            problems.push(format!("skill {missing} is not in the skill library"));
        }
        // A model missing from the price table costs nothing: under a cost ceiling or a cost
        // quota that would spend without limit, so such a configuration is refused.
        let cost_bounded = agent.limits.max_cost_micros.is_some()
            || self
                .quotas
                .default
                .iter()
                .chain(self.quotas.tenants.values())
                .any(|q| q.max_cost_micros.is_some());
        // Every model the agent's runs call: its own, and the one that summarises its thread.
        let summariser = agent.compaction.as_ref().and_then(|c| c.model.as_ref());
        let unpriced = std::iter::once(&agent.model)
            .chain(summariser)
            .filter(|m| !self.prices.models.contains_key(*m));
        for model in unpriced.filter(|_| cost_bounded) {
            problems.push(format!(
                "model {model} has no price in the price table, and a cost ceiling or cost \
                 quota applies: its calls would cost nothing against it"
            ));
        }
        problems
    }
}
