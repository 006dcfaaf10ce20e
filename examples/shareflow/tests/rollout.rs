//! ShareFlow's rollout gates, end to end through the server: the same representative cases on
//! both workflows, no security regression, idempotent external writes, the agent workflow's
//! cost envelope, and a verified feature-flag rollback. Each starts the whole application (server,
//! worker, publishing service) on a store of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, per_document};
use forge::core::event::RunEventKind;
use forge::core::part::Part;
use forge::core::scope::Scope;
use shareflow::StoreChoice;

/// The agent workflow's token envelope per document (the scripted model's metered usage, with
/// room for the instructions and tool descriptions to grow by half: 2,326 when written).
const ENVELOPE_TOKENS: u64 = 3_500;

const DOCS: [&str; 3] = ["spring-launch", "holiday-hours", "recycled-packaging"];

/// Rolling the flag back while drafts are in every state: published by the agent, delivered but
/// unrecorded (the publisher's answers were lost), waiting for review, and dropped afterwards.
/// Every document ends with exactly one delivery, under one key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feature_flag_rollback_mid_flight_loses_and_duplicates_nothing() {
    let env = Env::sqlite().await;
    let editor = env.token("acme", "eve", &["editor"]);
    let reviewer = env.token("acme", "rita", &["reviewer"]);
    let admin = env.token("acme", "ada", &["admin"]);
    let publisher = env.running.publisher.clone().unwrap();
    env.set_workflow(&admin, "agent").await;

    // 1. Published through the agent before the rollback.
    env.drop(&editor, "spring-launch").await;
    let a = env.approval_for(&reviewer, &editor, "spring-launch").await;
    env.approve(&reviewer, &a).await.unwrap();
    assert_eq!(
        env.published(&editor, "spring-launch").await.via.as_deref(),
        Some("agent")
    );

    // 2. Delivered, but every answer lost: the service has the post, ShareFlow does not know.
    publisher.lose_responses("holiday-hours", 1_000);
    env.drop(&editor, "holiday-hours").await;
    let b = env.approval_for(&reviewer, &editor, "holiday-hours").await;
    env.approve(&reviewer, &b).await.unwrap();
    let b_run = env.document(&editor, "holiday-hours").await.run_id.unwrap();
    env.run_ends(&editor, &b_run).await;
    // The run ended without the post recorded: the document says so (the rollback retries it).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while env.document(&editor, "holiday-hours").await.status != "failed" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "holiday-hours never failed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        per_document(&env.deliveries("acme").await)["holiday-hours"],
        1
    );
    publisher.lose_responses("holiday-hours", 0);

    // 3. Waiting for review when the flag turns.
    env.drop(&editor, "recycled-packaging").await;
    env.approval_for(&reviewer, &editor, "recycled-packaging")
        .await;
    let c_run = env
        .document(&editor, "recycled-packaging")
        .await
        .run_id
        .unwrap();

    let change = env.set_workflow(&admin, "legacy").await;
    assert_eq!(change["from"], "agent");
    let republished: Vec<&str> = change["republished"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(republished, ["holiday-hours", "recycled-packaging"]);
    assert_eq!(change["pending"], serde_json::json!([]));
    assert_eq!(env.run_ends(&editor, &c_run).await, "cancelled");
    // The cancelled draft's approval is gone from the reviewer's list.
    assert!(env.pending(&reviewer).await.is_empty());

    // 4. After the rollback, new documents take the legacy path at once.
    let d = env.drop(&editor, "globex-merger").await;
    assert_eq!(d.status, "published");
    assert_eq!(d.via.as_deref(), Some("legacy"));

    let deliveries = env.deliveries("acme").await;
    let counts = per_document(&deliveries);
    assert_eq!(
        counts.into_iter().collect::<Vec<_>>(),
        [
            ("globex-merger".to_owned(), 1),
            ("holiday-hours".to_owned(), 1),
            ("recycled-packaging".to_owned(), 1),
            ("spring-launch".to_owned(), 1),
        ],
        "one delivery per document: {deliveries:#?}"
    );
    // The post the agent delivered (and lost the answers to) is the one the service keeps: the
    // legacy publish replayed it instead of posting a second.
    let b_delivery = deliveries
        .iter()
        .find(|d| d.post.document == "holiday-hours")
        .unwrap();
    assert_eq!(b_delivery.post.via, "agent");
    assert!(
        b_delivery.attempts > 3,
        "the client's retries and the replay reached it once"
    );
    let docs = env.documents(&editor).await;
    assert!(docs.iter().all(|d| d.status == "published"), "{docs:#?}");
    assert_eq!(
        env.document(&editor, "holiday-hours")
            .await
            .delivery_id
            .as_deref(),
        Some(b_delivery.id.as_str())
    );
    env.stop().await;
}

