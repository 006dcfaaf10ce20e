//! Every storage and queue port of `forge-core` on an embedded SQLite file — Forge's default
//! (`sqlite://forge.db`).
//!
//! The file runs in WAL mode with a busy timeout; every write is one `BEGIN IMMEDIATE`
//! transaction, so writers queue on SQLite's lock instead of failing, and `commit_step` is atomic.
//! The store speaks to the file through one driver, rusqlite (`db`). Every write runs on the
//! store's writer lane, one connection on a thread of its own that commits what waits for it in
//! groups (`lane`); reads on a few reader connections. The log is checkpointed into the file by a
//! thread of its own (`checkpoint`), not by the commits. An in-memory URL (`sqlite::memory:`) is
//! a private temporary file, removed when the store is dropped, so that all of them see one
//! database.
//! The schema is provisioned on open from the embedded migrations. SQLite has no row-level
//! security: tenant isolation is the `tenant_id` filter every query carries.
//!
//! # Example
//!
//! Open a database (here in memory; `sqlite://app.db` for a file), and see that another
//! tenant's thread answers as one that does not exist:
//!
//! ```
//! use forge_core::ports::store::{NewThread, ThreadStore};
//! use forge_core::scope::Scope;
//! use forge_store_sqlite::SqliteStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = SqliteStore::open("sqlite::memory:").await?;
//! let acme = Scope::parse("acme", "alice", &[])?;
//! let thread = store.create_thread(&acme, NewThread::default()).await?;
//! assert_eq!(store.get_thread(&acme, thread.id).await?.id, thread.id);
//!
//! let globex = Scope::parse("globex", "bob", &[])?;
//! let err = store.get_thread(&globex, thread.id).await.unwrap_err();
//! assert!(matches!(err, forge_core::Error::NotFound { .. }), "{err}");
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

mod checkpoint;
mod commit;
mod db;
mod erasure;
mod evals;
mod files;
pub mod holder;
mod interactions;
mod keys;
mod lane;
mod migrate;
mod queue;
mod rows;
mod runs;
mod sources;
mod threads;
mod usage;

use std::path::PathBuf;
use std::sync::Arc;

use forge_core::id::{IdGenerator, UuidV7Generator};
use forge_core::time::{Clock, SystemClock};

pub use checkpoint::CheckpointStats;
pub use forge_sql::migrations::{Migration, Migrations};
pub use migrate::migrations;

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The URL is not a SQLite URL: `sqlite://PATH` or `sqlite:PATH`, optionally with
    /// `?mode=rwc` (the default: create if missing) or `?mode=rw`, or `sqlite::memory:`.
    #[error("invalid SQLite URL {url:?}: {reason}")]
    Url {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The database could not be opened or migrated.
    #[error("could not open SQLite database {url:?}")]
    Open {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: forge_core::Error,
    },
}

/// The SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// The reader connections (see the `db` module).
    readers: Arc<db::Readers>,
    /// The file, for the connections a migration run after open takes.
    path: Arc<PathBuf>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGenerator>,
    applied_on_open: usize,
    /// The writer lane (see the `lane` module).
    lane: Arc<lane::Lane>,
    /// The temporary file behind an in-memory URL, removed when the last clone is dropped.
    _scratch: Option<Arc<Scratch>>,
}

