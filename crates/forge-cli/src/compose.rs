//! Composition: the one place an engine is assembled from command-line settings — agents, model
//! providers, built-in tools, metering, redaction, policies and skills — for `run`, `worker`,
//! `serve` and `tools`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use forge_core::ports::model::ModelProvider;
use forge_core::ports::policy::{AllowAll, Authorizer};
use forge_core::ports::store::Store;
use forge_core::ports::tool::ApprovalRule;
use forge_core::scope::Scope;
use forge_engine::{Engine, EngineBuilder, SkillLibrary};
use forge_policy::CedarAuthorizer;

use crate::agent_file::{self, LoadedAgent, ProviderArgs};
use crate::metering::MeteringArgs;

/// Who may see and run what, and the skills agents may load.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct AccessArgs {
    /// Cedar policies: a `.cedar` file or a directory of them. Without it every agent's tools and
    /// skills are available to every principal.
    #[arg(long = "policies", env = "FORGE_POLICIES")]
    pub(crate) policies: Option<PathBuf>,
    /// Skills directory: one subdirectory per skill, each with a `SKILL.md`.
    #[arg(long = "skills", env = "FORGE_SKILLS")]
    pub(crate) skills: Option<PathBuf>,
    /// Lets skills' scripts run (off by default; scripts run without a shell, in their skill's
    /// directory, with a cleared environment).
    #[arg(long = "allow-skill-scripts", env = "FORGE_ALLOW_SKILL_SCRIPTS")]
    pub(crate) allow_skill_scripts: bool,
    /// Lets a person approve an external write in a run they started (off by default: someone
    /// else must approve it).
    #[arg(long = "allow-self-approval", env = "FORGE_ALLOW_SELF_APPROVAL")]
    pub(crate) allow_self_approval: bool,
    /// MCP servers whose pinned tools agents may use (`forge mcp pin` records the pins).
    #[arg(long = "mcp", env = "FORGE_MCP")]
    pub(crate) mcp: Option<PathBuf>,
    /// Retention of a tenant's retrieval sources, `TENANT=DAYS` (repeatable): `worker` and
    /// `serve` delete sources older than that, hourly and at start, audited.
    #[arg(
        long = "source-retention",
        env = "FORGE_SOURCE_RETENTION",
        value_delimiter = ','
    )]
    pub(crate) source_retention: Vec<String>,
    /// The embedding model retrieval uses.
    #[command(flatten)]
    pub(crate) embedder: crate::embedder::EmbedderArgs,
}

