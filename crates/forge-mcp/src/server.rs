//! One MCP server: its connection, kept up by a supervisor that restarts it with backoff, and
//! which of its pinned tools the live catalog still matches.

use std::collections::{BTreeSet, HashMap};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use forge_core::time::{Clock, SystemClock, Timestamp};
use parking_lot::Mutex;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::model::{ClientConfig, Implementation};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use tokio::io::AsyncBufReadExt;

use crate::catalog::{CatalogDiff, ServerPins, ToolDefinition};
use crate::config::{ServerConfig, TransportKind};
use crate::egress::{EgressPolicy, EgressResolver};
use crate::error::McpError;

/// Looks environment variables up (the process environment, or a test's), for references.
pub type Env = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Receives every catalog difference a server's listing shows (at start-up and on each
/// `notifications/tools/list_changed`), connection failures, and what a stdio server writes to
/// its stderr. The binary decides where they go (this crate prints nothing).
pub trait Reporter: Send + Sync {
    /// A listing differed from the pins (changed, added or removed tools).
    fn drift(&self, diff: &CatalogDiff);
    /// The server could not be reached or stopped; it is restarted with backoff.
    fn down(&self, server: &str, message: &str);
    /// A line a stdio server wrote to its stderr (at most 500 characters).
    fn output(&self, _server: &str, _line: &str) {}
}

/// Reports nothing: a one-off listing has no pins to drift from.
struct Quiet;

impl Reporter for Quiet {
    fn drift(&self, _: &CatalogDiff) {}
    fn down(&self, _: &str, _: &str) {}
}

/// How the connection stands.
#[derive(Debug, Clone, Default)]
struct State {
    /// The live peer, while connected.
    peer: Option<Peer<RoleClient>>,
    /// Pinned tools whose live definition matched the pin at the last listing.
    verified: BTreeSet<String>,
    /// The last listing's difference from the pins.
    diff: Option<CatalogDiff>,
    /// When the catalog was last listed.
    listed_at: Option<Timestamp>,
    /// When the listing first differed from the pins as it does now.
    drift_since: Option<Timestamp>,
    /// The last failure to reach or list the server, and when.
    last_error: Option<(Timestamp, String)>,
}

/// Where one server stands, for operators (`forge serve`'s console, through
/// [`ServerHandle::status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStatus {
    /// The server's name.
    pub name: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// Whether it is connected now.
    pub connected: bool,
    /// The pinned tools and their definitions' hashes, by remote name.
    pub pinned: Vec<(String, String)>,
    /// The last listing's difference from the pins (`None` before any listing).
    pub diff: Option<CatalogDiff>,
    /// When the catalog was last listed (the server last seen answering).
    pub listed_at: Option<Timestamp>,
    /// Since when the live catalog has differed from the pins as `diff` says.
    pub drift_since: Option<Timestamp>,
    /// The last failure to reach or list it (at most 300 characters), and when.
    pub last_error: Option<(Timestamp, String)>,
}

/// The first and the longest wait between restarts.
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// A server's supervising task; dropping it stops the supervisor (and so the connection).
#[derive(Debug)]
pub struct Supervisor(tokio::task::JoinHandle<()>);

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One configured server, connected by [`ServerHandle::spawn`].
pub struct ServerHandle {
    config: ServerConfig,
    pins: ServerPins,
    egress: Arc<EgressPolicy>,
    resolver: Arc<EgressResolver>,
    env: Env,
    reporter: Arc<dyn Reporter>,
    state: Mutex<State>,
    /// Catalog refreshes the server asked for (`notifications/tools/list_changed`), counted.
    asked: AtomicU64,
    /// The count of asked refreshes the last completed listing covers: calls wait until it
    /// catches up with `asked` (see [`ServerHandle::settled`]).
    listed: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("name", &self.config.name)
            .finish()
    }
}

/// The client side of the connection: answers the server's notifications.
struct Client {
    server: Weak<ServerHandle>,
}

impl rmcp::ClientHandler for Client {
    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        if let Some(server) = self.server.upgrade() {
            // Counted before anything else: from now on, calls wait for the listing.
            server.asked.fetch_add(1, Ordering::SeqCst);
            let peer = context.peer.clone();
            tokio::spawn(async move { server.reconcile(&peer).await });
        }
    }

    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.client_info = Implementation::new("forge", env!("CARGO_PKG_VERSION"));
        info
    }
}

type Running = RunningService<RoleClient, Client>;

fn lock<T>(m: &Mutex<T>) -> parking_lot::MutexGuard<'_, T> {
    m.lock()
}

