//! The CRM end to end through its server: runs started and approvals decided over Forge's
//! GraphQL API with real tokens, the records read and changed through the CRM's own MCP server
//! (the `crm` binary, started by Forge's MCP import), the notes searched and cited.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crm::{Options, Running, StoreChoice};
use forge::core::scope::Scope;
use serde_json::{Value, json};

const SECRET: &[u8] = b"crm-test-secret-crm-test-secret-0123456789";

struct Env {
    running: Running,
    http: reqwest::Client,
    /// Forge's API, as the tests drive it.
    client: forge::testing::Client,
    dir: std::path::PathBuf,
}

fn admin_url() -> String {
    std::env::var("FORGE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

impl Env {
    async fn start(store: StoreChoice) -> Env {
        let dir = std::env::temp_dir().join(format!(
            "crm-test-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        let running = Running::start(Options {
            data: dir.clone(),
            store,
            listen: "127.0.0.1:0".parse().unwrap(),
            crm_command: env!("CARGO_BIN_EXE_crm").into(),
            secret: SECRET.to_vec(),
            dev_sign_in: false,
            dev_sign_in_anywhere: false,
        })
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the CRM did not start: {e}\n(PostgreSQL tests need a server at {}; start it with `bash scripts/test-services.sh` in Forge's repository)",
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

    async fn stop(self) {
        self.running.stop().await;
        std::fs::remove_dir_all(&self.dir).ok();
    }

    fn token(&self, principal: &str, roles: &[&str]) -> String {
        self.token_in("acme", principal, roles)
    }

    fn token_in(&self, tenant: &str, principal: &str, roles: &[&str]) -> String {
        let scope = Scope::parse(tenant, principal, roles).unwrap();
        let now = chrono::Utc::now().timestamp();
        forge::server::auth::sign_hs256(SECRET, &scope, 3600, now).unwrap()
    }

    /// `POST /crm/notes` with `note`, as `token`.
    async fn post_note(&self, token: &str, note: Value) -> reqwest::Response {
        self.http
            .post(format!("{}/crm/notes", self.running.url))
            .bearer_auth(token)
            .json(&note)
            .send()
            .await
            .unwrap()
    }

    async fn gql(&self, token: &str, query: &str, variables: Value) -> Result<Value, String> {
        self.client.gql(token, query, variables).await
    }

    /// Starts a run of the assistant on a new thread; returns (thread, run).
    async fn ask(&self, token: &str, message: &str) -> (String, String) {
        self.client.ask(token, "assistant", message).await.unwrap()
    }

    /// Waits until the run's status is one of `statuses`.
    async fn until(&self, token: &str, run: &str, statuses: &[&str]) -> String {
        self.client
            .wait_for_status(token, run, statuses)
            .await
            .unwrap()
    }

    /// The thread's assistant text and its citations' source ids, once the run completed.
    async fn answer(&self, token: &str, thread: &str, run: &str) -> (String, Vec<String>) {
        assert_eq!(
            self.until(token, run, &["completed", "failed"]).await,
            "completed"
        );
        let answer = self.client.answer(token, thread).await.unwrap();
        (answer.text, answer.cited)
    }

    async fn pending(&self, token: &str) -> Vec<String> {
        let pending = self.client.pending_approvals(token).await.unwrap();
        pending.into_iter().map(|p| p.id).collect()
    }

    async fn approve(&self, token: &str, interaction: &str) -> Result<Value, String> {
        self.client.approve(token, interaction).await
    }
}

/// The import is pinned: every tool of the CRM's MCP server matches `mcp/mcp.lock` and is offered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crm_mcp_server_matches_its_pins_and_every_tool_is_offered() {
    let env = Env::start(StoreChoice::Sqlite).await;
    let mcp = env.running.crm.mcp();
    assert!(
        mcp.diffs().iter().all(|d| d.is_clean()),
        "{:?}",
        mcp.diffs()
    );
    let mut names: Vec<String> = mcp.tools().iter().map(|t| t.spec().name.clone()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "crm__get_company",
            "crm__list_opportunities",
            "crm__list_tasks",
            "crm__update_opportunity"
        ]
    );
    assert!(mcp.tools().iter().all(|t| t.available()));
    env.stop().await;
}

/// Per-user visibility by Cedar on the MCP path: a rep lists their own pipeline, not another
/// rep's; a manager lists anyone's; another tenant reaches no CRM tool at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rep_sees_their_own_pipeline_and_a_manager_sees_everyones() {
    let env = Env::start(StoreChoice::Sqlite).await;
    let alice = env.token("alice", &["sales"]);
    let carol = env.token("carol", &["manager"]);
    let (t, r) = env.ask(&alice, "Show my pipeline").await;
    let (text, _) = env.answer(&alice, &t, &r).await;
    assert!(
        text.contains("Initech renewal") && text.contains("opp-3"),
        "{text}"
    );
    assert!(!text.contains("Globex expansion"), "{text}");
    // The same words from bob are bob's pipeline: the agent is not told whose, the engine binds
    // the owner to whoever asks.
    let bob = env.token("bob", &["sales"]);
    let (t, r) = env.ask(&bob, "Show my pipeline").await;
    let (text, _) = env.answer(&bob, &t, &r).await;
    assert!(text.contains("Globex expansion"), "{text}");
    assert!(!text.contains("Initech renewal"), "{text}");

    let (t, r) = env.ask(&alice, "What is in bob's pipeline?").await;
    let (text, _) = env.answer(&alice, &t, &r).await;
    assert!(
        !text.contains("Globex expansion"),
        "alice saw bob's pipeline: {text}"
    );
    assert!(text.contains("is not permitted"), "{text}");

    let (t, r) = env.ask(&carol, "What is in bob's pipeline?").await;
    let (text, _) = env.answer(&carol, &t, &r).await;
    assert!(
        text.contains("Globex expansion") && text.contains("120000"),
        "{text}"
    );

    let gus = env.token_in("globex", "gus", &["manager"]);
    let (t, r) = env.ask(&gus, "What is in bob's pipeline?").await;
    let (text, _) = env.answer(&gus, &t, &r).await;
    assert!(
        !text.contains("Globex expansion"),
        "another tenant read the CRM: {text}"
    );
    env.stop().await;
}

/// The CRM's own listing is decided by the same policies as the assistant's tool: a rep reads
/// their own opportunities, a manager every one, and someone in neither role none — even one
/// whose id owns opportunities.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_opportunity_listing_follows_the_policies() {
    let env = Env::start(StoreChoice::Sqlite).await;
    let listed = async |token: &str| -> Vec<String> {
        let r = env
            .http
            .get(format!("{}/crm/opportunities", env.running.url))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let all: Vec<Value> = r.json().await.unwrap();
        all.iter()
            .map(|o| o["owner"].as_str().unwrap().to_owned())
            .collect()
    };
    let alice = listed(&env.token("alice", &["sales"])).await;
    assert!(
        !alice.is_empty() && alice.iter().all(|o| o == "alice"),
        "{alice:?}"
    );
    let carol = listed(&env.token("carol", &["manager"])).await;
    assert!(carol.contains(&"alice".to_owned()) && carol.contains(&"bob".to_owned()));
    let viewer = listed(&env.token("alice", &["viewer"])).await;
    assert!(viewer.is_empty(), "a viewer listed {viewer:?}");
    env.stop().await;
}

