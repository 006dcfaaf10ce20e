//! Two deployments on one PostgreSQL database, as two processes of one product would be: a run
//! queued by one that has no worker is executed by the other, and the first learns it ended from
//! PostgreSQL's notifications, not by reading the log on a timer. And `serve_with`: the
//! application's own routes beside Forge's on one listener.

#![cfg(all(feature = "postgres", feature = "server"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use forge::live::StreamSettings;
use forge::prelude::*;

const SCRIPT: &str = r#"
[[conversation]]
[[conversation.turn]]
text = ["Noted."]
"#;

/// The administrator's URL: `FORGE_TEST_DATABASE_URL`, or the local server.
fn admin_url() -> String {
    std::env::var("FORGE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A database of this test's own, as an application role of its own (two tests creating one
/// role at once would race).
async fn database(name: &str) -> String {
    let (role, database) = (
        format!("forge_facade_{name}"),
        format!("forge_facade_{name}_{}", std::process::id()),
    );
    forge::store::postgres::provision_application(&admin_url(), &role, &database)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "PostgreSQL is needed at {} ({e}); start it with `bash scripts/test-services.sh`",
                forge::redact(&admin_url())
            )
        })
}

fn deployment(url: &str) -> forge::ForgeBuilder {
    Forge::builder()
        .store(url)
        .agent(AgentDefinition::new("notes", "scripted:notes"))
        .model(ScriptedProvider::new(
            Script::parse(SCRIPT, "notes").unwrap(),
        ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_deployments_commits_wake_this_ones_waiters_through_postgres() {
    let url = database("listen").await;
    // No worker here, and streams that read the log on wake-ups only: the poll between reads
    // is longer than the test.
    let front = deployment(&url)
        .without_worker()
        .streams(StreamSettings {
            poll: Duration::from_secs(3_600),
            ..StreamSettings::default()
        })
        .build()
        .await
        .unwrap();
    let scope = Scope::parse("acme", "alice", &[]).unwrap();
    let run = front
        .start(&scope, "notes", "Remember this.")
        .await
        .unwrap();
    let back = deployment(&url).build().await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(60), run.wait())
        .await
        .expect("the other deployment's commits did not wake this one")
        .unwrap();
    assert_eq!(outcome.answer(), Some("Noted."));
    assert_eq!(back.shutdown().await.finished, 1);
    assert_eq!(front.shutdown().await.finished, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_applications_routes_are_served_beside_forges() {
    let url = database("routes").await;
    let forge = deployment(&url).build().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = forge::server::ServerConfig::new(
        forge::server::Authenticator::hs256(b"a secret of at least thirty-two bytes!").unwrap(),
    );
    let routes = axum::Router::new().route("/app/ping", axum::routing::get(|| async { "pong" }));
    let serving = tokio::spawn(forge.serve_with(listener, config, routes));
    forge::providers::http::install_crypto_provider();
    let http = reqwest::Client::new();
    let ping = http
        .get(format!("http://{addr}/app/ping"))
        .send()
        .await
        .unwrap();
    assert_eq!(ping.text().await.unwrap(), "pong");
    // Forge's readiness includes the store the deployment opened.
    let ready = http
        .get(format!("http://{addr}/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    assert!(ready.text().await.unwrap().contains("store"));
    forge.shutdown().await;
    serving.await.unwrap().unwrap();
}