/// What a store's writer lane has done since the store opened: how many operations it ran, in
/// how many group commits. Under concurrent load a group holds several operations, which is what
/// makes the lane cheap; an operator (or a test) sees it here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneStats {
    /// Operations run (committed, or failed and rolled back).
    pub operations: u64,
    /// Transactions they were committed in.
    pub groups: u64,
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `url` (`sqlite://forge.db`, `sqlite::memory:`)
    /// with the system clock and UUIDv7 ids, and applies pending migrations.
    pub async fn open(url: &str) -> Result<Self, OpenError> {
        Self::open_with(url, Arc::new(SystemClock), Arc::new(UuidV7Generator)).await
    }

    /// Like [`SqliteStore::open`] with an injected clock and id generator.
    pub async fn open_with(
        url: &str,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Self, OpenError> {
        let invalid = |reason: &str| OpenError::Url {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let failed = |source| OpenError::Open {
            url: url.to_owned(),
            source,
        };
        let target = Target::parse(url).map_err(invalid)?;
        // An in-memory database exists per connection; the lane and the readers must share one.
        let scratch = matches!(target, Target::Memory)
            .then(Scratch::new)
            .map(Arc::new);
        let path = match (&target, &scratch) {
            (Target::File { path, create }, _) => {
                if !create && !path.exists() {
                    return Err(invalid("mode=rw and the file does not exist"));
                }
                path.clone()
            }
            (Target::Memory, Some(scratch)) => scratch.path.clone(),
            (Target::Memory, None) => return Err(invalid("no file for the in-memory database")),
        };
        let opened = path.clone();
        // The lane's connection is opened and migrated first, so that a bad path fails `open`
        // with its reason, and no reader sees a schema half made.
        let (conn, applied_on_open) = tokio::task::spawn_blocking(move || {
            migrate::up(db::connect(&opened, db::Role::Writer)?)
        })
        .await
        .map_err(|_| failed(db::stopped("opening the SQLite database did not finish")))?
        .map_err(failed)?;
        let lane = lane::Lane::start(conn, &path).map_err(failed)?;
        Ok(Self {
            readers: Arc::new(db::Readers::new(path.clone())),
            path: Arc::new(path),
            clock,
            ids,
            applied_on_open,
            lane: Arc::new(lane),
            _scratch: scratch,
        })
    }

    /// How many migrations this process applied when it opened the database.
    pub fn applied_on_open(&self) -> usize {
        self.applied_on_open
    }

    /// What this store's writer lane has done since it opened (clones share it).
    pub fn lane_stats(&self) -> LaneStats {
        self.lane.stats()
    }

    /// What this store's WAL checkpointer has done since it opened (clones share it).
    pub fn checkpoint_stats(&self) -> CheckpointStats {
        self.lane.checkpoints()
    }

    /// Versions of the migrations applied to this database, ascending.
    pub async fn applied_migrations(&self) -> Result<Vec<i64>, forge_core::Error> {
        self.own_connection(db::Role::Reader, migrate::applied)
            .await
    }

    /// Reverts every applied migration (for tests and `forge migrate --down`), on a connection
    /// of its own.
    pub async fn migrate_down_all(&self) -> Result<(), forge_core::Error> {
        self.own_connection(db::Role::Writer, migrate::down_all)
            .await
    }

    /// Applies pending migrations (done by `open`; idempotent), on a connection of its own.
    pub async fn migrate_up(&self) -> Result<(), forge_core::Error> {
        self.own_connection(db::Role::Writer, |conn| migrate::up(conn).map(|_| ()))
            .await
    }

    /// Runs `step` on a connection of its own for `role`, on a blocking thread.
    async fn own_connection<T: Send + 'static>(
        &self,
        role: db::Role,
        step: impl FnOnce(rusqlite::Connection) -> Result<T, forge_core::Error> + Send + 'static,
    ) -> Result<T, forge_core::Error> {
        let path = Arc::clone(&self.path);
        tokio::task::spawn_blocking(move || step(db::connect(&path, role)?))
            .await
            .map_err(|_| db::stopped("a migration of the SQLite store did not finish"))?
    }

    /// Runs `read` on one of the store's reader connections (see `db::Readers`).
    pub(crate) async fn read<T, F>(&self, read: F) -> Result<T, forge_core::Error>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Connection) -> Result<T, forge_core::Error> + Send + 'static,
    {
        self.readers.run(read).await
    }

    /// Runs `write` on the writer lane, inside the transaction of its group, and answers once
    /// that committed (see `lane::Lane::run`).
    pub(crate) async fn write<T, F>(&self, write: F) -> Result<T, forge_core::Error>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Connection) -> Result<T, forge_core::Error> + Send + 'static,
    {
        self.lane.run(write).await
    }

    /// Closes the store: the writer lane once what was sent to it is answered, the idle reader
    /// connections now and those in use when their read ends.
    pub async fn close(&self) {
        self.lane.stop();
        self.readers.close();
    }
}

/// Where a URL says the database is.
#[derive(Debug)]
enum Target {
    /// A file, created if missing when `create`.
    File { path: PathBuf, create: bool },
    /// A private database (`sqlite::memory:`, `mode=memory`).
    Memory,
}

