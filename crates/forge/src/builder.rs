//! [`ForgeBuilder`]: a deployment assembled from its parts, the way `forge serve` assembles one.

use std::path::PathBuf;
use std::sync::Arc;

use forge_core::ports::model::ModelProvider;
use forge_core::ports::tool::Tool;
use forge_engine::{Engine, EngineBuilder, SkillLibrary, WorkerConfig};
use forge_live::{EventBus, LiveTail, LogCache, StreamContext, StreamSettings};
use forge_providers::ProvidersConfig;
use tokio_util::sync::CancellationToken;

use crate::agents::{self, AgentSource, LoadedAgent};
use crate::deployment::Forge;
use crate::{Error, Stores};

/// Changes the engine builder in ways [`ForgeBuilder`] has no method for.
type Customize = Box<dyn FnOnce(EngineBuilder) -> Result<EngineBuilder, Error> + Send>;

/// Assembles a [`Forge`]: a store, agents, models, tools, policies and skills in; an engine, a
/// worker and live streams out. Start with [`Forge::builder`].
#[must_use]
pub struct ForgeBuilder {
    store: String,
    opened: Option<Stores>,
    #[cfg(feature = "postgres")]
    pg_mode: crate::PgMode,
    agents: Vec<AgentSource>,
    models: Vec<Arc<dyn ModelProvider>>,
    tools: Vec<Arc<dyn Tool>>,
    providers: Option<PathBuf>,
    policies: Option<PathBuf>,
    skills: Option<PathBuf>,
    base: Option<EngineBuilder>,
    worker: WorkerConfig,
    start_worker: bool,
    streams: StreamSettings,
    customize: Vec<Customize>,
    /// Whether a job is registered (and with it the built-in `job` model).
    jobs: bool,
}

impl std::fmt::Debug for ForgeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForgeBuilder")
            .field("store", &crate::redact(&self.store))
            .field("agents", &self.agents.len())
            .field("tools", &self.tools.len())
            .finish_non_exhaustive()
    }
}

impl Default for ForgeBuilder {
    fn default() -> Self {
        Self {
            store: "sqlite://forge.db".into(),
            opened: None,
            #[cfg(feature = "postgres")]
            pg_mode: crate::PgMode::Rls,
            agents: Vec::new(),
            models: Vec::new(),
            tools: Vec::new(),
            providers: None,
            policies: None,
            skills: None,
            base: None,
            worker: WorkerConfig {
                id: holder("embedded"),
                concurrency: 4,
                ..WorkerConfig::default()
            },
            start_worker: true,
            streams: StreamSettings::default(),
            customize: Vec::new(),
            jobs: false,
        }
    }
}

/// The name this process's worker holds claims and leases under: on SQLite, one that says which
/// process it is, so a crashed one's runs are taken over at once.
fn holder(role: &str) -> String {
    #[cfg(feature = "sqlite")]
    return forge_store_sqlite::holder::this_process(role);
    #[cfg(not(feature = "sqlite"))]
    return format!("{role}-{}", std::process::id());
}

impl ForgeBuilder {
    /// Where data lives: `sqlite://PATH` (the default is `sqlite://forge.db`, created if
    /// missing), `postgres://…` (feature `postgres`) or `memory`.
    pub fn store(mut self, url: impl Into<String>) -> Self {
        self.store = url.into();
        self
    }