/// The publisher records a post and its answer is lost: the client tries again with the same key
/// and the service returns the first delivery instead of recording a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_delivery_is_recorded_once() {
    let env = Env::sqlite().await;
    let editor = env.token("acme", "eve", &["editor"]);
    let reviewer = env.token("acme", "rita", &["reviewer"]);
    let admin = env.token("acme", "ada", &["admin"]);
    let publisher = env.running.publisher.clone().unwrap();

    // Legacy: the first answer is lost, the retry replays it.
    publisher.lose_responses("recycled-packaging", 1);
    let doc = env.drop(&editor, "recycled-packaging").await;
    assert_eq!(doc.status, "published");

    // Agent: the same through the approved tool call.
    env.set_workflow(&admin, "agent").await;
    publisher.lose_responses("spring-launch", 2);
    env.drop(&editor, "spring-launch").await;
    let a = env.approval_for(&reviewer, &editor, "spring-launch").await;
    env.approve(&reviewer, &a).await.unwrap();
    env.published(&editor, "spring-launch").await;

    let deliveries = env.deliveries("acme").await;
    assert_eq!(deliveries.len(), 2, "{deliveries:#?}");
    let attempts = |doc: &str| {
        deliveries
            .iter()
            .find(|d| d.post.document == doc)
            .map(|d| d.attempts)
            .unwrap()
    };
    assert_eq!(attempts("recycled-packaging"), 2);
    assert_eq!(attempts("spring-launch"), 3);
    // Both documents' records point at the delivery the service kept.
    for d in env.documents(&editor).await {
        let kept = deliveries.iter().find(|x| x.post.document == d.id).unwrap();
        assert_eq!(d.delivery_id.as_deref(), Some(kept.id.as_str()));
    }
    env.stop().await;
}

