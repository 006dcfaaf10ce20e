//! [`Forge`]: an assembled deployment — engine, store, worker and live streams — and what an
//! application does with it: start runs, follow them, serve the API, shut down.

use std::sync::Arc;

use forge_core::id::{RunId, ThreadId, UuidV7Generator};
use forge_core::part::Part;
use forge_core::ports::store::{NewRun, NewThread};
use forge_core::scope::Scope;
use forge_engine::{Engine, LiveObserver, Worker, WorkerConfig, WorkerReport};
use forge_live::{LiveTail, StreamContext};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{Error, ForgeBuilder, RunHandle, Stores};

/// A running deployment: an engine over a store, a worker executing its queued runs (unless
/// built [`without_worker`](ForgeBuilder::without_worker)), and the live streams its runs are
/// followed through. Dropping it stops the worker; [`Forge::shutdown`] also waits for the runs
/// in flight to reach a checkpoint.
pub struct Forge {
    engine: Arc<Engine>,
    stores: Stores,
    tail: Arc<LiveTail>,
    streams: StreamContext,
    stop: CancellationToken,
    worker: Option<JoinHandle<WorkerReport>>,
}

impl std::fmt::Debug for Forge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forge")
            .field("worker", &self.worker.is_some())
            .finish_non_exhaustive()
    }
}

impl Forge {
    /// A builder with the defaults: `sqlite://forge.db`, a worker of concurrency 4.
    pub fn builder() -> ForgeBuilder {
        ForgeBuilder::default()
    }

    pub(crate) fn new(
        engine: Arc<Engine>,
        stores: Stores,
        tail: Arc<LiveTail>,
        streams: StreamContext,
        stop: CancellationToken,
    ) -> Self {
        Self {
            engine,
            stores,
            tail,
            streams,
            stop,
            worker: None,
        }
    }