impl ServerHandle {
    /// A handle for `config`, not yet connected.
    pub fn new(
        config: ServerConfig,
        pins: ServerPins,
        egress: Arc<EgressPolicy>,
        env: Env,
        reporter: Arc<dyn Reporter>,
    ) -> Arc<Self> {
        Arc::new(Self {
            resolver: Arc::new(EgressResolver::new(Arc::clone(&egress))),
            config,
            pins,
            egress,
            env,
            reporter,
            state: Mutex::new(State::default()),
            asked: AtomicU64::new(0),
            listed: tokio::sync::watch::Sender::new(0),
        })
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Its configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// Its pins.
    pub fn pins(&self) -> &ServerPins {
        &self.pins
    }

    /// Checks the endpoint against the egress policy, resolving its name once (http servers).
    /// A refusal is a configuration error naming the rule.
    pub async fn admit(&self) -> Result<(), McpError> {
        if self.config.transport == TransportKind::Http {
            let url = self.config.endpoint()?;
            self.resolver
                .admit(&url)
                .await
                .map_err(|e| McpError::Config(format!("MCP server {}: {e}", self.name())))?;
        }
        Ok(())
    }

    /// Connects and initializes, within the start-up timeout.
    async fn connect(self: &Arc<Self>) -> Result<Running, McpError> {
        let fail = |message: String| McpError::Connect {
            server: self.name().to_owned(),
            message,
        };
        let client = Client {
            server: Arc::downgrade(self),
        };
        let started = async {
            match self.config.transport {
                TransportKind::Stdio => {
                    let command = self.config.command.clone().unwrap_or_default();
                    let mut cmd = tokio::process::Command::new(&command);
                    cmd.args(&self.config.args).env_clear().kill_on_drop(true);
                    if let Some(path) = (self.env)("PATH") {
                        cmd.env("PATH", path);
                    }
                    for (k, v) in &self.config.env {
                        cmd.env(
                            k,
                            v.resolve(self.env.as_ref())
                                .map_err(|e| fail(e.to_string()))?,
                        );
                    }
                    if let Some(dir) = &self.config.cwd {
                        cmd.current_dir(dir);
                    }
                    let (transport, stderr) = TokioChildProcess::builder(cmd)
                        .stderr(Stdio::piped())
                        .spawn()
                        .map_err(|e| fail(format!("cannot start {command}: {e}")))?;
                    if let Some(stderr) = stderr {
                        let name = self.name().to_owned();
                        let reporter = self.reporter.clone();
                        tokio::spawn(async move {
                            let mut lines = tokio::io::BufReader::new(stderr).lines();
                            while let Ok(Some(line)) = lines.next_line().await {
                                let line: String = line.chars().take(500).collect();
                                reporter.output(&name, &line);
                            }
                        });
                    }
                    client
                        .serve(transport)
                        .await
                        .map_err(|e| fail(format!("initialization failed: {e}")))
                }
                TransportKind::Http => {
                    let url = self.config.endpoint()?;
                    self.admit().await?;
                    forge_providers::http::install_crypto_provider();
                    let http = reqwest::Client::builder()
                        .dns_resolver(Arc::clone(&self.resolver))
                        .redirect(self.egress.redirect_policy())
                        .no_proxy()
                        .connect_timeout(self.config.startup_timeout())
                        .user_agent(concat!("forge/", env!("CARGO_PKG_VERSION")))
                        .build()
                        .map_err(|e| fail(format!("cannot build the HTTP client: {e}")))?;
                    let mut headers = HashMap::new();
                    for (k, v) in &self.config.headers {
                        let value = v
                            .resolve(self.env.as_ref())
                            .map_err(|e| fail(e.to_string()))?;
                        let name = HeaderName::try_from(k.as_str())
                            .map_err(|_| fail(format!("header name {k:?} is not valid")))?;
                        let mut value = HeaderValue::try_from(value)
                            .map_err(|_| fail(format!("the value of header {k} is not valid")))?;
                        value.set_sensitive(true);
                        headers.insert(name, value);
                    }
                    let transport = StreamableHttpClientTransport::with_client(
                        http,
                        StreamableHttpClientTransportConfig::with_uri(url.as_str())
                            .custom_headers(headers)
                            .reinit_on_expired_session(true),
                    );
                    client
                        .serve(transport)
                        .await
                        .map_err(|e| fail(format!("initialization failed: {e}")))
                }
            }
        };
        tokio::time::timeout(self.config.startup_timeout(), started)
            .await
            .map_err(|_| {
                fail(format!(
                    "did not start within {} s",
                    self.config.startup_timeout().as_secs()
                ))
            })?
    }

    /// Lists the live catalog and records which pinned tools it still matches; reports drift.
    async fn reconcile(&self, peer: &Peer<RoleClient>) {
        // The refreshes asked for so far are covered by a listing that starts after them.
        let covers = self.asked.load(Ordering::SeqCst);
        let listed = tokio::time::timeout(self.config.call_timeout(), peer.list_all_tools()).await;
        let live: Vec<ToolDefinition> = match listed {
            Ok(Ok(tools)) => tools.iter().map(ToolDefinition::from_rmcp).collect(),
            Ok(Err(e)) => {
                self.down(&format!("tools/list failed: {e}"));
                return;
            }
            Err(_) => {
                self.down("tools/list timed out");
                return;
            }
        };
        let diff = CatalogDiff::between(self.name(), &self.pins, &live);
        let report = {
            let now = SystemClock.now();
            let mut state = lock(&self.state);
            state.verified = diff.unchanged.iter().cloned().collect();
            let report = !diff.is_clean() && state.diff.as_ref() != Some(&diff);
            if diff.is_clean() {
                state.drift_since = None;
            } else if report || state.drift_since.is_none() {
                state.drift_since = Some(now);
            }
            state.diff = Some(diff.clone());
            state.listed_at = Some(now);
            report
        };
        self.listed.send_modify(|done| *done = (*done).max(covers));
        if report {
            self.reporter.drift(&diff);
        }
    }

    /// Waits, at most `limit`, until the catalog has been listed since the server last said it
    /// changed; `false` when it has not been by then (the listing failed or is slow). A call is
    /// sent only after this: the definition it runs under is then the one the listing checked
    /// against the pin, not one the server changed after announcing it.
    pub async fn settled(&self, limit: Duration) -> bool {
        let asked = self.asked.load(Ordering::SeqCst);
        let mut listed = self.listed.subscribe();
        tokio::time::timeout(limit, listed.wait_for(|done| *done >= asked))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Starts the supervisor: connect, list, wait for the connection to end, restart with
    /// doubling backoff. Returns once the first attempt has connected and listed, or failed.
    pub async fn spawn(self: &Arc<Self>) -> Supervisor {
        let (first_tx, first_rx) = tokio::sync::oneshot::channel::<()>();
        let this = Arc::clone(self);
        let task = tokio::spawn(async move {
            let mut first = Some(first_tx);
            let mut backoff = BACKOFF_FIRST;
            loop {
                match this.connect().await {
                    Ok(running) => {
                        let peer = running.peer().clone();
                        lock(&this.state).peer = Some(peer.clone());
                        this.reconcile(&peer).await;
                        if let Some(tx) = first.take() {
                            let _ = tx.send(());
                        }
                        backoff = BACKOFF_FIRST;
                        let quit = running.waiting().await;
                        lock(&this.state).peer = None;
                        this.down(&format!("connection ended ({quit:?})"));
                    }
                    Err(e) => {
                        // Recorded first: whoever waits for the first attempt sees why it failed.
                        this.down(&e.to_string());
                        if let Some(tx) = first.take() {
                            let _ = tx.send(());
                        }
                    }
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        });
        let _ = first_rx.await;
        Supervisor(task)
    }

    /// The live peer, while connected.
    pub fn peer(&self) -> Option<Peer<RoleClient>> {
        lock(&self.state).peer.clone()
    }

    /// Whether pinned `tool`'s live definition matched its pin at the last listing.
    pub fn verified(&self, tool: &str) -> bool {
        lock(&self.state).verified.contains(tool)
    }

    /// The last listing's difference from the pins (`None` before any listing).
    pub fn diff(&self) -> Option<CatalogDiff> {
        lock(&self.state).diff.clone()
    }

    /// Where the server stands now.
    pub fn status(&self) -> ServerStatus {
        let state = lock(&self.state);
        ServerStatus {
            name: self.config.name.clone(),
            transport: match self.config.transport {
                TransportKind::Http => "http",
                TransportKind::Stdio => "stdio",
            },
            connected: state.peer.is_some(),
            pinned: self
                .pins
                .tools
                .iter()
                .map(|(name, pin)| (name.clone(), pin.hash.clone()))
                .collect(),
            diff: state.diff.clone(),
            listed_at: state.listed_at,
            drift_since: state.drift_since,
            last_error: state.last_error.clone(),
        }
    }

    /// Records a failure to reach or list the server, then reports it.
    fn down(&self, message: &str) {
        let kept: String = message.chars().take(300).collect();
        lock(&self.state).last_error = Some((SystemClock.now(), kept));
        self.reporter.down(self.name(), message);
    }
}

/// Connects to `config` once, lists its catalog and disconnects (for `forge mcp list | pin |
/// diff`). The egress policy applies as at run time.
pub async fn fetch_catalog(
    config: &ServerConfig,
    egress: Arc<EgressPolicy>,
    env: Env,
) -> Result<Vec<ToolDefinition>, McpError> {
    let handle = ServerHandle::new(
        config.clone(),
        ServerPins::default(),
        egress,
        env,
        Arc::new(Quiet),
    );
    handle.admit().await?;
    let running = handle.connect().await?;
    let listed = tokio::time::timeout(config.call_timeout(), running.peer().list_all_tools())
        .await
        .map_err(|_| McpError::Connect {
            server: config.name.clone(),
            message: "tools/list timed out".into(),
        })?
        .map_err(|e| McpError::Connect {
            server: config.name.clone(),
            message: format!("tools/list failed: {e}"),
        })?;
    let _ = running.cancel().await;
    let mut defs: Vec<ToolDefinition> = listed.iter().map(ToolDefinition::from_rmcp).collect();
    defs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(defs)
}
