//! ShareFlow's own database: the per-tenant workflow flag and each document's progress to a
//! post. Forge keeps the runs; this keeps what the application decides about them. SQLite beside
//! Forge's SQLite store, or the same PostgreSQL database as Forge's store (ShareFlow's own
//! tables, owned by its role), through sqlx's `Any` driver: every statement is written once, with
//! `$n` parameters both databases take.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::AnyPool;
use sqlx::any::AnyPoolOptions;

/// Which workflow turns a tenant's documents into posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Workflow {
    /// The deterministic workflow ShareFlow had before agents: a template over the document's
    /// first sentence, published at once.
    Legacy,
    /// The drafting agent: a cited post, approved by a reviewer, then published.
    Agent,
}

impl Workflow {
    /// Its name in the database and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Workflow::Legacy => "legacy",
            Workflow::Agent => "agent",
        }
    }

    fn parse(s: &str) -> Self {
        if s == "agent" {
            Workflow::Agent
        } else {
            Workflow::Legacy
        }
    }
}

/// A document and how far it is on its way to a post.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Document {
    /// The tenant it belongs to.
    pub tenant: String,
    /// Its id within the tenant (also its retrieval source id).
    pub id: String,
    /// Its title.
    pub title: String,
    /// Its text, as dropped.
    pub body: String,
    /// Its version as ingested (`sha256:…`).
    pub version: String,
    /// When its post should go live, if scheduled.
    pub publish_at: Option<String>,
    /// `new` (recorded, not routed yet), `routing` (its routing job is deciding its
    /// workflow), `drafting` (an agent run is working on it), `published`, `rejected`,
    /// `cancelled`, or `failed` (the legacy publish could not reach the service, or the draft
    /// failed; retried on the next rollback or drop).
    pub status: String,
    /// The workflow that published it.
    pub via: Option<String>,
    /// The drafting thread, on the agent workflow.
    pub thread_id: Option<String>,
    /// The drafting run, on the agent workflow (while `routing`: the routing job's run).
    pub run_id: Option<String>,
    /// The publisher's delivery id, once published.
    pub delivery_id: Option<String>,
    /// Who dropped it.
    pub submitted_by: String,
}

/// The application database.
#[derive(Debug, Clone)]
pub struct AppDb {
    pool: AnyPool,
    /// Whether it is SQLite (which takes a write lock up front with `BEGIN IMMEDIATE`).
    sqlite: bool,
}

impl AppDb {
    /// Opens (creating if missing) the SQLite database at `path`.
    pub async fn open(path: &std::path::Path) -> Result<Self, sqlx::Error> {
        Self::connect(&format!("sqlite://{}?mode=rwc", path.display())).await
    }

