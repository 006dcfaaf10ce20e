//! `forge serve`: the GraphQL server with an in-process worker (unless `--no-worker`), and
//! `forge token`, which signs development tokens with the server's HS256 secret.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use forge_core::scope::Scope;
use forge_engine::LiveObserver;
use forge_server::{
    Authenticator, ClaimsMode, EventBus, LiveTail, ReadinessCheck, Server, ServerConfig,
    StreamSettings, Wake,
};
use tokio_util::sync::CancellationToken;

use crate::agent_file;
use crate::compose::{self, AccessArgs, EngineSettings, ScopeArgs};
use crate::live::LiveArgs;
use crate::metering::MeteringArgs;
use crate::store::{self, StoreArgs};

/// How the server verifies bearer tokens.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct AuthArgs {
    /// Environment variable holding the HS256 secret (at least 32 bytes).
    #[arg(long = "jwt-secret-env", default_value = "FORGE_JWT_SECRET")]
    secret_env: String,
    /// A JWKS file with RS256 / ES256 public keys, used instead of the HS256 secret; read again
    /// when it changes.
    #[arg(long = "jwks", env = "FORGE_JWKS")]
    jwks: Option<PathBuf>,
    /// Required `iss` claim.
    #[arg(long = "jwt-issuer", env = "FORGE_JWT_ISSUER")]
    issuer: Option<String>,
    /// Required `aud` claim.
    #[arg(long = "jwt-audience", env = "FORGE_JWT_AUDIENCE")]
    audience: Option<String>,
    /// Where tenant and roles are read: `plain` (`tenant_id`, `roles`) or `supabase`
    /// (`app_metadata.tenant_id`, `app_metadata.roles`); `supabase` by default with
    /// `--pg-mode supabase`.
    #[arg(long = "jwt-claims", env = "FORGE_JWT_CLAIMS")]
    claims: Option<String>,
}

impl AuthArgs {
    fn secret(&self) -> anyhow::Result<String> {
        let secret = std::env::var(&self.secret_env).with_context(|| {
            format!(
                "set {} to the HS256 secret (32 bytes or more), or pass --jwks FILE",
                self.secret_env
            )
        })?;
        Ok(secret)
    }