impl AccessArgs {
    /// Starts the retention sweep over `sources` (nothing without `--source-retention`): at
    /// once, then hourly, until `stop`.
    pub(crate) fn spawn_retention(
        &self,
        sources: Arc<dyn forge_rag::SourceStore>,
        stop: tokio_util::sync::CancellationToken,
    ) -> anyhow::Result<()> {
        let mut retention = forge_rag::Retention::default();
        for rule in &self.source_retention {
            retention
                .tenants
                .push(forge_rag::Retention::parse_rule(rule).context("--source-retention")?);
        }
        if retention.tenants.is_empty() {
            return Ok(());
        }
        tokio::spawn(async move {
            let clock = forge_core::time::SystemClock;
            loop {
                match retention.sweep(sources.as_ref(), &clock).await {
                    Ok(deleted) => {
                        for (tenant, id) in deleted {
                            eprintln!("forge: retention deleted source {id} of tenant {tenant}");
                        }
                    }
                    Err(e) => eprintln!("forge: the retention sweep failed: {e}"),
                }
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(std::time::Duration::from_secs(3_600)) => {}
                }
            }
        });
        Ok(())
    }

    /// The policies (allow-all without `--policies`).
    pub(crate) fn authorizer(&self) -> anyhow::Result<Arc<dyn Authorizer>> {
        Ok(match &self.policies {
            Some(path) => {
                Arc::new(CedarAuthorizer::from_path(path).context("failed to load policies")?)
            }
            None => Arc::new(AllowAll),
        })
    }

    /// Configures `builder` with the policies, skills, imported MCP tools, and retrieval over
    /// `sources` (the `search_documents` and `cite` tools).
    pub(crate) fn apply(
        &self,
        mut builder: EngineBuilder,
        mcp: Option<&forge_mcp::McpRuntime>,
        sources: Option<Arc<dyn forge_rag::SourceStore>>,
    ) -> anyhow::Result<EngineBuilder> {
        builder = builder.allow_self_approval(self.allow_self_approval);
        for tool in mcp.map(|m| m.tools()).unwrap_or_default() {
            builder = builder.tool(tool)?;
        }
        // Arguments the MCP configuration binds to the caller (`bind = { owner = … }`).
        for (tool, argument, to) in mcp.map(|m| m.bindings()).unwrap_or_default() {
            builder = builder.tool_argument(tool, argument, *to)?;
        }
        // Previews the MCP configuration writes for its tools' approvals (`preview = { … }`).
        for (tool, previewer) in mcp.map(|m| m.previews()).unwrap_or_default() {
            builder = builder.approval_preview(tool, previewer.clone())?;
        }
        // Loaded policies decide access, and which `policy`-approval calls may run unreviewed.
        let (authorizer, rule): (Arc<dyn Authorizer>, Option<Arc<dyn ApprovalRule>>) = match &self
            .policies
        {
            Some(path) => {
                let cedar =
                    Arc::new(CedarAuthorizer::from_path(path).context("failed to load policies")?);
                (cedar.clone(), Some(cedar))
            }
            None => (Arc::new(AllowAll), None),
        };
        if let Some(rule) = rule {
            builder = builder.approval_rule(rule);
        }
        if let Some(sources) = sources {
            let retriever = self.embedder.retriever(sources, authorizer.clone())?;
            builder = builder
                .tool(Arc::new(forge_rag::SearchDocuments::new(retriever.clone())))?
                .citations(Arc::new(retriever));
        }
        builder = builder.authorizer(authorizer);
        if let Some(dir) = &self.skills {
            let mut library = SkillLibrary::load_dir(dir).context("failed to load skills")?;
            if self.allow_skill_scripts {
                library = library.enable_scripts();
            }
            builder = builder.skills(library);
        }
        Ok(builder)
    }
}

/// Everything an engine needs besides its store.
pub(crate) struct EngineSettings<'a> {
    pub(crate) agents: &'a [LoadedAgent],
    pub(crate) providers: &'a ProviderArgs,
    pub(crate) metering: &'a MeteringArgs,
    pub(crate) access: &'a AccessArgs,
    /// The started MCP servers, when `--mcp` names any.
    pub(crate) mcp: Option<&'a forge_mcp::McpRuntime>,
    /// The store's retrieval sources.
    pub(crate) sources: Option<Arc<dyn forge_rag::SourceStore>>,
}

/// An engine builder for `store` with every agent, its providers, the built-in tools, metering,
/// redaction, policies and skills. Callers add what only they have (worker id, extra tools).
///
/// Every configuration problem is reported at once: a model provider that cannot be used (a
/// missing key) does not hide an unknown tool or skill of the same agent, or another agent's.
pub(crate) fn builder(
    store: Arc<dyn Store>,
    settings: &EngineSettings<'_>,
) -> anyhow::Result<EngineBuilder> {
    let providers = match agent_file::providers(settings.agents, settings.providers) {
        Ok(providers) => providers,
        Err(first) => return Err(every_problem(store, settings, first)),
    };
    builder_with(store, settings, &providers)
}

