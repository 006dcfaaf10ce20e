//! `--leases`: where the workers of a deployment elect the one that sweeps (expires overdue
//! approvals and questions, releases orphaned reservations, reports the queue's depth).
//!
//! Redis when `--leases redis://…` is given; otherwise the store's own leases on PostgreSQL; none
//! on SQLite and in memory, whose single process has no one to share the sweeps with.

use std::sync::Arc;

use anyhow::Context as _;
use forge_core::ports::lease::LeaseStore;
use forge_store_postgres::PostgresStore;
use forge_store_redis::RedisLeaseStore;

/// Lease options.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct LeaseArgs {
    /// Redis URL for the lease that elects the one worker that sweeps (default: the store's own
    /// leases on PostgreSQL; none on SQLite or in memory).
    #[arg(long = "leases", env = "FORGE_LEASES")]
    leases_url: Option<String>,
    /// The prefix of the lease keys in Redis (deployments sharing a Redis keep theirs apart).
    #[arg(
        long = "leases-prefix",
        env = "FORGE_LEASES_PREFIX",
        default_value = "forge"
    )]
    prefix: String,
}

impl LeaseArgs {
    /// The readiness check of the Redis sweeps are elected in, when configured.
    pub(crate) fn readiness(&self) -> anyhow::Result<Option<forge_server::ReadinessCheck>> {
        self.leases_url
            .as_deref()
            .map(|url| crate::live::redis_readiness("redis leases", url))
            .transpose()
    }

    /// The lease store sweeps are elected in, if any.
    pub(crate) async fn sweep_leases(
        &self,
        postgres: Option<Arc<PostgresStore>>,
    ) -> anyhow::Result<Option<Arc<dyn LeaseStore>>> {
        if let Some(url) = &self.leases_url {
            let store = RedisLeaseStore::connect(url, &self.prefix)
                .await
                .with_context(|| format!("--leases: could not connect to {url}"))?;
            return Ok(Some(Arc::new(store)));
        }
        Ok(postgres.map(|pg| pg as Arc<dyn LeaseStore>))
    }
}
