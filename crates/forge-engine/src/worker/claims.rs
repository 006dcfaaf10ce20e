//! Claims made together. A worker's claim loops that want a job at the same time share one claim
//! of the queue ([`JobQueue::claim_leased_batch`]), as concurrent runs' steps share one commit:
//! while a batch is being claimed, loops that free up wait for it to end and go together in the
//! next, so a busy worker makes one claim write per group of runs that ended together instead of
//! one per run. A loop the queue had no job for hears `None` (and idles).
//!
//! The batches are claimed by a task of their own, so a loop that stops waiting (its future
//! dropped) cancels no claim half made: a job claimed for it is kept and handed to the next loop
//! that asks. One that no loop asks for lapses with its claim and is claimed again, as a crashed
//! worker's job is.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use forge_core::Error;
use forge_core::ports::queue::{ClaimFilter, Claimed, JobQueue, LeaseRequest};
use forge_core::scope::SystemScope;
use parking_lot::Mutex;
use tokio::sync::oneshot;

/// A claim and when it was asked for (before the round trip): its run's lease is vouched for
/// from then (`crate::lease`), however long it waited for a loop.
pub(crate) type Asked = (Claimed, Instant);

/// What a waiting loop is answered: its claim, or no job, or the batch's error.
type Answer = Result<Option<Asked>, Arc<Error>>;

/// The claims of one worker's loops.
pub(crate) struct ClaimGroup {
    inner: Arc<Inner>,
}

/// What a worker's claims are.
pub(crate) struct Claiming {
    /// The scope claims are made in (across tenants).
    pub(crate) system: SystemScope,
    /// The worker the claims name.
    pub(crate) worker: String,
    /// Each claim's time to live.
    pub(crate) ttl: Duration,
    /// The jobs claimed.
    pub(crate) filter: ClaimFilter,
    /// The run's lease each claim takes.
    pub(crate) lease: LeaseRequest,
    /// Most claims in one batch (at least 1; 1 claims for each loop alone, not in batches).
    pub(crate) most: usize,
}

struct Inner {
    queue: Arc<dyn JobQueue>,
    claiming: Claiming,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Loops waiting for the next batch, the longest waiting first.
    waiting: VecDeque<oneshot::Sender<Answer>>,
    /// Whether the claiming task is running (it ends when no loop waits).
    claiming: bool,
    /// Claims made for loops that stopped waiting, for the next loops that ask.
    spare: Vec<Asked>,
}

impl ClaimGroup {
    /// Claims from `queue`, as `claiming` says.
    pub(crate) fn new(queue: Arc<dyn JobQueue>, claiming: Claiming) -> Self {
        Self {
            inner: Arc::new(Inner {
                queue,
                claiming,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// A claimed job with its run's lease where taken, `None` when no job is ready: from the
    /// next batch, which this loop joins.
    pub(crate) async fn claim(&self) -> Result<Option<Asked>, Error> {
        let c = &self.inner.claiming;
        if c.most == 1 {
            // Each loop claims alone, at once, as many at a time as want to.
            let asked = Instant::now();
            return Ok(self
                .inner
                .queue
                .claim_leased(&c.system, &c.worker, c.ttl, &c.filter, &c.lease)
                .await?
                .map(|claimed| (claimed, asked)));
        }
        let answer = {
            let mut state = self.inner.lock();
            if let Some(spare) = state.spare.pop() {
                return Ok(Some(spare));
            }
            let (tx, rx) = oneshot::channel();
            state.waiting.push_back(tx);
            if !state.claiming {
                state.claiming = true;
                tokio::spawn(self.inner.clone().claim_batches());
            }
            rx
        };
        match answer.await {
            Ok(Ok(claimed)) => Ok(claimed),
            Ok(Err(shared)) => {
                Err(
                    Arc::try_unwrap(shared).unwrap_or_else(|shared| Error::Backend {
                        retryable: shared.kind() == forge_core::ErrorKind::Retryable,
                        source: Box::new(Shared(shared)),
                    }),
                )
            }
            // The claiming task was dropped unfinished: the runtime is shutting down.
            Err(_) => Err(Error::Cancelled),
        }
    }
}

impl Inner {
    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Claims a batch for the loops waiting (the longest waiting first, at most `most`), and
    /// again while more wait; ends when none does.
    async fn claim_batches(self: Arc<Self>) {
        loop {
            let waiting = {
                let mut state = self.lock();
                // Spare claims first: they need no write.
                while let Some(claim) = state.spare.pop() {
                    let Some(tx) = state.waiting.pop_front() else {
                        state.spare.push(claim);
                        break;
                    };
                    if let Err(Ok(Some(unasked))) = tx.send(Ok(Some(claim))) {
                        state.spare.push(unasked);
                    }
                }
                if state.waiting.is_empty() {
                    state.claiming = false;
                    return;
                }
                let most = state.waiting.len().min(self.claiming.most);
                state.waiting.drain(..most).collect::<Vec<_>>()
            };
            let c = &self.claiming;
            let asked = Instant::now();
            let claimed = self
                .queue
                .claim_leased_batch(
                    &c.system,
                    &c.worker,
                    c.ttl,
                    &c.filter,
                    &c.lease,
                    waiting.len(),
                )
                .await;
            match claimed {
                Ok(claims) => {
                    let mut claims = claims.into_iter().map(|claimed| (claimed, asked));
                    let mut unasked: Vec<Asked> = Vec::new();
                    for tx in waiting {
                        if let Err(Ok(Some(claim))) = tx.send(Ok(claims.next())) {
                            unasked.push(claim);
                        }
                    }
                    // More than asked would be the adapter's mistake; kept all the same.
                    unasked.extend(claims);
                    self.lock().spare.extend(unasked);
                }
                Err(e) => {
                    let e = Arc::new(e);
                    for tx in waiting {
                        let _ = tx.send(Err(e.clone()));
                    }
                }
            }
        }
    }
}

/// A batch's error, as each loop of the batch but the last to hear it sees it.
#[derive(Debug)]
struct Shared(Arc<Error>);

impl std::fmt::Display for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Shared {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.0.as_ref())
    }
}
