//! Cross-process wake-ups: `LISTEN forge_run_events` (`commit_step` notifies with every step that
//! appends events while a listener is registered, `create_run` for a run queued behind another;
//! both on commit). Listeners register in `forge_listeners` (migration 24): PostgreSQL serializes
//! the commits of notifying transactions, a cost not worth paying where no one listens.

use std::time::Duration;

use forge_core::id::{RunId, ThreadId};
use sqlx::postgres::PgListener;

use crate::PostgresStore;

/// A notification: the run that has new events and its thread, or `None` when notifications may
/// have been missed (the listening connection was lost and re-established), so every subscriber
/// should re-read.
pub type RunWake = Option<(RunId, ThreadId)>;

/// Parses a `'<run id> <thread id>'` payload.
pub fn parse_payload(payload: &str) -> Option<(RunId, ThreadId)> {
    let (run, thread) = payload.split_once(' ')?;
    Some((run.parse().ok()?, thread.parse().ok()?))
}

/// How long a listener's registration lasts unless renewed.
const LISTENER_TTL: Duration = Duration::from_secs(30);

/// How often a listener renews its registration (well within [`LISTENER_TTL`]).
const RENEW_EVERY: Duration = Duration::from_secs(10);

/// Registers (or renews) listener `$1` until `$2`, and clears registrations that expired before
/// `$3` (an hour earlier: hosts' clocks differ).
const REGISTER_SQL: &str = "WITH expired AS (DELETE FROM forge_listeners WHERE expires_at < $3) \
    INSERT INTO forge_listeners (id, expires_at) VALUES ($1, $2) \
    ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at";

/// Aborts a task when dropped: a listener's renewals stop with it, however it ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn register(
    pool: &sqlx::PgPool,
    clock: &dyn forge_core::time::Clock,
    id: uuid::Uuid,
) -> Result<(), sqlx::Error> {
    let now = clock.now();
    sqlx::query(REGISTER_SQL)
        .bind(id)
        .bind(now.plus(LISTENER_TTL).0)
        .bind(now.0 - chrono::Duration::hours(1))
        .execute(pool)
        .await
        .map(drop)
}

impl PostgresStore {
    /// Listens for run-event notifications until `on_wake` returns `false` or the task is
    /// dropped, reconnecting (and reporting `None`) when the connection drops.
    ///
    /// While it listens, the listener keeps a registration in `forge_listeners` (renewed every
    /// ten seconds, lapsing thirty seconds after the last renewal): steps notify only while one
    /// exists. It registers after `LISTEN` and before its first re-read (the `None`), so that a
    /// step committed after that re-read began notifies; a step whose statement began before
    /// the registration and committed after the re-read is found on the subscribers' next
    /// re-read (their poll interval).
    pub fn listen_run_events(
        &self,
        on_wake: impl Fn(RunWake) -> bool + Send + Sync + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let pool = self.pool.clone();
        let clock = self.clock.clone();
        let id = uuid::Uuid::new_v4();
        tokio::spawn(async move {
            let renewals = {
                let (pool, clock) = (pool.clone(), clock.clone());
                AbortOnDrop(tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(RENEW_EVERY).await;
                        // A failed renewal is tried again at the next; the registration lasts
                        // three renewals.
                        let _ = register(&pool, clock.as_ref(), id).await;
                    }
                }))
            };
            listen(&pool, clock.as_ref(), id, &on_wake).await;
            drop(renewals);
            // Best effort: a registration left behind lapses on its own.
            let _ = sqlx::query("DELETE FROM forge_listeners WHERE id = $1")
                .bind(id)
                .execute(&pool)
                .await;
        })
    }
}

/// Listens as listener `id` until `on_wake` returns `false`.
async fn listen(
    pool: &sqlx::PgPool,
    clock: &dyn forge_core::time::Clock,
    id: uuid::Uuid,
    on_wake: &(impl Fn(RunWake) -> bool + Send + Sync),
) {
    loop {
        let mut listener = match PgListener::connect_with(pool).await {
            Ok(l) => l,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        if listener.listen("forge_run_events").await.is_err()
            || register(pool, clock, id).await.is_err()
        {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        // Anything committed while no one listened is found by re-reading.
        if !on_wake(None) {
            return;
        }
        loop {
            match listener.try_recv().await {
                Ok(Some(n)) => {
                    if let Some(wake) = parse_payload(n.payload())
                        && !on_wake(Some(wake))
                    {
                        return;
                    }
                }
                // The connection was lost; sqlx reconnects on the next call.
                Ok(None) => {
                    if !on_wake(None) {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_parse_or_are_ignored() {
        let run = "0190a0a0-0000-7000-8000-000000000001";
        let thread = "0190a0a0-0000-7000-8000-000000000002";
        let (r, t) = parse_payload(&format!("{run} {thread}")).unwrap();
        assert_eq!(
            (r.to_string(), t.to_string()),
            (run.to_owned(), thread.to_owned())
        );
        assert!(parse_payload("garbage").is_none());
        assert!(parse_payload("a b").is_none());
    }
}
