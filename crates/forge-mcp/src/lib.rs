//! Forge's MCP import: tools that live in Model Context Protocol servers, offered and called under
//! the same policy as native tools.
//!
//! - [`config`] reads the deployment's file: servers (stdio or streamable HTTP), credentials as
//!   references, per-tool classification and overrides.
//! - [`egress`] decides which HTTP endpoints may be reached; names are resolved once and every
//!   address checked, redirects too.
//! - [`catalog`] pins each server's catalog in a lock file and compares live catalogs with it.
//! - [`import`] turns a pinned definition into the [`ToolSpec`](forge_core::ports::tool::ToolSpec)
//!   Forge offers: classification from the configuration (hints only restrict), cleaned text
//!   ([`sanitize`]).
//! - [`server`] keeps a connection up and knows which pinned tools the live catalog matches;
//!   [`tool`] is the [`Tool`] that calls one.
//! - [`McpRuntime`] starts every configured server and hands the engine its tools.

#![deny(missing_docs)]

pub mod catalog;
pub mod config;
pub mod egress;
pub mod error;
pub mod import;
pub mod sanitize;
pub mod server;
pub mod tool;

use std::sync::Arc;

use forge_core::ports::tool::Tool;

pub use catalog::{CatalogDiff, LockFile, Pin, ToolDefinition};
pub use config::McpConfig;
pub use error::McpError;
pub use server::{Env, Reporter, ServerHandle, ServerStatus, fetch_catalog};
pub use tool::McpTool;

use forge_core::interaction::PreviewTemplate;

/// The deployment's MCP servers, connected and supervised.
pub struct McpRuntime {
    servers: Vec<Arc<ServerHandle>>,
    /// Kept for their `Drop`: dropping the runtime stops every supervisor.
    _tasks: Vec<server::Supervisor>,
    tools: Vec<Arc<McpTool>>,
    skipped: Vec<String>,
    bindings: Vec<(String, String, forge_core::ports::tool::Argument)>,
    previews: Vec<(String, Arc<dyn forge_core::ports::tool::ApprovalPreviewer>)>,
}

impl std::fmt::Debug for McpRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpRuntime")
            .field("servers", &self.servers)
            .finish()
    }
}

/// The process environment, for resolving references.
pub fn process_env() -> Env {
    Arc::new(|name: &str| std::env::var(name).ok())
}

impl McpRuntime {
    /// Checks every HTTP endpoint against the egress policy (a refusal is an error naming the
    /// rule), then starts every server and waits for its first connection and listing (or its
    /// first failure: the supervisor keeps retrying with backoff). The tools are the pinned ones;
    /// each is offered only while its server's live definition matches its pin.
    pub async fn start(
        config: &McpConfig,
        lock: &LockFile,
        env: Env,
        reporter: Arc<dyn Reporter>,
    ) -> Result<Self, McpError> {
        let egress = Arc::new(config.egress.clone());
        let mut servers = Vec::new();
        for s in &config.servers {
            let mut s = s.clone();
            s.cwd = s.cwd.map(|d| config.base.join(d));
            let handle = ServerHandle::new(
                s.clone(),
                lock.server(&s.name),
                Arc::clone(&egress),
                Arc::clone(&env),
                Arc::clone(&reporter),
            );
            handle.admit().await?;
            servers.push(handle);
        }
        let tasks = start_all(&servers).await;
        let mut tools = Vec::new();
        let mut skipped = Vec::new();
        let mut bindings = Vec::new();
        let mut previews = Vec::new();
        for server in &servers {
            for (remote, pin) in &server.pins().tools {
                let over = server.config().tools.get(remote);
                match import::spec(server.name(), pin, over) {
                    Some(spec) => {
                        for (argument, to) in over.map(|o| &o.bind).into_iter().flatten() {
                            bindings.push((spec.name.clone(), argument.clone(), *to));
                        }
                        if let Some(template) = over.and_then(|o| o.preview.as_ref()) {
                            let previewer = Arc::new(PreviewTemplate::clone(template));
                            previews.push((spec.name.clone(), previewer as _));
                        }
                        tools.push(Arc::new(McpTool::new(
                            spec,
                            remote.clone(),
                            Arc::clone(server),
                        )));
                    }
                    None => skipped.push(format!("{}/{remote}", server.name())),
                }
            }
        }
        Ok(Self {
            servers,
            _tasks: tasks,
            tools,
            skipped,
            bindings,
            previews,
        })
    }

    /// The imported tools, for the engine's registry.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tools
            .iter()
            .map(|t| Arc::clone(t) as Arc<dyn Tool>)
            .collect()
    }

    /// The arguments the configuration binds to the caller, as (offered tool name, argument,
    /// binding): the engine's `tool_argument` takes each once the tools are registered.
    pub fn bindings(&self) -> &[(String, String, forge_core::ports::tool::Argument)] {
        &self.bindings
    }

    /// The previews the configuration writes for its tools' approvals, as (offered tool name,
    /// previewer): the engine's `approval_preview` takes each once the tools are registered.
    pub fn previews(&self) -> &[(String, Arc<dyn forge_core::ports::tool::ApprovalPreviewer>)] {
        &self.previews
    }

    /// Pinned tools whose names cannot be offered (`server/tool`), left out.
    pub fn skipped(&self) -> &[String] {
        &self.skipped
    }

    /// The servers.
    pub fn servers(&self) -> &[Arc<ServerHandle>] {
        &self.servers
    }

    /// Each server's last catalog difference from its pins.
    pub fn diffs(&self) -> Vec<CatalogDiff> {
        self.servers.iter().filter_map(|s| s.diff()).collect()
    }
}

/// Starts every server's supervisor concurrently and waits for each first attempt.
async fn start_all(servers: &[Arc<ServerHandle>]) -> Vec<server::Supervisor> {
    let mut starting = tokio::task::JoinSet::new();
    for s in servers {
        let s = Arc::clone(s);
        starting.spawn(async move { s.spawn().await });
    }
    starting.join_all().await
}
