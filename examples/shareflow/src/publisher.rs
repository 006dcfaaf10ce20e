//! The external service posts are published to: a small HTTP service with a store of its own
//! (SQLite), standing in for a social network's or a CMS's publishing API.
//!
//! It records each delivery under the caller's `Idempotency-Key`: a request that repeats a key
//! it has already recorded gets the first delivery back (`replayed: true`) and records nothing
//! new, only that it was asked again. A request without a key is refused. Posts carry an optional
//! `publish_at`; the service lists them as `scheduled` until then and `live` after.
//!
//! For the rollout tests it can lose responses on purpose ([`Publisher::lose_responses`]): the
//! delivery is recorded, then the caller gets a 503, exactly what a timeout after the write looks
//! like from outside.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

/// A post as the publishing API receives it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PostRequest {
    /// The customer account (ShareFlow's tenant).
    pub account: String,
    /// The document the post is about, as the sender names it.
    pub document: String,
    /// The post's text.
    pub text: String,
    /// Where the text comes from: citation labels such as `spring-launch@sha256:…#33-99`.
    #[serde(default)]
    pub sources: Vec<String>,
    /// When the post goes live; now when absent.
    #[serde(default)]
    pub publish_at: Option<DateTime<Utc>>,
    /// Which of the sender's workflows produced it (`agent` or `legacy`).
    pub via: String,
}

/// A recorded delivery.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Delivery {
    /// The service's id for it.
    pub id: String,
    /// The key it was recorded under.
    pub key: String,
    /// What was posted.
    #[serde(flatten)]
    pub post: PostRequest,
    /// How many requests carried its key (retries and replays included).
    pub attempts: i64,
    /// `scheduled` before `publish_at`, `live` after.
    pub status: String,
    /// True on a response that returned an earlier delivery for a repeated key.
    #[serde(default)]
    pub replayed: bool,
}

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum PublisherError {
    /// Its store could not be opened or migrated.
    #[error("the publisher's store: {0}")]
    Store(#[from] sqlx::Error),
}

/// The publishing service: its store and its deliberate faults.
#[derive(Clone)]
pub struct Publisher {
    db: SqlitePool,
    /// Responses still to lose, per document (see [`Publisher::lose_responses`]).
    losing: Arc<Mutex<HashMap<String, u32>>>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").finish_non_exhaustive()
    }
}

impl Publisher {
    /// Opens (creating if missing) the service's SQLite store at `path`.
    pub async fn open(path: &std::path::Path) -> Result<Self, PublisherError> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .busy_timeout(std::time::Duration::from_secs(5));
        let db = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS deliveries (
                id TEXT PRIMARY KEY,
                idempotency_key TEXT NOT NULL UNIQUE,
                account TEXT NOT NULL,
                document TEXT NOT NULL,
                body TEXT NOT NULL,
                sources TEXT NOT NULL,
                publish_at TEXT,
                via TEXT NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 1,
                received_at TEXT NOT NULL
            )",
        )
        .execute(&db)
        .await?;
        Ok(Self {
            db,
            losing: Arc::default(),
        })
    }

    /// Loses the next `n` responses to posts about `document`: each is recorded (or replayed),
    /// then answered with a 503, as a response lost after the write would be.
    pub fn lose_responses(&self, document: &str, n: u32) {
        if let Ok(mut losing) = self.losing.lock() {
            losing.insert(document.to_owned(), n);
        }
    }

    fn take_loss(&self, document: &str) -> bool {
        let Ok(mut losing) = self.losing.lock() else {
            return false;
        };
        match losing.get_mut(document) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }

    /// Records `post` under `key`, or returns the delivery already recorded under it.
    pub async fn deliver(&self, key: &str, post: PostRequest) -> Result<Delivery, sqlx::Error> {
        let id = format!("post-{}", uuid::Uuid::new_v4().simple());
        let sources = serde_json::to_string(&post.sources).unwrap_or_else(|_| "[]".into());
        sqlx::query(
            "INSERT INTO deliveries (id, idempotency_key, account, document, body, sources,
                                     publish_at, via, received_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (idempotency_key) DO UPDATE SET attempts = attempts + 1",
        )
        .bind(&id)
        .bind(key)
        .bind(&post.account)
        .bind(&post.document)
        .bind(&post.text)
        .bind(&sources)
        .bind(post.publish_at.map(|t| t.to_rfc3339()))
        .bind(&post.via)
        .bind(Utc::now().to_rfc3339())
        .execute(&self.db)
        .await?;
        let mut delivery = self.by_key(key).await?.ok_or(sqlx::Error::RowNotFound)?;
        delivery.replayed = delivery.id != id;
        Ok(delivery)
    }

    async fn by_key(&self, key: &str) -> Result<Option<Delivery>, sqlx::Error> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{SELECT} WHERE idempotency_key = ?"
        )))
        .bind(key)
        .fetch_optional(&self.db)
        .await?;
        Ok(row.as_ref().map(Row::read).transpose()?.map(Row::delivery))
    }

    /// Every delivery for `account` (all accounts when `None`), oldest first.
    pub async fn deliveries(&self, account: Option<&str>) -> Result<Vec<Delivery>, sqlx::Error> {
        let rows = match account {
            Some(a) => {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "{SELECT} WHERE account = ? ORDER BY received_at, id"
                )))
                .bind(a)
                .fetch_all(&self.db)
                .await?
            }
            None => {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "{SELECT} ORDER BY received_at, id"
                )))
                .fetch_all(&self.db)
                .await?
            }
        };
        rows.iter()
            .map(|r| Row::read(r).map(Row::delivery))
            .collect()
    }

    /// The service's HTTP API: `POST /posts` (with `Idempotency-Key`) and `GET /posts`.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/posts", get(list).post(create))
            .with_state(self.clone())
    }
}

