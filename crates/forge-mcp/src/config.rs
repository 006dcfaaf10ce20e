//! The deployment's MCP configuration file (`--mcp FILE`, `FORGE_MCP`): servers, egress rules and
//! per-tool classification.
//!
//! ```toml
//! lock = "mcp.lock"            # the pins, relative to this file (default: mcp.lock beside it)
//!
//! [egress]
//! [[egress.allow]]
//! schemes = ["http"]
//! host = "127.0.0.1"
//! ports = [3001]
//! addresses = ["127.0.0.1"]    # loopback and private ranges only when named
//!
//! [[servers]]
//! name = "time"
//! transport = "stdio"
//! command = "mcp-server-time"
//! env = { TZ = "UTC" }         # the child's whole environment, with PATH
//!
//! [servers.tools.get_current_time]
//! classification = "read"
//!
//! [[servers]]
//! name = "crm"
//! transport = "http"
//! url = "http://127.0.0.1:3001/mcp"
//! headers = { Authorization = "env:CRM_MCP_TOKEN" }
//! ```
//!
//! Credentials are `env:NAME` or `file:PATH` references. A header or variable whose name says it
//! carries a credential (authorization, cookie, key, token, secret, password) must be a reference;
//! a literal is refused and the message never repeats it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use forge_core::ports::tool::{ApprovalPolicy, ToolClassification};
use forge_core::redact::Redactor;
use forge_providers::SecretRef;
use reqwest::Url;
use serde::Deserialize;

use crate::egress::EgressPolicy;
use crate::error::McpError;

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// The lock file, relative to the configuration file.
    #[serde(default)]
    pub lock: Option<PathBuf>,
    /// Egress rules for HTTP servers.
    #[serde(default)]
    pub egress: EgressPolicy,
    /// The servers.
    #[serde(default)]
    pub servers: Vec<ServerConfig>,
    /// Where the file was read from (relative paths are resolved against its directory).
    #[serde(skip)]
    pub base: PathBuf,
}

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    /// A child process speaking JSON-RPC on stdin and stdout.
    Stdio,
    /// Streamable HTTP.
    Http,
}

/// A value that may be a literal (when its name does not mark a credential) or a reference.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct ConfigValue(String);

impl ConfigValue {
    /// Reads the value: a reference is resolved, a literal returned as is.
    pub fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<String, McpError> {
        match self.0.parse::<SecretRef>() {
            Ok(r) => r
                .resolve(env)
                .map(|s| s.expose().to_owned())
                .map_err(|e| McpError::Config(e.to_string())),
            Err(_) => Ok(self.0.clone()),
        }
    }

    fn is_reference(&self) -> bool {
        self.0.parse::<SecretRef>().is_ok()
    }
}

/// Whether a header or variable name marks a credential.
fn sensitive(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "authorization",
        "cookie",
        "key",
        "token",
        "secret",
        "password",
        "passwd",
        "credential",
        "auth",
    ]
    .iter()
    .any(|w| n.contains(w))
}

/// A tool override: what the deployment, not the server, says about a tool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolOverride {
    /// What the tool does to the world. Without it the tool is unclassified: every call needs
    /// approval.
    #[serde(default)]
    pub classification: Option<ToolClassification>,
    /// When a call needs approval (default: from the classification).
    #[serde(default)]
    pub approval: Option<ApprovalPolicy>,
    /// The permission policies may require.
    #[serde(default)]
    pub permission: Option<String>,
    /// A description written by the operator, used instead of the server's.
    #[serde(default)]
    pub description: Option<String>,
    /// Arguments the engine takes from the caller instead of the model:
    /// `bind = { owner = "caller_by_default" }` (or `"caller"`, `"tenant"`).
    #[serde(default)]
    pub bind: BTreeMap<String, forge_core::ports::tool::Argument>,
    /// What the person asked to approve a call sees beside its input, filled from the input:
    /// `preview = { summary = "Move {id} to {stage}", facts = [{ label = "Stage", value =
    /// "{stage}" }] }` ([`PreviewTemplate`](forge_core::interaction::PreviewTemplate)).
    #[serde(default)]
    pub preview: Option<forge_core::interaction::PreviewTemplate>,
}

/// One server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Its name: `[a-z0-9-]{1,24}`. Its tools are offered as `{name}__{tool}`.
    pub name: String,
    /// How to reach it.
    pub transport: TransportKind,
    /// The program (stdio).
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments (stdio).
    #[serde(default)]
    pub args: Vec<String>,
    /// Its environment (stdio): nothing else is passed but `PATH`.
    #[serde(default)]
    pub env: BTreeMap<String, ConfigValue>,
    /// Its working directory (stdio), relative to the configuration file.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The endpoint (http).
    #[serde(default)]
    pub url: Option<String>,
    /// Headers sent with every request (http).
    #[serde(default)]
    pub headers: BTreeMap<String, ConfigValue>,
    /// Seconds to start and initialize (default 30).
    #[serde(default = "default_startup")]
    pub startup_timeout_secs: u64,
    /// Seconds a call may take (default 60).
    #[serde(default = "default_call")]
    pub call_timeout_secs: u64,
    /// Per-tool overrides, by the server's tool name.
    #[serde(default)]
    pub tools: BTreeMap<String, ToolOverride>,
}

