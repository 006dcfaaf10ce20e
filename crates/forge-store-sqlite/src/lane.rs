//! The store's writer lane: one connection (rusqlite) on a thread of its own, which runs every
//! write of the store and commits them in groups.
//!
//! Through sqlx every statement is a trip to its connection's thread, and every result and row a
//! message back; the thread wake-ups of those messages cost far more CPU than SQLite's work on the
//! rows. Here an operation is a closure sent once and answered once. The lane takes every
//! operation waiting when it wakes (up to [`MAX_GROUP`]), runs each inside a savepoint of one
//! `BEGIN IMMEDIATE` transaction, and commits them together: an operation that fails is rolled
//! back to its savepoint alone, and nobody is answered before the `COMMIT` succeeded (a failed
//! `COMMIT` is every operation's error, and nothing of the group was written). An operation of
//! one run never waits for another's in the same group to be answered: the engine sends a run's
//! next operation only after the last was answered, so each run's order is kept.
//!
//! The lane does not checkpoint the log as it commits: it tells the store's checkpointer (see
//! `checkpoint`), which does that on a thread of its own.
//!
//! Every write of the store is the lane's, so within a process writers never meet SQLite's
//! lock; other processes on the file (and a migration run after open) meet it and its busy
//! timeout.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};

use forge_core::Error;
use rusqlite::Connection;

use crate::checkpoint::{CheckpointStats, Checkpointer};
use crate::db::stopped;

/// The most operations one group commits together.
pub(crate) const MAX_GROUP: usize = 64;

/// An operation sent to the lane: run once, then answered once the group's fate is known.
trait Work: Send {
    /// Runs the operation on the lane's connection; whether it succeeded (a failure is rolled
    /// back to its savepoint).
    fn run(&mut self, conn: &Connection) -> bool;
    /// Answers the caller: with the operation's own outcome when the group committed, or else
    /// with why it did not (`failed`).
    fn answer(self: Box<Self>, failed: Option<&rusqlite::Error>);
}

/// A closure `F` answering with a `T`.
struct Task<T, F> {
    work: Option<F>,
    outcome: Option<Result<T, Error>>,
    reply: tokio::sync::oneshot::Sender<Result<T, Error>>,
}

impl<T, F> Work for Task<T, F>
where
    T: Send,
    F: FnOnce(&Connection) -> Result<T, Error> + Send,
{
    fn run(&mut self, conn: &Connection) -> bool {
        let Some(work) = self.work.take() else {
            return false;
        };
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| work(conn)))
            .unwrap_or_else(|_| Err(stopped("an operation of the SQLite lane panicked")));
        let ok = outcome.is_ok();
        self.outcome = Some(outcome);
        ok
    }

    fn answer(self: Box<Self>, failed: Option<&rusqlite::Error>) {
        let outcome = match (self.outcome, failed) {
            // The operation's own error is the more precise one (it was rolled back either way).
            (Some(Err(e)), _) => Err(e),
            (Some(Ok(value)), None) => Ok(value),
            (_, Some(e)) => Err(group_error(e)),
            (None, None) => Err(stopped("the operation was never run")),
        };
        // A caller that went away (a cancelled future) has nothing to be told.
        let _ = self.reply.send(outcome);
    }
}

/// What the lane's thread is sent.
enum Message {
    Work(Box<dyn Work>),
    Stop,
}

/// The lane: the sending half, shared by the store's clones.
#[derive(Debug)]
pub(crate) struct Lane {
    jobs: parking_lot::Mutex<Option<Sender<Message>>>,
    counts: Arc<Counts>,
    /// Told of each group committed; stops when the lane's thread and this are gone.
    checkpointer: Arc<Checkpointer>,
}

/// What the lane's thread has done.
#[derive(Debug, Default)]
struct Counts {
    operations: AtomicU64,
    groups: AtomicU64,
}

impl Lane {
    /// Starts the lane's thread on `conn`, a writer's connection (`db::connect`) to the file at
    /// `path`, migrated already.
    pub(crate) fn start(conn: Connection, path: &Path) -> Result<Self, Error> {
        let checkpointer = Arc::new(Checkpointer::start(path)?);
        let (jobs, inbox) = std::sync::mpsc::channel();
        let counts = Arc::new(Counts::default());
        let kept = Arc::clone(&counts);
        let told = Arc::clone(&checkpointer);
        std::thread::Builder::new()
            .name("forge-sqlite-lane".into())
            .spawn(move || serve(&conn, &inbox, &kept, &told))
            .map_err(|e| Error::backend(false, e))?;
        Ok(Self {
            jobs: parking_lot::Mutex::new(Some(jobs)),
            counts,
            checkpointer,
        })
    }

