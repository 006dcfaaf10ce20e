//! A readiness probe for a Redis a process depends on: one `PING` on a fresh connection, bounded
//! in time, answering with a reason that never carries the URL (it may hold a password).

use std::time::Duration;

use crate::OpenError;

/// How long one probe may take before the Redis counts as down.
const TIMEOUT: Duration = Duration::from_secs(2);

/// Pings one Redis.
#[derive(Clone)]
pub struct RedisProbe {
    client: redis::Client,
}

impl std::fmt::Debug for RedisProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisProbe").finish_non_exhaustive()
    }
}

impl RedisProbe {
    /// A probe for `url`; refuses what is not a Redis URL, connects only when asked.
    pub fn new(url: &str) -> Result<Self, OpenError> {
        let client = redis::Client::open(url).map_err(OpenError::Connect)?;
        Ok(Self { client })
    }

    /// `Ok` when the server answered `PING` within two seconds; otherwise why not, in words
    /// that name no address or credential.
    pub async fn ping(&self) -> Result<(), String> {
        let attempt = async {
            let mut conn = self.client.get_multiplexed_async_connection().await?;
            redis::cmd("PING").query_async::<String>(&mut conn).await
        };
        match tokio::time::timeout(TIMEOUT, attempt).await {
            Err(_) => Err(format!("no answer within {} s", TIMEOUT.as_secs())),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if e.is_connection_refusal() => Err("connection refused".to_owned()),
            Ok(Err(e)) if e.is_io_error() => Err("could not connect".to_owned()),
            Ok(Err(e)) => Err(format!("error answering PING ({:?})", e.kind())),
        }
    }
}
