//! What Forge's SQL stores (SQLite and PostgreSQL) share: the statement text both run as it is
//! ([`statements`]), rows to domain values ([`rows`]), migrations through sqlx's migrator
//! ([`migrations`]), fair shares of connections between tenants ([`Shares`]), and the connection
//! pool of a sqlx driver (PostgreSQL's), which hands a connection out and takes it back without a
//! round trip to the database.
//!
//! sqlx's own pool checks a connection with a ping when it hands it out (unless told not to) and
//! always when it takes it back. On PostgreSQL a ping is a network round trip. A store operation
//! is one to three trips of its own (a step commit: `BEGIN`, the step, `COMMIT`), so those two
//! pings were 40% of all trips.
//!
//! This pool trusts what it knows to be sound and checks only what it cannot know:
//!
//! - A connection given back as sound ([`Conn::release`], a committed or rolled back [`Tx`]) goes
//!   straight back to the idle list.
//! - A connection dropped any other way (an error, a refused commit, a cancelled future) may hold
//!   an open transaction or a broken socket. In the background it has its transaction rolled
//!   back, or else is pinged when [`Checks::after_failure`] says so, and it goes back only if
//!   that succeeded; otherwise it is closed. The permit stays held meanwhile, so the pool never
//!   holds more than its size.
//! - A connection idle for longer than [`Checks::idle_after`] is pinged before it is handed out
//!   (a server may have closed it), and replaced if it does not answer.
//!
//! Idle connections are reused most-recently-used first, so the busiest connection keeps its
//! prepared statements warm.
//!
//! Work done on behalf of a tenant ([`on_behalf_of`]) gets a fair share of the pool, never all
//! of it, and a part of the pool stays for the system's own work ([`Shares`], module `fair`).

#![deny(missing_docs)]

pub mod dialect;
pub mod eval;
pub mod files;
pub mod migrations;
pub mod rag;
pub mod rows;
pub mod statements;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use sqlx::{Connection, Executor};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

mod fair;

pub use fair::{Held, Shares, on_behalf_of};

/// How long [`Pool::acquire`] waits for a free connection before it fails with
/// [`sqlx::Error::PoolTimedOut`] (sqlx's own default).
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);

/// Opens a new connection.
type Connect<C> = Arc<dyn Fn() -> BoxFuture<'static, Result<C, sqlx::Error>> + Send + Sync>;

/// When the pool checks a connection with a round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checks {
    /// Ping a connection idle for at least this long before handing it out (`None`: never).
    pub idle_after: Option<Duration>,
    /// Ping a connection dropped without being released (outside a transaction) before it is
    /// used again. A connection in a transaction is always rolled back instead.
    pub after_failure: bool,
}

impl Checks {
    /// For a server over a network (PostgreSQL): ping after 10 s idle and after a failure.
    pub const NETWORK: Self = Self {
        idle_after: Some(Duration::from_secs(10)),
        after_failure: true,
    };
}

/// A pool of at most `size` connections of type `C`.
pub struct Pool<C> {
    inner: Arc<Inner<C>>,
}

impl<C> Clone for Pool<C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<C> fmt::Debug for Pool<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("size", &self.inner.size)
            .field("idle", &self.inner.idle_count())
            .field("checks", &self.inner.checks)
            .field("shares", &self.inner.shares)
            .finish()
    }
}

struct Inner<C> {
    size: usize,
    idle: Mutex<Vec<Idle<C>>>,
    permits: Arc<Semaphore>,
    connect: Connect<C>,
    checks: Checks,
    shares: Shares,
}

struct Idle<C> {
    conn: C,
    since: Instant,
}

impl<C> Inner<C> {
    fn idle_list(&self) -> parking_lot::MutexGuard<'_, Vec<Idle<C>>> {
        self.idle.lock()
    }

    fn idle_count(&self) -> usize {
        self.idle_list().len()
    }

    /// Takes a sound connection back (or drops it, closing it, when the pool is closed).
    fn put(&self, conn: C) {
        if self.permits.is_closed() {
            return;
        }
        self.idle_list().push(Idle {
            conn,
            since: Instant::now(),
        });
    }
}

