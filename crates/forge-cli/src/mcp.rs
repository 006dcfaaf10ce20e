//! MCP in the CLI: starting the configured servers for `serve`, `worker`, `run` and `tools`
//! (`--mcp FILE`), auditing catalog drift, and `forge mcp list | pin | diff`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use forge_core::ports::audit::{AuditLog, AuditRecord};
use forge_core::scope::{PrincipalId, Scope, TenantId};
use forge_core::time::{Clock, SystemClock};
use forge_engine::DEPLOYMENT_TENANT;
use forge_mcp::server::Reporter;
use forge_mcp::{CatalogDiff, LockFile, McpConfig, McpRuntime, Pin};

use crate::store::StoreArgs;

/// The audit action of a catalog that differs from its pins.
const DRIFT_ACTION: &str = "mcp.drift";
/// The audit action of a re-pin.
const PIN_ACTION: &str = "mcp.pinned";

/// Appends an entry to the deployment's audit trail.
async fn audit(log: &dyn AuditLog, action: &str, subject: String, detail: serde_json::Value) {
    let written = async {
        let tenant = TenantId::new(DEPLOYMENT_TENANT)?;
        let scope = Scope::new(tenant.clone(), PrincipalId::new("forge")?, vec![]);
        log.record_audit(
            &scope,
            AuditRecord {
                tenant_id: tenant,
                at: SystemClock.now(),
                actor: "forge".into(),
                action: action.into(),
                subject,
                detail,
            },
        )
        .await
    };
    if let Err(e) = written.await {
        eprintln!("forge: could not audit {action}: {e}");
    }
}

/// Reports to stderr, for the operator running forge: drift and restarts as sentences, a
/// server's own output as a log line of the vocabulary (JSON lines on `telemetry`).
#[derive(Debug)]
pub(crate) struct StderrReporter {
    telemetry: forge_core::telemetry::Telemetry,
}

impl Default for StderrReporter {
    fn default() -> Self {
        Self {
            telemetry: forge_otel::lines_only(forge_otel::stderr_lines()),
        }
    }
}

impl Reporter for StderrReporter {
    fn drift(&self, d: &CatalogDiff) {
        eprintln!(
            "forge: MCP server {}: catalog differs from its pins: changed (disabled) {:?}, new (not offered) {:?}, removed {:?}; run `forge mcp diff` and `forge mcp pin`",
            d.server, d.changed, d.added, d.removed
        );
    }

    fn down(&self, server: &str, message: &str) {
        eprintln!("forge: MCP server {server}: {message}; restarting with backoff");
    }

    /// A server's stderr line is its own text (it can echo a credential or a user's input):
    /// logged in the closed vocabulary, its server and length only.
    fn output(&self, server: &str, line: &str) {
        forge_core::log!(
            self.telemetry,
            McpServerOutput,
            server = server,
            bytes = line.len(),
        );
    }
}

/// Reports to stderr and records drift in the deployment's audit trail.
struct Auditing {
    stderr: StderrReporter,
    log: Option<Arc<dyn AuditLog>>,
}

impl Reporter for Auditing {
    fn output(&self, server: &str, line: &str) {
        self.stderr.output(server, line);
    }

    fn drift(&self, diff: &CatalogDiff) {
        self.stderr.drift(diff);
        if let Some(log) = self.log.clone() {
            let detail = serde_json::to_value(diff).unwrap_or_default();
            let subject = format!("server {}", diff.server);
            tokio::spawn(async move { audit(log.as_ref(), DRIFT_ACTION, subject, detail).await });
        }
    }

    fn down(&self, server: &str, message: &str) {
        self.stderr.down(server, message);
    }
}

/// Starts the servers of the configuration at `path` (none without one), auditing drift to
/// `log`.
pub(crate) async fn start(
    path: Option<&Path>,
    log: Option<Arc<dyn AuditLog>>,
) -> anyhow::Result<Option<McpRuntime>> {
    let Some(path) = path else { return Ok(None) };
    let config = McpConfig::load(path)?;
    let lock = LockFile::load(&config.lock_path())?;
    let runtime = McpRuntime::start(
        &config,
        &lock,
        forge_mcp::process_env(),
        Arc::new(Auditing {
            stderr: StderrReporter::default(),
            log,
        }),
    )
    .await?;
    for skipped in runtime.skipped() {
        eprintln!("forge: MCP tool {skipped} has a name no provider accepts; it is not imported");
    }
    Ok(Some(runtime))
}