const SELECT: &str = "SELECT id, idempotency_key, account, document, body, sources, publish_at, \
                      via, attempts FROM deliveries";

struct Row {
    id: String,
    idempotency_key: String,
    account: String,
    document: String,
    body: String,
    sources: String,
    publish_at: Option<String>,
    via: String,
    attempts: i64,
}

impl Row {
    fn read(r: &sqlx::sqlite::SqliteRow) -> Result<Row, sqlx::Error> {
        use sqlx::Row as _;
        Ok(Row {
            id: r.try_get("id")?,
            idempotency_key: r.try_get("idempotency_key")?,
            account: r.try_get("account")?,
            document: r.try_get("document")?,
            body: r.try_get("body")?,
            sources: r.try_get("sources")?,
            publish_at: r.try_get("publish_at")?,
            via: r.try_get("via")?,
            attempts: r.try_get("attempts")?,
        })
    }

    fn delivery(self) -> Delivery {
        let publish_at = self
            .publish_at
            .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
            .map(|t| t.with_timezone(&Utc));
        let status = match publish_at {
            Some(t) if t > Utc::now() => "scheduled",
            _ => "live",
        };
        Delivery {
            id: self.id,
            key: self.idempotency_key,
            post: PostRequest {
                account: self.account,
                document: self.document,
                text: self.body,
                sources: serde_json::from_str(&self.sources).unwrap_or_default(),
                publish_at,
                via: self.via,
            },
            attempts: self.attempts,
            status: status.to_owned(),
            replayed: false,
        }
    }
}

/// The header every post must carry.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

async fn create(
    State(p): State<Publisher>,
    headers: HeaderMap,
    Json(post): Json<PostRequest>,
) -> Response {
    let key = headers
        .get(IDEMPOTENCY_KEY)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|k| !k.is_empty() && k.len() <= 200);
    let Some(key) = key else {
        return (
            StatusCode::BAD_REQUEST,
            Json(serde_json::json!({ "error": "an Idempotency-Key header is required" })),
        )
            .into_response();
    };
    if post.text.trim().is_empty() || post.text.len() > 5_000 {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(serde_json::json!({ "error": "a post's text is 1 to 5,000 bytes" })),
        )
            .into_response();
    }
    let document = post.document.clone();
    match p.deliver(key, post).await {
        Ok(_) if p.take_loss(&document) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({ "error": "upstream timeout" })),
        )
            .into_response(),
        Ok(d) => {
            let status = if d.replayed {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            (status, Json(d)).into_response()
        }
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}

#[derive(Deserialize)]
struct ListQuery {
    account: Option<String>,
}

async fn list(State(p): State<Publisher>, Query(q): Query<ListQuery>) -> Response {
    match p.deliveries(q.account.as_deref()).await {
        Ok(d) => Json(d).into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    }
}