    fn authenticator(&self, store: &StoreArgs) -> anyhow::Result<Authenticator> {
        let mut auth = match &self.jwks {
            // Re-read when the file changes: keys rotate without a restart.
            Some(path) => Authenticator::jwks_file(path)?,
            None => Authenticator::hs256(self.secret()?.as_bytes())?,
        };
        let mode = match self.claims.as_deref() {
            Some("plain") => ClaimsMode::Plain,
            Some("supabase") => ClaimsMode::Supabase,
            Some(other) => bail!("--jwt-claims must be plain or supabase, not {other:?}"),
            None if store.pg_mode == "supabase" && store.url.starts_with("postgres") => {
                ClaimsMode::Supabase
            }
            None => ClaimsMode::Plain,
        };
        auth = auth.mode(mode);
        if let Some(iss) = &self.issuer {
            auth = auth.issuer(iss);
        }
        if let Some(aud) = &self.audience {
            auth = auth.audience(aud);
        }
        Ok(auth)
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Agent files the server runs (repeatable).
    #[arg(long = "agent", required = true)]
    agents: Vec<PathBuf>,
    #[command(flatten)]
    providers: agent_file::ProviderArgs,
    #[command(flatten)]
    metering: MeteringArgs,
    #[command(flatten)]
    access: AccessArgs,
    #[command(flatten)]
    auth: AuthArgs,
    #[command(flatten)]
    live: LiveArgs,
    #[command(flatten)]
    leases: crate::leases::LeaseArgs,
    #[command(flatten)]
    files: crate::files::FilesArgs,
    #[command(flatten)]
    telemetry: crate::telemetry::TelemetryArgs,
    /// Address to listen on.
    #[arg(long, env = "FORGE_LISTEN", default_value = "127.0.0.1:8080")]
    listen: String,
    /// Serve only: runs are executed by separate `forge worker` processes.
    #[arg(long)]
    no_worker: bool,
    /// Runs the in-process worker executes at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Longest a subscription waits between reads of the log without a wake-up, in ms.
    #[arg(long, default_value_t = 2000)]
    poll_ms: u64,
    /// Enables the example `record_effect` tool, writing to this PostgreSQL database.
    #[arg(long, env = "FORGE_EFFECTS_DB")]
    effects_db: Option<String>,
    #[command(flatten)]
    browser: BrowserArgs,
    #[command(flatten)]
    tenant_limits: TenantLimitArgs,
}

/// What one tenant may use of this server (each refusal says which limit and when to retry).
#[derive(Debug, clap::Args)]
pub(crate) struct TenantLimitArgs {
    /// GraphQL requests one tenant may have executing at once, over HTTP and WebSockets
    /// (`TOO_MANY_REQUESTS` past it).
    #[arg(long, env = "FORGE_TENANT_REQUESTS", default_value_t = 16)]
    tenant_requests: usize,
    /// Subscriptions one tenant may have running at once (`TOO_MANY_SUBSCRIPTIONS` past it).
    #[arg(long, env = "FORGE_TENANT_SUBSCRIPTIONS", default_value_t = 2_000)]
    tenant_subscriptions: usize,
    /// WebSocket connections one tenant may hold open (closed with `1013` past it).
    #[arg(long, env = "FORGE_TENANT_CONNECTIONS", default_value_t = 2_000)]
    tenant_connections: usize,
    /// Query cost (complexity) one tenant may spend per second, sustained (`RATE_LIMITED` past
    /// it).
    #[arg(long, env = "FORGE_TENANT_COST_PER_SECOND", default_value_t = 20_000.0)]
    tenant_cost_per_second: f64,
    /// Query cost one tenant may spend at once.
    #[arg(long, env = "FORGE_TENANT_COST_BURST", default_value_t = 200_000.0)]
    tenant_cost_burst: f64,
    /// What every document costs beyond its complexity (subscriptions included).
    #[arg(long, env = "FORGE_TENANT_COST_PER_DOCUMENT", default_value_t = 50.0)]
    tenant_cost_per_document: f64,
    /// MiB of responses one tenant may receive per second, sustained (`RATE_LIMITED` past it).
    #[arg(
        long,
        env = "FORGE_TENANT_RESPONSE_MIB_PER_SECOND",
        default_value_t = 16.0
    )]
    tenant_response_mib_per_second: f64,
    /// MiB of responses one tenant may receive at once.
    #[arg(long, env = "FORGE_TENANT_RESPONSE_MIB_BURST", default_value_t = 64.0)]
    tenant_response_mib_burst: f64,
    /// Runs one tenant may have queued or running at once (`RATE_LIMITED` on `startRun` past
    /// it; a run waiting for a person does not count).
    #[arg(long, env = "FORGE_TENANT_RUNS", default_value_t = 100)]
    tenant_runs: usize,
    /// The part (0 to 1) of each of these limits one principal of a tenant may use: two people,
    /// or a person and a runaway script, each keep theirs. 1 lets one principal use them all.
    #[arg(long, env = "FORGE_PRINCIPAL_SHARE", default_value_t = 0.5, value_parser = share)]
    principal_share: f64,
}

/// A share: a number above 0 and at most 1.
fn share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(n) if n > 0.0 && n <= 1.0 => Ok(n),
        _ => Err(format!(
            "{text:?} is not a share: give a number above 0 and at most 1, such as 0.5"
        )),
    }
}

impl TenantLimitArgs {
    /// Sets the server's per-tenant limits.
    fn apply(&self, config: &mut ServerConfig) {
        const MIB: f64 = 1024.0 * 1024.0;
        config.http.per_tenant = self.tenant_requests.max(1);
        config.ws.per_tenant = self.tenant_subscriptions.max(1);
        config.ws.connections_per_tenant = self.tenant_connections.max(1);
        config.fair_use = forge_server::FairUse {
            cost_per_second: self.tenant_cost_per_second.max(0.0),
            cost_burst: self.tenant_cost_burst.max(1.0),
            cost_per_document: self.tenant_cost_per_document.max(0.0),
            bytes_per_second: self.tenant_response_mib_per_second.max(0.0) * MIB,
            bytes_burst: self.tenant_response_mib_burst.max(0.0) * MIB,
            principal_share: self.principal_share,
            runs_in_flight: self.tenant_runs.max(1),
        };
    }
}

