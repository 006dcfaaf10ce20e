//! What a client needs of threads: the caller's threads a page at a time, renamed, archived,
//! deleted by their creator; the caller's pending approvals live; typed parts, usage and event
//! types beside the JSON.

use serde_json::{Value, json};

use crate::support::{Opts, Ws, start, token};

const THREADS: &str = "query($after: String) {
    threads(first: 2, after: $after) {
        edges { cursor node { id title createdBy archivedAt } }
        pageInfo { hasNextPage endCursor }
    }
}";

async fn created(srv: &crate::support::Srv, t: &str, title: &str) -> String {
    let d = srv
        .gql(
            t,
            "mutation($t: String) { createThread(title: $t) { id } }",
            json!({"t": title}),
        )
        .await;
    d["createThread"]["id"].as_str().unwrap().to_owned()
}

fn titles(d: &Value) -> Vec<String> {
    d["threads"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e["cursor"], e["node"]["id"]);
            e["node"]["title"].as_str().unwrap_or("").to_owned()
        })
        .collect()
}

#[tokio::test]
async fn the_callers_threads_page_newest_first_and_archive_rename_and_delete() {
    let srv = start(Opts::default()).await;
    let alice = token("acme", "alice", &["member"]);
    let bob = token("acme", "bob", &["member"]);
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(created(&srv, &alice, &format!("a{n}")).await);
    }
    created(&srv, &bob, "bob's").await;

    // Pages of two, newest first, every one of alice's once.
    let mut seen = Vec::new();
    let mut after = Value::Null;
    for _ in 0..5 {
        let d = srv.gql(&alice, THREADS, json!({"after": after})).await;
        seen.extend(titles(&d));
        let info = &d["threads"]["pageInfo"];
        if info["hasNextPage"] == false {
            break;
        }
        after = info["endCursor"].clone();
    }
    assert_eq!(seen, ["a4", "a3", "a2", "a1", "a0"]);
    // Everyone's, when asked (the policies let every member read threads).
    let all = srv
        .gql(
            &alice,
            "{ threads(mine: false) { nodes { title } } }",
            json!({}),
        )
        .await;
    assert_eq!(all["threads"]["nodes"].as_array().unwrap().len(), 6);

    // Rename, archive, restore.
    let d = srv
        .gql(
            &alice,
            "mutation($id: ID!) { updateThread(id: $id, title: \"renamed\", archived: true) { title archivedAt } }",
            json!({"id": ids[1]}),
        )
        .await;
    assert_eq!(d["updateThread"]["title"], "renamed");
    assert!(d["updateThread"]["archivedAt"].is_string());
    let listed = srv
        .gql(&alice, "{ threads { nodes { title } } }", json!({}))
        .await;
    assert!(
        !listed.to_string().contains("renamed"),
        "archived: not listed"
    );
    let archived = srv
        .gql(
            &alice,
            "{ threads(archived: true) { nodes { title archivedAt } } }",
            json!({}),
        )
        .await;
    assert!(archived.to_string().contains("renamed"));
    let cleared = srv
        .gql(
            &alice,
            "mutation($id: ID!) { updateThread(id: $id, title: null, archived: false) { title archivedAt } }",
            json!({"id": ids[1]}),
        )
        .await;
    assert_eq!(
        cleared["updateThread"],
        json!({"title": null, "archivedAt": null})
    );
    let (code, _) = srv
        .gql_error(
            &alice,
            "mutation($id: ID!, $t: String) { updateThread(id: $id, title: $t) { id } }",
            json!({"id": ids[0], "t": "x".repeat(201)}),
        )
        .await;
    assert_eq!(code, "BAD_REQUEST");

    // Another tenant sees none of it and changes nothing.
    let mallory = token("globex", "mallory", &["member"]);
    let theirs = srv
        .gql(
            &mallory,
            "{ threads(mine: false) { nodes { id } } }",
            json!({}),
        )
        .await;
    assert_eq!(theirs["threads"]["nodes"], json!([]));
    let (code, _) = srv
        .gql_error(
            &mallory,
            "mutation($id: ID!) { updateThread(id: $id, archived: true) { id } }",
            json!({"id": ids[0]}),
        )
        .await;
    assert_eq!(code, "NOT_FOUND");

    // Deleting: the creator may, someone else may not (without `admin`).
    let (code, _) = srv
        .gql_error(
            &bob,
            "mutation($id: ID!) { deleteThread(id: $id) { threads } }",
            json!({"id": ids[2]}),
        )
        .await;
    assert_eq!(code, "FORBIDDEN");
    let done = srv
        .gql(
            &alice,
            "mutation($id: ID!) { deleteThread(id: $id) { threads } }",
            json!({"id": ids[2]}),
        )
        .await;
    assert_eq!(done["deleteThread"]["threads"], 1);
    let (code, _) = srv
        .gql_error(
            &alice,
            "query($id: ID!) { thread(id: $id) { id } }",
            json!({"id": ids[2]}),
        )
        .await;
    assert_eq!(code, "NOT_FOUND");
}