    /// Stores opened already ([`Stores::open`]): an application that needs them before the
    /// engine exists (its retrieval over `stores.sources`, say) opens them first. Takes the
    /// place of [`ForgeBuilder::store`].
    ///
    /// ```
    /// use forge::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), forge::Error> {
    /// let stores = forge::Stores::open("memory").await?;
    /// let sources = stores.sources.clone(); // for the application's own retrieval
    /// let forge = Forge::builder().stores(stores).build().await?;
    /// # drop(sources);
    /// forge.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn stores(mut self, stores: Stores) -> Self {
        self.opened = Some(stores);
        self
    }

    /// How PostgreSQL isolates tenants (RLS by default).
    #[cfg(feature = "postgres")]
    pub fn pg_mode(mut self, mode: crate::PgMode) -> Self {
        self.pg_mode = mode;
        self
    }

    /// Registers an agent: an [`AgentDefinition`](forge_core::agent::AgentDefinition) built in
    /// code, or the path of a TOML agent file.
    pub fn agent(mut self, agent: impl Into<AgentSource>) -> Self {
        self.agents.push(agent.into());
        self
    }

    /// Gives a model provider for the agents whose model names its prefix (`scripted`,
    /// `openai`, …). Prefixes no given provider covers are built from the providers file (or the
    /// built-in defaults) with credentials from the environment.
    pub fn model(mut self, provider: impl ModelProvider + 'static) -> Self {
        self.models.push(Arc::new(provider));
        self
    }

    /// Adds a tool agents may be offered ([`native_tool`](forge_engine::native_tool) wraps an
    /// async function).
    pub fn tool(mut self, tool: impl Tool + 'static) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    /// Adds tools built elsewhere, already shared (an MCP server's imported tools, say).
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Registers a durable application job ([`Job`](crate::Job)): its agent, its tool and (once)
    /// the built-in `job` model. Queue it with [`Forge::jobs`].
    pub fn job(mut self, job: crate::Job) -> Self {
        if !self.jobs {
            self.models.push(Arc::new(crate::jobs::JobModel));
            self.jobs = true;
        }
        self.agents.push(job.agent().into());
        self.tools.push(job.tool());
        self
    }

    /// The providers file (TOML): base URLs, credential references, headers, timeouts.
    pub fn providers(mut self, path: impl Into<PathBuf>) -> Self {
        self.providers = Some(path.into());
        self
    }

    /// Cedar policies (a `.cedar` file or a directory of them): who may use which agent and
    /// tool, and which calls need no approval. Without them every principal may use everything.
    pub fn policies(mut self, path: impl Into<PathBuf>) -> Self {
        self.policies = Some(path.into());
        self
    }

    /// A skills directory: one subdirectory per skill, each with a `SKILL.md`.
    pub fn skills(mut self, dir: impl Into<PathBuf>) -> Self {
        self.skills = Some(dir.into());
        self
    }

    /// Runs the worker executes at once (4 by default).
    pub fn concurrency(mut self, runs: usize) -> Self {
        self.worker.concurrency = runs.max(1);
        self
    }

    /// The worker's settings in full (its id, which is also the engine's lease holder; its
    /// poll; the one run it may execute…). The default holds claims under a name that says
    /// which process it is, and runs 4 at once.
    pub fn worker(mut self, config: WorkerConfig) -> Self {
        self.worker = config;
        self
    }

    /// No worker in this process: runs are queued here and executed by `forge worker`
    /// processes (or another deployment) on the same store — or by a worker started later with
    /// [`Forge::start_worker`].
    pub fn without_worker(mut self) -> Self {
        self.start_worker = false;
        self
    }

    /// How streams read the log: the longest wait between reads without a wake-up (runs
    /// executed by another process on SQLite are seen at that pace), and the batch size.
    pub fn streams(mut self, settings: StreamSettings) -> Self {
        self.streams = settings;
        self
    }

    /// Starts from this engine builder instead of an empty one: a composition root that
    /// already assembles engines its own way (`forge-cli` does) keeps doing so and gets the
    /// deployment around it. The deployment's store and lease holder replace the builder's.
    pub fn base(mut self, engine: EngineBuilder) -> Self {
        self.base = Some(engine);
        self
    }

    /// Anything else the engine builder offers (prices, quotas, retrieval, files, telemetry),
    /// applied after everything above.
    pub fn engine(
        mut self,
        customize: impl FnOnce(EngineBuilder) -> Result<EngineBuilder, Error> + Send + 'static,
    ) -> Self {
        self.customize.push(Box::new(customize));
        self
    }

    /// Opens the store (applying its migrations), loads the agents, builds the providers they
    /// need, the engine and its live streams, and starts the worker.
    ///
    /// ```
    /// use forge::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), forge::Error> {
    /// // An agent whose model provider nothing configures is refused before anything runs.
    /// let refused = Forge::builder()
    ///     .store("memory")
    ///     .agent(AgentDefinition::new("desk", "nowhere:model"))
    ///     .build()
    ///     .await;
    /// assert!(refused.is_err());
    /// # Ok(()) }
    /// ```
    pub async fn build(self) -> Result<Forge, Error> {
        let stores = match (self.opened, self.store.as_str()) {
            (Some(opened), _) => opened,
            #[cfg(feature = "postgres")]
            (None, url) if url.starts_with("postgres") => {
                Stores::open_postgres(url, self.pg_mode).await?
            }
            (None, url) => Stores::open(url).await?,
        };
        let loaded = self
            .agents
            .iter()
            .map(LoadedAgent::from_source)
            .collect::<Result<Vec<_>, _>>()?;
        let config = match &self.providers {
            Some(path) => ProvidersConfig::load(path)
                .map_err(|e| crate::Error::file("invalid providers file", path, e))?,
            None => ProvidersConfig::default(),
        };
        let env = |name: &str| std::env::var(name).ok();
        let mut models = self.models;
        models.extend(agents::model_providers(&loaded, &models, &config, &env)?);

        let mut builder = self
            .base
            .unwrap_or_else(Engine::builder)
            .dyn_store(stores.store.clone())
            .worker_id(self.worker.id.clone())
            .redactor(agents::redactor(&config, &[], &env));
        for agent in loaded {
            builder = builder.agent(agent.definition);
        }
        for model in models {
            builder = builder.model(model);
        }
        for tool in self.tools {
            builder = builder.tool(tool)?;
        }
        if let Some(path) = &self.policies {
            let cedar = Arc::new(
                forge_policy::CedarAuthorizer::from_path(path)
                    .map_err(|e| Error::file("failed to load policies", path, e))?,
            );
            builder = builder.authorizer(cedar.clone()).approval_rule(cedar);
        }
        if let Some(dir) = &self.skills {
            let library = SkillLibrary::load_dir(dir)
                .map_err(|e| Error::file("failed to load skills", dir, e))?;
            builder = builder.skills(library);
        }
        for customize in self.customize {
            builder = customize(builder)?;
        }
        let engine = Arc::new(builder.build()?);

        let tail = Arc::new(LiveTail::new(EventBus::default()));
        let stop = CancellationToken::new();
        // On PostgreSQL, runs other processes execute wake this one's streams too.
        #[cfg(feature = "postgres")]
        if let Some(pg) = &stores.postgres {
            let bus = tail.bus().clone();
            let listening = pg.listen_run_events(move |wake| {
                bus.publish(match wake {
                    Some((run_id, thread_id)) => forge_live::Wake::Run { run_id, thread_id },
                    None => forge_live::Wake::All,
                });
                true
            });
            let stop = stop.clone();
            tokio::spawn(async move {
                stop.cancelled().await;
                listening.abort();
            });
        }
        let streams = StreamContext {
            runs: engine.runs().clone(),
            cache: Arc::new(LogCache::default()),
            tail: Some(tail.clone()),
            settings: self.streams,
            shutdown: stop.clone(),
        };
        let mut forge = Forge::new(engine, stores, tail, streams, stop);
        if self.start_worker {
            forge.start_worker(self.worker)?;
        }
        Ok(forge)
    }
}