/// `forge mcp`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum McpCommand {
    /// Lists every server's live tools with their pin status, classification and approval.
    List(McpArgs),
    /// Records every server's live catalog (or one server's) in the lock file.
    Pin {
        #[command(flatten)]
        args: McpArgs,
        /// Only this server.
        #[arg(long)]
        server: Option<String>,
        /// Where the re-pin is audited.
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Shows how live catalogs differ from the pins; exits 1 when any does.
    Diff(McpArgs),
}

/// What every `forge mcp` command reads.
#[derive(Debug, clap::Args)]
pub(crate) struct McpArgs {
    /// The MCP configuration file.
    #[arg(long = "mcp", env = "FORGE_MCP")]
    mcp: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Each server's live catalog.
async fn catalogs(
    config: &McpConfig,
    only: Option<&str>,
) -> anyhow::Result<Vec<(String, Vec<forge_mcp::ToolDefinition>)>> {
    let egress = Arc::new(config.egress.clone());
    let mut out = Vec::new();
    for s in &config.servers {
        if only.is_some_and(|o| o != s.name) {
            continue;
        }
        let defs = forge_mcp::fetch_catalog(s, egress.clone(), forge_mcp::process_env()).await?;
        out.push((s.name.clone(), defs));
    }
    if let Some(o) = only
        && out.is_empty()
    {
        anyhow::bail!("no MCP server named {o} is configured");
    }
    Ok(out)
}

pub(crate) async fn run(command: McpCommand) -> anyhow::Result<ExitCode> {
    match command {
        McpCommand::List(args) => {
            let config = McpConfig::load(&args.mcp)?;
            let lock = LockFile::load(&config.lock_path())?;
            let mut rows = Vec::new();
            for (server, defs) in catalogs(&config, None).await? {
                let pins = lock.server(&server);
                let over = &config
                    .server(&server)
                    .map(|s| s.tools.clone())
                    .unwrap_or_default();
                for def in defs {
                    let status = match pins.tools.get(&def.name) {
                        Some(p) if p.hash == def.hash() => "pinned",
                        Some(_) => "changed",
                        None => "unpinned",
                    };
                    let spec = forge_mcp::import::spec(
                        &server,
                        &Pin::of(def.clone()),
                        over.get(&def.name),
                    );
                    rows.push(serde_json::json!({
                        "server": server,
                        "tool": def.name,
                        "name": spec.as_ref().map(|s| s.name.clone()),
                        "status": status,
                        "classification": spec.as_ref().map(|s| s.classification),
                        "approval": spec.as_ref().map(|s| s.approval),
                        "hash": def.hash(),
                        "description": spec.as_ref().map(|s| s.description.clone()),
                    }));
                }
            }
            if args.json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                for r in &rows {
                    println!(
                        "{}\t{}\t{}\t{}\t{}",
                        r["name"].as_str().unwrap_or("(not importable)"),
                        r["status"].as_str().unwrap_or(""),
                        r["classification"].as_str().unwrap_or(""),
                        r["approval"].as_str().unwrap_or(""),
                        r["description"].as_str().unwrap_or("")
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        McpCommand::Diff(args) => {
            let config = McpConfig::load(&args.mcp)?;
            let lock = LockFile::load(&config.lock_path())?;
            let diffs: Vec<CatalogDiff> = catalogs(&config, None)
                .await?
                .into_iter()
                .map(|(server, defs)| CatalogDiff::between(&server, &lock.server(&server), &defs))
                .collect();
            if args.json {
                println!("{}", serde_json::to_string_pretty(&diffs)?);
            } else {
                for d in &diffs {
                    if d.is_clean() {
                        println!(
                            "{}: matches its pins ({} tools)",
                            d.server,
                            d.unchanged.len()
                        );
                    } else {
                        println!(
                            "{}: changed (disabled) {:?}; new (not offered) {:?}; removed {:?}",
                            d.server, d.changed, d.added, d.removed
                        );
                    }
                }
            }
            Ok(if diffs.iter().all(CatalogDiff::is_clean) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        McpCommand::Pin {
            args,
            server,
            store,
        } => {
            let config = McpConfig::load(&args.mcp)?;
            let path = config.lock_path();
            let mut lock = LockFile::load(&path)?;
            let mut changes = Vec::new();
            for (name, defs) in catalogs(&config, server.as_deref()).await? {
                let diff = CatalogDiff::between(&name, &lock.server(&name), &defs);
                let pins = lock.servers.entry(name.clone()).or_default();
                pins.tools.clear();
                for d in defs {
                    pins.tools.insert(d.name.clone(), Pin::of(d));
                }
                changes.push(diff);
            }
            // Servers no longer configured lose their pins.
            lock.servers.retain(|s, _| config.server(s).is_some());
            lock.save(&path)?;
            let opened = crate::store::open(&store).await?;
            for d in &changes {
                if !d.is_clean() {
                    audit(
                        opened.store.as_ref(),
                        PIN_ACTION,
                        format!("server {}", d.server),
                        serde_json::to_value(d)?,
                    )
                    .await;
                }
            }
            if args.json {
                println!("{}", serde_json::to_string_pretty(&changes)?);
            } else {
                for d in &changes {
                    println!(
                        "{}: pinned {} tools (changed {:?}, new {:?}, removed {:?}) in {}",
                        d.server,
                        d.unchanged.len() + d.changed.len() + d.added.len(),
                        d.changed,
                        d.added,
                        d.removed,
                        path.display()
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The console's view of the running servers (`mcpServers`).
pub(crate) struct ConsoleStatus(pub(crate) Vec<Arc<forge_mcp::ServerHandle>>);

impl forge_server::McpStatus for ConsoleStatus {
    fn servers(&self) -> Vec<forge_server::McpServerState> {
        self.0.iter().map(|s| console_state(s.status())).collect()
    }
}

/// A server's status as the console shows it.
fn console_state(s: forge_mcp::ServerStatus) -> forge_server::McpServerState {
    let tool_state = |name: &str| match &s.diff {
        None => "unknown",
        Some(d) if d.changed.iter().any(|t| t == name) => "changed",
        Some(d) if d.removed.iter().any(|t| t == name) => "removed",
        Some(_) => "verified",
    };
    let health = match (&s.diff, s.connected) {
        (_, false) => "down",
        (None, true) => "unlisted",
        (Some(d), true) if d.is_clean() => "ok",
        (Some(_), true) => "drift",
    };
    forge_server::McpServerState {
        name: s.name.clone(),
        transport: s.transport.into(),
        connected: s.connected,
        health: health.into(),
        pinned: s
            .pinned
            .iter()
            .map(|(name, hash)| forge_server::McpPinnedTool {
                name: name.clone(),
                hash: hash.clone(),
                state: tool_state(name).into(),
            })
            .collect(),
        unpinned: s.diff.as_ref().map(|d| d.added.clone()).unwrap_or_default(),
        listed_at: s.listed_at.map(|t| t.to_string()),
        drift_since: s.drift_since.map(|t| t.to_string()),
        last_error_at: s.last_error.as_ref().map(|(t, _)| t.to_string()),
        last_error: s.last_error.map(|(_, m)| m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_stderr_is_logged_by_length_only() {
        let line = "token=ghp_abcdefghijklmnopqrstuvwxyz0123456789 for alice@example.com";
        let buffer = Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let reporter = StderrReporter {
            telemetry: forge_otel::lines_only(buffer.clone()),
        };
        reporter.output("crm", line);
        let printed = String::from_utf8(buffer.lock().expect("lines").clone()).expect("utf-8");
        let logged: serde_json::Value = serde_json::from_str(printed.trim()).expect("one line");
        assert_eq!(logged["event"], "mcp.server_output", "{printed}");
        assert_eq!(logged["server"], "crm", "{printed}");
        assert_eq!(logged["bytes"], line.len(), "{printed}");
        assert!(
            !printed.contains("ghp_") && !printed.contains("alice"),
            "{printed}"
        );
    }
}
