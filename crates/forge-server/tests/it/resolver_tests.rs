//! One test per area of the schema, each asserting every field it selects; the committed SDL;
//! query limits, body limits and error hygiene; health.

use serde_json::{Value, json};

use crate::support::{Opts, start, token};

#[tokio::test]
async fn agents_and_tools_are_listed_for_the_caller() {
    let srv = start(Opts::default()).await;
    let t = token("acme", "alice", &["member"]);
    let d = srv
        .gql(
            &t,
            "{ agents { name version model tools { name description classification version } } }",
            json!({}),
        )
        .await;
    let agents = d["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 2);
    assert_eq!(agents[0]["name"], "assistant");
    assert_eq!(agents[0]["version"], "1");
    assert_eq!(agents[0]["model"], "scripted:test");
    let tools = agents[0]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["slow_add", "send_email", "ask_user"]);
    assert_eq!(tools[1]["classification"], "external_write");
    assert_eq!(tools[1]["description"], "Sends an email.");
    assert_eq!(tools[1]["version"], "1");

    let d = srv
        .gql(
            &t,
            "{ searchTools(query: \"email\", limit: 5) { name description score signals } }",
            json!({}),
        )
        .await;
    let hits = d["searchTools"].as_array().unwrap();
    assert_eq!(hits[0]["name"], "send_email");
    assert!(hits[0]["score"].as_f64().unwrap() > 0.0);
    assert_eq!(hits[0]["signals"][0]["kind"], "name_term");
}

#[tokio::test]
async fn threads_runs_and_their_events_read_back() {
    let srv = start(Opts::default()).await;
    let t = token("acme", "alice", &[]);
    let d = srv
        .gql(
            &t,
            "mutation { createThread(title: \"Support\", state: {plan: \"pro\"}) { id title state stateVersion activeRunId createdAt } }",
            json!({}),
        )
        .await;
    let thread = &d["createThread"];
    assert_eq!(thread["title"], "Support");
    assert_eq!(thread["state"], json!({"plan": "pro"}));
    assert_eq!(thread["stateVersion"], 0);
    assert!(thread["activeRunId"].is_null());
    assert!(thread["createdAt"].as_str().unwrap().ends_with('Z'));
    let thread_id = thread["id"].as_str().unwrap().to_owned();

    let run = srv.start_run(&t, &thread_id, "greeter", "hi").await;
    let done = srv.wait_status(&t, &run, "completed").await;
    let last = done["lastSeq"].as_u64().unwrap();
    let d = srv
        .gql(
            &t,
            r#"query($id: ID!, $t: ID!) {
                run(id: $id) {
                    id threadId status agentName agentVersion lastSeq steps usage costMicros failure
                    cancelRequested createdAt
                    events(afterSeq: 1, limit: 2) { runId seq at type event }
                    interactions { id }
                    modelCalls
                }
                thread(id: $t) { runs { nodes { id status } } messages { nodes { id role text parts } } }
            }"#,
            json!({"id": run, "t": thread_id}),
        )
        .await;
    let r = &d["run"];
    assert_eq!(r["id"], run.as_str());
    assert_eq!(r["threadId"], thread_id.as_str());
    assert_eq!(r["status"], "completed");
    assert_eq!(
        (r["agentName"].as_str(), r["agentVersion"].as_str()),
        (Some("greeter"), Some("1"))
    );
    assert_eq!(r["lastSeq"].as_u64(), Some(last));
    assert_eq!(r["steps"], 1);
    assert!(r["usage"]["input_tokens"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["costMicros"], 0);
    assert!(r["failure"].is_null());
    assert_eq!(r["cancelRequested"], false);
    let events = r["events"].as_array().unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["seq"], 2);
    assert_eq!(events[0]["runId"], run.as_str());
    assert_eq!(events[0]["type"], events[0]["event"]["type"]);
    assert_eq!(events[0]["event"]["seq"], 2);
    assert!(r["interactions"].as_array().unwrap().is_empty());
    assert_eq!(r["modelCalls"].as_array().unwrap().len(), 1);
    assert_eq!(r["modelCalls"][0]["status"], "settled");
    let th = &d["thread"];
    assert_eq!(th["runs"]["nodes"][0]["id"], run.as_str());
    let messages = th["messages"]["nodes"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[1]["parts"][0]["text"], "Hello there.");
    assert_eq!(messages[1]["text"], "Hello there.");
    assert_eq!(
        (messages[0]["role"].as_str(), messages[1]["role"].as_str()),
        (Some("user"), Some("assistant"))
    );

    let log = srv.log(&t, &run).await;
    let seqs: Vec<u64> = log.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (1..=last).collect::<Vec<_>>());
    assert_eq!(log.last().unwrap().1, "run.completed");

    let now = forge_core::time::Clock::now(&forge_core::time::SystemClock);
    let day = std::time::Duration::from_secs(86_400);
    let d = srv
        .gql(
            &t,
            "query($from: String!, $to: String!) { usage(from: $from, to: $to) { day totals } }",
            json!({"from": now.minus(day), "to": now.plus(day)}),
        )
        .await;
    let usage = d["usage"].as_array().unwrap();
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert_eq!(usage[0]["totals"]["calls"], 1);
    assert_eq!(usage[0]["totals"]["model"], "scripted:test");
    // The day as documented: `YYYY-MM-DD`.
    let today = now.0.format("%Y-%m-%d").to_string();
    assert_eq!(usage[0]["day"], today.as_str());
}

