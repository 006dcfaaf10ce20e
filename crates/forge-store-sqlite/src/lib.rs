//! Every storage and queue port of `forge-core` on an embedded SQLite file — Forge's default
//! (`sqlite://forge.db`).
//!
//! The file runs in WAL mode with a busy timeout; every write is one `BEGIN IMMEDIATE`
//! transaction, so writers queue on SQLite's lock instead of failing, and `commit_step` is atomic.
//! The hot operations (step commits, claims, leases, completions) run on the store's writer lane,
//! one connection on a thread of its own that commits them in groups (`lane`); the rest on a
//! small pool of sqlx connections. The log is checkpointed into the file by a thread of its own
//! (`checkpoint`), not by the commits. An in-memory URL (`sqlite::memory:`) is a private temporary
//! file, removed when the store is dropped, so that both see one database.
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
mod erasure;
mod evals;
mod files;
pub mod holder;
mod interactions;
mod lane;
mod migrate;
mod queue;
mod rows;
mod runs;
mod sources;
mod usage;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use forge_core::id::{IdGenerator, UuidV7Generator};
use forge_core::time::{Clock, SystemClock};
use sqlx::ConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteSynchronous};

/// The store's connections (`forge-sql`): handed out and given back without a hop to a
/// connection's thread.
pub(crate) type Pool = forge_sql::Pool<SqliteConnection>;

/// A transaction on one of the store's connections.
pub(crate) type Tx = forge_sql::Tx<SqliteConnection>;

pub use checkpoint::CheckpointStats;
pub use forge_sql::migrations::{Migration, Migrations};
pub use migrate::migrations;

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The URL is not a SQLite URL sqlx understands.
    #[error("invalid SQLite URL {url:?}")]
    Url {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: sqlx::Error,
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
    pool: Pool,
    /// Taken before every `BEGIN IMMEDIATE` of this store: its writers queue here, parked as
    /// tasks, instead of on SQLite's lock, where each waiting connection's thread sleeps and
    /// retries. Other processes on the file still meet the lock and its busy timeout.
    write_gate: Arc<tokio::sync::Mutex<()>>,
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
        if !url.starts_with("sqlite:") {
            let source = sqlx::Error::Configuration("the URL must start with sqlite:".into());
            return Err(OpenError::Url {
                url: url.to_owned(),
                source,
            });
        }
        let invalid = |source| OpenError::Url {
            url: url.to_owned(),
            source,
        };
        let failed = |source| OpenError::Open {
            url: url.to_owned(),
            source,
        };
        // An in-memory database exists per connection; the lane and the pool must share one.
        let scratch = (url.contains(":memory:") || url.contains("mode=memory"))
            .then(Scratch::new)
            .map(Arc::new);
        let options = match &scratch {
            Some(scratch) => SqliteConnectOptions::new().filename(&scratch.path),
            None => SqliteConnectOptions::from_str(url).map_err(invalid)?,
        }
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(10))
        .foreign_keys(true)
        // The checkpointer checkpoints the log (see `checkpoint`); a commit only as a backstop.
        .pragma("wal_autocheckpoint", checkpoint::BACKSTOP_PAGES.to_string())
        .pragma(
            "journal_size_limit",
            checkpoint::LOG_LIMIT_BYTES.to_string(),
        );
        let path = options.get_filename().to_owned();
        // The first connection is opened here, so that a bad path fails `open` with its reason.
        let first = options
            .connect()
            .await
            .map_err(|e| failed(rows::db_error(e)))?;
        let pool = Pool::new(4, forge_sql::Checks::EMBEDDED, move || {
            let options = options.clone();
            Box::pin(async move { options.connect().await })
        });
        pool.give(first);
        let applied_on_open = migrate::up(&pool).await.map_err(failed)?;
        let write_gate = Arc::default();
        let lane = lane::Lane::open(&path, Arc::clone(&write_gate)).map_err(failed)?;
        Ok(Self {
            pool,
            write_gate,
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
        migrate::applied(&self.pool).await
    }

    /// Reverts every applied migration (for tests and `forge migrate --down`).
    pub async fn migrate_down_all(&self) -> Result<(), forge_core::Error> {
        migrate::down_all(&self.pool).await
    }

    /// Applies pending migrations (done by `open`; idempotent).
    pub async fn migrate_up(&self) -> Result<(), forge_core::Error> {
        migrate::up(&self.pool).await.map(|_| ())
    }

    /// A connection of the store's pool.
    pub(crate) async fn conn(
        &self,
    ) -> Result<forge_sql::Conn<SqliteConnection>, forge_core::Error> {
        self.pool.acquire().await.map_err(rows::db_error)
    }

    /// Closes the store: the writer lane once what was sent to it is answered, the pool's idle
    /// connections now and those in use when they are given back.
    pub async fn close(&self) {
        self.lane.stop();
        self.pool.close().await;
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
    /// on the pool alike.
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
        let mut conn = store.conn().await.expect("a pool connection");
        for (pragma, value) in expected {
            let sql = format!("PRAGMA {pragma}");
            let on_lane = sql.clone();
            let lane: i64 = store
                .lane
                .run(move |c| {
                    c.query_row(&on_lane, [], |row| row.get(0))
                        .map_err(lane::db)
                })
                .await
                .expect("the lane answers");
            assert_eq!(lane, value, "{pragma} on the lane's connection");
            let pool: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .fetch_one(&mut *conn)
                .await
                .expect("the pool answers");
            assert_eq!(pool, value, "{pragma} on a pool connection");
        }
        drop(conn);
        store.close().await;
    }
}