    /// Connects to the database at `url` (`sqlite://…` or `postgres://…`) and creates
    /// ShareFlow's tables if missing.
    pub async fn connect(url: &str) -> Result<Self, sqlx::Error> {
        sqlx::any::install_default_drivers();
        let sqlite = url.starts_with("sqlite:");
        let pool = AnyPoolOptions::new()
            .max_connections(4)
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if sqlite {
                        // Readers beside the writer, and a writer that waits its turn.
                        sqlx::query("PRAGMA journal_mode = WAL")
                            .execute(&mut *conn)
                            .await?;
                        sqlx::query("PRAGMA busy_timeout = 5000")
                            .execute(&mut *conn)
                            .await?;
                    }
                    Ok(())
                })
            })
            .connect(url)
            .await?;
        for ddl in [
            "CREATE TABLE IF NOT EXISTS flags (
                tenant TEXT PRIMARY KEY,
                workflow TEXT NOT NULL,
                changed_by TEXT NOT NULL,
                changed_at TEXT NOT NULL
            )",
            "CREATE TABLE IF NOT EXISTS documents (
                tenant TEXT NOT NULL,
                id TEXT NOT NULL,
                title TEXT NOT NULL,
                body TEXT NOT NULL,
                version TEXT NOT NULL,
                publish_at TEXT,
                status TEXT NOT NULL,
                via TEXT,
                thread_id TEXT,
                run_id TEXT,
                delivery_id TEXT,
                submitted_by TEXT NOT NULL,
                created_at TEXT NOT NULL,
                PRIMARY KEY (tenant, id)
            )",
            "CREATE INDEX IF NOT EXISTS documents_thread ON documents (tenant, thread_id)",
            // The settler looks a document up by its run on every commit it is woken by.
            "CREATE INDEX IF NOT EXISTS documents_run ON documents (run_id)",
            "CREATE INDEX IF NOT EXISTS documents_drafting ON documents (status) WHERE status = 'drafting'",
            "CREATE INDEX IF NOT EXISTS documents_new ON documents (status) WHERE status = 'new'",
        ] {
            sqlx::query(ddl).execute(&pool).await?;
        }
        Ok(Self { pool, sqlite })
    }

    /// The tenant's workflow (legacy until someone turns the agent on).
    pub async fn workflow(&self, tenant: &str) -> Result<Workflow, sqlx::Error> {
        let row: Option<(String,)> = sqlx::query_as("SELECT workflow FROM flags WHERE tenant = $1")
            .bind(tenant)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map_or(Workflow::Legacy, |(w,)| Workflow::parse(&w)))
    }

    /// Sets the tenant's workflow; returns the one it replaced.
    pub async fn set_workflow(
        &self,
        tenant: &str,
        workflow: Workflow,
        by: &str,
    ) -> Result<Workflow, sqlx::Error> {
        // Write-locked from the start: a transaction that reads first and then writes cannot be
        // upgraded while another change commits, and SQLite refuses it at once ("database is
        // locked") instead of waiting its busy timeout.
        let mut tx = if self.sqlite {
            self.pool.begin_with("BEGIN IMMEDIATE").await?
        } else {
            self.pool.begin().await?
        };
        let before: Option<(String,)> =
            sqlx::query_as("SELECT workflow FROM flags WHERE tenant = $1")
                .bind(tenant)
                .fetch_optional(&mut *tx)
                .await?;
        sqlx::query(
            "INSERT INTO flags (tenant, workflow, changed_by, changed_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (tenant) DO UPDATE SET workflow = excluded.workflow,
                changed_by = excluded.changed_by, changed_at = excluded.changed_at",
        )
        .bind(tenant)
        .bind(workflow.as_str())
        .bind(by)
        .bind(Utc::now().to_rfc3339())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(before.map_or(Workflow::Legacy, |(w,)| Workflow::parse(&w)))
    }

    /// Forgets a document whose drop did not finish (its text was not indexed).
    pub async fn delete_document(&self, tenant: &str, id: &str) -> Result<(), sqlx::Error> {
        sqlx::query("DELETE FROM documents WHERE tenant = $1 AND id = $2")
            .bind(tenant)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Records a dropped document; `false` when the tenant already has one with this id.
    pub async fn insert_document(&self, doc: &Document) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(
            "INSERT INTO documents (tenant, id, title, body, version, publish_at, status,
                                    submitted_by, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING",
        )
        .bind(&doc.tenant)
        .bind(&doc.id)
        .bind(&doc.title)
        .bind(&doc.body)
        .bind(&doc.version)
        .bind(&doc.publish_at)
        .bind(&doc.status)
        .bind(&doc.submitted_by)
        .bind(Utc::now().to_rfc3339())
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// One document.
    pub async fn document(&self, tenant: &str, id: &str) -> Result<Option<Document>, sqlx::Error> {
        self.one(tenant, "id", id).await
    }

    /// The document a drafting thread works on.
    pub async fn document_of_thread(
        &self,
        tenant: &str,
        thread: &str,
    ) -> Result<Option<Document>, sqlx::Error> {
        self.one(tenant, "thread_id", thread).await
    }

    /// The tenant's document whose `column` (a fixed column name) is `value`.
    async fn one(
        &self,
        tenant: &str,
        column: &'static str,
        value: &str,
    ) -> Result<Option<Document>, sqlx::Error> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "{SELECT} WHERE tenant = $1 AND {column} = $2"
        )))
        .bind(tenant)
        .bind(value)
        .fetch_optional(&self.pool)
        .await?
        .map(|r| document(&r))
        .transpose()
    }

    /// The tenant's documents, oldest first.
    pub async fn documents(&self, tenant: &str) -> Result<Vec<Document>, sqlx::Error> {
        self.many(tenant, "").await
    }

    /// The tenant's documents not yet published.
    pub async fn unpublished(&self, tenant: &str) -> Result<Vec<Document>, sqlx::Error> {
        self.many(tenant, "AND status != 'published'").await
    }

    /// The tenant's documents matching `filter` (a fixed SQL condition), oldest first.
    async fn many(&self, tenant: &str, filter: &'static str) -> Result<Vec<Document>, sqlx::Error> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "{SELECT} WHERE tenant = $1 {filter} ORDER BY created_at, id"
        )))
        .bind(tenant)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(document)
        .collect()
    }

    /// Every document being drafted, in every tenant (to settle the ones whose runs ended).
    pub async fn drafting(&self) -> Result<Vec<Document>, sqlx::Error> {
        self.everywhere("drafting").await
    }

    /// Every document in `status` (a fixed value, written into the SQL so that the partial
    /// index on it serves the query), in every tenant, oldest first.
    async fn everywhere(&self, status: &'static str) -> Result<Vec<Document>, sqlx::Error> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "{SELECT} WHERE status = '{status}' ORDER BY created_at, id"
        )))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(document)
        .collect()
    }

    /// The document drafted by the run `run` (run ids are unique across tenants).
    pub async fn document_of_run(&self, run: &str) -> Result<Option<Document>, sqlx::Error> {
        sqlx::query(sqlx::AssertSqlSafe(format!("{SELECT} WHERE run_id = $1")))
            .bind(run)
            .fetch_optional(&self.pool)
            .await?
            .map(|r| document(&r))
            .transpose()
    }

    /// Ends a draft that did not publish: `status` is `failed`, `cancelled` or `rejected`. Only
    /// a document still `drafting` changes (a publish that got there first stays).
    pub async fn end_draft(
        &self,
        tenant: &str,
        id: &str,
        status: &str,
    ) -> Result<bool, sqlx::Error> {
        self.changes_one(
            "UPDATE documents SET status = $1 WHERE tenant = $2 AND id = $3 AND status = 'drafting'",
            &[status, tenant, id],
        )
        .await
    }

    /// Claims a document for the routing job `job` (a Forge run id): from `new`, or again by the
    /// same job taken over after its process died. `false` when another job routes it or it is
    /// routed already.
    pub async fn claim_routing(
        &self,
        tenant: &str,
        id: &str,
        job: &str,
    ) -> Result<bool, sqlx::Error> {
        self.changes_one(
            "UPDATE documents SET status = 'routing', run_id = $1
             WHERE tenant = $2 AND id = $3
               AND (status = 'new' OR (status = 'routing' AND run_id = $1))",
            &[job, tenant, id],
        )
        .await
    }

    /// Gives up the routing job `job`'s claim after it failed: the document is `new` again
    /// (routed by the next start or drop), as is a draft it recorded without a run. Whether it
    /// changed the document.
    pub async fn release_routing(
        &self,
        tenant: &str,
        id: &str,
        job: &str,
    ) -> Result<bool, sqlx::Error> {
        self.changes_one(
            "UPDATE documents SET status = 'new', run_id = NULL, thread_id = NULL
             WHERE tenant = $1 AND id = $2
               AND ((status = 'routing' AND run_id = $3) OR (status = 'drafting' AND run_id = ''))",
            &[tenant, id, job],
        )
        .await
    }

    /// Runs the update `sql` with `values` bound in order; whether it changed exactly one row.
    async fn changes_one(&self, sql: &'static str, values: &[&str]) -> Result<bool, sqlx::Error> {
        let mut query = sqlx::query(sql);
        for value in values {
            query = query.bind(*value);
        }
        Ok(query.execute(&self.pool).await?.rows_affected() == 1)
    }

    /// Every document recorded but never routed, in every tenant: its drop's process died
    /// before the routing job was queued.
    pub async fn stranded(&self) -> Result<Vec<Document>, sqlx::Error> {
        self.everywhere("new").await
    }

    /// Opens a document whose draft ended without a post (`failed`, `cancelled`, `rejected`)
    /// again, as new; `false` when it was not in one of those states.
    pub async fn reopen(&self, tenant: &str, id: &str) -> Result<bool, sqlx::Error> {
        self.changes_one(
            "UPDATE documents SET status = 'new', thread_id = NULL, run_id = NULL
             WHERE tenant = $1 AND id = $2 AND status IN ('failed', 'cancelled', 'rejected')",
            &[tenant, id],
        )
        .await
    }

    /// Marks a document as being drafted by `run` on `thread`.
    pub async fn set_drafting(
        &self,
        tenant: &str,
        id: &str,
        thread: &str,
        run: &str,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(
            "UPDATE documents SET status = 'drafting', thread_id = $1, run_id = $2
             WHERE tenant = $3 AND id = $4 AND status != 'published'",
        )
        .bind(thread)
        .bind(run)
        .bind(tenant)
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Marks a document's legacy publish as failed (to be tried again).
    pub async fn set_failed(&self, tenant: &str, id: &str) -> Result<(), sqlx::Error> {
        sqlx::query(
            "UPDATE documents SET status = 'failed' WHERE tenant = $1 AND id = $2 AND status != 'published'",
        )
        .bind(tenant)
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Records the delivery of a document's post; the first workflow to record one keeps it.
    pub async fn set_published(
        &self,
        tenant: &str,
        id: &str,
        via: Workflow,
        delivery: &str,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(
            "UPDATE documents SET status = 'published', via = $1, delivery_id = $2
             WHERE tenant = $3 AND id = $4 AND status != 'published'",
        )
        .bind(via.as_str())
        .bind(delivery)
        .bind(tenant)
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

const SELECT: &str = "SELECT tenant, id, title, body, version, publish_at, status, via, thread_id, \
                      run_id, delivery_id, submitted_by FROM documents";

fn document(r: &sqlx::any::AnyRow) -> Result<Document, sqlx::Error> {
    use sqlx::Row;
    Ok(Document {
        tenant: r.try_get("tenant")?,
        id: r.try_get("id")?,
        title: r.try_get("title")?,
        body: r.try_get("body")?,
        version: r.try_get("version")?,
        publish_at: r.try_get("publish_at")?,
        status: r.try_get("status")?,
        via: r.try_get("via")?,
        thread_id: r.try_get("thread_id")?,
        run_id: r.try_get("run_id")?,
        delivery_id: r.try_get("delivery_id")?,
        submitted_by: r.try_get("submitted_by")?,
    })
}

/// When a scheduled post goes live, parsed.
pub fn parse_publish_at(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn document(id: &str) -> Document {
        Document {
            tenant: "acme".into(),
            id: id.into(),
            title: "T".into(),
            body: "B".into(),
            version: "sha256:1".into(),
            publish_at: None,
            status: "new".into(),
            via: None,
            thread_id: None,
            run_id: None,
            delivery_id: None,
            submitted_by: "eve".into(),
        }
    }

    /// One routing job holds a document: the same job again (taken over after a crash) keeps
    /// it, another job does not get it, and a routed document is no one's to claim.
    #[tokio::test]
    async fn a_document_is_routed_by_the_one_job_that_claimed_it() {
        let path = std::env::temp_dir().join(format!(
            "shareflow-claims-{}-{}.db",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        let db = AppDb::open(&path).await.unwrap();
        db.insert_document(&document("d")).await.unwrap();
        assert!(db.claim_routing("acme", "d", "job-a").await.unwrap());
        assert!(
            db.claim_routing("acme", "d", "job-a").await.unwrap(),
            "its takeover"
        );
        assert!(!db.claim_routing("acme", "d", "job-b").await.unwrap());
        assert!(!db.claim_routing("globex", "d", "job-a").await.unwrap());
        // A failed job lets go: the document is new again, for the next job.
        assert!(!db.release_routing("acme", "d", "job-b").await.unwrap());
        assert!(db.release_routing("acme", "d", "job-a").await.unwrap());
        assert_eq!(db.stranded().await.unwrap().len(), 1);
        assert!(db.claim_routing("acme", "d", "job-b").await.unwrap());
        db.set_published("acme", "d", Workflow::Legacy, "delivery-1")
            .await
            .unwrap();
        assert!(!db.claim_routing("acme", "d", "job-b").await.unwrap());
        assert!(db.stranded().await.unwrap().is_empty());
        let _ = std::fs::remove_file(&path);
    }
}
