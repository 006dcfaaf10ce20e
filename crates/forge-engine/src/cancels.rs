//! Stopping a run in the middle of its step when someone asks it to cancel.
//!
//! A cancel request is a flag on the run in the store (`RunStore::request_cancel`); the step
//! that commits next sees it. That was too late for a step streaming a long answer: every token
//! streamed and was paid for, and the run completed. So each execution holds a token of its own
//! here, which fires
//! - at once when the request comes through this process's engine ([`Cancels::fire`]), or when a
//!   run started here interrupts the thread's runs ([`Cancels::fire_thread`]);
//! - within one poll interval when it came through another process (a server without a worker,
//!   an operator's CLI): the execution polls the store for its flag while it runs
//!   ([`Cancels::poll`]).
//!
//! A fired token aborts the model stream in progress (dropping it closes the provider's
//! connection) and any tool call awaiting its result; the step settles the usage actually
//! reported and the run ends `cancelled`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use forge_core::id::{RunId, ThreadId};
use forge_core::ports::store::RunStore;
use forge_core::scope::Scope;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

/// How often an executing run asks the store whether someone asked it to cancel, by default.
/// The first poll comes one interval after the execution starts, so runs shorter than it never
/// poll. Each poll is a read (on PostgreSQL a short transaction): at 250 ms, runs of a loaded
/// worker (a debug build's throughput phase) polled about once each, which the regression
/// check measured as PostgreSQL's CPU per run growing by a tenth to a third; 500 ms keeps a
/// request from another process under a second.
pub const DEFAULT_CANCEL_POLL: Duration = Duration::from_millis(500);

/// The runs this process is executing, each execution with the token that stops it.
#[derive(Debug, Default, Clone)]
pub(crate) struct Cancels {
    executing: Arc<Mutex<Executing>>,
}

#[derive(Debug, Default)]
struct Executing {
    next: u64,
    /// By watch: the run, its thread and the execution's token.
    watches: HashMap<u64, (RunId, ThreadId, CancellationToken)>,
}

/// An execution's place in [`Cancels`]; leaves it when dropped.
#[derive(Debug)]
pub(crate) struct Watch {
    cancels: Cancels,
    id: u64,
    token: CancellationToken,
}

impl Watch {
    /// The token that stops this execution: fires with the caller's, or when a cancel is
    /// requested.
    pub(crate) fn token(&self) -> &CancellationToken {
        &self.token
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.cancels.lock().watches.remove(&self.id);
    }
}

impl Cancels {
    fn lock(&self) -> parking_lot::MutexGuard<'_, Executing> {
        // The map stays consistent whatever panicked while it was held: every change is one call.
        self.executing.lock()
    }

    /// Registers an execution of `run` on `thread`, stopped by `parent` or by a cancel request.
    pub(crate) fn watch(&self, run: RunId, thread: ThreadId, parent: &CancellationToken) -> Watch {
        let token = parent.child_token();
        let mut executing = self.lock();
        let id = executing.next;
        executing.next += 1;
        executing.watches.insert(id, (run, thread, token.clone()));
        Watch {
            cancels: self.clone(),
            id,
            token,
        }
    }

    /// Whether this process is executing `run`.
    pub(crate) fn executing(&self, run: RunId) -> bool {
        self.lock().watches.values().any(|(r, _, _)| *r == run)
    }

    /// Stops the executions of `run` in this process, if any.
    pub(crate) fn fire(&self, run: RunId) {
        for (r, _, token) in self.lock().watches.values() {
            if *r == run {
                token.cancel();
            }
        }
    }

    /// Stops the executions in this process of `thread`'s runs other than `except`.
    pub(crate) fn fire_thread(&self, thread: ThreadId, except: RunId) {
        for (run, t, token) in self.lock().watches.values() {
            if *t == thread && *run != except {
                token.cancel();
            }
        }
    }

    /// Asks the store every `every` whether someone asked `run` to cancel, and fires `token`
    /// when so. Never returns: it runs beside the execution, which ends it. A failed read is
    /// tried again at the next interval (the step's commit sees the flag in any case).
    pub(crate) async fn poll(
        runs: &dyn RunStore,
        scope: &Scope,
        run: RunId,
        token: &CancellationToken,
        every: Duration,
    ) -> std::convert::Infallible {
        loop {
            tokio::time::sleep(every).await;
            if token.is_cancelled() {
                break;
            }
            if let Ok(asked) = runs.cancels_requested(scope, &[run]).await
                && asked.contains(&run)
            {
                token.cancel();
                break;
            }
        }
        std::future::pending().await
    }
}