fn default_startup() -> u64 {
    30
}

fn default_call() -> u64 {
    60
}

impl ServerConfig {
    /// The start-up timeout.
    pub fn startup_timeout(&self) -> Duration {
        Duration::from_secs(self.startup_timeout_secs.max(1))
    }

    /// The per-call timeout.
    pub fn call_timeout(&self) -> Duration {
        Duration::from_secs(self.call_timeout_secs.max(1))
    }

    /// The endpoint, parsed (http servers).
    pub fn endpoint(&self) -> Result<Url, McpError> {
        let url = self.url.as_deref().ok_or_else(|| {
            McpError::Config(format!(
                "MCP server {}: an http server needs `url`",
                self.name
            ))
        })?;
        let parsed = Url::parse(url).map_err(|e| {
            McpError::Config(format!("MCP server {}: `url` is not a URL: {e}", self.name))
        })?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(McpError::Config(format!(
                "MCP server {}: credentials in `url` are refused; use a header with an env: or file: reference",
                self.name
            )));
        }
        Ok(parsed)
    }

    fn validate(&self, egress: &EgressPolicy) -> Result<(), McpError> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 24
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !name_ok {
            return Err(McpError::Config(format!(
                "MCP server name {:?} must be 1 to 24 of a-z, 0-9 and '-'",
                self.name
            )));
        }
        // By its name, or by its shape whatever it is called (`X-Custom = "Bearer …"`, a URL
        // with a password, a provider key).
        let literal = |kind: &str, map: &BTreeMap<String, ConfigValue>| {
            map.iter()
                .find(|(k, v)| {
                    !v.is_reference() && (sensitive(k) || Redactor::credential_shaped(&v.0))
                })
                .map(|(k, _)| {
                    McpError::Config(format!(
                        "MCP server {}: {kind} {k} carries a credential and must be an env:NAME or file:PATH reference (the value given is not repeated here)",
                        self.name
                    ))
                })
        };
        if let Some(e) = literal("header", &self.headers).or_else(|| literal("env", &self.env)) {
            return Err(e);
        }
        if let Some(at) = self
            .args
            .iter()
            .position(|a| Redactor::credential_shaped(a))
        {
            return Err(McpError::Config(format!(
                "MCP server {}: argument {} has the shape of a credential; pass it through `env` \
                 as an env:NAME or file:PATH reference (the value given is not repeated here)",
                self.name,
                at + 1
            )));
        }
        match self.transport {
            TransportKind::Stdio => {
                if self.command.as_deref().is_none_or(str::is_empty) {
                    return Err(McpError::Config(format!(
                        "MCP server {}: a stdio server needs `command`",
                        self.name
                    )));
                }
            }
            TransportKind::Http => {
                let url = self.endpoint()?;
                egress
                    .check_url(&url)
                    .map_err(|e| McpError::Config(format!("MCP server {}: {e}", self.name)))?;
            }
        }
        Ok(())
    }
}

impl McpConfig {
    /// Parses and validates a configuration; `base` is the directory relative paths start from.
    pub fn parse(text: &str, base: &Path) -> Result<Self, McpError> {
        let mut config: Self = toml::from_str(text)
            .map_err(|e| McpError::Config(format!("MCP configuration: {}", e.message())))?;
        config.base = base.to_path_buf();
        let mut seen = std::collections::BTreeSet::new();
        for s in &config.servers {
            s.validate(&config.egress)?;
            if !seen.insert(s.name.clone()) {
                return Err(McpError::Config(format!(
                    "MCP server {} is configured twice",
                    s.name
                )));
            }
        }
        Ok(config)
    }

