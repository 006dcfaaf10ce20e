//! Choosing the store from configuration: `memory`, `sqlite://…` (the default) or `postgres://…`.

use std::sync::Arc;

use anyhow::{Context, bail};
use forge_core::ports::store::Store;
use forge_store_memory::MemoryStore;
use forge_store_postgres::{Mode, PostgresStore};
use forge_store_sqlite::SqliteStore;

/// Where data lives, from `--store` / `FORGE_STORE`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StoreArgs {
    /// `sqlite://PATH` (the default, created if missing), `postgres://…`, or `memory`.
    #[arg(
        long = "store",
        env = "FORGE_STORE",
        default_value = "sqlite://forge.db"
    )]
    pub(crate) url: String,
    /// Tenant isolation for PostgreSQL: `rls` (policies on a transaction setting) or `supabase`
    /// (policies on Supabase JWT claims).
    #[arg(long = "pg-mode", env = "FORGE_PG_MODE", default_value = "rls")]
    pub(crate) pg_mode: String,
}

/// Checks a store is reachable and its schema is current.
pub(crate) type Probe = Arc<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>
        + Send
        + Sync,
>;

/// An opened store and what `forge migrate` reports about it.
pub(crate) struct Opened {
    pub(crate) store: Arc<dyn Store>,
    /// The same store's retrieval sources.
    pub(crate) sources: Arc<dyn forge_rag::SourceStore>,
    /// The same store's file records.
    pub(crate) files: Arc<dyn forge_files::FileStore>,
    /// The same store's scoring runs and judge verdicts.
    pub(crate) evals: Arc<dyn forge_eval::EvalStore>,
    /// The PostgreSQL store itself, for `LISTEN`.
    pub(crate) postgres: Option<Arc<PostgresStore>>,
    /// Readiness: reachable, migrations current.
    pub(crate) probe: Probe,
    /// Migrations this process applied while opening.
    pub(crate) applied: usize,
    /// Migration versions now in place.
    pub(crate) versions: Vec<i64>,
}

fn redact(url: &str) -> String {
    // Never print a password that a URL may carry.
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://…@{}", &url[..s], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

fn current(applied: Result<Vec<i64>, forge_core::Error>, latest: i64) -> Result<(), String> {
    match applied {
        Err(e) => Err(format!("unreachable ({:?})", e.kind())),
        Ok(v) if v.last().copied() == Some(latest) => Ok(()),
        Ok(v) => Err(format!(
            "schema at version {}, this build needs {latest}",
            v.last().copied().unwrap_or(0)
        )),
    }
}

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
        .with_context(|| format!("invalid store URL {}", redact(url)))?;
    let role = options.get_username().to_owned();
    let applied = forge_store_postgres::provision_system(admin_url, &role)
        .await
        .with_context(|| format!("failed to provision forge_system as {}", redact(admin_url)))?;
    Ok((role, applied))
}

/// Opens the store the URL names, provisioning its schema.
pub(crate) async fn open(args: &StoreArgs) -> anyhow::Result<Opened> {
    let url = args.url.as_str();
    if url == "memory" {
        let store = Arc::new(MemoryStore::default());
        return Ok(Opened {
            sources: store.clone(),
            files: store.clone(),
            evals: store.clone(),
            store,
            postgres: None,
            probe: Arc::new(|| Box::pin(async { Ok(()) })),
            applied: 0,
            versions: vec![],
        });
    }
    if url.starts_with("sqlite:") {
        let store = SqliteStore::open(url)
            .await
            .with_context(|| format!("failed to open {}", redact(url)))?;
        let versions = store.applied_migrations().await?;
        let applied = store.applied_on_open();
        let store = Arc::new(store);
        let probed = store.clone();
        let latest = forge_store_sqlite::migrations().latest();
        let probe: Probe = Arc::new(move || {
            let store = probed.clone();
            Box::pin(async move { current(store.applied_migrations().await, latest) })
        });
        return Ok(Opened {
            sources: store.clone(),
            files: store.clone(),
            evals: store.clone(),
            store,
            postgres: None,
            probe,
            applied,
            versions,
        });
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let mode = match args.pg_mode.as_str() {
            "rls" => Mode::Rls,
            "supabase" => Mode::Supabase,
            other => bail!("--pg-mode must be rls or supabase, not {other:?}"),
        };
        let store = PostgresStore::connect(url, mode)
            .await
            .with_context(|| format!("failed to open {}", redact(url)))?;
        let versions = store.applied_migrations().await?;
        let applied = store.applied_on_connect();
        let store = Arc::new(store);
        let probed = store.clone();
        let latest = forge_store_postgres::migrations(mode).latest();
        let probe: Probe = Arc::new(move || {
            let store = probed.clone();
            Box::pin(async move { current(store.applied_migrations().await, latest) })
        });
        return Ok(Opened {
            store: store.clone(),
            sources: store.clone(),
            files: store.clone(),
            evals: store.clone(),
            postgres: Some(store),
            probe,
            applied,
            versions,
        });
    }
    bail!(
        "--store must be memory, sqlite://PATH or postgres://…, not {:?}",
        redact(url)
    )
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn urls_are_printed_without_credentials() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/forge"),
            "postgres://…@db:5432/forge"
        );
        assert_eq!(redact("sqlite://forge.db"), "sqlite://forge.db");
    }
}
