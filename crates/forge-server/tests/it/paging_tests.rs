//! Relay connections over a thread's messages and runs and the pending interactions, and a
//! compaction asked for through the API.

use serde_json::{Value, json};

use crate::support::{Opts, start, token};

const MESSAGES: &str = "query($t: ID!, $first: Int, $after: String, $last: Int, $before: String) {
    thread(id: $t) {
        messages(first: $first, after: $after, last: $last, before: $before) {
            edges { cursor node { id role text } }
            pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
        }
    }
}";

fn texts(connection: &Value) -> Vec<String> {
    connection["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e["cursor"], e["node"]["id"], "a message's cursor is its id");
            format!(
                "{}:{}",
                e["node"]["role"].as_str().unwrap(),
                e["node"]["text"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test]
async fn messages_and_runs_page_by_cursor_and_a_compaction_keeps_them_all() {
    let srv = start(Opts::default()).await;
    let t = token("acme", "alice", &["member"]);
    let thread = srv.thread(&t).await;
    let mut runs = Vec::new();
    for turn in 0..5 {
        let run = srv
            .start_run(&t, &thread, "greeter", &format!("hi {turn}"))
            .await;
        srv.wait_status(&t, &run, "completed").await;
        runs.push(run);
    }

    // Forward, three at a time, through all ten messages.
    let mut seen = Vec::new();
    let mut after = Value::Null;
    for page in 0.. {
        assert!(page < 10, "paging never ends");
        let d = srv
            .gql(
                &t,
                MESSAGES,
                json!({"t": thread, "first": 3, "after": after}),
            )
            .await;
        let c = &d["thread"]["messages"];
        seen.extend(texts(c));
        assert_eq!(c["pageInfo"]["hasPreviousPage"], page > 0);
        if c["pageInfo"]["hasNextPage"] == false {
            break;
        }
        after = c["pageInfo"]["endCursor"].clone();
    }
    let expected: Vec<String> = (0..5)
        .flat_map(|i| [format!("user:hi {i}"), "assistant:Hello there.".to_owned()])
        .collect();
    assert_eq!(seen, expected);

    // Backward: the newest four, then the two before them.
    let d = srv.gql(&t, MESSAGES, json!({"t": thread, "last": 4})).await;
    let c = &d["thread"]["messages"];
    assert_eq!(texts(c), expected[6..]);
    assert_eq!(c["pageInfo"]["hasPreviousPage"], true);
    let d = srv
        .gql(
            &t,
            MESSAGES,
            json!({"t": thread, "last": 2, "before": c["pageInfo"]["startCursor"]}),
        )
        .await;
    assert_eq!(texts(&d["thread"]["messages"]), expected[4..6]);

    // Runs, newest first, two at a time.
    let runs_query =
        "query($t: ID!, $after: String) { thread(id: $t) { runs(first: 2, after: $after) {
        nodes { id } pageInfo { hasNextPage endCursor } } } }";
    let mut newest_first = Vec::new();
    let mut after = Value::Null;
    for page in 0.. {
        assert!(page < 10, "paging never ends");
        let d = srv
            .gql(&t, runs_query, json!({"t": thread, "after": after}))
            .await;
        let c = &d["thread"]["runs"];
        newest_first.extend(
            c["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["id"].as_str().unwrap().to_owned()),
        );
        if c["pageInfo"]["hasNextPage"] == false {
            break;
        }
        after = c["pageInfo"]["endCursor"].clone();
    }
    runs.reverse();
    assert_eq!(newest_first, runs);

    // Bad requests: a page too large, a cursor that is no id, another tenant's cursor.
    let (code, message) = srv
        .gql_error(
            &t,
            "query($t: ID!) { thread(id: $t) { messages(first: 501) { nodes { id } } } }",
            json!({"t": thread}),
        )
        .await;
    assert_eq!(
        (code.as_str(), message.as_str()),
        ("BAD_REQUEST", "a page holds at most 500 items")
    );
    // A page counts its size toward the query's complexity: 500 messages with every field of
    // each, twice, is refused before anything is read.
    let (code, message) = srv
        .gql_error(
            &t,
            "query($t: ID!) { a: thread(id: $t) { messages(first: 500) { nodes { id runId role text parts createdAt } } }
                              b: thread(id: $t) { messages(first: 500) { nodes { id runId role text parts createdAt } } } }",
            json!({"t": thread}),
        )
        .await;
    assert!(message.contains("too complex"), "{code}: {message}");
    let (code, _) = srv
        .gql_error(
            &t,
            MESSAGES,
            json!({"t": thread, "first": 2, "after": "nope"}),
        )
        .await;
    assert_eq!(code, "BAD_REQUEST");
    let other = token("globex", "gina", &["member"]);
    let theirs = srv.thread(&other).await;
    let (code, _) = srv
        .gql_error(
            &other,
            MESSAGES,
            json!({"t": theirs, "first": 2, "after": seen_cursor(&srv, &t, &thread).await}),
        )
        .await;
    assert_eq!(code, "NOT_FOUND");

    // A compaction asked for: the greeter's model summarises the two oldest messages.
    let d = srv
        .gql(
            &t,
            "mutation($t: ID!) { compactThread(threadId: $t, agent: \"greeter\") { id status } }",
            json!({"t": thread}),
        )
        .await;
    let compaction = d["compactThread"]["id"].as_str().unwrap().to_owned();
    srv.wait_status(&t, &compaction, "completed").await;
    let d = srv
        .gql(
            &t,
            "query($t: ID!) { thread(id: $t) {
                summary { version covered text model runId throughMessageId }
                messages(first: 50) { nodes { id } } } }",
            json!({"t": thread}),
        )
        .await;
    let summary = &d["thread"]["summary"];
    assert_eq!(summary["version"], 1);
    assert_eq!(summary["covered"], 2, "ten messages, the eight newest kept");
    assert_eq!(summary["runId"], compaction.as_str());
    assert_eq!(summary["text"], "Hello there.");
    let nodes = d["thread"]["messages"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 10, "the stored history is whole");
    assert_eq!(summary["throughMessageId"], nodes[1]["id"]);
}

