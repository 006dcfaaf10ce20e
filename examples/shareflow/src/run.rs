//! Everything ShareFlow runs, started together: the publishing service (unless another is
//! named), ShareFlow's database, Forge's store, engine and worker, and one HTTP server carrying
//! Forge's GraphQL API and web client and ShareFlow's own API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use forge::Forge;
use forge::server::{Authenticator, DevSignIn, ServerConfig, WebConfig};
use tokio_util::sync::CancellationToken;

use crate::app::{AppError, ShareFlow};
use crate::client::PublisherClient;
use crate::db::AppDb;
use crate::publisher::Publisher;

/// Where Forge keeps ShareFlow's runs.
#[derive(Debug, Clone)]
pub enum StoreChoice {
    /// SQLite, `forge.db` in the data directory (the default).
    Sqlite,
    /// PostgreSQL with row-level security. From the administrator URL ShareFlow creates (if
    /// missing) its login role `shareflow` and its database `shareflow`, provisions what the
    /// policies need, and then connects as `shareflow`, never as the administrator. ShareFlow's
    /// own tables (the flag, the documents) are in that database too.
    Postgres {
        /// A superuser's URL, for example `postgres://postgres@127.0.0.1:5432/postgres`.
        admin_url: String,
        /// The database to create and use.
        database: String,
    },
}

/// How to start.
#[derive(Debug, Clone)]
pub struct Options {
    /// ShareFlow's files: its database, the publishing service's, and SQLite's `forge.db`.
    pub data: PathBuf,
    /// Forge's store.
    pub store: StoreChoice,
    /// Where the server listens.
    pub listen: SocketAddr,
    /// Where the bundled publishing service listens (when `publisher_url` is not given).
    pub publisher_listen: SocketAddr,
    /// Another publishing service to use instead of starting one.
    pub publisher_url: Option<String>,
    /// The HS256 secret tokens are signed with (32 bytes or more).
    pub secret: Vec<u8>,
    /// Development sign-in in the web client: anyone who reaches the server signs in as anyone.
    /// Refused on a listener that is not a loopback address unless `dev_sign_in_anywhere`.
    pub dev_sign_in: bool,
    /// With `dev_sign_in`, serve it on any listener.
    pub dev_sign_in_anywhere: bool,
    /// How long a run this process was executing when it died (a draft, a flag's rollback)
    /// waits before a worker takes it over: the lease it held, renewed while it lives.
    pub takeover_after: std::time::Duration,
}

/// [`Options::takeover_after`] by default.
pub const TAKEOVER_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// ShareFlow, running.
pub struct Running {
    /// The server's address (`http://…`): Forge's `/graphql`, the web client at `/`, `/app/…`.
    pub url: String,
    /// The publishing service's address.
    pub publisher_url: String,
    /// The bundled publishing service, when this process runs it.
    pub publisher: Option<Publisher>,
    /// The application.
    pub app: Arc<ShareFlow>,
    forge: Forge,
    serving: tokio::task::JoinHandle<Result<(), forge::Error>>,
    /// Stops the bundled publishing service.
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("url", &self.url)
            .field("publisher_url", &self.publisher_url)
            .finish_non_exhaustive()
    }
}

/// Settles the document of every run whose log grows (its end among those commits); when the
/// bus has dropped wake-ups, every drafting document.
async fn settle_drafts(
    app: Arc<ShareFlow>,
    mut wakes: tokio::sync::broadcast::Receiver<forge::live::Wake>,
    stop: CancellationToken,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let wake = tokio::select! {
            _ = stop.cancelled() => return,
            wake = wakes.recv() => wake,
        };
        let settled = match wake {
            Ok(forge::live::Wake::Run { run_id, .. }) => {
                app.settle_run(&run_id.to_string()).await.map(drop)
            }
            Ok(forge::live::Wake::All) | Err(RecvError::Lagged(_)) => {
                app.settle_all().await.map(drop)
            }
            Ok(_) => Ok(()),
            Err(RecvError::Closed) => return,
        };
        if let Err(e) = settled {
            eprintln!("shareflow: settling drafts: {e}");
        }
    }
}

fn config(what: &str) -> impl Fn(String) -> AppError + '_ {
    move |e| AppError::Config(format!("{what}: {e}"))
}