#[tokio::test]
async fn parts_usage_and_event_types_are_typed_beside_the_json() {
    let srv = start(Opts::default()).await;
    let t = token("acme", "alice", &["member"]);
    let thread = srv.thread(&t).await;
    let run = srv.start_run(&t, &thread, "assistant", "slow").await;
    srv.wait_status(&t, &run, "completed").await;
    let d = srv
        .gql(
            &t,
            "query($t: ID!, $r: ID!) {
                thread(id: $t) { messages(first: 20) { nodes { role content {
                    __typename
                    ... on TextPart { text }
                    ... on ToolCallPart { toolName input }
                    ... on ToolResultPart { toolName output isError trusted toolVersion }
                } } } }
                run(id: $r) { tokens { inputTokens outputTokens } events(limit: 3) { type eventType } }
            }",
            json!({"t": thread, "r": run}),
        )
        .await;
    let parts: Vec<&Value> = d["thread"]["messages"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap())
        .collect();
    let kinds: Vec<&str> = parts
        .iter()
        .map(|p| p["__typename"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"TextPart")
            && kinds.contains(&"ToolCallPart")
            && kinds.contains(&"ToolResultPart"),
        "{kinds:?}"
    );
    let call = parts
        .iter()
        .find(|p| p["__typename"] == "ToolCallPart")
        .unwrap();
    assert_eq!(call["toolName"], "slow_add");
    assert_eq!(call["input"], json!({"a": 1, "b": 2}));
    let result = parts
        .iter()
        .find(|p| p["__typename"] == "ToolResultPart")
        .unwrap();
    assert_eq!(
        (&result["trusted"], &result["isError"]),
        (&json!(false), &json!(false))
    );
    assert_eq!(result["output"], json!({"sum": 3}));
    assert!(d["run"]["tokens"]["inputTokens"].as_u64().unwrap() > 0);
    let events = d["run"]["events"].as_array().unwrap();
    assert_eq!(events[0]["type"], "run.started");
    assert_eq!(events[0]["eventType"], "RUN_STARTED");
    assert_eq!(events[1]["eventType"], "STEP_STARTED");
}

#[tokio::test]
async fn a_runs_message_is_readable_before_its_first_step_commits_it() {
    // No worker: the run stays queued, so the thread's history does not hold its message yet.
    let srv = start(Opts {
        worker: false,
        ..Opts::default()
    })
    .await;
    let t = token("acme", "alice", &["member"]);
    let thread = srv.thread(&t).await;
    let run = srv.start_run(&t, &thread, "assistant", "hello there").await;
    let d = srv
        .gql(
            &t,
            "query($t: ID!, $r: ID!) {
                thread(id: $t) { messages(first: 5) { nodes { id } } }
                run(id: $r) { status input { __typename ... on TextPart { text } } }
            }",
            json!({"t": thread, "r": run}),
        )
        .await;
    assert_eq!(d["thread"]["messages"]["nodes"], json!([]));
    assert_eq!(d["run"]["status"], "queued");
    assert_eq!(
        d["run"]["input"],
        json!([{"__typename": "TextPart", "text": "hello there"}])
    );
}

