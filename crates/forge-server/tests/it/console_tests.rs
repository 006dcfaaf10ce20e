//! The operator console's queries (issue 69): the tenant's runs with every filter, a page at a
//! time, and the usage broken down per agent version and per run — for administrators only, and
//! never another tenant's.

use serde_json::{Value, json};

use crate::support::{Opts, start, token};

/// The ids of a `runs` answer's nodes, in order.
fn ids(d: &Value) -> Vec<String> {
    d["runs"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_owned())
        .collect()
}

/// The tenant's runs, whoever started them (issue 69, the console's run list): for
/// administrators, filtered by state and thread, newest first a page at a time, and never
/// another tenant's.
#[tokio::test]
async fn administrators_list_the_tenants_runs() {
    let srv = start(Opts::default()).await;
    let admin = token("acme", "ada", &["admin"]);
    let (alice, bob) = (
        token("acme", "alice", &["member"]),
        token("acme", "bob", &["member"]),
    );
    let elsewhere = token("globex", "gus", &["member"]);
    let (first_thread, first) = srv.run_until(&alice, "greeter", "hi", "completed").await;
    let (_, second) = srv.run_until(&bob, "greeter", "hello", "completed").await;
    let (_, third) = srv.run_until(&alice, "greeter", "hey", "completed").await;
    srv.run_until(&elsewhere, "greeter", "hi", "completed")
        .await;

    let list = "query($status: String, $thread: ID, $after: String, $first: Int) {
        runs(status: $status, threadId: $thread, after: $after, first: $first) {
            nodes { id } pageInfo { hasNextPage endCursor } } }";
    let all = srv.gql(&admin, list, json!({})).await;
    assert_eq!(
        ids(&all),
        [third.clone(), second.clone(), first.clone()],
        "{all}"
    );
    // A page at a time, each older than the last.
    let page = srv.gql(&admin, list, json!({"first": 2})).await;
    assert_eq!(ids(&page), [third.clone(), second.clone()]);
    assert_eq!(page["runs"]["pageInfo"]["hasNextPage"], true);
    let after = page["runs"]["pageInfo"]["endCursor"].clone();
    let rest = srv
        .gql(&admin, list, json!({"first": 2, "after": after}))
        .await;
    assert_eq!(ids(&rest), std::slice::from_ref(&first));
    assert_eq!(rest["runs"]["pageInfo"]["hasNextPage"], false);
    // Filtered.
    let of_thread = srv.gql(&admin, list, json!({"thread": first_thread})).await;
    assert_eq!(ids(&of_thread), std::slice::from_ref(&first));
    let failed = srv.gql(&admin, list, json!({"status": "failed"})).await;
    assert!(ids(&failed).is_empty(), "{failed}");
    let (code, _) = srv
        .gql_error(&admin, list, json!({"status": "sideways"}))
        .await;
    assert_eq!(code, "BAD_REQUEST");
    // Not for members.
    let (code, _) = srv.gql_error(&alice, list, json!({})).await;
    assert_eq!(code, "FORBIDDEN");
}

