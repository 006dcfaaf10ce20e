//! The crate's errors.

/// What went wrong importing or calling MCP tools.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The configuration or lock file is unusable; the message names the server, field or rule.
    #[error("{0}")]
    Config(String),
    /// An endpoint the egress policy refuses; the message names the rule.
    #[error("egress refused: {0}")]
    Egress(String),
    /// A server could not be started, reached or initialized.
    #[error("MCP server {server}: {message}")]
    Connect {
        /// The server.
        server: String,
        /// Why.
        message: String,
    },
}
