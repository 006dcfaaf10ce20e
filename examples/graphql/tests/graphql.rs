//! The example as a client sees it: started as a process on a free port, asked over GraphQL with a
//! signed token, its run executed with the program's own tool, and stopped by SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use forge::core::scope::Scope;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt as _;

const SECRET: &str = "graphql-example-secret-0123456789abcdef";

/// How long a test waits for the server, scaled by `FORGE_TEST_PATIENCE` on a slow machine.
fn patience(secs: u64) -> Duration {
    let scale = std::env::var("FORGE_TEST_PATIENCE")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(4);
    Duration::from_secs(secs * scale)
}

async fn gql(http: &reqwest::Client, url: &str, token: &str, query: &str, vars: Value) -> Value {
    let res: Value = http
        .post(url)
        .bearer_auth(token)
        .json(&json!({ "query": query, "variables": vars }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(res["errors"].is_null(), "{res}");
    res["data"].clone()
}

#[tokio::test]
async fn a_run_started_over_graphql_uses_the_programs_own_tool() {
    let dir = std::env::temp_dir().join(format!("forge-graphql-example-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_forge-example-graphql"))
        .current_dir(&dir)
        .env("FORGE_JWT_SECRET", SECRET)
        .env("FORGE_LISTEN", "127.0.0.1:0")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(server.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(patience(30), lines.next_line())
        .await
        .expect("the example did not say where it listens")
        .unwrap()
        .expect("the example exited before listening");
    let url = line.strip_prefix("listening on ").unwrap().to_owned();

    let scope = Scope::parse("acme", "alice", &[]).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let token = forge::server::auth::sign_hs256(SECRET.as_bytes(), &scope, 600, now).unwrap();
    forge::providers::http::install_crypto_provider();
    let http = reqwest::Client::new();
    let thread = gql(
        &http,
        &url,
        &token,
        "mutation { createThread { id } }",
        json!({}),
    )
    .await["createThread"]["id"]
        .clone();
    let start = "mutation($i: StartRunInput!) { startRun(input: $i) { id } }";
    let input = json!({ "i": { "threadId": thread, "agent": "weather", "message": "Lisbon?" } });
    let run = gql(&http, &url, &token, start, input).await["startRun"]["id"].clone();

    // The run's status, read until it ends.
    let deadline = tokio::time::Instant::now() + patience(15);
    let query = "query($id: ID!) { run(id: $id) { status } }";
    loop {
        let status =
            gql(&http, &url, &token, query, json!({ "id": run })).await["run"]["status"].clone();
        if status == "completed" {
            break;
        }
        assert!(status != "failed", "the run failed");
        assert!(tokio::time::Instant::now() < deadline, "run still {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let messages = "query($id: ID!) { thread(id: $id) { messages(first: 10) { nodes { text } } } }";
    let data = gql(&http, &url, &token, messages, json!({ "id": thread })).await;
    let last = data["thread"]["messages"]["nodes"]
        .as_array()
        .and_then(|n| n.last())
        .map(|m| m["text"].clone());
    assert_eq!(
        last,
        Some(json!(r#"In Lisbon: "sunny and 21 °C in Lisbon""#))
    );

    // SIGTERM: the server drains, the worker stops, the process exits cleanly.
    let pid = server.id().unwrap().to_string();
    let killed = tokio::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(patience(30), server.wait())
        .await
        .expect("the example did not stop on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    std::fs::remove_dir_all(&dir).unwrap();
}