/// Notes are found and cited by exact span; a private note is its author's alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notes_are_cited_and_private_notes_stay_private() {
    let env = Env::start(StoreChoice::Sqlite).await;
    let alice = env.token("alice", &["sales"]);
    let bob = env.token("bob", &["sales"]);
    let (t, r) = env
        .ask(&alice, "What do the notes say about the Initech renewal?")
        .await;
    let (text, cited) = env.answer(&alice, &t, &r).await;
    assert_eq!(cited, ["note-1"]);
    assert!(text.contains("31 March"), "{text}");

    let (t, r) = env.ask(&bob, "Any notes on the Globex discount?").await;
    let (_, cited) = env.answer(&bob, &t, &r).await;
    assert_eq!(cited, ["note-2"], "bob cites his own private note");
    let (t, r) = env.ask(&alice, "Any notes on the Globex discount?").await;
    let (text, cited) = env.answer(&alice, &t, &r).await;
    assert!(cited.is_empty(), "alice cited bob's private note: {text}");
    assert!(!text.contains("10%"), "{text}");

    // A note added through the API is searchable at once, with its own visibility.
    let note = json!({ "record_kind": "company", "record_id": "co-initech", "body": "Initech prefers invoices in euros.", "visibility": "private" });
    let added: Value = env.post_note(&alice, note).await.json().await.unwrap();
    assert_eq!(added["author"], "alice");
    let id = added["id"].as_str().unwrap().to_owned();
    let readable = |principal: &'static str| {
        let retriever = env.running.crm.retriever().clone();
        async move {
            let scope = Scope::parse("acme", principal, &["sales"]).unwrap();
            let ids = retriever.readable(&scope).await.unwrap();
            ids.iter()
                .map(|i| i.as_str().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert!(readable("alice").await.contains(&id));
    assert!(
        !readable("bob").await.contains(&id),
        "bob may read alice's private note"
    );

    // A principal whose id is the team label's text: a private note is still its author's
    // alone (ownership is the source's owner, not a label an id could equal).
    let team = env.token("team", &["sales"]);
    let note = json!({ "record_kind": "company", "record_id": "co-initech", "body": "Initech's CFO is leaving.", "visibility": "private" });
    let added: Value = env.post_note(&team, note).await.json().await.unwrap();
    let id = added["id"].as_str().unwrap().to_owned();
    assert!(readable("team").await.contains(&id));
    assert!(
        !readable("alice").await.contains(&id),
        "a private note by the principal `team` is readable by everyone"
    );
    env.stop().await;
}

/// The CRM's own API answers in JSON, every time: an unknown path under `/crm` is a JSON 404
/// (not the web client's page), a body that is not a note is a JSON 4xx, and a note on a record
/// that does not exist is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crm_api_answers_every_request_in_json() {
    let env = Env::start(StoreChoice::Sqlite).await;
    let alice = env.token("alice", &["sales"]);
    let url = |path: &str| format!("{}{path}", env.running.url);
    let is_json = |r: &reqwest::Response| {
        r.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"))
    };
    for path in ["/crm/nope", "/crm/opportunities/extra", "/crm"] {
        let r = env
            .http
            .get(url(path))
            .bearer_auth(&alice)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{path}");
        assert!(is_json(&r), "{path}: {:?}", r.headers());
    }
    let r = env
        .http
        .post(url("/crm/notes"))
        .bearer_auth(&alice)
        .header("content-type", "application/json")
        .body("{\"record_kind\": 1}")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_client_error(), "{}", r.status());
    assert!(is_json(&r), "{:?}", r.headers());
    assert_eq!(
        r.json::<Value>().await.unwrap()["errors"][0]["extensions"]["code"],
        "BAD_REQUEST"
    );
    let r = env.post_note(&alice, json!({ "record_kind": "company", "record_id": "co-nowhere", "body": "Hello.", "visibility": "team" })).await;
    assert_eq!(r.status(), 404);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("co-nowhere"),
        "{body}"
    );
    // Who may add a note is the policies' decision: a viewer adds no team note for the
    // assistant to cite to everyone.
    let viewer = env.token("vic", &["viewer"]);
    let r = env.post_note(&viewer, json!({ "record_kind": "company", "record_id": "co-initech", "body": "Initech is churning.", "visibility": "team" })).await;
    assert_eq!(r.status(), 403);
    assert!(is_json(&r));
    assert!(
        !env.running
            .crm
            .db()
            .notes()
            .await
            .unwrap()
            .iter()
            .any(|n| n.record_id == "co-nowhere" || n.author == "vic"),
        "a refused note was stored anyway"
    );
    env.stop().await;
}

