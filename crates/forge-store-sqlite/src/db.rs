//! The store's connections to its file, all of them rusqlite's: how each is set up, the reader
//! connections that answer reads, and the few calls every module's statements go through.
//!
//! Writes go to the writer lane (`lane`), one connection on a thread of its own; reads to
//! [`Readers`], a few connections opened as reads need them, each read run on tokio's blocking
//! threads. Both are one closure sent and one answer back: a statement is not a trip of its own,
//! so a module writes its statements in order, as it would on one connection.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use forge_core::Error;
use parking_lot::Mutex;
use rusqlite::types::FromSql;
use rusqlite::{Connection, OpenFlags, Row, Statement, ToSql};

use crate::checkpoint::{BACKSTOP_PAGES, LOG_LIMIT_BYTES};

/// How long a connection waits for another's write lock (another process's, or a migration's).
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How many reader connections a store opens at most.
pub(crate) const READERS: usize = 4;

/// What a connection is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The lane's (and a migration's): creates the file if missing, and writes.
    Writer,
    /// A reader's: refuses to write (`query_only`), so that every write is the lane's.
    Reader,
}

/// A connection to the file at `path`, set up for `role`: WAL, foreign keys on, statement
/// journals in memory (`temp_store`), the log left to the checkpointer with SQLite's own
/// checkpoint as a backstop, and statements prepared once per connection.
pub(crate) fn connect(path: &Path, role: Role) -> Result<Connection, Error> {
    let flags = match role {
        Role::Writer => OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
        Role::Reader => OpenFlags::SQLITE_OPEN_READ_WRITE,
    } | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(error)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(error)?;
    let journal = match role {
        Role::Writer => "PRAGMA journal_mode = WAL;",
        Role::Reader => "PRAGMA query_only = ON;",
    };
    conn.execute_batch(&format!(
        "{journal} PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; \
         PRAGMA temp_store = MEMORY; PRAGMA wal_autocheckpoint = {BACKSTOP_PAGES}; \
         PRAGMA journal_size_limit = {LOG_LIMIT_BYTES};"
    ))
    .map_err(error)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// `n` as SQLite's integer, `i64::MAX` past it (a limit, a count, a cursor).
pub(crate) fn saturating(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

/// Classifies a rusqlite error: lock contention may succeed later.
pub(crate) fn error(e: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode::{DatabaseBusy, DatabaseLocked};
    let retryable = matches!(e.sqlite_error_code(), Some(DatabaseBusy | DatabaseLocked));
    Error::backend(retryable, e)
}

/// The values a statement binds: `params![…]`.
pub(crate) type Values<'v> = &'v [&'v dyn ToSql];

/// The values a shared statement (`forge_sql::statements`) binds, as SQLite stores them, after
/// `first` (times as Unix milliseconds, ids as their text).
pub(crate) fn binds(
    first: String,
    values: Vec<forge_sql::statements::Bind>,
) -> Vec<Box<dyn ToSql + Send>> {
    use forge_sql::statements::Bind;
    let mut bound: Vec<Box<dyn ToSql + Send>> = vec![Box::new(first)];
    for v in values {
        bound.push(match v {
            Bind::Text(t) => Box::new(t),
            Bind::Time(t) => Box::new(t.unix_millis()),
            Bind::Id(id) => Box::new(id.to_string()),
            Bind::Limit(n) => Box::new(n),
        });
    }
    bound
}

/// `bound` as the slice [`all`] takes.
pub(crate) fn refs(bound: &[Box<dyn ToSql + Send>]) -> Vec<&dyn ToSql> {
    bound.iter().map(|v| v.as_ref() as &dyn ToSql).collect()
}

/// Binds `values` to `statement`'s parameters: `$n` and `?n` take the `n`th value (so a
/// statement shared with PostgreSQL, which may use `$6` before `$5`, binds as it does there), a
/// bare `?` the value at its position.
fn bind(statement: &mut Statement<'_>, values: Values<'_>) -> Result<(), Error> {
    for index in 1..=statement.parameter_count() {
        let at = statement
            .parameter_name(index)
            .and_then(|name| name.get(1..))
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(index);
        let value = at
            .checked_sub(1)
            .and_then(|i| values.get(i))
            .ok_or_else(|| stopped("a statement has a parameter no value was given for"))?;
        statement.raw_bind_parameter(index, *value).map_err(error)?;
    }
    Ok(())
}

/// Runs one statement; the rows it changed.
pub(crate) fn execute(conn: &Connection, sql: &str, values: Values<'_>) -> Result<usize, Error> {
    let mut statement = conn.prepare_cached(sql).map_err(error)?;
    bind(&mut statement, values)?;
    statement.raw_execute().map_err(error)
}

/// Every row `sql` returns, each read by `read`.
pub(crate) fn all<T>(
    conn: &Connection,
    sql: &str,
    values: Values<'_>,
    mut read: impl FnMut(&Row<'_>) -> Result<T, Error>,
) -> Result<Vec<T>, Error> {
    let mut statement = conn.prepare_cached(sql).map_err(error)?;
    bind(&mut statement, values)?;
    let mut rows = statement.raw_query();
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(error)? {
        out.push(read(row)?);
    }
    Ok(out)
}

/// The first row `sql` returns, if any, read by `read`.
pub(crate) fn first<T>(
    conn: &Connection,
    sql: &str,
    values: Values<'_>,
    read: impl FnOnce(&Row<'_>) -> Result<T, Error>,
) -> Result<Option<T>, Error> {
    let mut statement = conn.prepare_cached(sql).map_err(error)?;
    bind(&mut statement, values)?;
    let mut rows = statement.raw_query();
    rows.next().map_err(error)?.map(read).transpose()
}

/// The first column of the first row `sql` returns, if any.
pub(crate) fn value<T: FromSql>(
    conn: &Connection,
    sql: &str,
    values: Values<'_>,
) -> Result<Option<T>, Error> {
    first(conn, sql, values, |row| row.get(0).map_err(error))
}

/// The store's reader connections: at most [`READERS`], opened as reads need them and kept.
/// Reads on behalf of a tenant (`forge_sql::on_behalf_of`) hold at most that tenant's share of
/// them, and never the one kept for the system's work ([`forge_sql::Shares`]), as on a pool's.
#[derive(Debug)]
pub(crate) struct Readers {
    path: PathBuf,
    idle: Arc<Mutex<Vec<Connection>>>,
    permits: Arc<tokio::sync::Semaphore>,
    shares: forge_sql::Shares,
}

impl Readers {
    /// Readers of the file at `path` (migrated already).
    pub(crate) fn new(path: PathBuf) -> Self {
        Self {
            path,
            idle: Arc::default(),
            permits: Arc::new(tokio::sync::Semaphore::new(READERS)),
            shares: forge_sql::Shares::of(READERS),
        }
    }

    /// Runs `read` on a reader connection, on one of tokio's blocking threads. Each statement
    /// sees what was committed when it began; `read` that needs several to agree runs them in
    /// [`snapshot`].
    pub(crate) async fn run<T, F>(&self, read: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Error> + Send + 'static,
    {
        let closed = || stopped("the SQLite store is closed");
        let share = match self.shares.enter_current().await {
            Some(held) => Some(held.ok_or_else(closed)?),
            None => None,
        };
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| closed())?;
        let idle = Arc::clone(&self.idle);
        let taken = idle.lock().pop();
        let conn = match taken {
            Some(conn) => conn,
            None => {
                let path = self.path.clone();
                tokio::task::spawn_blocking(move || connect(&path, Role::Reader))
                    .await
                    .map_err(|_| stopped("opening a SQLite reader failed"))??
            }
        };
        tokio::task::spawn_blocking(move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read(&conn)))
                .unwrap_or_else(|_| Err(stopped("a read of the SQLite store panicked")));
            // A closed store's permits are closed: its connection is not kept.
            if !permit.semaphore().is_closed() {
                idle.lock().push(conn);
            }
            drop((permit, share));
            outcome
        })
        .await
        .map_err(|_| stopped("a read of the SQLite store did not finish"))?
    }

    /// Closes the idle connections; reads asked for later fail, those running finish.
    pub(crate) fn close(&self) {
        self.permits.close();
        self.shares.close();
        self.idle.lock().clear();
    }
}

/// Runs `read` in one read transaction: its statements see one state of the database.
pub(crate) fn snapshot<T>(
    conn: &Connection,
    read: impl FnOnce(&Connection) -> Result<T, Error>,
) -> Result<T, Error> {
    let tx = conn.unchecked_transaction().map_err(error)?;
    let out = read(&tx)?;
    tx.finish().map_err(error)?;
    Ok(out)
}

/// The store cannot take or answer an operation.
pub(crate) fn stopped(why: &str) -> Error {
    Error::backend(false, std::io::Error::other(why.to_owned()))
}

#[cfg(test)]
mod tests {
    use rusqlite::params;

    use super::*;

    /// A read that holds its connection until told, and says when it has begun.
    fn held_read(
        readers: &Arc<Readers>,
        tenant: Option<&'static str>,
    ) -> (
        tokio::task::JoinHandle<Result<(), Error>>,
        tokio::sync::oneshot::Receiver<()>,
        std::sync::mpsc::Sender<()>,
    ) {
        let (begun, began) = tokio::sync::oneshot::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let readers = Arc::clone(readers);
        let read = async move {
            readers
                .run(move |_| {
                    let _ = begun.send(());
                    let _ = released.recv();
                    Ok(())
                })
                .await
        };
        let task = match tenant {
            Some(tenant) => tokio::spawn(forge_sql::on_behalf_of(tenant, read)),
            None => tokio::spawn(read),
        };
        (task, began, release)
    }

    /// One tenant's reads hold at most its share of the readers (2 of 4), the tenants together
    /// three: another tenant and the system are still served while the first waits on itself.
    #[tokio::test]
    async fn a_tenant_reads_on_its_share_of_the_readers() {
        let dir = std::env::temp_dir().join(format!("forge-readers-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let path = dir.join("r.db");
        drop(connect(&path, Role::Writer).expect("creates the file"));
        let readers = Arc::new(Readers::new(path));
        let (a1, a1_began, a1_release) = held_read(&readers, Some("acme"));
        let (a2, a2_began, a2_release) = held_read(&readers, Some("acme"));
        a1_began.await.expect("acme's first read runs");
        a2_began.await.expect("acme's second read runs");
        // A third read of acme's, asked once: it waits for a place of its own, taking no reader.
        let third = Arc::clone(&readers);
        let mut a3 = std::pin::pin!(forge_sql::on_behalf_of(
            "acme",
            third.run(|conn| value::<i64>(conn, "SELECT 3", params![]))
        ));
        std::future::poll_fn(|cx| {
            assert!(
                a3.as_mut().poll(cx).is_pending(),
                "all of acme's places are held"
            );
            std::task::Poll::Ready(())
        })
        .await;
        assert_eq!(
            readers.permits.available_permits(),
            2,
            "acme's third read holds no reader while it waits"
        );
        let (g, g_began, g_release) = held_read(&readers, Some("globex"));
        g_began
            .await
            .expect("another tenant's read runs beside acme's two");
        let (s, s_began, s_release) = held_read(&readers, None);
        s_began
            .await
            .expect("the system's read takes the reserved reader");
        a1_release.send(()).expect("released");
        a1.await.expect("joins").expect("reads");
        let third = a3
            .await
            .expect("acme's third read runs once its first ended");
        assert_eq!(third, Some(3));
        for release in [a2_release, g_release, s_release] {
            release.send(()).expect("released");
        }
        for task in [a2, g, s] {
            task.await.expect("joins").expect("reads");
        }
        readers.close();
        let _ = std::fs::remove_dir_all(dir);
    }

    /// `$n` and `?n` take the `n`th value wherever they stand and however often, as sqlx bound
    /// them; a bare `?` its position's.
    #[test]
    fn numbered_parameters_take_their_own_value_in_any_order() {
        let conn = Connection::open_in_memory().expect("opens");
        let read = |sql: &str| -> String {
            value(&conn, sql, params!["a", "b", "c"])
                .expect("runs")
                .expect("a row")
        };
        assert_eq!(read("SELECT $3 || $1 || $2 || $1"), "caba");
        assert_eq!(read("SELECT ?2 || ?3 || ?1"), "bca");
        assert_eq!(read("SELECT ? || ? || ?"), "abc");
        let missing = value::<String>(&conn, "SELECT $4", params!["a"]);
        assert!(missing.is_err(), "a parameter without a value is an error");
    }
}
