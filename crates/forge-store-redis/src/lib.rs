//! Forge on Redis: named leases (`LeaseStore`), the live tail across processes ([`live`]), and a
//! readiness probe ([`probe`]).
//!
//! Each key is one Redis string `holder|token|expires_ms`, changed only by Lua scripts, so every
//! check-and-set is atomic on the server. Tokens come from a per-key counter that only grows.
//! Expiry is decided with Forge's injected clock (passed to every script), exactly as the other
//! adapters decide it; the Redis TTL set alongside only collects keys long after they lapsed.
//! Renewal is part of the typed API ([`LeaseStore::renew`]), and it and release check the token.

#![deny(missing_docs)]

pub mod live;
pub mod probe;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use forge_core::Error;
use forge_core::ports::lease::{Lease, LeaseStore};
use forge_core::scope::SystemScope;
use forge_core::time::{Clock, SystemClock, Timestamp};
use redis::Script;
use redis::aio::ConnectionManager;

/// Why the store could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The URL is not a Redis URL, or the server could not be reached.
    #[error("could not connect to Redis")]
    Connect(#[source] redis::RedisError),
}

/// Leases on Redis.
#[derive(Clone)]
pub struct RedisLeaseStore {
    conn: ConnectionManager,
    prefix: String,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for RedisLeaseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLeaseStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// Takes a free, expired or own lease: `{1, token}`, or `{0, expires_ms}` of the other holder's.
const ACQUIRE: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur then
  local holder, _, expires = string.match(cur, '^(.*)|(%d+)|(%d+)$')
  if holder ~= ARGV[1] and tonumber(expires) > tonumber(ARGV[2]) then
    return {0, tonumber(expires)}
  end
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. token .. '|' .. ARGV[3], 'PX', ARGV[4])
return {1, token}
";

/// Extends the lease if it is still `holder|token` and unexpired: 1, else 0.
const RENEW: &str = r"
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local holder, token, expires = string.match(cur, '^(.*)|(%d+)|(%d+)$')
if holder == ARGV[1] and token == ARGV[2] and tonumber(expires) > tonumber(ARGV[3]) then
  redis.call('SET', KEYS[1], holder .. '|' .. token .. '|' .. ARGV[4], 'PX', ARGV[5])
  return 1
end
return 0
";

/// Deletes the lease if it is still `holder|token`: 1, else 0.
const RELEASE: &str = r"
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local holder, token = string.match(cur, '^(.*)|(%d+)|%d+$')
if holder == ARGV[1] and token == ARGV[2] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
";

/// Keys are collected by Redis this long after they lapse (Forge's clock decides expiry).
const GRACE: Duration = Duration::from_secs(24 * 3600);

fn backend(e: redis::RedisError) -> Error {
    let retryable = e.is_io_error() || e.is_timeout() || e.is_connection_dropped();
    Error::backend(retryable, e)
}

fn ms(t: Timestamp) -> i64 {
    t.unix_millis()
}

impl RedisLeaseStore {
    /// Connects to `url` (`redis://127.0.0.1:6379`), namespacing keys under `prefix`.
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, OpenError> {
        Self::connect_with(url, prefix, Arc::new(SystemClock)).await
    }

    /// Like [`RedisLeaseStore::connect`] with an injected clock.
    pub async fn connect_with(
        url: &str,
        prefix: &str,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, OpenError> {
        let client = redis::Client::open(url).map_err(OpenError::Connect)?;
        let conn = ConnectionManager::new(client)
            .await
            .map_err(OpenError::Connect)?;
        Ok(Self {
            conn,
            prefix: prefix.to_owned(),
            clock,
        })
    }

    fn lease_key(&self, key: &str) -> String {
        format!("{}:lease:{key}", self.prefix)
    }

    fn fence_key(&self, key: &str) -> String {
        format!("{}:fence:{key}", self.prefix)
    }

    fn px(ttl: Duration) -> u64 {
        u64::try_from((ttl + GRACE).as_millis()).unwrap_or(u64::MAX)
    }
}

#[async_trait]
impl LeaseStore for RedisLeaseStore {
    async fn acquire(
        &self,
        _system: &SystemScope,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Lease, Error> {
        if holder.contains('|') {
            return Err(Error::invalid("a lease holder's name cannot contain '|'"));
        }
        let now = self.clock.now();
        let expires_at = now.plus(ttl);
        let (won, value): (i64, i64) = Script::new(ACQUIRE)
            .key(self.lease_key(key))
            .key(self.fence_key(key))
            .arg(holder)
            .arg(ms(now))
            .arg(ms(expires_at))
            .arg(Self::px(ttl))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(backend)?;
        if won == 1 {
            let token =
                u64::try_from(value).map_err(|_| Error::invalid("negative fencing token"))?;
            Ok(Lease {
                key: key.to_owned(),
                holder: holder.to_owned(),
                token,
                expires_at,
            })
        } else {
            let until = Timestamp::from_unix_millis(value).unwrap_or(expires_at);
            Err(Error::LeaseHeld {
                resource: format!("lease {key}"),
                until,
            })
        }
    }

    async fn renew(
        &self,
        _system: &SystemScope,
        lease: &Lease,
        ttl: Duration,
    ) -> Result<Lease, Error> {
        let now = self.clock.now();
        let expires_at = now.plus(ttl);
        let renewed: i64 = Script::new(RENEW)
            .key(self.lease_key(&lease.key))
            .arg(&lease.holder)
            .arg(lease.token.to_string())
            .arg(ms(now))
            .arg(ms(expires_at))
            .arg(Self::px(ttl))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(backend)?;
        if renewed == 1 {
            Ok(Lease {
                expires_at,
                ..lease.clone()
            })
        } else {
            Err(Error::Fenced {
                resource: format!("lease {}", lease.key),
            })
        }
    }

    async fn release(&self, _system: &SystemScope, lease: &Lease) -> Result<(), Error> {
        let _released: i64 = Script::new(RELEASE)
            .key(self.lease_key(&lease.key))
            .arg(&lease.holder)
            .arg(lease.token.to_string())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(backend)?;
        Ok(())
    }
}
