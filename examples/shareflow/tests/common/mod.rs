//! The rollout tests' harness: ShareFlow started whole (server, worker, publishing service) on a
//! store of its own, driven through its HTTP API and Forge's GraphQL API with real tokens.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use shareflow::{Delivery, Document, Options, Running, StoreChoice};

pub const SECRET: &[u8] = b"rollout-test-secret-rollout-test-secret-0123";

pub struct Env {
    pub running: Running,
    pub http: reqwest::Client,
    /// Forge's API, as the tests drive it.
    pub client: forge::testing::Client,
    dir: std::path::PathBuf,
}

/// The administrator URL tests use for PostgreSQL.
pub fn admin_url() -> String {
    std::env::var("FORGE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

impl Env {
    pub async fn start(store: StoreChoice) -> Env {
        let dir = std::env::temp_dir().join(format!(
            "shareflow-test-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        Env::start_in(dir, store).await
    }

    /// ShareFlow stopped and started again on the same SQLite data.
    pub async fn restart(self) -> Env {
        self.running.stop().await;
        Env::start_in(self.dir, StoreChoice::Sqlite).await
    }

    async fn start_in(dir: std::path::PathBuf, store: StoreChoice) -> Env {
        let running = Running::start(Options {
            data: dir.clone(),
            store,
            listen: "127.0.0.1:0".parse().unwrap(),
            publisher_listen: "127.0.0.1:0".parse().unwrap(),
            publisher_url: None,
            secret: SECRET.to_vec(),
            dev_sign_in: false,
            dev_sign_in_anywhere: false,
            takeover_after: shareflow::run::TAKEOVER_AFTER,
        })
        .await
        .unwrap_or_else(|e| {
            panic!(
                "ShareFlow did not start: {e}\n(PostgreSQL tests need a server at {}; start it with `bash scripts/test-services.sh` in Forge's repository)",
                admin_url()
            )
        });
        let client = forge::testing::Client::new(&running.url);
        Env {
            running,
            http: reqwest::Client::new(),
            client,
            dir,
        }
    }

    /// ShareFlow's data directory.
    pub fn data(&self) -> &std::path::Path {
        &self.dir
    }

    pub async fn sqlite() -> Env {
        Env::start(StoreChoice::Sqlite).await
    }

    pub async fn stop(self) {
        self.running.stop().await;
        std::fs::remove_dir_all(&self.dir).ok();
    }

    pub fn token(&self, tenant: &str, principal: &str, roles: &[&str]) -> String {
        Running::token(SECRET, tenant, principal, roles).unwrap()
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.running.url)
    }

    /// A request to ShareFlow's API; the status and the JSON body.
    pub async fn api(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self.http.request(method, self.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = req.send().await.unwrap();
        let status = res.status().as_u16();
        (status, res.json().await.unwrap_or(Value::Null))
    }

    /// Drops the sample document `id` (from `documents/`), as `token`.
    pub async fn drop(&self, token: &str, id: &str) -> Document {
        self.drop_at(token, id, None).await
    }

    pub async fn drop_at(&self, token: &str, id: &str, publish_at: Option<&str>) -> Document {
        let body = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("documents")
                .join(format!("{id}.md")),
        )
        .unwrap();
        let title = body
            .lines()
            .next()
            .unwrap()
            .trim_start_matches("# ")
            .to_owned();
        let (status, doc) = self
            .api(
                reqwest::Method::POST,
                "/app/documents",
                Some(token),
                Some(json!({ "id": id, "title": title, "body": body, "publish_at": publish_at })),
            )
            .await;
        assert_eq!(status, 201, "dropping {id}: {doc}");
        serde_json::from_value(doc).unwrap()
    }

    pub async fn set_workflow(&self, token: &str, workflow: &str) -> Value {
        let (status, change) = self
            .api(
                reqwest::Method::PUT,
                "/app/workflow",
                Some(token),
                Some(json!({ "workflow": workflow })),
            )
            .await;
        assert_eq!(status, 200, "turning the flag to {workflow}: {change}");
        change
    }

    pub async fn documents(&self, token: &str) -> Vec<Document> {
        let (status, docs) = self
            .api(reqwest::Method::GET, "/app/documents", Some(token), None)
            .await;
        assert_eq!(status, 200, "{docs}");
        serde_json::from_value(docs).unwrap()
    }

    pub async fn document(&self, token: &str, id: &str) -> Document {
        self.documents(token)
            .await
            .into_iter()
            .find(|d| d.id == id)
            .unwrap_or_else(|| panic!("no document {id}"))
    }

    /// Every delivery the publishing service recorded for `tenant`, read from the service.
    pub async fn deliveries(&self, tenant: &str) -> Vec<Delivery> {
        self.running
            .app
            .publisher()
            .deliveries(tenant)
            .await
            .unwrap()
    }

    /// A GraphQL request as `token`; the data, or the errors' first message.
    pub async fn gql(&self, token: &str, query: &str, variables: Value) -> Result<Value, String> {
        self.client.gql(token, query, variables).await
    }

    /// The approvals `token` may decide, as (interaction id, thread id).
    pub async fn pending(&self, token: &str) -> Vec<(String, String)> {
        let pending = self.client.pending_approvals(token).await.unwrap();
        pending.into_iter().map(|p| (p.id, p.thread_id)).collect()
    }

    /// Waits until `document`'s approval reaches `token`; returns its interaction id.
    pub async fn approval_for(&self, token: &str, editor: &str, document: &str) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let thread = self.document(editor, document).await.thread_id;
            if let Some(thread) = thread
                && let Some((id, _)) = self
                    .pending(token)
                    .await
                    .into_iter()
                    .find(|(_, t)| *t == thread)
            {
                return id;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{document}'s draft did not reach review within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn approve(&self, token: &str, interaction: &str) -> Result<Value, String> {
        self.client.approve(token, interaction).await
    }

    /// The run's status, read through GraphQL.
    pub async fn run_status(&self, token: &str, run: &str) -> String {
        self.client.run_status(token, run).await.unwrap()
    }

    /// Waits until the run `run` has ended; returns its status.
    pub async fn run_ends(&self, token: &str, run: &str) -> String {
        let ended = ["completed", "failed", "cancelled"];
        self.client
            .wait_for_status(token, run, &ended)
            .await
            .unwrap()
    }

    /// Waits until `document` is published; returns it.
    pub async fn published(&self, token: &str, document: &str) -> Document {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let doc = self.document(token, document).await;
            if doc.status == "published" {
                return doc;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{document} still {} after 30 s",
                doc.status
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// One delivery per document, and which documents.
pub fn per_document(deliveries: &[Delivery]) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for d in deliveries {
        *counts.entry(d.post.document.clone()).or_insert(0) += 1;
    }
    counts
}
