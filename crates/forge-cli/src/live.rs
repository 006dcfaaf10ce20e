//! `--live`: carries the live tail of steps in flight between processes over Redis pub/sub, so a
//! `forge serve --no-worker` streams what separate `forge worker` processes produce as they
//! produce it. Without it, a server sees another process's runs at each commit only.

use std::sync::Arc;

use anyhow::Context;
use forge_core::ports::live::LiveSink;
use forge_live::{LiveTail, Wake};
use forge_store_redis::live::{DEFAULT_CHANNEL, LiveFeed, RedisLivePublisher};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Where live messages travel between processes.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct LiveArgs {
    /// Redis URL carrying the live tail between workers and servers (e.g. redis://127.0.0.1:6379).
    #[arg(long = "live", env = "FORGE_LIVE")]
    live_url: Option<String>,
    /// The pub/sub channel.
    #[arg(long = "live-channel", env = "FORGE_LIVE_CHANNEL", default_value = DEFAULT_CHANNEL)]
    channel: String,
}

impl LiveArgs {
    /// A publisher for a worker's observer, when configured; its task ends after `shutdown`.
    pub(crate) async fn publisher(
        &self,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Option<(Arc<dyn LiveSink>, JoinHandle<()>)>> {
        let Some(url) = &self.live_url else {
            return Ok(None);
        };
        let (publisher, task) = RedisLivePublisher::connect(url, &self.channel, shutdown.clone())
            .await
            .context("failed to connect the live tail publisher to Redis (--live)")?;
        Ok(Some((Arc::new(publisher), task)))
    }

    /// The readiness check of the Redis carrying the live tail, when configured.
    pub(crate) fn readiness(&self) -> anyhow::Result<Option<forge_server::ReadinessCheck>> {
        self.live_url
            .as_deref()
            .map(|url| redis_readiness("redis live tail", url))
            .transpose()
    }

    /// Feeds `tail` from the channel, when configured.
    pub(crate) async fn subscribe(
        &self,
        tail: Arc<LiveTail>,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Option<JoinHandle<()>>> {
        let Some(url) = &self.live_url else {
            return Ok(None);
        };
        let task = forge_store_redis::live::subscribe(url, &self.channel, shutdown.clone(), {
            move |feed| match feed {
                LiveFeed::Message(m) => tail.send(&m),
                // Messages may have been lost: every subscriber re-reads.
                LiveFeed::Resubscribed => tail.bus().publish(Wake::All),
            }
        })
        .await
        .context("failed to subscribe to the live tail on Redis (--live)")?;
        Ok(Some(task))
    }
}

/// A readiness check named `name` that pings the Redis at `url` (issue 62, item 8).
pub(crate) fn redis_readiness(
    name: &str,
    url: &str,
) -> anyhow::Result<forge_server::ReadinessCheck> {
    let probe = forge_store_redis::probe::RedisProbe::new(url)
        .with_context(|| format!("{name}: not a Redis URL"))?;
    Ok(forge_server::ReadinessCheck {
        name: name.to_owned(),
        probe: Box::new(move || {
            let probe = probe.clone();
            Box::pin(async move { probe.ping().await })
        }),
    })
}