impl<C> Pool<C>
where
    C: Connection + 'static,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
{
    /// A pool of at most `size` connections (at least one), opened by `connect` on demand.
    pub fn new<F>(size: usize, checks: Checks, connect: F) -> Self
    where
        F: Fn() -> BoxFuture<'static, Result<C, sqlx::Error>> + Send + Sync + 'static,
    {
        let size = size.max(1);
        Self {
            inner: Arc::new(Inner {
                size,
                idle: Mutex::new(Vec::with_capacity(size)),
                permits: Arc::new(Semaphore::new(size)),
                connect: Arc::new(connect),
                checks,
                shares: Shares::of(size),
            }),
        }
    }

    /// The most connections the pool holds at once.
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// Connections open and idle now.
    pub fn idle(&self) -> usize {
        self.inner.idle_count()
    }

    /// How the pool is shared between tenants and the system.
    pub fn shares(&self) -> &Shares {
        &self.inner.shares
    }

    /// A connection: the most recently used idle one, or a new one. Waits while all `size` are
    /// in use (and, on behalf of a tenant, while it holds its share), at most
    /// [`ACQUIRE_TIMEOUT`] in all.
    pub async fn acquire(&self) -> Result<Conn<C>, sqlx::Error> {
        let deadline = tokio::time::Instant::now() + ACQUIRE_TIMEOUT;
        let share = match fair::current() {
            Some(tenant) => Some(
                tokio::time::timeout_at(deadline, self.inner.shares.enter(tenant))
                    .await
                    .map_err(|_| sqlx::Error::PoolTimedOut)?
                    .ok_or(sqlx::Error::PoolClosed)?,
            ),
            None => None,
        };
        let permit = tokio::time::timeout_at(deadline, self.inner.permits.clone().acquire_owned())
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)?
            .map_err(|_| sqlx::Error::PoolClosed)?;
        let permit = Permit {
            _pool: permit,
            _share: share,
        };
        loop {
            let idle = self.inner.idle_list().pop();
            let Some(Idle { mut conn, since }) = idle else {
                break;
            };
            let stale = self
                .inner
                .checks
                .idle_after
                .is_some_and(|after| since.elapsed() >= after);
            if stale && conn.ping().await.is_err() {
                // Gone (a server that closed it): open another in its place.
                continue;
            }
            return Ok(Conn::new(conn, permit, self.inner.clone()));
        }
        let conn = (self.inner.connect)().await?;
        Ok(Conn::new(conn, permit, self.inner.clone()))
    }

    /// Adds a connection opened elsewhere (one opened first to fail fast, say) to the idle list;
    /// closed instead when the list already holds the pool's size.
    pub fn give(&self, conn: C) {
        if self.inner.idle_count() < self.inner.size {
            self.inner.put(conn);
        }
    }

    /// A connection with a transaction begun by `begin` (`BEGIN`, `BEGIN IMMEDIATE`, or a
    /// `BEGIN` followed by settings, sent as one message).
    ///
    /// A connection the server closed under the pool (it restarted, or ended idle sessions)
    /// fails its `BEGIN` with an I/O error: that is retried on another connection, up to the
    /// pool's size, as nothing can have been done on a connection that is gone.
    pub async fn begin(&self, begin: impl sqlx::SqlSafeStr) -> Result<Tx<C>, sqlx::Error> {
        let sql = begin.into_sql_str();
        let mut attempts = 0;
        loop {
            let mut conn = self.acquire().await?;
            // Marked first: a `BEGIN` that failed half way is rolled back when `conn` is dropped.
            conn.in_tx = true;
            match sqlx::raw_sql(sql.clone()).execute(&mut *conn).await {
                Ok(_) => return Ok(Tx { conn }),
                Err(e) if self.retries(&e, &mut attempts) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether a first use that failed with `e` is tried again on another connection: when the
    /// server closed the one it met, up to the pool's size in all (`attempts` counts them). For
    /// a use that is harmless to repeat: a read, a `BEGIN`, or a write that refuses itself when
    /// it was done already (one gated on the version it changes).
    pub fn retries(&self, e: &sqlx::Error, attempts: &mut usize) -> bool {
        let again = closed_under_the_pool(e) && *attempts < self.inner.size;
        *attempts += usize::from(again);
        again
    }

    /// Refuses new acquisitions and closes the idle connections. Connections in use are closed
    /// when they are given back.
    pub async fn close(&self) {
        self.inner.permits.close();
        self.inner.shares.close();
        let idle = std::mem::take(&mut *self.inner.idle_list());
        for Idle { conn, .. } in idle {
            let _ = conn.close().await;
        }
    }

    /// Whether [`Pool::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.permits.is_closed()
    }
}

/// Whether `e` says the connection was closed by the other side before it did anything: an I/O
/// error, or PostgreSQL's notice that it ended the session (`57P01`, an administrator's command
/// or a fast shutdown; `57P02`, a crash of another backend). SQLite reports neither.
fn closed_under_the_pool(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) => true,
        sqlx::Error::Database(db) => matches!(db.code().as_deref(), Some("57P01" | "57P02")),
        _ => false,
    }
}