/// `first` (a model provider that cannot be used) with every other configuration problem: each
/// agent's provider, then what the engine refuses once each unusable provider is stood in for.
fn every_problem(
    store: Arc<dyn Store>,
    settings: &EngineSettings<'_>,
    first: anyhow::Error,
) -> anyhow::Error {
    let mut problems: Vec<String> = Vec::new();
    let mut standins: Vec<Arc<dyn ModelProvider>> = Vec::new();
    for agent in settings.agents {
        if let Err(e) = agent_file::providers(std::slice::from_ref(agent), settings.providers) {
            let said = crate::report::message(&e);
            if !problems.contains(&said) {
                problems.push(said);
            }
            if let Ok((prefix, _)) = agent.definition.model_parts()
                && !standins.iter().any(|p| p.name() == prefix)
            {
                standins.push(Arc::new(Unusable(prefix.to_owned())));
            }
        }
    }
    if problems.is_empty() {
        return first;
    }
    let resolved = agent_file::providers(
        &settings
            .agents
            .iter()
            .filter(|a| {
                a.definition
                    .model_parts()
                    .is_ok_and(|(p, _)| !standins.iter().any(|s| s.name() == p))
            })
            .cloned()
            .collect::<Vec<_>>(),
        settings.providers,
    )
    .unwrap_or_default();
    standins.extend(resolved);
    if let Err(e) = builder_with(store, settings, &standins).and_then(|b| Ok(b.build()?)) {
        problems.push(crate::report::message(&e));
    }
    anyhow::anyhow!(
        "{} configuration problem(s):\n  {}",
        problems.len(),
        problems.join("\n  ")
    )
}

/// Stands in for a model provider that could not be set up, so that the rest of the
/// configuration is checked too; never asked (the command stops with the problems).
#[derive(Debug)]
struct Unusable(String);

#[async_trait::async_trait]
impl ModelProvider for Unusable {
    fn name(&self) -> &str {
        &self.0
    }

    async fn stream(
        &self,
        _request: forge_core::ports::model::ModelRequest,
    ) -> Result<forge_core::ports::model::ModelStream, forge_core::ports::model::ModelError> {
        Err(forge_core::ports::model::ModelErrorKind::Authentication.into())
    }
}

/// [`builder`] with the model providers already built (a caller that also needs them, such as
/// `serve` for its readiness checks, builds them once).
pub(crate) fn builder_with(
    store: Arc<dyn Store>,
    settings: &EngineSettings<'_>,
    providers: &[Arc<dyn ModelProvider>],
) -> anyhow::Result<EngineBuilder> {
    builder_with_tools(store, settings, providers, crate::builtin::tools())
}

/// [`builder_with`] with the built-in tools given (`forge eval` shares one payments ledger
/// across its engines and wraps tools to inject failures).
pub(crate) fn builder_with_tools(
    store: Arc<dyn Store>,
    settings: &EngineSettings<'_>,
    providers: &[Arc<dyn ModelProvider>],
    tools: Vec<Arc<dyn forge_core::ports::tool::Tool>>,
) -> anyhow::Result<EngineBuilder> {
    let mut builder = Engine::builder().dyn_store(store);
    for agent in settings.agents {
        builder = builder.agent(agent.definition.clone());
    }
    for provider in providers {
        builder = builder.model(provider.clone());
    }
    for tool in tools {
        builder = builder.tool(tool)?;
    }
    let builder = settings
        .metering
        .apply(builder)?
        .redactor(settings.providers.redactor());
    settings
        .access
        .apply(builder, settings.mcp, settings.sources.clone())
}

/// The scope a command acts as.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ScopeArgs {
    /// Tenant to act as.
    #[arg(long, default_value = "local", env = "FORGE_TENANT")]
    pub(crate) tenant: String,
    /// Principal to act as.
    #[arg(long, default_value = "cli", env = "FORGE_PRINCIPAL")]
    pub(crate) principal: String,
    /// Roles of the principal (comma separated), as policies see them.
    #[arg(long, env = "FORGE_ROLES", value_delimiter = ',')]
    pub(crate) roles: Vec<String>,
}

impl ScopeArgs {
    pub(crate) fn scope(&self) -> anyhow::Result<Scope> {
        let roles: Vec<&str> = self.roles.iter().map(String::as_str).collect();
        Scope::parse(&self.tenant, &self.principal, &roles).context("failed to build the scope")
    }
}