async fn seen_cursor(srv: &crate::support::Srv, t: &str, thread: &str) -> Value {
    let d = srv.gql(t, MESSAGES, json!({"t": thread, "first": 1})).await;
    d["thread"]["messages"]["pageInfo"]["endCursor"].clone()
}

#[tokio::test]
async fn pending_interactions_page_by_cursor() {
    let srv = start(Opts::default()).await;
    let t = token("acme", "alice", &["member"]);
    let mut parked = Vec::new();
    for _ in 0..3 {
        let (_, run) = srv.run_until(&t, "assistant", "ask me", "waiting").await;
        parked.push(run);
    }
    let query = "query($after: String) { pendingInteractions(first: 2, after: $after) {
        nodes { id runId kind } pageInfo { hasNextPage endCursor } } }";
    let d = srv.gql(&t, query, json!({"after": null})).await;
    let first = &d["pendingInteractions"];
    assert_eq!(first["nodes"].as_array().unwrap().len(), 2);
    assert_eq!(first["pageInfo"]["hasNextPage"], true);
    let d = srv
        .gql(&t, query, json!({"after": first["pageInfo"]["endCursor"]}))
        .await;
    let second = &d["pendingInteractions"];
    assert_eq!(second["nodes"].as_array().unwrap().len(), 1);
    assert_eq!(second["pageInfo"]["hasNextPage"], false);
    let runs: Vec<&str> = first["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .chain(second["nodes"].as_array().unwrap())
        .map(|n| n["runId"].as_str().unwrap())
        .collect();
    assert_eq!(runs, parked, "oldest first, each once");
    let other = token("globex", "gina", &["member"]);
    let d = srv.gql(&other, query, json!({"after": null})).await;
    assert!(
        d["pendingInteractions"]["nodes"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}