/// The representative documents produce a post on either workflow: the legacy one quotes the
/// first sentence; the agent's is grounded, with a citation of that exact sentence committed in
/// its run, and carries the document's version as its source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_representative_cases_publish_one_cited_post_on_either_workflow() {
    let legacy = Env::sqlite().await;
    let agent = Env::sqlite().await;
    let editor = |env: &Env| env.token("acme", "eve", &["editor"]);
    let reviewer = agent.token("acme", "rita", &["reviewer"]);
    agent
        .set_workflow(&agent.token("acme", "ada", &["admin"]), "agent")
        .await;
    for id in DOCS {
        legacy.drop(&editor(&legacy), id).await;
        agent.drop(&editor(&agent), id).await;
        let approval = agent.approval_for(&reviewer, &editor(&agent), id).await;
        agent.approve(&reviewer, &approval).await.unwrap();
    }
    let scope = Scope::parse("acme", "eve", &["editor"]).unwrap();
    for id in DOCS {
        let before = legacy.document(&editor(&legacy), id).await;
        let after = agent.published(&editor(&agent), id).await;
        assert_eq!(before.via.as_deref(), Some("legacy"));
        assert_eq!(after.via.as_deref(), Some("agent"));
        let first_sentence = before
            .body
            .lines()
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .unwrap()
            .to_owned();
        let legacy_post = legacy.deliveries("acme").await;
        let legacy_post = legacy_post.iter().find(|d| d.post.document == id).unwrap();
        assert!(legacy_post.post.text.contains(&first_sentence));
        let agent_posts = agent.deliveries("acme").await;
        let agent_post = agent_posts.iter().find(|d| d.post.document == id).unwrap();
        assert_eq!(agent_post.post.sources, [format!("{id}@{}", after.version)]);

        // The run cited the same sentence of the same version.
        let run = after.run_id.unwrap().parse().unwrap();
        let events = agent
            .running
            .app
            .engine()
            .runs()
            .read_events(&scope, run, 0, 1000)
            .await
            .unwrap();
        let cited: Vec<_> = events
            .iter()
            .filter_map(|e| match &e.kind {
                RunEventKind::PartAdded {
                    part: Part::Citation(c),
                    ..
                } => Some(c.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(cited.len(), 1, "{id}: one citation");
        // The house style was loaded (the skill, through the policies) before drafting.
        let styled = events.iter().any(|e| {
            matches!(&e.kind, RunEventKind::PartAdded { part: Part::ToolResult(r), .. }
                if r.tool_name == "load_skill" && !r.is_error
                    && r.output.to_string().contains("280 characters"))
        });
        assert!(styled, "{id}: the post-style skill was loaded");
        assert_eq!(cited[0].source_id, id);
        assert_eq!(cited[0].source_version, after.version);
        assert_eq!(cited[0].excerpt, first_sentence);
    }
    assert_eq!(per_document(&legacy.deliveries("acme").await).len(), 3);
    assert_eq!(per_document(&agent.deliveries("acme").await).len(), 3);
    legacy.stop().await;
    agent.stop().await;
}

/// Tenants and roles hold on the new workflow as on the old: another tenant's documents, drafts,
/// approvals and posts are invisible; an editor cannot approve their own post even with the
/// reviewer role; only administrators turn the flag; no token, no access.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_security_regression_across_tenants_and_roles() {
    let env = Env::sqlite().await;
    let acme_editor = env.token("acme", "eve", &["editor", "reviewer"]);
    let acme_reviewer = env.token("acme", "rita", &["reviewer"]);
    let globex_editor = env.token("globex", "gus", &["editor"]);
    let globex_admin = env.token("globex", "gina", &["admin"]);
    let globex_reviewer = env.token("globex", "gail", &["reviewer"]);
    let acme_admin = env.token("acme", "ada", &["admin"]);
    env.set_workflow(&acme_admin, "agent").await;
    env.set_workflow(&globex_admin, "agent").await;

    env.drop(&acme_editor, "spring-launch").await;
    env.drop(&globex_editor, "globex-merger").await;
    let acme_approval = env
        .approval_for(&acme_reviewer, &acme_editor, "spring-launch")
        .await;
    env.approval_for(&globex_reviewer, &globex_editor, "globex-merger")
        .await;

    // Another tenant sees none of it.
    let globex_docs = env.documents(&globex_editor).await;
    assert_eq!(globex_docs.len(), 1);
    assert_eq!(globex_docs[0].id, "globex-merger");
    assert!(
        env.pending(&globex_reviewer)
            .await
            .iter()
            .all(|(id, _)| *id != acme_approval)
    );
    let err = env
        .approve(&globex_reviewer, &acme_approval)
        .await
        .unwrap_err();
    assert!(err.to_lowercase().contains("not found"), "{err}");
    let acme_run = env
        .document(&acme_editor, "spring-launch")
        .await
        .run_id
        .unwrap();
    let seen = env
        .gql(
            &globex_editor,
            "query($id: ID!) { run(id: $id) { status } }",
            serde_json::json!({ "id": acme_run }),
        )
        .await;
    assert!(seen.is_err() || seen.unwrap()["run"].is_null());

    // The editor cannot pass their own post, reviewer role or not.
    let own = env.approve(&acme_editor, &acme_approval).await.unwrap_err();
    assert!(own.contains("approve"), "{own}");
    // Only administrators turn the flag; only editors drop documents; no token, no access.
    let (status, _) = env
        .api(
            reqwest::Method::PUT,
            "/app/workflow",
            Some(&acme_reviewer),
            Some(serde_json::json!({ "workflow": "legacy" })),
        )
        .await;
    assert_eq!(status, 403);
    let (status, _) = env
        .api(
            reqwest::Method::POST,
            "/app/documents",
            Some(&acme_reviewer),
            Some(serde_json::json!({ "id": "x", "title": "x", "body": "x" })),
        )
        .await;
    assert_eq!(status, 403);
    let (status, _) = env
        .api(reqwest::Method::GET, "/app/documents", None, None)
        .await;
    assert_eq!(status, 401);
    let (status, body) = env
        .api(
            reqwest::Method::POST,
            "/app/documents",
            Some(&acme_editor),
            Some(serde_json::json!({ "id": "../etc", "title": "x", "body": "x" })),
        )
        .await;
    assert_eq!(status, 400, "{body}");

    // The reviewer of the right tenant passes it; each tenant has its own one post.
    env.approve(&acme_reviewer, &acme_approval).await.unwrap();
    env.published(&acme_editor, "spring-launch").await;
    assert_eq!(per_document(&env.deliveries("acme").await).len(), 1);
    assert!(env.deliveries("globex").await.is_empty());
    env.stop().await;
}

/// The agent workflow stays inside its envelope: one run per document, at most five steps (the house
/// style, search, cite, draft and publish, report), a metered token count under the envelope, and a scheduled post is
/// held by the service until its time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_workflow_stays_inside_its_cost_envelope_and_keeps_the_schedule() {
    let env = Env::sqlite().await;
    let editor = env.token("acme", "eve", &["editor"]);
    let reviewer = env.token("acme", "rita", &["reviewer"]);
    env.set_workflow(&env.token("acme", "ada", &["admin"]), "agent")
        .await;
    env.drop_at(&editor, "spring-launch", Some("2099-03-14T09:00:00Z"))
        .await;
    let a = env.approval_for(&reviewer, &editor, "spring-launch").await;
    env.approve(&reviewer, &a).await.unwrap();
    let doc = env.published(&editor, "spring-launch").await;
    let run = doc.run_id.unwrap();
    assert_eq!(env.run_ends(&editor, &run).await, "completed");
    let data = env
        .gql(
            &editor,
            "query($id: ID!) { run(id: $id) { steps costMicros usage } }",
            serde_json::json!({ "id": run }),
        )
        .await
        .unwrap();
    let steps = data["run"]["steps"].as_u64().unwrap();
    assert!((1..=5).contains(&steps), "steps: {steps}");
    let usage = &data["run"]["usage"];
    let tokens = usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap();
    eprintln!("agent workflow envelope: {steps} steps, {usage}");
    assert!(tokens > 0, "usage is metered: {usage}");
    assert!(tokens <= ENVELOPE_TOKENS, "{tokens} tokens: {usage}");
    let posts = env.deliveries("acme").await;
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].status, "scheduled");
    assert_eq!(
        posts[0].post.publish_at.map(|t| t.to_rfc3339()).as_deref(),
        Some("2099-03-14T09:00:00+00:00")
    );
    env.stop().await;
}

