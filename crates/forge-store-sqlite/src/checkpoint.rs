//! The WAL checkpointer: copies committed pages from the write-ahead log into the database file
//! on a thread and connection of its own, so that no commit waits for it.
//!
//! SQLite's default is for the connection that commits to checkpoint, inside its commit, once
//! the log passes 1,000 pages. For the writer lane that meant one group in every few hundred
//! stalled while thousands of pages were written to the database file and both files were
//! synced, and every operation waiting behind it stalled too: the sequential runs' 95th
//! percentile was three times their median, and the lane's throughput a seventh lower than
//! without checkpoints. Here the lane only says it committed ([`Checkpointer::committed`]); this
//! thread then waits [`INTERVAL`] (so that a burst of commits is checkpointed once) and runs a
//! `PASSIVE` checkpoint, which never blocks a writer or a reader.
//!
//! The store's connections keep SQLite's own checkpoint as a backstop, at [`BACKSTOP_PAGES`].
//! The log restarts from its beginning only when a write finds all of it copied, which under
//! sustained writes (the lane appending while this thread copies) is when the backstop
//! checkpoints: so the `-wal` file grows to about that size (40 MB) under load, and should this
//! thread fall behind (or a checkpoint fail), the log still stops growing there. Once writes
//! pause, this thread copies the rest, and the next write restarts the log and truncates its file
//! to [`LOG_LIMIT_BYTES`] (`journal_size_limit`).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender};
use std::time::Duration;

use rusqlite::Connection;

/// How long the checkpointer waits after a commit before it checkpoints what was committed
/// meanwhile.
pub(crate) const INTERVAL: Duration = Duration::from_millis(50);

/// The log's size, in pages, at which a committing connection checkpoints by itself
/// (`wal_autocheckpoint`): ten times SQLite's default, reached only if the checkpointer falls
/// behind.
pub(crate) const BACKSTOP_PAGES: u32 = 10_000;

/// The size the `-wal` file is truncated to when the log restarts (`journal_size_limit`): about
/// SQLite's default checkpoint threshold, so that a burst's log does not keep its disk space.
pub(crate) const LOG_LIMIT_BYTES: u64 = 4 * 1024 * 1024;

/// What a store's checkpointer has done since the store opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointStats {
    /// Checkpoints run.
    pub checkpoints: u64,
    /// Frames of the log they had copied into the database file when they ended (the log's
    /// frames counted again by each checkpoint until the log restarts).
    pub frames_copied: u64,
    /// Checkpoints that failed (the next one copies what they did not).
    pub failures: u64,
    /// Frames of the log the last checkpoint left uncopied: those a reader's snapshot still
    /// needed, or that were appended while it ran. 0 once the checkpointer has caught up.
    pub behind: u64,
}

/// The handle the lane keeps: it says when it committed, and stops the thread when dropped.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    nudge: SyncSender<()>,
    state: Arc<State>,
}

/// What the handle and the thread share.
#[derive(Debug, Default)]
struct State {
    /// Whether something was committed since the last checkpoint began.
    dirty: AtomicBool,
    checkpoints: AtomicU64,
    frames: AtomicU64,
    failures: AtomicU64,
    behind: AtomicU64,
}

impl Checkpointer {
    /// Opens the checkpointer's connection to the database file at `path` and starts its thread.
    pub(crate) fn start(path: &Path) -> Result<Self, forge_core::Error> {
        let conn = Connection::open(path).map_err(crate::db::error)?;
        let (nudge, nudged) = std::sync::mpsc::sync_channel(1);
        let state = Arc::new(State::default());
        let shared = Arc::clone(&state);
        std::thread::Builder::new()
            .name("forge-sqlite-checkpoint".into())
            .spawn(move || serve(&conn, &nudged, &shared))
            .map_err(|e| forge_core::Error::backend(false, e))?;
        Ok(Self { nudge, state })
    }