    /// What the lane has done so far.
    pub(crate) fn stats(&self) -> crate::LaneStats {
        crate::LaneStats {
            operations: self.counts.operations.load(Relaxed),
            groups: self.counts.groups.load(Relaxed),
        }
    }

    /// What the store's checkpointer has done so far.
    pub(crate) fn checkpoints(&self) -> CheckpointStats {
        self.checkpointer.stats()
    }

    /// Runs `work` on the lane, inside the transaction of its group, and answers once that
    /// committed: `work`'s outcome, or the group's error (then nothing `work` did was kept).
    pub(crate) async fn run<T, F>(&self, work: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Error> + Send + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let task = Task {
            work: Some(work),
            outcome: None,
            reply,
        };
        {
            let jobs = self.jobs.lock();
            let sent = jobs
                .as_ref()
                .map(|jobs| jobs.send(Message::Work(Box::new(task))));
            if !matches!(sent, Some(Ok(()))) {
                return Err(stopped("the SQLite store is closed"));
            }
        }
        answer
            .await
            .map_err(|_| stopped("the SQLite lane stopped"))?
    }

    /// Stops the lane once the operations sent before are answered; later ones fail.
    pub(crate) fn stop(&self) {
        let mut jobs = self.jobs.lock();
        if let Some(jobs) = jobs.take() {
            let _ = jobs.send(Message::Stop);
        }
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The lane's thread: a group per wake-up, until stopped or every sender is gone.
fn serve(
    conn: &Connection,
    inbox: &Receiver<Message>,
    counts: &Counts,
    checkpointer: &Checkpointer,
) {
    let mut open = true;
    while open {
        let Ok(first) = inbox.recv() else { return };
        let mut group = Vec::new();
        match first {
            Message::Work(work) => group.push(work),
            Message::Stop => return,
        }
        // What arrived meanwhile joins the group.
        while group.len() < MAX_GROUP {
            match inbox.try_recv() {
                Ok(Message::Work(work)) => group.push(work),
                Ok(Message::Stop) => {
                    open = false;
                    break;
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        counts.groups.fetch_add(1, Relaxed);
        counts
            .operations
            .fetch_add(u64::try_from(group.len()).unwrap_or(u64::MAX), Relaxed);
        if commit_group(conn, group) {
            checkpointer.committed();
        }
    }
}

/// Runs `group` in one transaction, each operation in a savepoint, and answers each; whether
/// the transaction committed.
fn commit_group(conn: &Connection, group: Vec<Box<dyn Work>>) -> bool {
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        for work in group {
            work.answer(Some(&e));
        }
        return false;
    }
    let mut ran = Vec::with_capacity(group.len());
    for mut work in group {
        let outcome = savepoint(conn, "SAVEPOINT forge_op").and_then(|()| {
            if work.run(conn) {
                savepoint(conn, "RELEASE forge_op")
            } else {
                savepoint(conn, "ROLLBACK TO forge_op")
                    .and_then(|()| savepoint(conn, "RELEASE forge_op"))
            }
        });
        if let Err(e) = outcome {
            // The transaction is in a state no later operation should build on.
            let _ = conn.execute_batch("ROLLBACK");
            work.answer(Some(&e));
            for done in ran {
                Work::answer(done, Some(&e));
            }
            return false;
        }
        ran.push(work);
    }
    match conn.execute_batch("COMMIT") {
        Ok(()) => {
            for work in ran {
                work.answer(None);
            }
            true
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            for work in ran {
                work.answer(Some(&e));
            }
            false
        }
    }
}

/// One savepoint statement (prepared once).
fn savepoint(conn: &Connection, sql: &str) -> Result<(), rusqlite::Error> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// The error of a group that did not commit, as each of its operations is told it.
fn group_error(e: &rusqlite::Error) -> Error {
    use rusqlite::ErrorCode::{DatabaseBusy, DatabaseLocked};
    let retryable = matches!(e.sqlite_error_code(), Some(DatabaseBusy | DatabaseLocked));
    Error::backend(retryable, std::io::Error::other(e.to_string()))
}