#[tokio::test]
async fn approvals_are_listed_and_resolved_once() {
    let srv = start(Opts::default()).await;
    let alice = token("acme", "alice", &[]);
    let (thread, run) = srv
        .run_until(&alice, "assistant", "send the email", "waiting")
        .await;
    // Separation of duties (issue 16, item 4): alice started the run, so the external write is
    // someone else's to approve; she neither sees it as hers to approve nor can approve it.
    let mine = srv
        .gql(
            &alice,
            "{ pendingInteractions { nodes { id } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        mine["pendingInteractions"]["nodes"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    let listed = srv
        .gql(
            &alice,
            "query($r: ID!) { run(id: $r) { interactions { id request } } }",
            json!({"r": run}),
        )
        .await;
    let own = &listed["run"]["interactions"][0];
    let (code, message) = srv
        .gql_error(
            &alice,
            "mutation($id: ID!, $h: String) { resolveApproval(interactionId: $id, approve: true, key: \"self\", inputHash: $h) { status } }",
            json!({"id": own["id"], "h": own["request"]["input_hash"]}),
        )
        .await;
    assert_eq!(code, "FORBIDDEN", "{message}");
    assert!(message.contains("run they started"), "{message}");
    let t = token("acme", "bob", &[]);
    let d = srv
        .gql(
            &t,
            "{ pendingInteractions { nodes { id kind runId threadId status request resolution expiresAt } } }",
            json!({}),
        )
        .await;
    let pending = d["pendingInteractions"]["nodes"].as_array().unwrap();
    assert_eq!(pending.len(), 1);
    let i = &pending[0];
    assert_eq!(i["kind"], "approval");
    assert_eq!(i["runId"], run.as_str());
    assert_eq!(i["threadId"], thread.as_str());
    assert_eq!(i["status"], "pending");
    assert_eq!(i["request"]["tool_name"], "send_email");
    assert!(i["resolution"].is_null());
    let id = i["id"].as_str().unwrap().to_owned();
    let hash = i["request"]["input_hash"].as_str().unwrap().to_owned();

    // A wrong input hash is refused and changes nothing.
    let (code, _) = srv
        .gql_error(
            &t,
            "mutation($id: ID!) { resolveApproval(interactionId: $id, approve: true, key: \"k1\", inputHash: \"00\") { status } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(code, "BAD_REQUEST");
    let resolve = "mutation($id: ID!, $h: String) { resolveApproval(interactionId: $id, approve: true, key: \"k1\", inputHash: $h) { id status resolution } }";
    let d = srv.gql(&t, resolve, json!({"id": id, "h": hash})).await;
    assert_eq!(d["resolveApproval"]["status"], "resolved");
    let resolution = d["resolveApproval"]["resolution"].to_string();
    assert!(
        resolution.contains("approve") && resolution.contains("bob"),
        "{resolution}"
    );
    // The same key replays; another key conflicts.
    let again = srv.gql(&t, resolve, json!({"id": id, "h": hash})).await;
    assert_eq!(again["resolveApproval"]["status"], "resolved");
    let (code, _) = srv
        .gql_error(
            &t,
            "mutation($id: ID!) { resolveApproval(interactionId: $id, approve: false, key: \"k2\") { status } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(code, "CONFLICT");
    srv.wait_status(&t, &run, "completed").await;
    assert_eq!(srv.emails.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn questions_are_answered_against_their_schema() {
    let srv = start(Opts::default()).await;
    let t = token("acme", "alice", &[]);
    let (_, run) = srv.run_until(&t, "assistant", "ask me", "waiting").await;
    let d = srv
        .gql(
            &t,
            "{ pendingInteractions { nodes { id kind request } } }",
            json!({}),
        )
        .await;
    let i = &d["pendingInteractions"]["nodes"][0];
    assert_eq!(i["kind"], "question");
    assert_eq!(i["request"]["prompt"], "Which account?");
    let id = i["id"].as_str().unwrap().to_owned();
    let answer = "mutation($id: ID!, $a: JSON!) { answerQuestion(interactionId: $id, answer: $a, key: \"a1\") { status resolution } }";
    let (code, message) = srv
        .gql_error(&t, answer, json!({"id": id, "a": {"acct": 1}}))
        .await;
    assert_eq!(code, "BAD_REQUEST");
    assert!(message.contains("schema"), "{message}");
    let d = srv
        .gql(&t, answer, json!({"id": id, "a": {"account": "savings"}}))
        .await;
    assert_eq!(d["answerQuestion"]["status"], "resolved");
    srv.wait_status(&t, &run, "completed").await;
    let d = srv
        .gql(
            &t,
            "query($id: ID!) { run(id: $id) { interactions { status } } }",
            json!({"id": run}),
        )
        .await;
    assert_eq!(d["run"]["interactions"][0]["status"], "resolved");
}

#[tokio::test]
async fn cancel_and_start_strategies() {
    let srv = start(Opts::default()).await;
    let t = token("acme", "alice", &[]);
    let (thread, run) = srv
        .run_until(&t, "assistant", "send the email", "waiting")
        .await;
    // The thread is busy: reject refuses, with a conflict.
    let (code, message) = srv
        .gql_error(
            &t,
            "mutation($t: ID!) { startRun(input: {threadId: $t, agent: \"greeter\", message: \"hi\", strategy: REJECT}) { id } }",
            json!({"t": thread}),
        )
        .await;
    assert_eq!(code, "CONFLICT", "{message}");
    let d = srv
        .gql(
            &t,
            "mutation($id: ID!) { cancelRun(runId: $id) }",
            json!({"id": run}),
        )
        .await;
    assert_eq!(d["cancelRun"], true);
    srv.wait_status(&t, &run, "cancelled").await;
    // Enqueue (the default) then runs on the freed thread.
    let next = srv.start_run(&t, &thread, "greeter", "hi").await;
    srv.wait_status(&t, &next, "completed").await;
    let (code, _) = srv
        .gql_error(
            &t,
            "mutation($t: ID!) { startRun(input: {threadId: $t, agent: \"nobody\", message: \"hi\"}) { id } }",
            json!({"t": thread}),
        )
        .await;
    assert_eq!(code, "NOT_FOUND");
}

#[tokio::test]
async fn the_committed_schema_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas/forge.graphql");
    let sdl = forge_server::schema::sdl();
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &sdl).unwrap();
    }
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} ({e}); run with UPDATE_SCHEMA=1", path.display()));
    assert!(
        committed == sdl,
        "schemas/forge.graphql is stale; if intended, rerun with UPDATE_SCHEMA=1"
    );
}

#[tokio::test]
async fn complex_and_oversized_requests_are_refused_without_internals() {
    let srv = start(Opts::default()).await;
    let t = token("acme", "alice", &[]);
    // Too wide to be worth validating: refused before validation.
    let fields: String = (0..3000).map(|i| format!("f{i}: id ")).collect();
    let wide = format!("{{ thread(id: \"x\") {{ runs {{ nodes {{ {fields} }} }} }} }}");
    let (_, body) = srv.post(Some(&t), &wide, json!({})).await;
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "QUERY_TOO_LARGE",
        "{body}"
    );
    let huge = format!("{{ agents {{ name }} }} # {}", "x".repeat(100 * 1024));
    let (status, _) = srv.post(Some(&t), &huge, json!({})).await;
    assert_eq!(status, 413);
    // A malformed id is simply not found; the message names no internals.
    let (code, message) = srv
        .gql_error(&t, "{ run(id: \"not-a-uuid\") { id } }", json!({}))
        .await;
    assert_eq!(
        (code.as_str(), message.as_str()),
        ("NOT_FOUND", "not found")
    );
    // Unknown fields are refused without suggestions that would map the schema.
    let (_, body) = srv.post(Some(&t), "{ agentz { name } }", json!({})).await;
    let message = body["errors"][0]["message"].as_str().unwrap();
    assert!(!message.contains("Did you mean"), "{message}");
}