/// A record update is an external write: it waits for a manager (not the rep who asked, not
/// another rep), then applies once through the MCP server, under the call's idempotency key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_update_waits_for_a_manager_and_applies_once() {
    let env = Env::start(StoreChoice::Sqlite).await;
    let alice = env.token("alice", &["sales", "manager"]);
    let bob = env.token("bob", &["sales"]);
    let carol = env.token("carol", &["manager"]);
    let (t, r) = env.ask(&alice, "Please mark opp-1 won").await;
    env.until(&alice, &r, &["waiting"]).await;
    let db = env.running.crm.db();
    assert_eq!(
        db.opportunities(Some("alice")).await.unwrap()[0].stage,
        "proposal"
    );
    assert!(
        env.pending(&bob).await.is_empty(),
        "a rep may not approve updates"
    );
    let pending = env.client.pending_approvals(&carol).await.unwrap();
    let approval = pending.last().expect("the manager sees the approval");
    // The card says what the update does: the record, the stage it leaves and enters, and the
    // record before and after — not only the tool's raw input.
    let preview = approval.preview.clone().expect("the update has a preview");
    assert_eq!(
        preview.summary,
        "Move Initech renewal (opp-1) from proposal to won"
    );
    let fact = |label: &str| {
        preview
            .facts
            .iter()
            .find(|f| f.label == label)
            .map(|f| f.value.clone())
    };
    assert_eq!(fact("Stage").as_deref(), Some("proposal → won"));
    assert_eq!(fact("Owner").as_deref(), Some("alice"));
    let change = preview.change.clone().expect("the record before and after");
    assert!(change.before.contains("stage: proposal"), "{change:?}");
    assert!(change.after.contains("stage: won"), "{change:?}");
    assert_eq!(
        change.before.replace("proposal", "won"),
        change.after,
        "only the stage changes"
    );
    let approval = approval.id.clone();
    let own = env.approve(&alice, &approval).await.unwrap_err();
    assert!(own.contains("approve"), "{own}");
    env.approve(&carol, &approval).await.unwrap();
    let (text, _) = env.answer(&alice, &t, &r).await;
    assert!(text.contains("\"stage\":\"won\""), "{text}");
    // The record as the server's structured result, not JSON encoded again inside a string.
    assert!(!text.contains("\\\""), "double-encoded: {text}");
    assert_eq!(
        db.opportunities(Some("alice")).await.unwrap()[0].stage,
        "won"
    );
    assert_eq!(db.applied_updates().await.unwrap(), 1);
    // Approving again is the same decision, and nothing applies twice.
    env.approve(&carol, &approval).await.unwrap();
    assert_eq!(db.applied_updates().await.unwrap(), 1);
    env.stop().await;
}