/// What browsers get.
#[derive(Debug, clap::Args)]
pub(crate) struct BrowserArgs {
    /// Do not serve the web client at `/`.
    #[arg(long)]
    no_ui: bool,
    /// An origin allowed to call the API from a browser, such as `https://app.example.com`
    /// (repeatable, or comma separated).
    #[arg(
        long = "cors-origin",
        env = "FORGE_CORS_ORIGINS",
        value_delimiter = ','
    )]
    cors_origins: Vec<String>,
    /// Serve GraphiQL on `GET /graphql`.
    #[arg(long, env = "FORGE_GRAPHIQL")]
    graphiql: bool,
    /// Development sign-in: `POST /auth/dev` hands out tokens for any tenant, principal and
    /// roles, signed with the HS256 secret. Never in production. Refused on a listener that is
    /// not a loopback address unless `--dev-sign-in-anywhere`.
    #[arg(long, env = "FORGE_DEV_SIGN_IN")]
    dev_sign_in: bool,
    /// With `--dev-sign-in`: serve it on any listener, not only a loopback one (anyone who
    /// reaches the server can then sign in as anyone).
    #[arg(long, env = "FORGE_DEV_SIGN_IN_ANYWHERE", requires = "dev_sign_in")]
    dev_sign_in_anywhere: bool,
}

impl BrowserArgs {
    fn config(&self, auth: &AuthArgs) -> anyhow::Result<forge_server::WebConfig> {
        for o in &self.cors_origins {
            let ok = (o.starts_with("http://") || o.starts_with("https://"))
                && !o.trim_end_matches('/').contains(['*', ' '])
                && o.matches('/').count() == 2;
            if !ok {
                bail!("--cors-origin takes an origin such as https://app.example.com, not {o:?}");
            }
        }
        let dev_sign_in = if self.dev_sign_in {
            if auth.jwks.is_some() {
                bail!("--dev-sign-in signs with the HS256 secret; it cannot be used with --jwks");
            }
            eprintln!(
                "warning: development sign-in is on: anyone who reaches this server can sign in as anyone"
            );
            Some(forge_server::DevSignIn {
                secret: auth.secret()?.into_bytes(),
                ttl_secs: 12 * 3600,
                anywhere: self.dev_sign_in_anywhere,
            })
        } else {
            None
        };
        Ok(forge_server::WebConfig {
            ui: !self.no_ui,
            cors_origins: self.cors_origins.clone(),
            graphiql: self.graphiql,
            dev_sign_in,
        })
    }
}