#[tokio::test]
async fn depth_beyond_the_limit_is_refused() {
    let schema_with = |depth| {
        forge_server::schema::build(
            std::sync::Arc::new(forge_server::AppState {
                engine: std::sync::Arc::new(
                    forge_engine::Engine::builder()
                        .store(std::sync::Arc::new(
                            forge_store_memory::MemoryStore::default(),
                        ))
                        .build()
                        .unwrap(),
                ),
                bus: forge_server::EventBus::default(),
                tail: std::sync::Arc::new(forge_server::LiveTail::new(
                    forge_server::EventBus::default(),
                )),
                streams: forge_server::StreamSettings::default(),
                shutdown: tokio_util::sync::CancellationToken::new(),
                cache: Default::default(),
                retriever: None,
                files: None,
                dead_letters: None,
                mcp: None,
            }),
            forge_server::QueryLimits {
                depth,
                complexity: 1000,
            },
        )
    };
    let deepest = "{ thread(id: \"x\") { runs { nodes { interactions { id } } } } }";
    let res = schema_with(2).execute(deepest).await;
    assert_eq!(res.errors[0].message, "Query is nested too deep.");
    // The default limit admits the deepest query the schema has.
    let res = schema_with(forge_server::QueryLimits::default().depth)
        .execute(deepest)
        .await;
    assert!(
        res.errors
            .iter()
            .all(|e| e.message != "Query is nested too deep."),
        "{:?}",
        res.errors
    );
}