/// The main path on PostgreSQL (row-level security, ShareFlow's own role): a draft reviewed and
/// published, then the rollback — with ShareFlow's own tables in the same database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workflows_and_the_rollback_run_on_postgres() {
    let database = format!("shareflow_test_{}", uuid::Uuid::new_v4().simple());
    let env = Env::start(StoreChoice::Postgres {
        admin_url: common::admin_url(),
        database: database.clone(),
    })
    .await;
    let editor = env.token("acme", "eve", &["editor"]);
    let reviewer = env.token("acme", "rita", &["reviewer"]);
    let admin = env.token("acme", "ada", &["admin"]);
    env.set_workflow(&admin, "agent").await;
    env.drop(&editor, "spring-launch").await;
    env.drop(&editor, "holiday-hours").await;
    let a = env.approval_for(&reviewer, &editor, "spring-launch").await;
    env.approve(&reviewer, &a).await.unwrap();
    assert_eq!(
        env.published(&editor, "spring-launch").await.via.as_deref(),
        Some("agent")
    );
    env.approval_for(&reviewer, &editor, "holiday-hours").await;
    let change = env.set_workflow(&admin, "legacy").await;
    assert_eq!(change["republished"], serde_json::json!(["holiday-hours"]));
    let counts = per_document(&env.deliveries("acme").await);
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), [1, 1]);
    // ShareFlow's own data is in PostgreSQL too, not in a SQLite file beside it.
    assert!(!env.data().join("shareflow.db").exists());
    let published: Vec<(String, String)> = {
        use sqlx::Connection;
        let admin = common::admin_url();
        let url = format!("{}/{database}", &admin[..admin.rfind('/').unwrap()]);
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        sqlx::query_as("SELECT id, status FROM documents WHERE tenant = 'acme' ORDER BY id")
            .fetch_all(&mut conn)
            .await
            .unwrap()
    };
    assert_eq!(
        published,
        [
            ("holiday-hours".to_owned(), "published".to_owned()),
            ("spring-launch".to_owned(), "published".to_owned()),
        ]
    );
    env.stop().await;
    drop_database(&database).await;
}

