//! Choosing the store from configuration: `memory`, `sqlite://…` (the default) or `postgres://…`.

use anyhow::{Context, bail};
use forge_store_postgres::Mode;

/// The store a command uses when none is given.
pub(crate) const DEFAULT_URL: &str = "sqlite://forge.db";

/// Where data lives, from `--store` / `FORGE_STORE`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StoreArgs {
    /// `sqlite://PATH` (the default, created if missing), `postgres://…`, or `memory`.
    #[arg(long = "store", env = "FORGE_STORE", default_value = DEFAULT_URL)]
    pub(crate) url: String,
    /// Tenant isolation for PostgreSQL: `rls` (policies on a transaction setting) or `supabase`
    /// (policies on Supabase JWT claims).
    #[arg(long = "pg-mode", env = "FORGE_PG_MODE", default_value = "rls")]
    pub(crate) pg_mode: String,
}

/// An opened store: each port that keeps its records, readiness, and what `forge migrate`
/// reports.
pub(crate) type Opened = forge::Stores;

/// Provisions, as the administrator `admin_url`, what RLS mode needs and the application role must
/// not be able to create or change, the schema included (see
/// `forge_store_postgres::provision_system`); returns the role and how many migrations it
/// applied.
pub(crate) async fn provision_system(
    args: &StoreArgs,
    admin_url: &str,
) -> anyhow::Result<(String, usize)> {
    let url = args.url.as_str();
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://"))
        || args.pg_mode != "rls"
    {
        bail!(
            "--admin-url applies to PostgreSQL in RLS mode only (Supabase mode's migrations provision as the login role)"
        );
    }
    let options: sqlx::postgres::PgConnectOptions = url
        .parse()
        .with_context(|| format!("invalid store URL {}", forge::redact(url)))?;
    let role = options.get_username().to_owned();
    let applied = forge_store_postgres::provision_system(admin_url, &role)
        .await
        .with_context(|| {
            format!(
                "failed to provision forge_system as {}",
                forge::redact(admin_url)
            )
        })?;
    Ok((role, applied))
}

/// Opens the store the URL names, provisioning its schema.
pub(crate) async fn open(args: &StoreArgs) -> anyhow::Result<Opened> {
    let url = args.url.as_str();
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let mode = match args.pg_mode.as_str() {
            "rls" => Mode::Rls,
            "supabase" => Mode::Supabase,
            other => bail!("--pg-mode must be rls or supabase, not {other:?}"),
        };
        return Ok(forge::Stores::open_postgres(url, mode).await?);
    }
    forge::Stores::open(url).await.map_err(|e| match e {
        forge::Error::StoreUrl { url, .. } => {
            anyhow::anyhow!("--store must be memory, sqlite://PATH or postgres://…, not {url:?}")
        }
        other => other.into(),
    })
}