#[tokio::test]
async fn health_and_readiness() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let healthy = std::sync::Arc::new(AtomicBool::new(true));
    let flag = healthy.clone();
    let srv = start(Opts {
        readiness: vec![forge_server::ReadinessCheck {
            name: "store".into(),
            probe: Box::new(move || {
                let ok = flag.load(Ordering::SeqCst);
                Box::pin(async move {
                    if ok {
                        Ok(())
                    } else {
                        Err("schema at version 3, this build needs 6".into())
                    }
                })
            }),
        }],
        ..Opts::default()
    })
    .await;
    let live = srv.http.get(srv.url("/healthz")).send().await.unwrap();
    assert_eq!(live.status(), 200);
    let ready = srv.http.get(srv.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(
        body,
        json!({"ready": true, "checks": {"store": {"ok": true}}})
    );
    healthy.store(false, Ordering::SeqCst);
    // Answers are reused briefly; the next one after that sees the failure.
    tokio::time::sleep(forge_server::READINESS_CACHE + std::time::Duration::from_millis(100)).await;
    let ready = srv.http.get(srv.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(
        body["checks"]["store"]["error"],
        "schema at version 3, this build needs 6"
    );
}

/// Readiness checks run at once, each within its own deadline, and an answer is reused briefly
/// (issue 17, item 8): a provider that never answers costs one probe timeout, not a hung probe,
/// and a burst of probes calls each check once.
#[tokio::test]
async fn readiness_checks_run_concurrently_with_a_deadline_and_a_short_cache() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let srv = start(Opts {
        readiness: vec![
            forge_server::ReadinessCheck {
                name: "provider stuck".into(),
                probe: Box::new(|| Box::pin(std::future::pending())),
            },
            forge_server::ReadinessCheck {
                name: "store".into(),
                probe: Box::new(move || {
                    counted.fetch_add(1, Ordering::SeqCst);
                    Box::pin(async { Ok(()) })
                }),
            },
        ],
        ..Opts::default()
    })
    .await;
    let started = std::time::Instant::now();
    let probes = (0..5).map(|_| srv.http.get(srv.url("/readyz")).send());
    for answer in futures_util::future::join_all(probes).await {
        let answer = answer.unwrap();
        assert_eq!(answer.status(), 503);
        let body: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(body["checks"]["store"]["ok"], true, "{body}");
        assert!(
            body["checks"]["provider stuck"]["error"]
                .as_str()
                .unwrap()
                .contains("no answer within"),
            "{body}"
        );
    }
    assert!(
        started.elapsed() < forge_server::PROBE_TIMEOUT * 2,
        "five probes cost one deadline, not five: {:?}",
        started.elapsed()
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "one answer served five probes"
    );
}

