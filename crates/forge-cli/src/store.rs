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

/// An opened store and what `forge migrate` reports about it.
pub(crate) struct Opened {
    pub(crate) store: Arc<dyn Store>,
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

/// Opens the store the URL names, provisioning its schema.
pub(crate) async fn open(args: &StoreArgs) -> anyhow::Result<Opened> {
    let url = args.url.as_str();
    if url == "memory" {
        return Ok(Opened {
            store: Arc::new(MemoryStore::default()),
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
        return Ok(Opened {
            store: Arc::new(store),
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
        return Ok(Opened {
            store: Arc::new(store),
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