    /// Reads and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Self, McpError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| McpError::Config(format!("cannot read {}: {e}", path.display())))?;
        let base = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        Self::parse(&text, &base)
    }

    /// The lock file's path.
    pub fn lock_path(&self) -> PathBuf {
        self.base.join(
            self.lock
                .clone()
                .unwrap_or_else(|| PathBuf::from("mcp.lock")),
        )
    }

    /// A server by name.
    pub fn server(&self, name: &str) -> Option<&ServerConfig> {
        self.servers.iter().find(|s| s.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<McpConfig, McpError> {
        McpConfig::parse(text, Path::new("/etc/forge"))
    }

    #[test]
    fn a_full_file_parses() {
        let c = parse(
            r#"
            [[egress.allow]]
            schemes = ["http"]
            host = "127.0.0.1"
            ports = [3001]
            addresses = ["127.0.0.1"]

            [[servers]]
            name = "time"
            transport = "stdio"
            command = "mcp-server-time"
            env = { TZ = "UTC", API_KEY = "env:TIME_KEY" }
            [servers.tools.get_current_time]
            classification = "read"

            [[servers]]
            name = "crm"
            transport = "http"
            url = "http://127.0.0.1:3001/mcp"
            headers = { Authorization = "file:/run/secrets/crm" }
            "#,
        )
        .unwrap();
        assert_eq!(c.servers.len(), 2);
        assert_eq!(
            c.servers[0].tools["get_current_time"].classification,
            Some(ToolClassification::Read)
        );
        assert_eq!(c.lock_path(), Path::new("/etc/forge/mcp.lock"));
        let env = |n: &str| (n == "TIME_KEY").then(|| "k-1".to_owned());
        assert_eq!(c.servers[0].env["API_KEY"].resolve(&env).unwrap(), "k-1");
        assert_eq!(c.servers[0].env["TZ"].resolve(&env).unwrap(), "UTC");
    }

    #[test]
    fn a_literal_credential_is_refused_without_being_echoed() {
        for text in [
            r#"[[servers]]
            name = "a"
            transport = "stdio"
            command = "x"
            env = { GITHUB_TOKEN = "ghp_supersecretvalue" }"#,
            r#"[[egress.allow]]
            host = "mcp.example.com"
            [[servers]]
            name = "a"
            transport = "http"
            url = "https://mcp.example.com/mcp"
            headers = { Authorization = "Bearer ghp_supersecretvalue" }"#,
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains("must be an env:NAME or file:PATH"), "{e}");
            assert!(!e.contains("supersecret"), "{e}");
        }
        let e = parse(
            r#"[[egress.allow]]
            host = "mcp.example.com"
            [[servers]]
            name = "a"
            transport = "http"
            url = "https://user:hunter2@mcp.example.com/mcp""#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("credentials in `url`") && !e.contains("hunter2"),
            "{e}"
        );
    }

    /// The held-out cases: credential-shaped literals under names that do not say so.
    #[test]
    fn a_credential_shaped_literal_is_refused_whatever_its_name() {
        let stdio = |line: &str| {
            format!("[[servers]]\nname = \"a\"\ntransport = \"stdio\"\ncommand = \"x\"\n{line}")
        };
        let http = |line: &str| {
            format!(
                "[[egress.allow]]\nhost = \"mcp.example.com\"\n[[servers]]\nname = \"a\"\n\
                 transport = \"http\"\nurl = \"https://mcp.example.com/mcp\"\n{line}"
            )
        };
        for text in [
            http(r#"headers = { X-Custom = "Bearer abcdefgh12345678secret" }"#),
            stdio(r#"env = { OPENAI = "sk-proj-abcdefghijklmnopqrstuvwxsecret" }"#),
            stdio(r#"env = { GH = "ghp_abcdefghijklmnopqrstuvwxyzsecret0123" }"#),
            stdio(r#"env = { DATABASE_URL = "postgres://app:pwsecret@db:5432/x" }"#),
            stdio(r#"args = ["--db", "postgres://app:pwsecret@db:5432/x"]"#),
        ] {
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains("env:NAME or file:PATH"), "{text}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
        // Ordinary values stay literals.
        parse(&stdio(
            r#"env = { LOG_LEVEL = "debug", HOME_URL = "https://example.com/" }"#,
        ))
        .unwrap();
    }

    #[test]
    fn an_endpoint_outside_the_egress_policy_is_a_start_up_error() {
        let e = parse(
            r#"[[servers]]
            name = "a"
            transport = "http"
            url = "http://10.0.0.5:8080/mcp""#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("MCP server a") && e.contains("no egress rule"),
            "{e}"
        );
    }

    #[test]
    fn names_and_shapes_are_checked() {
        for text in [
            "[[servers]]\nname = \"Bad_Name\"\ntransport = \"stdio\"\ncommand = \"x\"",
            "[[servers]]\nname = \"a\"\ntransport = \"stdio\"",
            "[[servers]]\nname = \"a\"\ntransport = \"http\"",
            "[[servers]]\nname = \"a\"\ntransport = \"stdio\"\ncommand = \"x\"\n[[servers]]\nname = \"a\"\ntransport = \"stdio\"\ncommand = \"y\"",
            "[[servers]]\nname = \"a\"\ntransport = \"stdio\"\ncommand = \"x\"\nunknown = 1",
        ] {
            assert!(parse(text).is_err(), "{text}");
        }
    }
}