/// The places a connection out of the pool holds: one of the pool's, and its tenant's share
/// when it was taken on behalf of one.
struct Permit {
    _pool: OwnedSemaphorePermit,
    _share: Option<fair::Held>,
}

/// A connection out of the pool. Give it back with [`Conn::release`] after a successful use;
/// dropped otherwise, it is checked before it is used again (see the crate documentation).
pub struct Conn<C>
where
    C: Connection + 'static,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
{
    conn: Option<C>,
    permit: Option<Permit>,
    pool: Arc<Inner<C>>,
    /// Known to be usable as it is: no transaction open, no failure seen.
    sound: bool,
    /// A transaction may be open on it.
    in_tx: bool,
}

impl<C> Conn<C>
where
    C: Connection + 'static,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
{
    fn new(conn: C, permit: Permit, pool: Arc<Inner<C>>) -> Self {
        Self {
            conn: Some(conn),
            permit: Some(permit),
            pool,
            sound: false,
            in_tx: false,
        }
    }

    /// Gives the connection back as sound, with no transaction open: the next user gets it
    /// without a check.
    pub fn release(mut self) {
        self.sound = true;
        self.in_tx = false;
    }

    /// Marks the connection as inside a transaction, for a message that is a whole transaction
    /// from its `BEGIN` to its `COMMIT`: unless it is [`Conn::release`]d after the `COMMIT`, the
    /// transaction (one a statement half way stopped) is rolled back before the connection is
    /// used again.
    pub fn begins_transaction(&mut self) {
        self.in_tx = true;
    }
}

impl<C> std::ops::Deref for Conn<C>
where
    C: Connection + 'static,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
{
    type Target = C;

    fn deref(&self) -> &C {
        // Some from construction until drop.
        self.conn.as_ref().unwrap_or_else(|| unreachable!())
    }
}

impl<C> std::ops::DerefMut for Conn<C>
where
    C: Connection + 'static,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
{
    fn deref_mut(&mut self) -> &mut C {
        self.conn.as_mut().unwrap_or_else(|| unreachable!())
    }
}

impl<C> Drop for Conn<C>
where
    C: Connection + 'static,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
{
    fn drop(&mut self) {
        let (Some(mut conn), permit) = (self.conn.take(), self.permit.take()) else {
            return;
        };
        if self.sound && !self.in_tx {
            self.pool.put(conn);
            return;
        }
        if !self.in_tx && !self.pool.checks.after_failure {
            self.pool.put(conn);
            return;
        }
        // Outside a runtime (one shutting down) the connection is closed by dropping it.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (pool, in_tx) = (self.pool.clone(), self.in_tx);
        runtime.spawn(async move {
            let checked = if in_tx {
                sqlx::raw_sql("ROLLBACK").execute(&mut conn).await.map(drop)
            } else {
                conn.ping().await
            };
            if checked.is_ok() {
                pool.put(conn);
            }
            // The permit is freed only now, so a connection being checked still counts.
            drop(permit);
        });
    }
}