/// The console's run filters and usage breakdown (issue 69): runs by agent and version, by a
/// creation window and by failure code, each checked as the API documents (a bad time or an
/// unknown code is `BAD_REQUEST`); the usage of a window per agent version and per run, summing to
/// the per-day rollups; both for administrators only.
#[tokio::test]
async fn administrators_filter_runs_and_break_usage_down() {
    let srv = start(Opts::default()).await;
    let admin = token("acme", "ada", &["admin"]);
    let alice = token("acme", "alice", &["member"]);
    let (_, first) = srv.run_until(&alice, "greeter", "hi", "completed").await;
    let (_, second) = srv.run_until(&alice, "greeter", "hello", "completed").await;
    srv.run_until(
        &token("globex", "gus", &["member"]),
        "greeter",
        "hi",
        "completed",
    )
    .await;
    let list = "query($agent: String, $version: String, $since: String, $until: String,
        $code: String) { runs(agentName: $agent, agentVersion: $version, since: $since,
        until: $until, failureCode: $code) { nodes { id agentName agentVersion } } }";
    let all = srv.gql(&admin, list, json!({"agent": "greeter"})).await;
    assert_eq!(ids(&all), [second.clone(), first.clone()], "{all}");
    let version = all["runs"]["nodes"][0]["agentVersion"].clone();
    let same = srv
        .gql(
            &admin,
            list,
            json!({"agent": "greeter", "version": version}),
        )
        .await;
    assert_eq!(ids(&same).len(), 2, "{same}");
    let none = srv.gql(&admin, list, json!({"agent": "nobody"})).await;
    assert!(ids(&none).is_empty(), "{none}");
    let old = srv
        .gql(&admin, list, json!({"until": "2001-01-01T00:00:00Z"}))
        .await;
    assert!(ids(&old).is_empty(), "{old}");
    let recent = srv
        .gql(&admin, list, json!({"since": "2001-01-01T00:00:00Z"}))
        .await;
    assert_eq!(ids(&recent).len(), 2, "{recent}");
    let failed = srv
        .gql(&admin, list, json!({"code": "provider_error"}))
        .await;
    assert!(ids(&failed).is_empty(), "{failed}");
    for bad in [json!({"code": "sideways"}), json!({"since": "yesterday"})] {
        let (code, message) = srv.gql_error(&admin, list, bad.clone()).await;
        assert_eq!(code, "BAD_REQUEST", "{bad}: {message}");
    }

    let usage = "query($f: String!, $t: String!) {
        usage(from: $f, to: $t) { totals }
        usageBreakdown(from: $f, to: $t, top: 1) {
            currency agents { agentName runs calls costMicros inputTokens }
            topRuns { runId costMicros run { id } } quota { tokens } } }";
    // A day either side of the first run (a usage window spans at most 92 days).
    let created = srv
        .gql(
            &admin,
            "query($id: ID!) { run(id: $id) { createdAt } }",
            json!({"id": first}),
        )
        .await;
    let at: forge_core::time::Timestamp =
        serde_json::from_value(created["run"]["createdAt"].clone()).unwrap();
    let day = |ms: i64| {
        serde_json::to_value(
            forge_core::time::Timestamp::from_unix_millis(at.unix_millis() + ms).unwrap(),
        )
        .unwrap()
    };
    let window = json!({"f": day(-86_400_000), "t": day(86_400_000)});
    let d = srv.gql(&admin, usage, window.clone()).await;
    let sum = |v: &Value, key: &str| -> u64 {
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| r.pointer(key).and_then(Value::as_u64).unwrap_or(0))
            .sum()
    };
    let b = &d["usageBreakdown"];
    assert_eq!(b["agents"].as_array().unwrap().len(), 1, "{d}");
    assert_eq!(b["agents"][0]["agentName"], "greeter");
    assert_eq!(b["agents"][0]["runs"], 2, "this tenant's runs only: {d}");
    assert_eq!(
        sum(&b["agents"], "/calls"),
        sum(&d["usage"], "/totals/calls"),
        "{d}"
    );
    assert_eq!(
        sum(&b["agents"], "/costMicros"),
        sum(&d["usage"], "/totals/cost_micros")
    );
    assert_eq!(
        sum(&b["agents"], "/inputTokens"),
        sum(&d["usage"], "/totals/usage/input_tokens")
    );
    assert_eq!(b["topRuns"].as_array().unwrap().len(), 1, "top: 1");
    let top = b["topRuns"][0]["runId"].as_str().unwrap();
    assert!([&first, &second].iter().any(|r| *r == top), "{d}");
    assert_eq!(b["topRuns"][0]["run"]["id"], top);
    assert!(b["quota"].is_null(), "no quota configured: {d}");
    let (code, _) = srv.gql_error(&alice, usage, window).await;
    assert_eq!(code, "FORBIDDEN");
}
