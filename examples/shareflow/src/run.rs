//! Everything ShareFlow runs, started together: the publishing service (unless another is
//! named), ShareFlow's database, Forge's store, engine and worker, and one HTTP server carrying
//! Forge's GraphQL API and web client and ShareFlow's own API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use forge_core::ports::store::Store;
use forge_engine::{LiveObserver, Worker, WorkerConfig};
use forge_rag::SourceStore;
use forge_server::{
    Authenticator, DevSignIn, EventBus, LiveTail, Server, ServerConfig, Wake, WebConfig,
};
use forge_store_postgres::{Mode, PostgresStore};
use forge_store_sqlite::SqliteStore;
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
    /// policies need, and then connects as `shareflow`, never as the administrator.
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
}

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

/// Forge's store, its retrieval sources, and the PostgreSQL store itself (for `LISTEN`).
type Opened = (
    Arc<dyn Store>,
    Arc<dyn SourceStore>,
    Option<Arc<PostgresStore>>,
);

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

        let db = AppDb::open(&options.data.join("shareflow.db")).await?;
        let (store, sources, pg): Opened = match &options.store {
            StoreChoice::Sqlite => {
                let url = format!("sqlite://{}", options.data.join("forge.db").display());
                let s = Arc::new(
                    SqliteStore::open(&url)
                        .await
                        .map_err(|e| config("the SQLite store")(e.to_string()))?,
                );
                (s.clone(), s, None)
            }
            StoreChoice::Postgres {
                admin_url,
                database,
            } => {
                let url =
                    forge_store_postgres::provision_application(admin_url, "shareflow", database)
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
                (s.clone(), s.clone(), Some(s))
            }
        };
        let worker_id = format!("shareflow-{}", std::process::id());
        let app = Arc::new(ShareFlow::new(
            store.clone(),
            sources,
            db,
            PublisherClient::new(publisher_url.clone()),
            forge_engine::SkillLibrary::load_dir(&crate::app::skills_dir())
                .map_err(|e| config("the skills")(e.to_string()))?,
            &worker_id,
        )?);

        let auth = Authenticator::hs256(&options.secret)
            .map_err(|e| config("the token secret")(e.to_string()))?;
        let bus = EventBus::default();
        let tail = Arc::new(LiveTail::new(bus.clone()));
        if let Some(pg) = &pg {
            let bus = bus.clone();
            let listening = pg.listen_run_events(move |wake| {
                bus.publish(match wake {
                    Some((run_id, thread_id)) => Wake::Run { run_id, thread_id },
                    None => Wake::All,
                });
                true
            });
            let until = stop.clone();
            tasks.push(tokio::spawn(async move {
                until.cancelled().await;
                listening.abort();
            }));
        }
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
        let server = Server::new(app.engine().clone(), tail.clone(), server_config);
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
        let until = stop.clone();
        tasks.push(tokio::spawn(async move {
            // Forge's routes and the application's, with Forge's header timeout and drain.
            let _ = server.serve_with(routes, listener, until).await;
        }));

        let worker = Worker::new(
            app.engine().clone(),
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
            publisher_url,
            publisher,
            app,
            stop,
            tasks,
        })
    }

    /// Stops accepting work, lets the worker drain, and waits for everything to end.
    pub async fn stop(self) {
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
        let scope = forge_core::scope::Scope::parse(tenant, principal, roles)
            .map_err(|e| AppError::Invalid(e.to_string()))?;
        let now = chrono::Utc::now().timestamp();
        forge_server::auth::sign_hs256(secret, &scope, 3600, now)
            .map_err(|e| config("the token secret")(e.to_string()))
    }
}
