//! Everything the CRM runs, started together: its database (seeded when new), its MCP server
//! (a child process, `crm mcp`), Forge's store, engine and worker, and one HTTP server carrying
//! Forge's GraphQL API and web client and the CRM's own API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use forge_core::ports::store::Store;
use forge_engine::{LiveObserver, Worker, WorkerConfig};
use forge_rag::SourceStore;
use forge_server::{Authenticator, DevSignIn, EventBus, LiveTail, Server, ServerConfig, WebConfig};
use forge_store_postgres::{Mode, PostgresStore};
use forge_store_sqlite::SqliteStore;
use tokio_util::sync::CancellationToken;

use crate::app::{Crm, CrmError};
use crate::db::CrmDb;

/// Where Forge keeps the CRM's runs.
#[derive(Debug, Clone)]
pub enum StoreChoice {
    /// SQLite, `forge.db` in the data directory (the default).
    Sqlite,
    /// PostgreSQL with row-level security, set up from a superuser's URL: the role `crm` and the
    /// database named here, created if missing; the CRM connects as `crm`.
    Postgres {
        /// A superuser's URL.
        admin_url: String,
        /// The database to create and use.
        database: String,
    },
}

/// How to start.
#[derive(Debug, Clone)]
pub struct Options {
    /// The CRM's files: `crm.db`, SQLite's `forge.db`.
    pub data: PathBuf,
    /// Forge's store.
    pub store: StoreChoice,
    /// Where the server listens.
    pub listen: SocketAddr,
    /// The `crm` executable the MCP server is started from.
    pub crm_command: PathBuf,
    /// The HS256 secret tokens are signed with.
    pub secret: Vec<u8>,
    /// Development sign-in in the web client: anyone who reaches the server signs in as anyone.
    /// Refused on a listener that is not a loopback address unless `dev_sign_in_anywhere`.
    pub dev_sign_in: bool,
    /// With `dev_sign_in`, serve it on any listener.
    pub dev_sign_in_anywhere: bool,
}

/// The CRM, running.
pub struct Running {
    /// The server's address: Forge's `/graphql`, the web client at `/`, `/crm/…`.
    pub url: String,
    /// The application.
    pub crm: Arc<Crm>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

fn config(what: &'static str) -> impl Fn(String) -> CrmError {
    move |e| CrmError::Config(format!("{what}: {e}"))
}

/// Opens Forge's store as `options` say.
async fn open_store(options: &Options) -> Result<(Arc<dyn Store>, Arc<dyn SourceStore>), CrmError> {
    match &options.store {
        StoreChoice::Sqlite => {
            let url = format!("sqlite://{}", options.data.join("forge.db").display());
            let s = Arc::new(
                SqliteStore::open(&url)
                    .await
                    .map_err(|e| config("the SQLite store")(e.to_string()))?,
            );
            Ok((s.clone(), s))
        }
        StoreChoice::Postgres {
            admin_url,
            database,
        } => {
            let url = forge_store_postgres::provision_application(admin_url, "crm", database)
                .await
                .map_err(|e| {
                    config("PostgreSQL set-up")(format!(
                        "{e} (is PostgreSQL running at the administrator URL?)"
                    ))
                })?;
            let s = Arc::new(
                PostgresStore::connect(&url, Mode::Rls)
                    .await
                    .map_err(|e| config("the PostgreSQL store")(e.to_string()))?,
            );
            Ok((s.clone(), s))
        }
    }
}

impl Running {
    /// Starts everything; returns once the server accepts connections.
    pub async fn start(options: Options) -> Result<Running, CrmError> {
        std::fs::create_dir_all(&options.data)
            .map_err(|e| config("the data directory")(e.to_string()))?;
        let db_path = options.data.join("crm.db");
        let db = CrmDb::open(Some(&db_path)).await?;
        let mcp = crate::app::import_tools(&options.crm_command, &db_path).await?;
        let (store, sources) = open_store(&options).await?;
        let worker_id = format!("crm-{}", std::process::id());
        let crm = Arc::new(Crm::new(store.clone(), sources, db, mcp, &worker_id)?);
        crm.index_notes().await?;

        let stop = CancellationToken::new();
        let mut tasks = Vec::new();
        let tail = Arc::new(LiveTail::new(EventBus::default()));
        let auth = || {
            Authenticator::hs256(&options.secret)
                .map_err(|e| config("the token secret")(e.to_string()))
        };
        let dev_sign_in = options.dev_sign_in.then(|| DevSignIn {
            secret: options.secret.clone(),
            ttl_secs: 12 * 3600,
            anywhere: options.dev_sign_in_anywhere,
        });
        let mut server_config = ServerConfig::new(auth()?);
        server_config.web = WebConfig {
            ui: true,
            cors_origins: vec![],
            graphiql: false,
            dev_sign_in: dev_sign_in.clone(),
        };
        server_config.retriever = Some(crm.retriever().clone());
        let server = Server::new(crm.engine().clone(), tail.clone(), server_config);
        let routes = crate::http::router(crm.clone(), Arc::new(auth()?));
        let listener = tokio::net::TcpListener::bind(options.listen)
            .await
            .map_err(|e| config("the server's address")(e.to_string()))?;
        let addr = listener
            .local_addr()
            .map_err(|e| config("the server's address")(e.to_string()))?;
        if let Some(dev) = &dev_sign_in {
            dev.check_listener(addr)
                .map_err(|e| config("development sign-in")(e.to_string()))?;
        }
        let until = stop.clone();
        tasks.push(tokio::spawn(async move {
            // Forge's routes and the application's, with Forge's header timeout and drain.
            let _ = server.serve_with(routes, listener, until).await;
        }));
        let worker = Worker::new(
            crm.engine().clone(),
            store,
            WorkerConfig {
                id: worker_id,
                poll_interval: std::time::Duration::from_millis(50),
                ..WorkerConfig::default()
            },
        )
        .with_observer(Arc::new(LiveObserver::default().with(tail)));
        let until = stop.clone();
        tasks.push(tokio::spawn(async move {
            worker.run(until).await;
        }));
        Ok(Running {
            url: format!("http://{addr}"),
            crm,
            stop,
            tasks,
        })
    }

    /// Stops, letting the worker drain.
    pub async fn stop(self) {
        self.stop.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
    }
}