impl Target {
    /// `sqlite://PATH`, `sqlite:PATH`, `sqlite::memory:`, each with an optional
    /// `?mode=rwc|rw|memory`.
    fn parse(url: &str) -> Result<Self, &'static str> {
        let rest = url
            .strip_prefix("sqlite:")
            .ok_or("the URL must start with sqlite:")?;
        let rest = rest.strip_prefix("//").unwrap_or(rest);
        let (file, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut create = true;
        let mut memory = file == ":memory:";
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair {
                "mode=rwc" => create = true,
                "mode=rw" => create = false,
                "mode=memory" => memory = true,
                _ => {
                    return Err(
                        "the only parameter understood is mode=rwc, mode=rw or mode=memory",
                    );
                }
            }
        }
        if memory {
            return Ok(Self::Memory);
        }
        if file.is_empty() {
            return Err("the URL names no file");
        }
        Ok(Self::File {
            path: PathBuf::from(file),
            create,
        })
    }
}

/// The private file behind an in-memory URL, removed (with its WAL files) on drop.
#[derive(Debug)]
struct Scratch {
    path: std::path::PathBuf,
}

impl Scratch {
    fn new() -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "forge-memory-{}-{}-{}.db",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            uuid::Uuid::new_v4().simple()
        );
        Self {
            path: std::env::temp_dir().join(name),
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.path.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every connection of the store leaves the log to the checkpointer (SQLite's own checkpoint
    /// at a commit only at the backstop) and truncates its file when it restarts, on the lane and
    /// on the readers alike.
    #[tokio::test]
    async fn commits_checkpoint_only_at_the_backstop() {
        let store = SqliteStore::open("sqlite::memory:").await.expect("opens");
        let expected = [
            ("wal_autocheckpoint", i64::from(checkpoint::BACKSTOP_PAGES)),
            (
                "journal_size_limit",
                i64::try_from(checkpoint::LOG_LIMIT_BYTES).expect("fits"),
            ),
        ];
        for (pragma, value) in expected {
            let sql = format!("PRAGMA {pragma}");
            let on_lane = sql.clone();
            let lane: i64 = store
                .write(move |c| {
                    c.query_row(&on_lane, [], |row| row.get(0))
                        .map_err(db::error)
                })
                .await
                .expect("the lane answers");
            assert_eq!(lane, value, "{pragma} on the lane's connection");
            let reader: i64 = store
                .read(move |c| c.query_row(&sql, [], |row| row.get(0)).map_err(db::error))
                .await
                .expect("a reader answers");
            assert_eq!(reader, value, "{pragma} on a reader's connection");
        }
        store.close().await;
    }

    /// Only the lane writes: a reader connection refuses to.
    #[tokio::test]
    async fn a_reader_refuses_to_write() {
        let store = SqliteStore::open("sqlite::memory:").await.expect("opens");
        let wrote = store
            .read(|c| {
                db::execute(
                    c,
                    "INSERT INTO forge_audit (tenant_id, at, actor, action, subject, detail) \
                     VALUES ('acme', 0, 'a', 'b', 'c', '{}')",
                    rusqlite::params![],
                )
            })
            .await;
        let err = wrote.expect_err("a reader is query-only");
        assert!(
            err.to_string().contains("readonly") || format!("{err:?}").contains("ReadOnly"),
            "{err:?}"
        );
        store.close().await;
    }

    #[test]
    fn a_url_names_a_file_or_a_private_database() {
        let file = |url: &str| match Target::parse(url) {
            Ok(Target::File { path, create }) => (path.display().to_string(), create),
            other => panic!("{url}: {other:?}"),
        };
        assert_eq!(file("sqlite://forge.db"), ("forge.db".into(), true));
        assert_eq!(file("sqlite:forge.db"), ("forge.db".into(), true));
        assert_eq!(
            file("sqlite:///var/x.db?mode=rwc"),
            ("/var/x.db".into(), true)
        );
        assert_eq!(file("sqlite://x.db?mode=rw"), ("x.db".into(), false));
        for memory in ["sqlite::memory:", "sqlite://x.db?mode=memory"] {
            assert!(
                matches!(Target::parse(memory), Ok(Target::Memory)),
                "{memory}"
            );
        }
        for bad in ["postgres://x", "sqlite://", "sqlite://x.db?cache=shared"] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    /// A URL the store cannot use says why, naming the URL.
    #[tokio::test]
    async fn a_bad_url_is_refused_with_its_reason() {
        let err = SqliteStore::open("sqlite://no-such-file.db?mode=rw")
            .await
            .expect_err("mode=rw does not create");
        assert!(err.to_string().contains("does not exist"), "{err}");
        let err = SqliteStore::open("sqlite://x.db?journal=off")
            .await
            .expect_err("an unknown parameter");
        assert!(err.to_string().contains("mode=rwc"), "{err}");
    }
}