    /// Says a transaction was committed: the thread checkpoints within [`INTERVAL`]. Never
    /// blocks (a nudge already pending covers this one).
    pub(crate) fn committed(&self) {
        self.state.dirty.store(true, Relaxed);
        // Full: a nudge is pending already. Disconnected: the thread is gone (the store closes).
        let _ = self.nudge.try_send(());
    }

    /// What the checkpointer has done so far.
    pub(crate) fn stats(&self) -> CheckpointStats {
        CheckpointStats {
            checkpoints: self.state.checkpoints.load(Relaxed),
            frames_copied: self.state.frames.load(Relaxed),
            failures: self.state.failures.load(Relaxed),
            behind: self.state.behind.load(Relaxed),
        }
    }
}

/// The thread: a checkpoint [`INTERVAL`] after each nudge that found something committed, until
/// the handle is dropped.
fn serve(conn: &Connection, nudged: &Receiver<()>, state: &State) {
    while let Ok(()) = nudged.recv() {
        std::thread::sleep(INTERVAL);
        if state.dirty.swap(false, Relaxed) {
            checkpoint(conn, state);
        }
    }
    // The handle is gone: the store is closing, and its last connection to close checkpoints
    // the rest.
}

/// One `PASSIVE` checkpoint, counted.
fn checkpoint(conn: &Connection, state: &State) {
    let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        Ok((row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
    });
    state.checkpoints.fetch_add(1, Relaxed);
    match done {
        Ok((log, copied)) => {
            let frames = |n: i64| u64::try_from(n).unwrap_or(0);
            state.frames.fetch_add(frames(copied), Relaxed);
            state
                .behind
                .store(frames(log).saturating_sub(frames(copied)), Relaxed);
        }
        Err(_) => {
            state.failures.fetch_add(1, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database file in WAL mode with the store's backstop and a table, in a directory of its
    /// own (removed by the caller).
    fn database(name: &str) -> (std::path::PathBuf, std::path::PathBuf, Connection) {
        let dir = std::env::temp_dir().join(format!(
            "forge-checkpoint-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7()
        ));
        std::fs::create_dir_all(&dir).expect("creates the directory");
        let path = dir.join("db.sqlite");
        let conn = Connection::open(&path).expect("opens");
        conn.execute_batch(&format!(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
             PRAGMA wal_autocheckpoint = {BACKSTOP_PAGES}; \
             CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL);"
        ))
        .expect("sets up");
        (dir, path, conn)
    }

    #[test]
    fn what_is_committed_is_copied_into_the_database_file_by_the_thread() {
        let (dir, path, conn) = database("thread");
        let checkpointer = Checkpointer::start(&path).expect("starts");
        // More than SQLite's default threshold (1,000 pages), each commit saying so as the lane
        // does; below the backstop, the committing connection copies nothing itself.
        let body = "x".repeat(3_000);
        for i in 0..2_000 {
            conn.execute("INSERT INTO t (id, body) VALUES (?1, ?2)", (i, &body))
                .expect("inserts");
            checkpointer.committed();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let stats = checkpointer.stats();
            // The last checkpoint began after the last commit, and copied the whole log.
            if !checkpointer.state.dirty.load(Relaxed)
                && stats.checkpoints > 0
                && stats.behind == 0
                && stats.frames_copied >= 1_000
            {
                assert_eq!(stats.failures, 0, "{stats:?}");
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the checkpointer did not copy the log: {stats:?}"
            );
            std::thread::sleep(INTERVAL);
        }
        drop((checkpointer, conn));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_idle_database_is_never_checkpointed() {
        let (dir, path, conn) = database("idle");
        let checkpointer = Checkpointer::start(&path).expect("starts");
        std::thread::sleep(INTERVAL * 4);
        assert_eq!(checkpointer.stats(), CheckpointStats::default());
        drop((checkpointer, conn));
        let _ = std::fs::remove_dir_all(dir);
    }
}