/// A database failure reaches the client as `INTERNAL` with a reference, never the database's
/// words (table names, SQL, connection details).
#[tokio::test]
async fn a_store_failure_is_an_internal_error_that_leaks_nothing() {
    use forge_store_postgres::testing::{Flavor, TestDatabase};
    let db = TestDatabase::create(Flavor::Plain)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let admin = db.admin_url().to_owned();
    let store =
        forge_store_postgres::PostgresStore::connect(db.url(), forge_store_postgres::Mode::Rls)
            .await
            .unwrap()
            .with_guard(db);
    let srv = start(Opts {
        store: std::sync::Arc::new(store),
        worker: false,
        ..Opts::default()
    })
    .await;
    let t = token("acme", "alice", &[]);
    let thread = srv.thread(&t).await;
    // Break the schema under the server.
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin)
        .await
        .unwrap();
    sqlx::query("ALTER TABLE forge_threads RENAME TO forge_threads_gone")
        .execute(&mut conn)
        .await
        .unwrap();
    let (status, body) = srv
        .post(
            Some(&t),
            "query($id: ID!) { thread(id: $id) { id } }",
            json!({"id": thread}),
        )
        .await;
    assert_eq!(status, 200);
    let e = &body["errors"][0];
    assert_eq!(e["extensions"]["code"], "INTERNAL", "{body}");
    let message = e["message"].as_str().unwrap();
    assert!(
        message.starts_with("internal error (reference "),
        "{message}"
    );
    // Each failure has its own reference (issue 16, item 8): many at once, none shared — eight,
    // the requests one principal may have executing at once (half its tenant's sixteen).
    let mut references = std::collections::BTreeSet::new();
    let failures = (0..8).map(|_| {
        srv.post(
            Some(&t),
            "query($id: ID!) { thread(id: $id) { id } }",
            json!({"id": thread}),
        )
    });
    for (_, body) in futures_util::future::join_all(failures).await {
        let m = body["errors"][0]["message"].as_str().unwrap().to_owned();
        references.insert(m);
    }
    assert_eq!(references.len(), 8, "{references:?}");
    let text = body.to_string();
    for leak in [
        "forge_threads",
        "relation",
        "postgres",
        "sqlx",
        "SELECT",
        "127.0.0.1",
    ] {
        assert!(!text.contains(leak), "the response leaks {leak:?}: {text}");
    }
}

