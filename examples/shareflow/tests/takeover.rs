//! The flag's rollback survives its process: `shareflow serve` killed (`SIGKILL`) while it
//! publishes the documents one by one, then started again on the same data, finishes the
//! rollback by itself — every document published, each exactly once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use forge::testing::Served;
use serde_json::{Value, json};
use shareflow::{Document, Publisher, Running};

const DOCUMENTS: usize = 10;
/// How long the publishing service takes over each post: the rollback takes seconds, time to
/// kill the process in the middle of it.
const SLOW: Duration = Duration::from_millis(300);

fn serve_args(publisher: &str) -> Vec<String> {
    [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--publisher-url",
        publisher,
        "--takeover-after",
        "2",
    ]
    .map(str::to_owned)
    .to_vec()
}

async fn api(url: &str, method: reqwest::Method, path: &str, token: &str, body: Value) -> Value {
    let r = reqwest::Client::new()
        .request(method, format!("{url}{path}"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{path}: {}", r.status());
    r.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_killed_midway_finishes_after_a_restart_and_posts_once() {
    forge::providers::http::install_crypto_provider();
    // The publishing service, outside ShareFlow's process (so it outlives the kill), slowed.
    let dir = std::env::temp_dir().join(format!("shareflow-takeover-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let publisher = Publisher::open(&dir.join("publisher.db")).await.unwrap();
    let slowed = publisher.router().layer(axum::middleware::from_fn(
        async |req: axum::extract::Request, next: axum::middleware::Next| {
            tokio::time::sleep(SLOW).await;
            next.run(req).await
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let publisher_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, slowed).await });

    let program = env!("CARGO_BIN_EXE_shareflow");
    let args = serve_args(&publisher_url);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut served = Served::start(program, &args, "shareflow: listening on ").unwrap();
    let token = |roles: &[&str]| {
        Running::token(shareflow::DEV_SECRET.as_bytes(), "acme", "ada", roles).unwrap()
    };
    let (admin, editor) = (token(&["admin"]), token(&["editor"]));
    let url = served.url().to_owned();
    api(
        &url,
        reqwest::Method::PUT,
        "/app/workflow",
        &admin,
        json!({"workflow": "agent"}),
    )
    .await;
    for n in 0..DOCUMENTS {
        let body = format!("# Note {n}\n\nThe note number {n} says something. More follows.");
        let doc = json!({"id": format!("note-{n}"), "title": format!("Note {n}"), "body": body});
        api(&url, reqwest::Method::POST, "/app/documents", &editor, doc).await;
    }

    // The rollback starts publishing; the process dies after the first posts.
    let rollback = tokio::spawn({
        let (url, admin) = (url.clone(), admin.clone());
        async move {
            reqwest::Client::new()
                .put(format!("{url}/app/workflow"))
                .bearer_auth(admin)
                .json(&json!({"workflow": "legacy"}))
                .send()
                .await
        }
    });
    for waited in 0.. {
        if publisher.deliveries(Some("acme")).await.unwrap().len() >= 3 {
            break;
        }
        assert!(waited < 3_000, "the rollback never started publishing");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    served
        .kill_and_restart(program, &args, "shareflow: listening on ")
        .unwrap();
    if let Ok(answer) = rollback.await.unwrap() {
        let status = answer.status();
        panic!(
            "the rollback's request died with its process (killed mid-way), but got {status}: {}",
            answer.text().await.unwrap_or_default()
        );
    }

    // Restarted, ShareFlow takes the rollback's run over and finishes it, with no one asking.
    let url = served.url().to_owned();
    let mut docs: Vec<Document> = Vec::new();
    for _ in 0..600 {
        let all = api(
            &url,
            reqwest::Method::GET,
            "/app/documents",
            &editor,
            Value::Null,
        )
        .await;
        docs = serde_json::from_value(all).unwrap();
        if docs.iter().all(|d| d.status == "published") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        docs.len() == DOCUMENTS && docs.iter().all(|d| d.status == "published"),
        "every document published after the restart: {docs:#?}"
    );
    let mut per_document = BTreeMap::new();
    for delivery in publisher.deliveries(Some("acme")).await.unwrap() {
        *per_document.entry(delivery.post.document).or_insert(0) += 1;
    }
    assert_eq!(per_document.len(), DOCUMENTS, "{per_document:?}");
    assert!(per_document.values().all(|n| *n == 1), "{per_document:?}");
    drop(served);
    let _ = std::fs::remove_dir_all(&dir);
}