/// A transaction on a pooled connection. [`Tx::commit`] or [`Tx::rollback`] gives the
/// connection back as sound; dropped without either, it is rolled back in the background.
pub struct Tx<C>
where
    C: Connection + 'static,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
{
    conn: Conn<C>,
}

impl<C> Tx<C>
where
    C: Connection + 'static,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
{
    /// Commits, and gives the connection back.
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.end("COMMIT").await
    }

    /// Rolls back, and gives the connection back.
    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        self.end("ROLLBACK").await
    }

    async fn end(mut self, statement: &'static str) -> Result<(), sqlx::Error> {
        sqlx::raw_sql(statement).execute(&mut *self.conn).await?;
        self.conn.in_tx = false;
        self.conn.sound = true;
        Ok(())
    }
}

impl<C> std::ops::Deref for Tx<C>
where
    C: Connection + 'static,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
{
    type Target = C;

    fn deref(&self) -> &C {
        &self.conn
    }
}

impl<C> std::ops::DerefMut for Tx<C>
where
    C: Connection + 'static,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
{
    fn deref_mut(&mut self) -> &mut C {
        &mut self.conn
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
    use sqlx::{ConnectOptions, Row};

    /// Checks for a connection that cannot be closed under the pool (the tests' SQLite): none.
    const NO_CHECKS: Checks = Checks {
        idle_after: None,
        after_failure: false,
    };

    /// A pool over one shared in-memory database, and how many connections it opened.
    fn pool(
        name: &str,
        size: usize,
        checks: Checks,
    ) -> (Pool<SqliteConnection>, Arc<std::sync::atomic::AtomicUsize>) {
        let options = SqliteConnectOptions::new()
            .filename(format!("file:forge-pool-{name}?mode=memory&cache=shared"))
            .in_memory(true)
            .shared_cache(true);
        let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = opened.clone();
        let pool = Pool::new(size, checks, move || {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let options = options.clone();
            Box::pin(async move { options.connect().await })
        });
        (pool, opened)
    }

    /// Runs `sql` on a connection given back sound.
    async fn run(pool: &Pool<SqliteConnection>, sql: &'static str) {
        let mut conn = pool.acquire().await.expect("acquire");
        sqlx::raw_sql(sql).execute(&mut *conn).await.expect(sql);
        conn.release();
    }

    async fn insert(tx: &mut Tx<SqliteConnection>, x: i64) {
        sqlx::query("INSERT INTO t VALUES ($1)")
            .bind(x)
            .execute(&mut **tx)
            .await
            .expect("insert");
    }

    async fn count(pool: &Pool<SqliteConnection>) -> i64 {
        let mut conn = pool.acquire().await.expect("acquire");
        let n: i64 = sqlx::query("SELECT count(*) FROM t")
            .fetch_one(&mut *conn)
            .await
            .expect("count")
            .get(0);
        conn.release();
        n
    }

    #[tokio::test]
    async fn a_released_connection_is_reused_and_a_committed_write_stays() {
        let (pool, opened) = pool("reuse", 2, NO_CHECKS);
        run(&pool, "CREATE TABLE t (x INTEGER)").await;
        let mut tx = pool.begin("BEGIN IMMEDIATE").await.expect("begin");
        insert(&mut tx, 1).await;
        tx.commit().await.expect("commit");
        assert_eq!(count(&pool).await, 1);
        assert_eq!(opened.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(pool.idle(), 1);
    }

    #[tokio::test]
    async fn a_dropped_transaction_is_rolled_back_before_reuse() {
        let (pool, _) = pool("rollback", 1, NO_CHECKS);
        run(&pool, "CREATE TABLE t (x INTEGER)").await;
        {
            let mut tx = pool.begin("BEGIN IMMEDIATE").await.expect("begin");
            sqlx::query("INSERT INTO t VALUES (1)")
                .execute(&mut *tx)
                .await
                .expect("insert");
            // Dropped: neither committed nor rolled back.
        }
        // The only connection comes back once its rollback is done, with nothing written; a
        // transaction left open would make the `BEGIN` below fail.
        let tx = pool.begin("BEGIN IMMEDIATE").await.expect("begin again");
        tx.rollback().await.expect("rollback");
        assert_eq!(count(&pool).await, 0);
    }

    #[tokio::test]
    async fn a_whole_transaction_in_one_message_stays_and_one_stopped_half_way_rolls_back() {
        let (pool, _) = pool("whole", 1, NO_CHECKS);
        run(&pool, "CREATE TABLE t (x INTEGER PRIMARY KEY)").await;
        let mut conn = pool.acquire().await.expect("acquire");
        conn.begins_transaction();
        sqlx::raw_sql("BEGIN IMMEDIATE; INSERT INTO t VALUES (1); COMMIT")
            .execute(&mut *conn)
            .await
            .expect("a whole transaction");
        conn.release();
        let mut conn = pool.acquire().await.expect("acquire");
        conn.begins_transaction();
        let failed = sqlx::raw_sql(
            "BEGIN IMMEDIATE; INSERT INTO t VALUES (2); INSERT INTO t VALUES (1); COMMIT",
        )
        .execute(&mut *conn)
        .await;
        assert!(failed.is_err(), "a duplicate key");
        drop(conn);
        // The one connection comes back after its rollback (a transaction left open would fail
        // this `BEGIN`): the first row alone stays.
        let tx = pool.begin("BEGIN IMMEDIATE").await.expect("begin again");
        tx.rollback().await.expect("rollback");
        assert_eq!(count(&pool).await, 1);
    }

    #[tokio::test]
    async fn the_pool_never_holds_more_than_its_size() {
        let (pool, opened) = pool("size", 2, NO_CHECKS);
        let a = pool.acquire().await.expect("a");
        let b = pool.acquire().await.expect("b");
        let waiting = tokio::time::timeout(Duration::from_millis(50), pool.acquire()).await;
        assert!(waiting.is_err(), "a third connection was handed out");
        a.release();
        let c = pool.acquire().await.expect("c after a");
        assert_eq!(opened.load(std::sync::atomic::Ordering::SeqCst), 2);
        drop((b, c));
    }

    /// Whether an acquisition (on behalf of `tenant`, or the system's) gets a connection now.
    async fn gets_one(
        pool: &Pool<SqliteConnection>,
        tenant: Option<&str>,
    ) -> Option<Conn<SqliteConnection>> {
        let acquire = async {
            tokio::time::timeout(Duration::from_millis(50), pool.acquire())
                .await
                .ok()
                .map(|c| c.expect("acquire"))
        };
        match tenant {
            Some(t) => on_behalf_of(t, acquire).await,
            None => acquire.await,
        }
    }

    #[tokio::test]
    async fn a_tenant_holds_its_share_others_get_theirs_and_the_system_its_reserve() {
        let (pool, _) = pool("shares", 8, NO_CHECKS);
        let shares = (pool.shares().per_tenant(), pool.shares().reserved());
        assert_eq!(shares, (3, 2));
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(gets_one(&pool, Some("acme")).await.expect("acme's share"));
        }
        assert!(
            gets_one(&pool, Some("acme")).await.is_none(),
            "acme has taken its share"
        );
        for _ in 0..3 {
            held.push(
                gets_one(&pool, Some("globex"))
                    .await
                    .expect("globex's share"),
            );
        }
        assert!(
            gets_one(&pool, Some("initech")).await.is_none(),
            "the tenants' part of the pool is in use"
        );
        for _ in 0..2 {
            held.push(gets_one(&pool, None).await.expect("the system's reserve"));
        }
        assert!(gets_one(&pool, None).await.is_none(), "the pool is in use");
        // A connection given back frees its tenant's place.
        held.remove(0).release();
        assert!(gets_one(&pool, Some("acme")).await.is_some());
    }

    #[tokio::test]
    async fn a_closed_pool_refuses_and_keeps_nothing() {
        let (pool, _) = pool("closed", 2, Checks::NETWORK);
        pool.acquire().await.expect("acquire").release();
        assert_eq!(pool.idle(), 1);
        pool.close().await;
        assert!(pool.is_closed());
        assert_eq!(pool.idle(), 0);
        assert!(matches!(
            pool.acquire().await.err(),
            Some(sqlx::Error::PoolClosed)
        ));
    }
}