/// The audit trail is for administrators (issue 16, item 9): a decision on an approval is on it,
/// filtered by action; a caller without the `admin` role is refused.
#[tokio::test]
async fn administrators_read_the_audit_trail_and_nobody_else_does() {
    let srv = start(Opts::default()).await;
    let alice = token("acme", "alice", &[]);
    let (_, run) = srv
        .run_until(&alice, "assistant", "send the email", "waiting")
        .await;
    let bob = token("acme", "bob", &[]);
    let pending = srv
        .gql(
            &bob,
            "{ pendingInteractions { nodes { id request } } }",
            json!({}),
        )
        .await;
    let i = &pending["pendingInteractions"]["nodes"][0];
    srv.gql(
        &bob,
        "mutation($id: ID!, $h: String) { resolveApproval(interactionId: $id, approve: true, key: \"k\", inputHash: $h) { status } }",
        json!({"id": i["id"], "h": i["request"]["input_hash"]}),
    )
    .await;
    srv.wait_status(&alice, &run, "completed").await;
    let q = "query($a: String) { auditRecords(action: $a) }";
    let (code, _) = srv.gql_error(&alice, q, json!({"a": null})).await;
    assert_eq!(code, "FORBIDDEN");
    let admin = token("acme", "ada", &["admin"]);
    let d = srv.gql(&admin, q, json!({"a": "approval."})).await;
    let records = d["auditRecords"].as_array().unwrap();
    assert!(!records.is_empty(), "{d}");
    assert!(
        records
            .iter()
            .all(|r| r["action"].as_str().unwrap().starts_with("approval.")),
        "{d}"
    );
    assert!(records.iter().any(|r| r["actor"] == "bob"), "{d}");
    // Another tenant's administrator sees none of it.
    let other = token("globex", "gus", &["admin"]);
    let d = srv.gql(&other, q, json!({"a": null})).await;
    assert!(d["auditRecords"].as_array().unwrap().is_empty(), "{d}");
}