async fn drop_database(name: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&common::admin_url())
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
}

/// ShareFlow's own API answers in JSON: an unknown path under `/app` is a JSON 404, never the
/// web client's page with a 200, and a malformed body a JSON 4xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_application_paths_are_json_404s() {
    let env = Env::sqlite().await;
    let editor = env.token("acme", "erin", &["editor"]);
    for path in ["/app/nope", "/app/documents/extra", "/app"] {
        let (status, body) = env
            .api(reqwest::Method::GET, path, Some(&editor), None)
            .await;
        assert_eq!(status, 404, "{path}");
        assert_eq!(
            body["errors"][0]["extensions"]["code"], "NOT_FOUND",
            "{path}: {body}"
        );
    }
    // A body that is not a document is refused in JSON too, with the reason.
    let res = env
        .http
        .post(format!("{}/app/documents", env.running.url))
        .bearer_auth(&editor)
        .header("content-type", "application/json")
        .body("{\"id\": 7")
        .send()
        .await
        .unwrap();
    assert!(res.status().is_client_error(), "{}", res.status());
    let body: serde_json::Value = res.json().await.expect("a JSON error");
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "BAD_REQUEST",
        "{body}"
    );
    env.stop().await;
}

/// Six editors drop one id at once with six different texts: one drop wins, the others are told
/// the id is taken (`409`), and the document the application keeps is the version retrieval
/// indexed, so its citations resolve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_drops_of_one_id_keep_one_version_everywhere() {
    let env = Env::sqlite().await;
    let admin = env.token("acme", "ada", &["admin"]);
    env.set_workflow(&admin, "agent").await;
    let editor = env.token("acme", "eve", &["editor"]);
    let drops = (0..6).map(|i| {
        let (env, editor) = (&env, &editor);
        async move {
            env.api(
                reqwest::Method::POST,
                "/app/documents",
                Some(editor),
                Some(serde_json::json!({
                    "id": "launch-notes",
                    "title": "Launch notes",
                    "body": format!("# Launch notes\n\nVersion {i} of the launch notes."),
                })),
            )
            .await
        }
    });
    let answers = futures_util::future::join_all(drops).await;
    let statuses: Vec<u16> = answers.iter().map(|(s, _)| *s).collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 201 || **s == 200).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 409).count(),
        5,
        "{statuses:?}"
    );
    let kept = env.document(&editor, "launch-notes").await;
    let scope = Scope::parse("acme", "eve", &["editor"]).unwrap();
    let indexed = env
        .running
        .app
        .retriever()
        .store()
        .source(
            &scope,
            &forge::rag::model::SourceId::new("launch-notes").unwrap(),
        )
        .await
        .unwrap()
        .expect("indexed");
    assert_eq!(
        indexed.version, kept.version,
        "the index holds another version"
    );
    env.stop().await;
}