/// `forge tools`: what a scope may discover.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ToolsCommand {
    /// Lists the tools the scope may discover (an agent's, or all).
    #[command(mut_args = crate::help::hide(&[crate::help::RUN_ONLY, crate::help::EMBEDDER]))]
    List(ToolsArgs),
    /// Searches the names and descriptions of the tools the scope may discover.
    #[command(mut_args = crate::help::hide(&[crate::help::RUN_ONLY, crate::help::EMBEDDER]))]
    Search {
        #[command(flatten)]
        args: ToolsArgs,
        /// Most results.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// What to look for.
        query: String,
    },
}

/// What `forge tools` needs: agents (for their tools), policies, skills and a scope.
#[derive(Debug, clap::Args)]
pub(crate) struct ToolsArgs {
    /// Agent files; with exactly one, only its tools are shown.
    #[arg(long = "agent")]
    agents: Vec<PathBuf>,
    #[command(flatten)]
    access: AccessArgs,
    #[command(flatten)]
    scope: ScopeArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn tools(command: ToolsCommand) -> anyhow::Result<ExitCode> {
    let (args, search) = match &command {
        ToolsCommand::List(args) => (args, None),
        ToolsCommand::Search { args, limit, query } => (args, Some((query.as_str(), *limit))),
    };
    let loaded = args
        .agents
        .iter()
        .map(|a| agent_file::load(a))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Listing needs no model: every agent gets a scripted stand-in so nothing is dialled.
    let mut builder = Engine::builder()
        .store(Arc::new(forge_store_memory::MemoryStore::default()))
        .model(Arc::new(forge_providers::ScriptedProvider::empty()));
    for agent in &loaded {
        let mut def = agent.definition.clone();
        def.model = "scripted:listing".into();
        builder = builder.agent(def);
    }
    for tool in crate::builtin::tools() {
        builder = builder.tool(tool)?;
    }
    let mcp = crate::mcp::start(args.access.mcp.as_deref(), None).await?;
    let engine = args
        .access
        .apply(
            builder,
            mcp.as_ref(),
            Some(Arc::new(forge_store_memory::MemoryStore::default())),
        )?
        .build()
        .context("failed to build the engine")?;
    let scope = args.scope.scope()?;
    let agent = match loaded.as_slice() {
        [one] => Some(one.definition.agent.clone()),
        _ => None,
    };
    match search {
        None => {
            let entries = engine.list_tools(&scope, agent.as_ref())?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&entries)?);
            } else {
                for e in entries {
                    println!("{}\t{:?}\t{}", e.name, e.classification, e.description);
                }
            }
        }
        Some((query, limit)) => {
            let hits = engine.search_tools(&scope, agent.as_ref(), query, limit)?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&hits)?);
            } else {
                for h in hits {
                    println!("{:.2}\t{}\t{}", h.score, h.entry.name, h.entry.description);
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What a server or worker process accepts and exposes besides its engine, for the audit
/// record of its configuration (`EngineBuilder::settings`); no secret is in it (a key is
/// recorded as configured, never its value).
pub(crate) fn process_settings(
    access: &AccessArgs,
    files: &crate::files::FilesArgs,
    web: Option<&forge_server::WebConfig>,
) -> anyhow::Result<serde_json::Value> {
    let egress = match &access.mcp {
        Some(path) => forge_mcp::McpConfig::load(path)?.egress.summary(),
        None => Vec::new(),
    };
    Ok(serde_json::json!({
        "web": web.map(|w| serde_json::json!({
            "dev_sign_in": w.dev_sign_in.is_some(),
            "cors_origins": w.cors_origins,
            "graphiql": w.graphiql,
            "ui": w.ui,
        })),
        "mcp_egress": egress,
        "files": files.settings()?,
        "source_retention": access.source_retention,
    }))
}
