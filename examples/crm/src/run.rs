//! Everything the CRM runs, started together: its database (seeded when new), its MCP server
//! (a child process, `crm mcp`), Forge's store, engine and worker, and one HTTP server carrying
//! Forge's GraphQL API and web client and the CRM's own API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use forge::Forge;
use forge::server::{Authenticator, DevSignIn, ServerConfig, WebConfig};

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
    forge: Forge,
    serving: tokio::task::JoinHandle<Result<(), forge::Error>>,
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

/// Opens Forge's stores as `options` say.
async fn open_stores(options: &Options) -> Result<forge::Stores, CrmError> {
    match &options.store {
        StoreChoice::Sqlite => {
            let url = format!("sqlite://{}", options.data.join("forge.db").display());
            forge::Stores::open(&url)
                .await
                .map_err(|e| config("the SQLite store")(e.to_string()))
        }
        StoreChoice::Postgres {
            admin_url,
            database,
        } => {
            let url = forge::store::postgres::provision_application(admin_url, "crm", database)
                .await
                .map_err(|e| {
                    config("PostgreSQL set-up")(format!(
                        "{e} (is PostgreSQL running at the administrator URL?)"
                    ))
                })?;
            forge::Stores::open_postgres(&url, forge::PgMode::Rls)
                .await
                .map_err(|e| config("the PostgreSQL store")(e.to_string()))
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
        let stores = open_stores(&options).await?;
        let (crm, forge) = Crm::start(stores, db, mcp).await?;
        let crm = Arc::new(crm);
        crm.index_notes().await?;

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
        // Forge's routes and the application's, with Forge's header timeout and drain; it ends
        // when the deployment shuts down.
        let serving = tokio::spawn(forge.serve_with(listener, server_config, routes));
        Ok(Running {
            url: format!("http://{addr}"),
            crm,
            forge,
            serving,
        })
    }

    /// Stops, letting the worker drain.
    pub async fn stop(self) {
        self.forge.shutdown().await;
        let _ = self.serving.await;
    }
}