pub(crate) async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let auth = args.auth.authenticator(&args.store)?;
    let loaded = args
        .agents
        .iter()
        .map(|a| agent_file::load(a))
        .collect::<anyhow::Result<Vec<_>>>()?;
    agent_file::note_scripted(&loaded);
    let telemetry = args.telemetry.start("forge-serve")?;
    let opened = store::open(&args.store).await?;
    let sweep_leases = args.leases.sweep_leases(opened.postgres.clone()).await?;
    let store = opened.store.clone();
    let mcp = crate::mcp::start(args.access.mcp.as_deref(), Some(store.clone())).await?;
    let settings = EngineSettings {
        agents: &loaded,
        providers: &args.providers,
        metering: &args.metering,
        access: &args.access,
        mcp: mcp.as_ref(),
        sources: Some(opened.sources.clone()),
    };
    let id = forge_store_sqlite::holder::this_process("serve");
    let providers = agent_file::providers(&loaded, &args.providers)?;
    args.files.warn_if_ephemeral();
    let files = args
        .files
        .files(
            opened.files.clone(),
            store.clone(),
            Some(args.access.embedder.retriever(
                opened.sources.clone(),
                Arc::new(forge_core::ports::policy::AllowAll),
            )?),
        )?
        .with_telemetry(telemetry.telemetry())
        .with_authorizer(args.access.authorizer()?);
    let web = args.browser.config(&args.auth)?;
    let mut builder = compose::builder_with(store.clone(), &settings, &providers)?
        .settings(compose::process_settings(
            &args.access,
            &args.files,
            Some(&web),
        )?)
        .worker_id(id.clone())
        .telemetry(telemetry.telemetry())
        .files(Arc::new(files.clone()));
    if let Some(url) = &args.effects_db {
        builder = builder.tool(crate::effects::record_effect(url).await?)?;
    }
    let engine = Arc::new(builder.build().context("failed to build the engine")?);
    engine
        .audit_configuration(&format!("forge serve (pid {})", std::process::id()))
        .await
        .context("failed to record the configuration in the audit trail")?;

    let bus = EventBus::default();
    let tail = Arc::new(LiveTail::new(bus.clone()));
    let stop = CancellationToken::new();
    args.access
        .spawn_retention(opened.sources.clone(), stop.clone())?;
    let live_feed = args.live.subscribe(tail.clone(), &stop).await?;
    let live_publisher = args.live.publisher(&stop).await?;
    let listener_task = opened.postgres.as_ref().map(|pg| {
        let bus = bus.clone();
        pg.listen_run_events(move |wake| {
            bus.publish(match wake {
                Some((run_id, thread_id)) => Wake::Run { run_id, thread_id },
                None => Wake::All,
            });
            true
        })
    });

    let mut readiness = Vec::new();
    let stores = opened.clone();
    readiness.push(ReadinessCheck {
        name: "store".into(),
        probe: Box::new(move || {
            let stores = stores.clone();
            Box::pin(async move { stores.check().await })
        }),
    });
    for provider in providers {
        let name = format!("provider {}", provider.name());
        readiness.push(ReadinessCheck {
            name,
            probe: Box::new(move || {
                let provider = provider.clone();
                Box::pin(async move { provider.health().await.map_err(|e| e.code().to_owned()) })
            }),
        });
    }
    // Every configured dependency, each named: the files' storage and scanner, the MCP servers.
    let storage = files.clone();
    readiness.push(ReadinessCheck {
        name: "file storage".into(),
        probe: Box::new(move || {
            let files = storage.clone();
            Box::pin(async move { files.storage_health().await })
        }),
    });
    if files.scanner_health().await.is_some() {
        let scanning = files.clone();
        readiness.push(ReadinessCheck {
            name: "file scanner".into(),
            probe: Box::new(move || {
                let files = scanning.clone();
                Box::pin(async move { files.scanner_health().await.unwrap_or(Ok(())) })
            }),
        });
    }
    for server in mcp.iter().flat_map(|rt| rt.servers().iter().cloned()) {
        readiness.push(ReadinessCheck {
            name: format!("mcp server {}", server.name()),
            probe: Box::new(move || {
                let connected = server.peer().is_some();
                Box::pin(async move {
                    if connected {
                        Ok(())
                    } else {
                        Err("not connected (restarting with backoff)".to_owned())
                    }
                })
            }),
        });
    }
    readiness.extend(args.live.readiness()?);
    if !args.no_worker {
        readiness.extend(args.leases.readiness()?);
    }
    if let Some(embedder) = args.access.embedder.embedder()? {
        readiness.push(ReadinessCheck {
            name: format!("embedder {}", embedder.model()),
            probe: Box::new(move || {
                let embedder = embedder.clone();
                Box::pin(async move {
                    // The kind only: a server's refusal may quote what it was sent.
                    embedder.health().await.map_err(|e| match e.kind() {
                        forge_core::ErrorKind::Retryable => "unreachable or failing".to_owned(),
                        kind => format!("refused ({kind:?})"),
                    })
                })
            }),
        });
    }
    let mut config = ServerConfig::new(auth);
    args.tenant_limits.apply(&mut config);
    config.web = web;
    config.readiness = readiness;
    // The console's dead letters: the same queue `forge dlq` works on.
    config.dead_letters = Some(store.clone());
    // The console's MCP servers: the ones this process connected.
    config.mcp = mcp.as_ref().map(|rt| {
        Arc::new(crate::mcp::ConsoleStatus(rt.servers().to_vec()))
            as Arc<dyn forge_server::McpStatus>
    });
    config.retriever = Some(
        args.access
            .embedder
            .retriever(opened.sources.clone(), args.access.authorizer()?)?,
    );
    config.files = Some(files);
    let metrics_at = args.telemetry.metrics_at(true)?;
    config.metrics =
        (metrics_at == crate::telemetry::MetricsAt::ApiPort).then(|| telemetry.metrics());
    telemetry
        .serve_metrics(&metrics_at, "forge serve", stop.clone())
        .await?;
    config.streams = StreamSettings {
        poll: std::time::Duration::from_millis(args.poll_ms.max(10)),
        ..StreamSettings::default()
    };
    let dev_sign_in = config.web.dev_sign_in.clone();
    let server = Server::new(engine.clone(), tail.clone(), config);

    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("failed to listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    // Before a worker starts or anything says it listens (`Server::serve` checks it too).
    if let Some(dev) = &dev_sign_in {
        dev.check_listener(addr)?;
    }
    let on_signal = stop.clone();
    tokio::spawn(async move {
        crate::shutdown_signal().await;
        on_signal.cancel();
    });

    let worker = (!args.no_worker).then(|| {
        let config = forge_engine::WorkerConfig {
            id,
            concurrency: args.concurrency,
            ..forge_engine::WorkerConfig::default()
        };
        // Subscribers of this server follow the step in flight through the in-process tail; with
        // --live, other servers do through Redis.
        let mut observer = LiveObserver::default().with(tail.clone());
        if let Some((publisher, _)) = &live_publisher {
            observer = observer.with(publisher.clone());
        }
        let mut worker = forge_engine::Worker::new(engine.clone(), store.clone(), config)
            .with_observer(Arc::new(observer));
        if let Some(leases) = sweep_leases {
            worker = worker.with_sweep_leases(leases);
        }
        let drain = stop.clone();
        tokio::spawn(async move { worker.run(drain).await })
    });
    eprintln!(
        "forge serve: listening on http://{addr}/graphql ({} agent(s), {})",
        loaded.len(),
        if args.no_worker {
            "no worker".to_owned()
        } else {
            format!("worker concurrency {}", args.concurrency)
        }
    );
    server.serve(listener, stop).await?;
    if let Some(worker) = worker {
        let report = worker.await?;
        eprintln!(
            "forge serve: stopped; worker finished {}, released {}",
            report.finished, report.released
        );
    }
    if let Some(task) = listener_task {
        task.abort();
    }
    // `stop` has fired: the live tasks send what is queued and end.
    for task in live_feed.into_iter().chain(live_publisher.map(|(_, t)| t)) {
        let _ = task.await;
    }
    telemetry.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, clap::Args)]
pub(crate) struct TokenArgs {
    #[command(flatten)]
    scope: ScopeArgs,
    /// Environment variable holding the HS256 secret.
    #[arg(long = "jwt-secret-env", default_value = "FORGE_JWT_SECRET")]
    secret_env: String,
    /// Lifetime in seconds.
    #[arg(long, default_value_t = 3600)]
    ttl_secs: i64,
}

/// Prints an HS256 token for the scope (development and tests).
pub(crate) fn token(args: TokenArgs) -> anyhow::Result<ExitCode> {
    let secret = std::env::var(&args.secret_env)
        .with_context(|| format!("set {} to the HS256 secret", args.secret_env))?;
    let scope: Scope = args.scope.scope()?;
    let now = chrono::Utc::now().timestamp();
    let token = forge_server::auth::sign_hs256(secret.as_bytes(), &scope, args.ttl_secs, now)?;
    println!("{token}");
    Ok(ExitCode::SUCCESS)
}
