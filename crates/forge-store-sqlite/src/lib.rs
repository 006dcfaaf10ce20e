//! Every storage and queue port of `forge-core` on an embedded SQLite file — Forge's default
//! (`sqlite://forge.db`).
//!
//! The file runs in WAL mode with a busy timeout; every write is one `BEGIN IMMEDIATE`
//! transaction, so writers queue on SQLite's lock instead of failing, and `commit_step` is atomic.
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

mod commit;
mod erasure;
mod evals;
mod files;
mod interactions;
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

/// The store's connections (`forge-sql-pool`): handed out and given back without a hop to a
/// connection's thread.
pub(crate) type Pool = forge_sql_pool::Pool<SqliteConnection>;

/// A transaction on one of the store's connections.
pub(crate) type Tx = forge_sql_pool::Tx<SqliteConnection>;

pub use migrate::{MIGRATIONS, Migration};

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
    /// How steps were committed (see [`SqliteStore::commit_paths`]).
    paths: Arc<PathCounters>,
}

/// How a store has committed steps since it opened: the common step in one trip to its
/// connection, and the rest (a step that writes beside the log, or one the database refused)
/// judged in two. Every outcome is the same on either path; only the cost differs, so this is
/// how an operator (or a test) sees that the cheap path is the one taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitPaths {
    /// Steps committed in one trip.
    pub one_trip: u64,
    /// Steps judged in two trips, committed or refused.
    pub judged: u64,
}

/// The counters behind [`CommitPaths`].
#[derive(Debug, Default)]
struct PathCounters {
    one_trip: std::sync::atomic::AtomicU64,
    judged: std::sync::atomic::AtomicU64,
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
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|source| OpenError::Url {
                url: url.to_owned(),
                source,
            })?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        // An in-memory database exists per connection, so it must be exactly one connection.
        let max = if url.contains(":memory:") || url.contains("mode=memory") {
            1
        } else {
            4
        };
        // The first connection is opened here, so that a bad path fails `open` with its reason.
        let first = options.connect().await.map_err(|e| OpenError::Open {
            url: url.to_owned(),
            source: rows::db_error(e),
        })?;
        let pool = Pool::new(max, forge_sql_pool::Checks::EMBEDDED, move || {
            let options = options.clone();
            Box::pin(async move { options.connect().await })
        });
        pool.give(first);
        let applied_on_open = migrate::up(&pool).await.map_err(|source| OpenError::Open {
            url: url.to_owned(),
            source,
        })?;
        Ok(Self {
            pool,
            write_gate: Arc::default(),
            clock,
            ids,
            applied_on_open,
            paths: Arc::default(),
        })
    }

    /// How many migrations this process applied when it opened the database.
    pub fn applied_on_open(&self) -> usize {
        self.applied_on_open
    }

    /// How this store has committed steps since it opened (clones share the count).
    pub fn commit_paths(&self) -> CommitPaths {
        use std::sync::atomic::Ordering::Relaxed;
        CommitPaths {
            one_trip: self.paths.one_trip.load(Relaxed),
            judged: self.paths.judged.load(Relaxed),
        }
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
    ) -> Result<forge_sql_pool::Conn<SqliteConnection>, forge_core::Error> {
        self.pool.acquire().await.map_err(rows::db_error)
    }

    /// Closes the pool: idle connections now, those in use when they are given back.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}