/// A client that sends a request again (it timed out, its connection dropped) gets what the
/// first made: the record's thread by its external key, the update's run and its one approval by
/// the start's idempotency key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_request_is_one_thread_one_run_and_one_approval() {
    let env = Env::start(StoreChoice::Sqlite).await;
    let alice = env.token("alice", &["sales", "manager"]);
    let carol = env.token("carol", &["manager"]);
    let thread_of = async |key: &str| {
        env.gql(
            &alice,
            "mutation($k: String) { createThread(externalKey: $k, title: \"opp-1\") { id } }",
            json!({ "k": key }),
        )
        .await
        .unwrap()["createThread"]["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let thread = thread_of("opportunity:opp-1").await;
    assert_eq!(thread_of("opportunity:opp-1").await, thread);
    assert_ne!(thread_of("opportunity:opp-2").await, thread);
    let start = async || {
        env.gql(
            &alice,
            "mutation($i: StartRunInput!) { startRun(input: $i) { id } }",
            json!({ "i": {
                "threadId": thread, "agent": "assistant", "message": "Please mark opp-1 won",
                "idempotencyKey": "mark-opp-1-won",
            } }),
        )
        .await
        .unwrap()["startRun"]["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let run = start().await;
    env.until(&alice, &run, &["waiting"]).await;
    assert_eq!(start().await, run, "the retry is the first run");
    assert_eq!(env.pending(&carol).await.len(), 1, "and its one approval");
    env.stop().await;
}

/// The main path on PostgreSQL (row-level security, the CRM's own role).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crm_runs_on_postgres() {
    let database = format!("crm_test_{}", uuid::Uuid::new_v4().simple());
    let env = Env::start(StoreChoice::Postgres {
        admin_url: admin_url(),
        database: database.clone(),
    })
    .await;
    let alice = env.token("alice", &["sales"]);
    let carol = env.token("carol", &["manager"]);
    let (t, r) = env
        .ask(&alice, "What do the notes say about the Initech renewal?")
        .await;
    assert_eq!(env.answer(&alice, &t, &r).await.1, ["note-1"]);
    let (t, r) = env.ask(&alice, "Please mark opp-1 won").await;
    env.until(&alice, &r, &["waiting"]).await;
    let approval = env.pending(&carol).await.pop().expect("an approval");
    env.approve(&carol, &approval).await.unwrap();
    env.answer(&alice, &t, &r).await;
    assert_eq!(env.running.crm.db().applied_updates().await.unwrap(), 1);
    env.stop().await;
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&admin_url()).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
}