#[tokio::test]
async fn the_callers_pending_approvals_arrive_live_and_leave_when_decided() {
    let srv = start(Opts::default()).await;
    let alice = token("acme", "alice", &["member"]);
    let bob = token("acme", "bob", &["member"]);
    let (mut ws, ack) = Ws::connect(&srv, Some(&bob)).await;
    assert!(ack.to_string().contains("connection_ack"), "{ack}");
    ws.subscribe(
        "p",
        "subscription { pendingInteractions { id kind runId status request } }",
        json!({}),
    )
    .await;
    let (first, _) = ws.collect("p", "pendingInteractions", Some(1)).await;
    assert_eq!(first[0], json!([]), "nothing pending at first");

    // Alice's run asks for an approval bob may give: it arrives without a query.
    let thread = srv.thread(&alice).await;
    let run = srv.start_run(&alice, &thread, "assistant", "email").await;
    let (raised, _) = ws.collect("p", "pendingInteractions", Some(1)).await;
    let list = raised[0].as_array().unwrap();
    assert_eq!(list.len(), 1, "{raised:?}");
    assert_eq!(list[0]["runId"], run.as_str());
    assert_eq!(list[0]["request"]["tool_name"], "send_email");
    // Alice may not approve her own external write: her list stays empty.
    let (mut mine, _) = Ws::connect(&srv, Some(&alice)).await;
    mine.subscribe(
        "m",
        "subscription { pendingInteractions { id } }",
        json!({}),
    )
    .await;
    let (own, _) = mine.collect("m", "pendingInteractions", Some(1)).await;
    assert_eq!(own[0], json!([]));

    // Bob decides: the list empties.
    srv.gql(
        &bob,
        "mutation($id: ID!, $h: String) { resolveApproval(interactionId: $id, approve: true, key: \"k\", inputHash: $h) { status } }",
        json!({"id": list[0]["id"], "h": list[0]["request"]["input_hash"]}),
    )
    .await;
    let (after, _) = ws.collect("p", "pendingInteractions", Some(1)).await;
    assert_eq!(after[0], json!([]));
    srv.wait_status(&alice, &run, "completed").await;
}

/// An omitted variable leaves its argument unset, as the GraphQL specification says: the
/// argument's default applies (`archived: false`), and `updateThread` leaves an omitted title
/// alone rather than clearing it (what the web client's Archive sends).
#[tokio::test]
async fn an_omitted_variable_takes_the_arguments_default() {
    let srv = start(Opts::default()).await;
    let alice = token("acme", "alice", &["member"]);
    let id = created(&srv, &alice, "Kept title").await;
    let update = "mutation Update($id: ID!, $title: String, $archived: Boolean) {
        updateThread(id: $id, title: $title, archived: $archived) { title archivedAt } }";
    let d = srv
        .gql(&alice, update, json!({"id": id, "archived": true}))
        .await;
    assert_eq!(d["updateThread"]["title"], "Kept title");
    assert!(d["updateThread"]["archivedAt"].is_string());
    // Given as null, it is cleared.
    let d = srv
        .gql(&alice, update, json!({"id": id, "title": null}))
        .await;
    assert_eq!(d["updateThread"]["title"], Value::Null);
    assert!(
        d["updateThread"]["archivedAt"].is_string(),
        "archived left alone"
    );
    // A non-null argument with a default takes it when its variable is omitted.
    let listed = srv
        .gql(
            &alice,
            "query Threads($archived: Boolean, $first: Int) {
                threads(archived: $archived, first: $first) { nodes { id } } }",
            json!({}),
        )
        .await;
    assert_eq!(listed["threads"]["nodes"], json!([]), "archived: false");
    let archived = srv
        .gql(
            &alice,
            "query($archived: Boolean) { threads(archived: $archived) { nodes { id } } }",
            json!({"archived": true}),
        )
        .await;
    assert_eq!(archived["threads"]["nodes"][0]["id"], id);
}

/// Over the WebSocket too: a `subscribe` whose variable is omitted takes the argument's default,
/// and one that gives it null is refused as the specification says (a non-null argument).
#[tokio::test]
async fn an_omitted_variable_takes_the_arguments_default_over_the_websocket() {
    let srv = start(Opts::default()).await;
    let alice = token("acme", "alice", &["member"]);
    let id = created(&srv, &alice, "Listed").await;
    let (mut ws, ack) = Ws::connect(&srv, Some(&alice)).await;
    assert!(ack.to_string().contains("connection_ack"), "{ack}");
    let query = "query Threads($archived: Boolean, $first: Int) {
        threads(archived: $archived, first: $first) { nodes { id } } }";
    ws.subscribe("omitted", query, json!({})).await;
    let m = ws.next_for("omitted").await;
    assert_eq!(m["type"], "next", "{m}");
    assert_eq!(
        m["payload"]["data"]["threads"]["nodes"],
        json!([{"id": id}]),
        "{m}"
    );
    ws.send(json!({"id": "given", "type": "subscribe",
        "payload": {"query": query, "operationName": "Threads", "variables": {"archived": null}}}))
        .await;
    let m = ws.next_for("given").await;
    assert!(
        m.to_string().contains("archived"),
        "a null for a non-null argument: {m}"
    );
    assert!(m["payload"]["data"]["threads"].is_null(), "{m}");
}