    /// Starts this deployment's worker with `config`: for one built
    /// [`without_worker`](ForgeBuilder::without_worker) that queues work first (`forge run`
    /// starts one for the run it just queued, `only_run`). Its commits wake this deployment's
    /// waiters and streams; [`Forge::shutdown`] drains it. A deployment has one worker: a second
    /// is refused.
    ///
    /// ```
    /// use forge::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), forge::Error> {
    /// # let script = "[[conversation]]\n[[conversation.turn]]\ntext = [\"Hi.\"]\n";
    /// let mut forge = Forge::builder()
    ///     .store("memory")
    ///     .agent(AgentDefinition::new("greeter", "scripted:hello"))
    ///     .model(ScriptedProvider::new(Script::parse(script, "hello")?))
    ///     .without_worker()
    ///     .build()
    ///     .await?;
    /// let scope = Scope::parse("acme", "alice", &[])?;
    /// let run = forge.start(&scope, "greeter", "Hi!").await?;
    /// forge.start_worker(forge::engine::WorkerConfig {
    ///     only_run: Some(run.id()),
    ///     ..Default::default()
    /// })?;
    /// assert_eq!(run.wait().await?.answer(), Some("Hi."));
    /// forge.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn start_worker(&mut self, config: WorkerConfig) -> Result<(), Error> {
        if self.worker.is_some() {
            return Err(Error::Config(
                "this deployment's worker is running already".into(),
            ));
        }
        let worker = Worker::new(self.engine.clone(), self.stores.store.clone(), config)
            .with_observer(Arc::new(LiveObserver::default().with(self.tail.clone())));
        let stop = self.stop.clone();
        self.worker = Some(tokio::spawn(async move { worker.run(stop).await }));
        Ok(())
    }

    /// The engine: threads, runs, approvals and answers, tools, usage, erasure.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The store, as each port that keeps its records.
    pub fn stores(&self) -> &Stores {
        &self.stores
    }

    /// The live tail of the steps in flight in this process (a server streams from it).
    pub fn tail(&self) -> &Arc<LiveTail> {
        &self.tail
    }

    /// How this deployment's streams read the log.
    pub(crate) fn streams(&self) -> &StreamContext {
        &self.streams
    }

    /// Cancelled when the deployment shuts down.
    pub fn stopping(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Starts a run of the agent `agent` (its newest registered version) on a new thread, with
    /// `text` as the user's message; it is queued, and executed by a worker.
    pub async fn start(
        &self,
        scope: &Scope,
        agent: &str,
        text: impl Into<String>,
    ) -> Result<RunHandle, Error> {
        let agent = self.agent(agent)?;
        let new = NewRun::on_new_thread(
            &UuidV7Generator,
            NewThread::default(),
            agent,
            vec![Part::text(text)],
        );
        self.submit(scope, new).await
    }

    /// Starts a run of `agent` on the thread `thread`, queued behind any run the thread has.
    pub async fn start_on(
        &self,
        scope: &Scope,
        thread: ThreadId,
        agent: &str,
        input: Vec<Part>,
    ) -> Result<RunHandle, Error> {
        let agent = self.agent(agent)?;
        self.submit(scope, NewRun::new(thread, agent, input)).await
    }

    /// Submits `new` as it is (a start strategy, attempts, files in the input…).
    pub async fn submit(&self, scope: &Scope, new: NewRun) -> Result<RunHandle, Error> {
        let run = self.engine.submit(scope, new).await?;
        Ok(self.handle(scope, run.id, run.thread_id))
    }

    /// A handle on an existing run `scope` may see (`NOT_FOUND` for another tenant's).
    pub async fn run(&self, scope: &Scope, id: RunId) -> Result<RunHandle, Error> {
        let run = self.engine.runs().get_run(scope, id).await?;
        Ok(self.handle(scope, run.id, run.thread_id))
    }

    fn handle(&self, scope: &Scope, id: RunId, thread: ThreadId) -> RunHandle {
        RunHandle::new(
            id,
            thread,
            scope.clone(),
            self.streams.clone(),
            self.tail.bus().clone(),
        )
    }

    /// The newest registered version of the agent `name`.
    fn agent(&self, name: &str) -> Result<forge_core::agent::AgentRef, Error> {
        self.engine
            .agents()
            .into_iter()
            .rev()
            .find(|a| a.agent.name == name)
            .map(|a| a.agent.clone())
            .ok_or_else(|| Error::UnknownAgent(name.to_owned()))
    }

    /// Serves the GraphQL API, its subscriptions and the web client on `listener` with
    /// `config` (feature `server`), until the deployment shuts down. The store is one of its
    /// readiness checks. The future borrows nothing: spawn it, and [`Forge::shutdown`] ends it.
    ///
    /// The configuration's stream settings are replaced by the deployment's
    /// ([`ForgeBuilder::streams`]): the server and [`RunHandle::subscribe`] read the log alike.
    #[cfg(feature = "server")]
    pub fn serve(
        &self,
        listener: tokio::net::TcpListener,
        config: forge_server::ServerConfig,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        self.serve_with(listener, config, axum::Router::new())
    }

    /// [`Forge::serve`] with the application's own routes beside Forge's (its REST API, say),
    /// under the same header timeout, drain and panic handling.
    ///
    /// ```no_run
    /// # async fn serve(forge: forge::Forge) -> Result<(), Box<dyn std::error::Error>> {
    /// use forge::server::{Authenticator, ServerConfig};
    ///
    /// let auth = Authenticator::hs256(std::env::var("FORGE_JWT_SECRET")?.as_bytes())?;
    /// let routes = axum::Router::new().route("/app/ping", axum::routing::get(|| async { "pong" }));
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    /// tokio::spawn(forge.serve_with(listener, ServerConfig::new(auth), routes));
    /// // …until `forge.shutdown()` ends it.
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "server")]
    pub fn serve_with(
        &self,
        listener: tokio::net::TcpListener,
        mut config: forge_server::ServerConfig,
        routes: axum::Router,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        let stores = self.stores.clone();
        config.readiness.push(forge_server::ReadinessCheck {
            name: "store".into(),
            probe: Box::new(move || {
                let stores = stores.clone();
                Box::pin(async move { stores.check().await })
            }),
        });
        config.streams = self.streams.settings;
        let server = forge_server::Server::new(self.engine.clone(), self.tail.clone(), config);
        let stop = self.stop.clone();
        async move {
            server.serve_with(routes, listener, stop).await?;
            Ok(())
        }
    }

    /// Shuts the deployment down on Ctrl-C or, on Unix, SIGTERM ([`shutdown_signal`]).
    pub fn shutdown_on_signal(&self) {
        let stop = self.stop.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            stop.cancel();
        });
    }

    /// Stops the worker claiming, lets the runs in flight reach a checkpoint (a run cut short
    /// resumes from it in the next process), ends every stream, and returns what the worker did.
    pub async fn shutdown(mut self) -> WorkerReport {
        self.stop.cancel();
        match self.worker.take() {
            Some(worker) => worker.await.unwrap_or_default(),
            None => WorkerReport::default(),
        }
    }
}

impl Drop for Forge {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Resolves when the process is asked to stop: Ctrl-C or, on Unix, SIGTERM (what a service
/// manager or `docker stop` sends first). An application awaits it, then shuts its deployment
/// down so the runs in flight reach a checkpoint instead of being killed mid-step.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            },
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}
