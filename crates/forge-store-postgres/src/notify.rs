//! Cross-process wake-ups: `LISTEN forge_run_events` (`commit_step` notifies with every step that
//! appends events, `create_run` for a run queued behind another; both on commit).

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

impl PostgresStore {
    /// Listens for run-event notifications until `on_wake` returns `false` or the task is
    /// dropped, reconnecting (and reporting `None`) when the connection drops.
    pub fn listen_run_events(
        &self,
        on_wake: impl Fn(RunWake) -> bool + Send + Sync + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let pool = self.pool.clone();
        tokio::spawn(async move {
            loop {
                let mut listener = match PgListener::connect_with(&pool).await {
                    Ok(l) => l,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                };
                if listener.listen("forge_run_events").await.is_err() {
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
        })
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
