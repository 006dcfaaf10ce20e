//! Opening the store a URL names: `memory`, `sqlite://PATH` (feature `sqlite`) or
//! `postgres://…` (feature `postgres`), with every record kind it keeps behind its trait.

use std::sync::Arc;

use forge_core::ports::store::Store;
use forge_store_memory::MemoryStore;

use crate::Error;

/// How PostgreSQL enforces tenant isolation (feature `postgres`).
#[cfg(feature = "postgres")]
pub use forge_store_postgres::Mode as PgMode;

/// One opened store, as each of the ports that keep its records.
#[derive(Clone)]
pub struct Stores {
    /// Threads, runs, events, jobs, interactions, audit.
    pub store: Arc<dyn Store>,
    /// Retrieval sources and their chunks.
    pub sources: Arc<dyn forge_rag::SourceStore>,
    /// Stored files' records.
    pub files: Arc<dyn forge_files::FileStore>,
    /// Scoring runs and judge verdicts.
    pub evals: Arc<dyn forge_eval::EvalStore>,
    /// The PostgreSQL store itself, for `LISTEN` wake-ups and lease sweeps.
    #[cfg(feature = "postgres")]
    pub postgres: Option<Arc<forge_store_postgres::PostgresStore>>,
    /// Migrations this process applied while opening.
    pub applied: usize,
    /// Migration versions now in place (none for `memory`).
    pub versions: Vec<i64>,
    latest: Latest,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("applied", &self.applied)
            .field("versions", &self.versions)
            .finish_non_exhaustive()
    }
}

/// Where the schema version the build needs is read from.
#[derive(Clone)]
enum Latest {
    /// `memory` has no schema.
    None,
    #[cfg(feature = "sqlite")]
    Sqlite(Arc<forge_store_sqlite::SqliteStore>),
    #[cfg(feature = "postgres")]
    Postgres(Arc<forge_store_postgres::PostgresStore>, PgMode),
}

impl Stores {
    /// Opens the store `url` names, creating a SQLite file and applying pending migrations:
    /// `memory`, `sqlite://PATH` or `sqlite:PATH` (feature `sqlite`), `postgres://…` in RLS mode
    /// (feature `postgres`; [`Stores::open_postgres`] for Supabase mode).
    ///
    /// ```
    /// # tokio_test_block_on(async {
    /// let stores = forge::Stores::open("memory").await?;
    /// assert!(stores.versions.is_empty());
    /// assert!(forge::Stores::open("mysql://db").await.is_err());
    /// # Ok::<_, forge::Error>(()) });
    /// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    /// # }
    /// ```
    pub async fn open(url: &str) -> Result<Self, Error> {
        if url == "memory" {
            return Ok(Self::of(
                Arc::new(MemoryStore::default()),
                0,
                Vec::new(),
                Latest::None,
            ));
        }
        #[cfg(feature = "sqlite")]
        if url.starts_with("sqlite:") {
            let store = forge_store_sqlite::SqliteStore::open(url)
                .await
                .map_err(|e| Error::open(url, e))?;
            let applied = store.applied_on_open();
            let store = Arc::new(store);
            let versions = store
                .applied_migrations()
                .await
                .map_err(|e| Error::open(url, e))?;
            return Ok(Self::of(
                store.clone(),
                applied,
                versions,
                Latest::Sqlite(store),
            ));
        }
        #[cfg(feature = "postgres")]
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Self::open_postgres(url, PgMode::Rls).await;
        }
        Err(Error::StoreUrl {
            url: redact(url),
            reason: format!("this build opens {}", kinds()),
        })
    }

    /// Opens a PostgreSQL store in `mode`, applying pending migrations (in RLS mode the role
    /// must own the schema, or an administrator provisions it first: `forge migrate`).
    #[cfg(feature = "postgres")]
    pub async fn open_postgres(url: &str, mode: PgMode) -> Result<Self, Error> {
        let store = forge_store_postgres::PostgresStore::connect(url, mode)
            .await
            .map_err(|e| Error::open(url, e))?;
        let applied = store.applied_on_connect();
        let store = Arc::new(store);
        let versions = store
            .applied_migrations()
            .await
            .map_err(|e| Error::open(url, e))?;
        let latest = Latest::Postgres(store.clone(), mode);
        Ok(Self {
            postgres: Some(store.clone()),
            ..Self::of(store, applied, versions, latest)
        })
    }

    /// `store` as each of its ports.
    fn of<S>(store: Arc<S>, applied: usize, versions: Vec<i64>, latest: Latest) -> Self
    where
        S: Store
            + forge_rag::SourceStore
            + forge_files::FileStore
            + forge_eval::EvalStore
            + 'static,
    {
        Self {
            store: store.clone(),
            sources: store.clone(),
            files: store.clone(),
            evals: store,
            #[cfg(feature = "postgres")]
            postgres: None,
            applied,
            versions,
            latest,
        }
    }

    /// Readiness: the store answers and its schema is the one this build needs; `Err` says
    /// which of the two failed, without any of the store's own words (they may quote data).
    pub async fn check(&self) -> Result<(), String> {
        match &self.latest {
            Latest::None => Ok(()),
            #[cfg(feature = "sqlite")]
            Latest::Sqlite(s) => current(
                s.applied_migrations().await,
                forge_store_sqlite::migrations().latest(),
            ),
            #[cfg(feature = "postgres")]
            Latest::Postgres(s, mode) => current(
                s.applied_migrations().await,
                forge_store_postgres::migrations(*mode).latest(),
            ),
        }
    }
}