/// Eight administrators turn the flag at once: every change is applied in turn, none is refused
/// because the database was busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_flag_changes_all_apply() {
    let env = Env::sqlite().await;
    let admin = env.token("acme", "ada", &["admin"]);
    let changes = (0..8).map(|i| {
        let (env, admin) = (&env, &admin);
        async move {
            env.api(
                reqwest::Method::PUT,
                "/app/workflow",
                Some(admin),
                Some(
                    serde_json::json!({ "workflow": if i % 2 == 0 { "agent" } else { "legacy" } }),
                ),
            )
            .await
        }
    });
    let answers = futures_util::future::join_all(changes).await;
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{body}");
    }
    env.stop().await;
}

/// Waits until `document` is in `status`.
async fn until_status(env: &Env, token: &str, document: &str, status: &str) -> shareflow::Document {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let doc = env.document(token, document).await;
        if doc.status == status {
            return doc;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{document} is still {} after 30 s, never {status}",
            doc.status
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A draft that ends without a post is never left `drafting`: one the reviewer rejects ends
/// `rejected` (and the rollback does not post it through the legacy workflow behind their back),
/// one cancelled ends `cancelled`; dropping it again routes it afresh instead of returning the
/// dead run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_drafts_get_a_state_a_person_can_act_on() {
    let env = Env::sqlite().await;
    let admin = env.token("acme", "ada", &["admin"]);
    let editor = env.token("acme", "eve", &["editor"]);
    let reviewer = env.token("acme", "rita", &["reviewer"]);
    env.set_workflow(&admin, "agent").await;

    env.drop(&editor, "spring-launch").await;
    let approval = env.approval_for(&reviewer, &editor, "spring-launch").await;
    env.gql(
        &reviewer,
        "mutation($id: ID!) { resolveApproval(interactionId: $id, approve: false, key: \"no\") { status } }",
        serde_json::json!({ "id": approval }),
    )
    .await
    .unwrap();
    let rejected = until_status(&env, &editor, "spring-launch", "rejected").await;

    env.drop(&editor, "holiday-hours").await;
    let run = until_status(&env, &editor, "holiday-hours", "drafting")
        .await
        .run_id
        .filter(|r| !r.is_empty());
    let run = match run {
        Some(run) => run,
        None => {
            // The run id is recorded a moment after the status.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            env.document(&editor, "holiday-hours").await.run_id.unwrap()
        }
    };
    env.gql(
        &editor,
        "mutation($id: ID!) { cancelRun(runId: $id) }",
        serde_json::json!({ "id": run }),
    )
    .await
    .unwrap();
    until_status(&env, &editor, "holiday-hours", "cancelled").await;

    // The rollback posts neither: a person said no to one and stopped the other.
    env.set_workflow(&admin, "legacy").await;
    assert_eq!(
        env.document(&editor, "spring-launch").await.status,
        "rejected"
    );
    assert_eq!(
        env.document(&editor, "holiday-hours").await.status,
        "cancelled"
    );
    assert!(
        env.deliveries("acme").await.is_empty(),
        "something was posted"
    );

    // Dropped again, the rejected document is routed afresh (the legacy post, now).
    let again = env.drop(&editor, "spring-launch").await;
    assert_ne!(again.run_id, rejected.run_id, "the dead run came back");
    until_status(&env, &editor, "spring-launch", "published").await;
    env.stop().await;
}

/// A reviewer decides on the document and the post, not on a tool's raw input: the approval says
/// which document (title, id, version, who dropped it, when it goes live), the stage it moves
/// to, and the post the feed gains — and what is published is exactly that post.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reviewer_sees_the_document_the_stage_and_the_post() {
    let env = Env::sqlite().await;
    let (editor, reviewer) = (
        env.token("acme", "eve", &["editor"]),
        env.token("acme", "rita", &["reviewer"]),
    );
    env.set_workflow(&env.token("acme", "ada", &["admin"]), "agent")
        .await;
    let doc = env
        .drop_at(&editor, "holiday-hours", Some("2031-12-01T09:00:00Z"))
        .await;
    let approval = env.approval_for(&reviewer, &editor, "holiday-hours").await;
    let pending = env.client.pending_approvals(&reviewer).await.unwrap();
    let preview = pending
        .into_iter()
        .find(|p| p.id == approval)
        .and_then(|p| p.preview)
        .expect("the approval has a preview");
    assert_eq!(
        preview.summary,
        format!("Publish the post for “{}” to acme's feed", doc.title)
    );
    let fact = |label: &str| {
        preview
            .facts
            .iter()
            .find(|f| f.label == label)
            .map(|f| f.value.clone())
            .unwrap_or_else(|| panic!("no {label} in {preview:?}"))
    };
    assert_eq!(fact("Document"), format!("{} (holiday-hours)", doc.title));
    assert!(doc.version.contains(&fact("Version")), "{}", doc.version);
    assert_eq!(fact("Dropped by"), "eve");
    assert_eq!(fact("Stage"), "drafting → published");
    assert_eq!(fact("Goes live"), "2031-12-01T09:00:00Z");
    let change = preview.change.clone().expect("the post the feed gains");
    assert_eq!(change.before, "");
    assert!(!change.after.is_empty());

    env.approve(&reviewer, &approval).await.unwrap();
    env.published(&editor, "holiday-hours").await;
    let posts = env.deliveries("acme").await;
    let post = posts
        .iter()
        .find(|d| d.post.document == "holiday-hours")
        .expect("the post");
    assert_eq!(
        post.post.text, change.after,
        "what was shown is what is published"
    );
    env.stop().await;
}