#[tokio::test]
async fn administrators_erase_ended_threads_and_runs() {
    let srv = start(Opts::default()).await;
    let user = token("acme", "alice", &[]);
    let admin = token("acme", "root", &["admin"]);
    let (thread, run) = srv.run_until(&user, "greeter", "hi", "completed").await;
    let second = srv.start_run(&user, &thread, "greeter", "again").await;
    srv.wait_status(&user, &second, "completed").await;
    let erase_run =
        "mutation($id: ID!) { eraseRun(id: $id) { runs messages events jobs modelCallsUnlinked } }";
    let erase_thread = "mutation($id: ID!) { eraseThread(id: $id) { threads runs messages events jobs modelCallsUnlinked } }";

    let (code, message) = srv.gql_error(&user, erase_run, json!({"id": run})).await;
    assert_eq!(code, "FORBIDDEN", "{message}");
    let (code, _) = srv
        .gql_error(
            &token("globex", "root", &["admin"]),
            erase_thread,
            json!({"id": thread}),
        )
        .await;
    assert_eq!(code, "NOT_FOUND", "another tenant's thread");

    let d = srv.gql(&admin, erase_run, json!({"id": run})).await;
    let erased = &d["eraseRun"];
    assert_eq!(erased["runs"], 1);
    assert_eq!(erased["messages"], 2, "the input and the answer: {erased}");
    assert!(erased["events"].as_u64().unwrap() > 2);
    assert_eq!(erased["modelCallsUnlinked"], 1);
    let (code, _) = srv
        .gql_error(
            &user,
            "query($id: ID!) { run(id: $id) { id } }",
            json!({"id": run}),
        )
        .await;
    assert_eq!(code, "NOT_FOUND");
    let d = srv
        .gql(
            &user,
            "query($t: ID!) { thread(id: $t) { runs { nodes { id } } messages { nodes { id } } } }",
            json!({"t": thread}),
        )
        .await;
    assert_eq!(d["thread"]["runs"]["nodes"], json!([{"id": second}]));
    assert_eq!(
        d["thread"]["messages"]["nodes"].as_array().unwrap().len(),
        2
    );

    let d = srv.gql(&admin, erase_thread, json!({"id": thread})).await;
    assert_eq!(d["eraseThread"]["threads"], 1);
    assert_eq!(d["eraseThread"]["runs"], 1);
    let (code, _) = srv
        .gql_error(
            &user,
            "query($t: ID!) { thread(id: $t) { id } }",
            json!({"t": thread}),
        )
        .await;
    assert_eq!(code, "NOT_FOUND");
    let (code, _) = srv
        .gql_error(&admin, erase_thread, json!({"id": thread}))
        .await;
    assert_eq!(code, "NOT_FOUND", "erasing twice");

    let now = forge_core::time::Clock::now(&forge_core::time::SystemClock);
    let day = std::time::Duration::from_secs(86_400);
    let d = srv
        .gql(
            &user,
            "query($from: String!, $to: String!) { usage(from: $from, to: $to) { totals } }",
            json!({"from": now.minus(day), "to": now.plus(day)}),
        )
        .await;
    assert_eq!(
        d["usage"][0]["totals"]["calls"], 2,
        "both calls still count for the tenant"
    );
    let d = srv
        .gql(
            &admin,
            "query { auditRecords(action: \"thread.erased\") }",
            json!({}),
        )
        .await;
    let records = d["auditRecords"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["actor"], "root");
    assert_eq!(records[0]["subject"], format!("thread {thread}"));
}

#[tokio::test]
async fn concurrent_state_updates_one_wins_the_other_is_a_conflict() {
    let srv = start(Opts::default()).await;
    let t = token("acme", "alice", &[]);
    let thread = srv.thread(&t).await;
    let update = "mutation($t: ID!, $v: Int!, $s: JSON!) {
        updateThreadState(threadId: $t, expectedVersion: $v, state: $s) { state stateVersion } }";
    let vars = |writer: &str| json!({"t": thread, "v": 0, "s": {"writer": writer}});
    let (a, b) = tokio::join!(
        srv.post(Some(&t), update, vars("a")),
        srv.post(Some(&t), update, vars("b"))
    );
    let outcomes = [a.1, b.1];
    let won: Vec<&Value> = outcomes
        .iter()
        .filter(|o| o.get("errors").is_none())
        .collect();
    assert_eq!(won.len(), 1, "exactly one writer wins: {outcomes:?}");
    assert_eq!(won[0]["data"]["updateThreadState"]["stateVersion"], 1);
    let lost = outcomes.iter().find(|o| o.get("errors").is_some()).unwrap();
    assert_eq!(
        lost["errors"][0]["extensions"]["code"], "CONFLICT",
        "{lost}"
    );
    let d = srv
        .gql(
            &t,
            "query($t: ID!) { thread(id: $t) { state stateVersion } }",
            json!({"t": thread}),
        )
        .await;
    assert_eq!(
        d["thread"]["state"], won[0]["data"]["updateThreadState"]["state"],
        "the stored state is the winner's"
    );
    // Another tenant's thread answers like one that does not exist.
    let other = token("globex", "bob", &[]);
    let (code, _) = srv
        .gql_error(&other, update, json!({"t": thread, "v": 1, "s": {}}))
        .await;
    assert_eq!(code, "NOT_FOUND");
}
