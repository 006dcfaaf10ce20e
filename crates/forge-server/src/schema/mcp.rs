//! The deployment's MCP servers for the console: each one's connection, pinned tools and their
//! standing against the live catalog (verified, changed, gone), tools offered but not pinned,
//! when it was last listed and since when it has drifted. The servers are deployment-wide;
//! reading them is an administrator's power (`mcp_servers`). The process that runs them
//! (`forge serve` with `--mcp`) reports them through [`McpStatus`].

use super::*;

/// Reports where the deployment's MCP servers stand (`forge serve` implements it over its MCP
/// runtime).
pub trait McpStatus: Send + Sync {
    /// Every configured server, in configuration order.
    fn servers(&self) -> Vec<McpServerState>;
}

/// One MCP server as the console shows it.
#[derive(SimpleObject, Clone, Debug, PartialEq, Eq)]
pub struct McpServerState {
    /// The configured name (the prefix of its tools' names).
    pub name: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// Whether it is connected now.
    pub connected: bool,
    /// `ok` (connected, the live catalog as pinned), `drift` (connected, differing from the
    /// pins: changed and removed tools are not offered), `down` (not connected) or `unlisted`
    /// (connected, not listed yet).
    pub health: String,
    /// The pinned tools.
    pub pinned: Vec<McpPinnedTool>,
    /// Tools the server offers that are not pinned (not offered until pinned).
    pub unpinned: Vec<String>,
    /// When the catalog was last listed (RFC 3339): the server last seen answering.
    pub listed_at: Option<String>,
    /// Since when the live catalog has differed from the pins (RFC 3339).
    pub drift_since: Option<String>,
    /// The last failure to reach or list it.
    pub last_error: Option<String>,
    /// When that failure happened (RFC 3339).
    pub last_error_at: Option<String>,
}

/// A pinned tool and how the live catalog stands against its pin.
#[derive(SimpleObject, Clone, Debug, PartialEq, Eq)]
pub struct McpPinnedTool {
    /// Its name on the server.
    pub name: String,
    /// The pinned definition's hash.
    pub hash: String,
    /// `verified` (the live definition matches: offered), `changed` (differs: not offered
    /// until re-pinned), `removed` (the server no longer offers it) or `unknown` (not listed
    /// yet).
    pub state: String,
}

/// The deployment's MCP servers; none when the server runs without MCP.
pub(crate) fn servers(ctx: &Context<'_>) -> async_graphql::Result<Vec<McpServerState>> {
    require_admin(ctx, "mcp_servers", "the MCP servers")?;
    let state = state(ctx)?;
    Ok(state.mcp.as_ref().map(|m| m.servers()).unwrap_or_default())
}