/// A drop whose process died after recording the document and before routing it leaves it
/// `new`: the next start routes it (a job on Forge's queue), and so does dropping it again —
/// each document published once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_that_died_before_routing_is_routed_after_a_restart_or_a_new_drop() {
    let env = Env::sqlite().await;
    let editor = env.token("acme", "eve", &["editor"]);
    let dropped = env.drop(&editor, "spring-launch").await;
    assert_eq!(
        dropped.status, "published",
        "the legacy workflow publishes at once"
    );
    // The process dies between recording these and routing them.
    for id in ["holiday-hours", "recycled-packaging"] {
        let body = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("documents")
                .join(format!("{id}.md")),
        )
        .unwrap();
        let source = forge::rag::ingest::ingest(
            forge::rag::model::SourceId::new(id.to_owned()).unwrap(),
            id.to_owned(),
            "team",
            forge::rag::model::Format::Markdown,
            serde_json::json!({}),
            &body,
        );
        let stranded = shareflow::Document {
            id: id.into(),
            title: body
                .lines()
                .next()
                .unwrap()
                .trim_start_matches("# ")
                .to_owned(),
            body,
            version: source.version,
            status: "new".into(),
            via: None,
            delivery_id: None,
            ..dropped.clone()
        };
        assert!(
            env.running
                .app
                .db()
                .insert_document(&stranded)
                .await
                .unwrap()
        );
    }
    // Dropped again: routed, not answered as it stood.
    let again = env.drop(&editor, "holiday-hours").await;
    assert_eq!(again.status, "published");
    // Restarted: the other is routed without anyone asking.
    let env = env.restart().await;
    until_status(&env, &editor, "recycled-packaging", "published").await;
    assert_eq!(
        per_document(&env.deliveries("acme").await),
        [
            ("holiday-hours".to_owned(), 1),
            ("recycled-packaging".to_owned(), 1),
            ("spring-launch".to_owned(), 1)
        ]
        .into_iter()
        .collect()
    );
    env.stop().await;
}
