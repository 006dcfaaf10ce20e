//! `forge audit list`: the audit trail for operators — approvals, external writes, dead-letter
//! handling, and the configuration processes ran with (`config.changed`; deployment-wide records
//! are in the trail of the tenant `_deployment`).

use std::process::ExitCode;

use anyhow::Context;
use forge_core::ports::audit::AuditQuery;
use forge_core::scope::Scope;
use forge_core::time::Timestamp;

use crate::store::{self, StoreArgs};

/// Arguments of `forge audit list`.
#[derive(Debug, clap::Args)]
pub(crate) struct AuditListArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The tenant whose trail to read (`_deployment` for deployment-wide configuration).
    #[arg(long, default_value = "local", env = "FORGE_TENANT")]
    tenant: String,
    /// Only actions starting with this, for example `config.` or `job.replayed`.
    #[arg(long)]
    action: Option<String>,
    /// Only this subject.
    #[arg(long)]
    subject: Option<String>,
    /// Only entries at or after this time (RFC 3339).
    #[arg(long)]
    since: Option<String>,
    /// At most this many, newest first.
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// As a JSON array of entries.
    #[arg(long)]
    json: bool,
}

/// `forge audit` subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum AuditCommand {
    /// List audit entries, newest first.
    List(AuditListArgs),
}

pub(crate) async fn audit(command: AuditCommand) -> anyhow::Result<ExitCode> {
    let AuditCommand::List(args) = command;
    let store = store::open(&args.store).await?.store;
    let scope = Scope::parse(&args.tenant, "operator", &[]).context("invalid tenant")?;
    let since = args
        .since
        .as_deref()
        .map(|s| {
            chrono::DateTime::parse_from_rfc3339(s)
                .map(|t| Timestamp(t.with_timezone(&chrono::Utc)))
                .with_context(|| format!("--since {s:?} is not an RFC 3339 time"))
        })
        .transpose()?;
    let found = store
        .query_audit(
            &scope,
            &AuditQuery {
                action: args.action,
                subject: args.subject,
                since,
                ..AuditQuery::latest(args.limit)
            },
        )
        .await?;
    let entries: Vec<serde_json::Value> = found
        .iter()
        .map(|r| {
            serde_json::json!({"tenant": r.tenant_id, "at": r.at, "actor": r.actor,
                "action": r.action, "subject": r.subject, "detail": r.detail})
        })
        .collect();
    crate::records::print_list(args.json, &entries, "no audit entries", |e| {
        format!(
            "{}  {:<24} {:<16} by {}  {}",
            e["at"].as_str().unwrap_or_default(),
            e["action"].as_str().unwrap_or_default(),
            e["subject"].as_str().unwrap_or_default(),
            e["actor"].as_str().unwrap_or_default(),
            e["detail"]
        )
    })?;
    Ok(ExitCode::SUCCESS)
}