impl Running {
    /// Starts everything and returns once the server accepts connections.
    pub async fn start(options: Options) -> Result<Running, AppError> {
        std::fs::create_dir_all(&options.data)
            .map_err(|e| config("the data directory")(e.to_string()))?;
        let stop = CancellationToken::new();
        let mut tasks = Vec::new();

        let (publisher, publisher_url) = match &options.publisher_url {
            Some(url) => (None, url.clone()),
            None => {
                let publisher = Publisher::open(&options.data.join("publisher.db"))
                    .await
                    .map_err(|e| config("the publishing service")(e.to_string()))?;
                let listener = tokio::net::TcpListener::bind(options.publisher_listen)
                    .await
                    .map_err(|e| config("the publishing service's address")(e.to_string()))?;
                let addr = listener
                    .local_addr()
                    .map_err(|e| config("the publishing service's address")(e.to_string()))?;
                let router = publisher.router();
                let until = stop.clone();
                tasks.push(tokio::spawn(async move {
                    let _ = axum::serve(listener, router)
                        .with_graceful_shutdown(async move { until.cancelled().await })
                        .await;
                }));
                (Some(publisher), format!("http://{addr}"))
            }
        };

        let (stores, db) = match &options.store {
            StoreChoice::Sqlite => {
                let url = format!("sqlite://{}", options.data.join("forge.db").display());
                let stores = forge::Stores::open(&url)
                    .await
                    .map_err(|e| config("the SQLite store")(e.to_string()))?;
                (
                    stores,
                    AppDb::open(&options.data.join("shareflow.db")).await?,
                )
            }
            StoreChoice::Postgres {
                admin_url,
                database,
            } => {
                let url =
                    forge::store::postgres::provision_application(admin_url, "shareflow", database)
                        .await
                        .map_err(|e| {
                            config("PostgreSQL set-up")(format!(
                                "{e} (is PostgreSQL running at the administrator URL?)"
                            ))
                        })?;
                let stores = forge::Stores::open_postgres(&url, forge::PgMode::Rls)
                    .await
                    .map_err(|e| config("the PostgreSQL store")(e.to_string()))?;
                // ShareFlow's own tables in the same database, owned by its role.
                (stores, AppDb::connect(&url).await?)
            }
        };
        // PostgreSQL's notifications wake the deployment's streams for runs other processes
        // execute (the facade listens).
        let (app, forge) = ShareFlow::start(
            stores,
            db,
            PublisherClient::new(publisher_url.clone()),
            options.takeover_after,
        )
        .await?;
        let app = Arc::new(app);
        // Drafts that ended while no process watched get their state now; from here on each
        // is settled as its run commits its end.
        app.settle_all().await?;
        // Documents whose drop died before routing them are routed now, by jobs on the queue.
        app.route_stranded().await?;
        tasks.push(tokio::spawn(settle_drafts(
            app.clone(),
            forge.tail().bus().subscribe(),
            forge.stopping(),
        )));

        let auth = Authenticator::hs256(&options.secret)
            .map_err(|e| config("the token secret")(e.to_string()))?;
        let dev_sign_in = options.dev_sign_in.then(|| DevSignIn {
            secret: options.secret.clone(),
            ttl_secs: 12 * 3600,
            anywhere: options.dev_sign_in_anywhere,
        });
        let mut server_config = ServerConfig::new(
            Authenticator::hs256(&options.secret)
                .map_err(|e| config("the token secret")(e.to_string()))?,
        );
        server_config.web = WebConfig {
            ui: true,
            cors_origins: vec![],
            graphiql: false,
            dev_sign_in: dev_sign_in.clone(),
        };
        server_config.retriever = Some(app.retriever().clone());
        let routes = crate::http::router(app.clone(), Arc::new(auth));
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
            publisher_url,
            publisher,
            app,
            forge,
            serving,
            stop,
            tasks,
        })
    }

    /// Stops accepting work, lets the worker drain, and waits for everything to end.
    pub async fn stop(self) {
        self.forge.shutdown().await;
        let _ = self.serving.await;
        self.stop.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
    }

    /// A token for `principal` in `tenant` with `roles`, signed with `secret`, valid an hour.
    pub fn token(
        secret: &[u8],
        tenant: &str,
        principal: &str,
        roles: &[&str],
    ) -> Result<String, AppError> {
        let scope = forge::core::scope::Scope::parse(tenant, principal, roles)
            .map_err(|e| AppError::Invalid(e.to_string()))?;
        let now = chrono::Utc::now().timestamp();
        forge::server::auth::sign_hs256(secret, &scope, 3600, now)
            .map_err(|e| config("the token secret")(e.to_string()))
    }
}
