//! The live tail across processes, on Redis pub/sub.
//!
//! Workers publish every [`LiveMessage`] (events of the step in flight, commits) as JSON on one
//! channel; each server subscribes once and feeds what it receives to its in-process live tail,
//! which fans it out to however many subscribers it has. Publishing never blocks a step: messages
//! go through a bounded queue to one task that sends whatever has accumulated as one pipeline, and
//! a full queue drops (counted). Pub/sub delivery is at most once; the committed log covers
//! whatever is lost, and a subscriber that reconnects asks its callback to wake every reader.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use forge_core::ports::live::{LiveMessage, LiveSink};
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::OpenError;

/// The channel live messages travel on unless configured otherwise.
pub const DEFAULT_CHANNEL: &str = "forge:live";

/// Messages queued for publishing before new ones are dropped.
const QUEUE: usize = 65_536;
/// Messages sent in one pipeline at most.
const BATCH: usize = 512;

/// Publishes live messages to Redis: a [`LiveSink`] for a worker's observer.
#[derive(Clone)]
pub struct RedisLivePublisher {
    tx: mpsc::Sender<String>,
    dropped: Arc<AtomicU64>,
}

impl std::fmt::Debug for RedisLivePublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLivePublisher")
            .field("dropped", &self.dropped.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl RedisLivePublisher {
    /// Connects to `url` and starts the publishing task, which ends when `shutdown` fires (after
    /// sending what is queued) or every publisher is dropped.
    pub async fn connect(
        url: &str,
        channel: &str,
        shutdown: CancellationToken,
    ) -> Result<(Self, JoinHandle<()>), OpenError> {
        let client = redis::Client::open(url).map_err(OpenError::Connect)?;
        let conn = redis::aio::ConnectionManager::new(client)
            .await
            .map_err(OpenError::Connect)?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(publish_loop(conn, channel.to_owned(), rx, shutdown));
        Ok((Self { tx, dropped }, task))
    }

    /// Messages dropped because the queue was full or the task had ended.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl LiveSink for RedisLivePublisher {
    fn send(&self, message: &LiveMessage) {
        let Ok(json) = serde_json::to_string(message) else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if self.tx.try_send(json).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn publish_loop(
    mut conn: redis::aio::ConnectionManager,
    channel: String,
    mut rx: mpsc::Receiver<String>,
    shutdown: CancellationToken,
) {
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let got = tokio::select! {
            n = rx.recv_many(&mut batch, BATCH) => n,
            _ = shutdown.cancelled() => {
                rx.close();
                rx.recv_many(&mut batch, BATCH).await
            }
        };
        if got == 0 {
            return;
        }
        let mut pipe = redis::pipe();
        for payload in batch.drain(..) {
            pipe.publish(&channel, payload).ignore();
        }
        // Lost on a Redis failure: the log covers it; the connection manager reconnects.
        let _: Result<(), redis::RedisError> = pipe.query_async(&mut conn).await;
    }
}

/// What a subscription reports.
// Moved once per received message; boxing would add an allocation per streamed token.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum LiveFeed {
    /// A message.
    Message(LiveMessage),
    /// The subscription was (re)established after a failure: messages may have been lost.
    Resubscribed,
}

/// Subscribes to `channel` on `url` and hands every message to `on` until `shutdown` fires,
/// reconnecting with backoff. Fails only if the first connection cannot be made.
pub async fn subscribe(
    url: &str,
    channel: &str,
    shutdown: CancellationToken,
    on: impl Fn(LiveFeed) + Send + Sync + 'static,
) -> Result<JoinHandle<()>, OpenError> {
    let client = redis::Client::open(url).map_err(OpenError::Connect)?;
    let mut pubsub = client
        .get_async_pubsub()
        .await
        .map_err(OpenError::Connect)?;
    pubsub
        .subscribe(channel)
        .await
        .map_err(OpenError::Connect)?;
    let channel = channel.to_owned();
    Ok(tokio::spawn(async move {
        let mut backoff = Duration::from_millis(100);
        let mut pubsub = Some(pubsub);
        loop {
            if let Some(mut ps) = pubsub.take() {
                let mut messages = ps.on_message();
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        msg = messages.next() => match msg {
                            Some(msg) => {
                                let Ok(payload) = msg.get_payload::<String>() else { continue };
                                if let Ok(m) = serde_json::from_str::<LiveMessage>(&payload) {
                                    on(LiveFeed::Message(m));
                                }
                            }
                            None => break,
                        },
                    }
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
            if let Ok(mut ps) = client.get_async_pubsub().await
                && ps.subscribe(&channel).await.is_ok()
            {
                backoff = Duration::from_millis(100);
                pubsub = Some(ps);
                on(LiveFeed::Resubscribed);
            }
        }
    }))
}