/// Whether the `applied` migrations end at `latest`.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn current(applied: Result<Vec<i64>, forge_core::Error>, latest: i64) -> Result<(), String> {
    match applied {
        Err(e) => Err(format!("unreachable ({:?})", e.kind())),
        Ok(v) if v.last().copied() == Some(latest) => Ok(()),
        Ok(v) => Err(format!(
            "schema at version {}, this build needs {latest}",
            v.last().copied().unwrap_or(0)
        )),
    }
}

/// The store URLs this build opens, for messages.
fn kinds() -> String {
    let mut kinds = vec!["memory"];
    if cfg!(feature = "sqlite") {
        kinds.push("sqlite://PATH");
    }
    if cfg!(feature = "postgres") {
        kinds.push("postgres://…");
    }
    kinds.join(", ")
}

/// `url` without the password it may carry.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://…@{}", &url[..s], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_printed_without_credentials() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/forge"),
            "postgres://…@db:5432/forge"
        );
        assert_eq!(redact("sqlite://forge.db"), "sqlite://forge.db");
    }

    proptest::proptest! {
        /// Any Unicode around `://` and `@`: never a panic (the cuts are at ASCII characters),
        /// and nothing between the scheme and the last `@` survives.
        #[test]
        fn any_unicode_url_is_redacted_without_a_panic(
            scheme in forge_core::text::strategy::unicode(20),
            secret in forge_core::text::strategy::unicode_runs(40),
            host in forge_core::text::strategy::unicode(40),
        ) {
            let host = host.replace('@', "");
            let shown = redact(&format!("{scheme}://{secret}@{host}"));
            let _ = redact(&secret);
            proptest::prop_assert!(shown.ends_with(&format!("…@{host}")), "{shown}");
        }
    }

    #[tokio::test]
    async fn an_unknown_url_says_what_this_build_opens_and_never_prints_a_password() {
        let err = Stores::open("mysql://app:s3cret@db/forge")
            .await
            .unwrap_err()
            .to_string();
        assert!(!err.contains("s3cret"), "{err}");
        assert!(err.contains("memory"), "{err}");
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn a_sqlite_file_is_created_migrated_and_ready() {
        let dir = std::env::temp_dir().join(format!("forge-facade-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("stores.db").display());
        let stores = Stores::open(&url).await.unwrap();
        assert!(stores.applied > 0);
        assert_eq!(stores.versions.len(), stores.applied);
        assert_eq!(stores.check().await, Ok(()));
        drop(stores);
        let again = Stores::open(&url).await.unwrap();
        assert_eq!(again.applied, 0, "opening twice applies nothing");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
