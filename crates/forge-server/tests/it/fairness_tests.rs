//! One tenant cannot take the server from the others (issue 63), and every limit of
//! `POST /graphql` holds over graphql-ws too (issue 73, item 1).

use std::sync::Arc;
use std::time::{Duration, Instant};

use forge_core::ports::store::Store;
use futures_util::SinkExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use super::support::*;

const THREAD_EVENTS: &str =
    "subscription($t: ID!) { threadEvents(threadId: $t) { kind runId seq type item } }";

/// A document selecting a thread's first message `n` times.
fn aliases(n: usize) -> String {
    let fields: String = (0..n)
        .map(|i| format!("a{i}: thread(id: $t) {{ messages(first: 1) {{ nodes {{ text }} }} }} "))
        .collect();
    format!("query($t: ID!) {{ {fields} }}")
}

/// Opens and drops 1,000 subscriptions of tenant acme in bursts (some sockets dropped as soon
/// as their subscribes are written, mid-read; some held unread while the server polls), then
/// requires the store to answer another tenant at once.
async fn subscriptions_come_and_go_and_the_store_answers(store: Arc<dyn Store>) {
    let srv = start(Opts {
        store,
        // Subscriptions re-read the log every 100 ms: many reads are in flight when they go.
        poll: Duration::from_millis(100),
        ..Opts::default()
    })
    .await;
    let a = token("acme", "alice", &[]);
    let b = token("globex", "bob", &[]);
    let (thread, _) = srv.run_until(&a, "greeter", "hi", "completed").await;
    let idle = srv.thread(&a).await;
    let (b_thread, _) = srv.run_until(&b, "greeter", "hi", "completed").await;
    for round in 0..5 {
        let mut held = Vec::new();
        for (i, on) in [&thread, &idle].into_iter().enumerate() {
            let ws = burst(&srv, &a, 100, THREAD_EVENTS, &json!({"t": on})).await;
            if (round + i) % 2 == 0 {
                // Dropped at once: its subscriptions are mid-read.
                drop(ws);
            } else {
                held.push(ws);
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(held);
    }
    // Nobody is connected any more: the store answers both tenants at once, through the
    // server. The best of three reads each, against a machine's hiccup; a leaked connection
    // (or share) fails all three (the pool waits 30 s).
    for (who, thread) in [(&a, &thread), (&b, &b_thread)] {
        let mut best = Duration::MAX;
        for _ in 0..3 {
            let started = Instant::now();
            let read = tokio::time::timeout(
                Duration::from_millis(100),
                srv.gql(
                    who,
                    "query($t: ID!) { thread(id: $t) { id } }",
                    json!({"t": thread}),
                ),
            )
            .await;
            if let Ok(data) = read {
                assert_eq!(&data["thread"]["id"], thread);
                best = best.min(started.elapsed());
            }
        }
        assert!(
            best < Duration::from_millis(100),
            "the store did not answer within 100 ms after the subscriptions went away"
        );
    }
    srv.stop.cancel();
}

/// Issue 63, item 1, on SQLite. Sabotage: a pool connection dropped mid-read that never gives its
/// place back (`forge_sql::Conn::drop` forgetting the permit when not released) fails it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_subscriptions_come_and_go_and_sqlite_answers_at_once() {
    let (store, dir) = sqlite_store().await;
    subscriptions_come_and_go_and_the_store_answers(store).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 63, item 1, on PostgreSQL (same sabotage).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_subscriptions_come_and_go_and_postgres_answers_at_once() {
    subscriptions_come_and_go_and_the_store_answers(postgres_store().await).await;
}

/// The first message of operation `id` sent on `ws`.
async fn ask(ws: &mut Ws, id: &str, query: &str, variables: Value) -> Value {
    ws.subscribe(id, query, variables).await;
    ws.next_for(id).await
}

/// The first error's `extensions` of an answer, `error` or `next` alike.
fn extensions(m: &Value) -> Value {
    let errors = if m["type"] == "error" {
        &m["payload"]
    } else {
        &m["payload"]["errors"]
    };
    errors[0]["extensions"].clone()
}

/// Issue 73, item 1: a response past the budget, a validation error and the requests a tenant
/// may have executing are the same over graphql-ws as over HTTP. Sabotage: without the guard's
/// budget (`execute` not replacing the response), the large query answers 27 MB; without its
/// codes (`subscribe` not mapping), the validation error has none; with `admit` acquiring from
/// the subscriptions' limiter for every operation, the second query runs; with a query's place
/// kept until its `complete`, a request sent on reading the answer is refused now and then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_http_limit_holds_over_graphql_ws() {
    let srv = start(Opts {
        tune: Some(|c| c.http.per_tenant = 1),
        ..Opts::default()
    })
    .await;
    let t = token("acme", "alice", &[]);
    let big = "x".repeat(60_000);
    let (thread, _) = srv.run_until(&t, "greeter", &big, "completed").await;
    let (mut ws, _) = Ws::connect(&srv, Some(&t)).await;

    let m = ask(&mut ws, "big", &aliases(450), json!({"t": thread})).await;
    assert_eq!(extensions(&m)["code"], "RESPONSE_TOO_LARGE", "{m:.300}");
    assert!(m.to_string().len() < 10_000, "the refusal is small");
    // The same document over HTTP.
    let (code, _) = srv.gql_error(&t, &aliases(450), json!({"t": thread})).await;
    assert_eq!(code, "RESPONSE_TOO_LARGE");

    // A query's place among the tenant's requests is given back with its result: a client
    // asking again, on either transport, as soon as it reads an answer is never refused.
    for round in 0..20 {
        let m = ask(
            &mut ws,
            &format!("r{round}"),
            &aliases(1),
            json!({"t": thread}),
        )
        .await;
        assert!(m["payload"]["errors"].is_null(), "{m:.300}");
        srv.gql(&t, &aliases(1), json!({"t": thread})).await;
    }

    let m = ask(&mut ws, "invalid", "{ noSuchField }", json!({})).await;
    assert_eq!(extensions(&m)["code"], "GRAPHQL_VALIDATION_FAILED", "{m}");

    // Two queries written at once: the second arrives while the first executes, one past the
    // tenant's one request at a time.
    for id in ["q1", "q2"] {
        let m = json!({"id": id, "type": "subscribe", "payload": {
            "query": aliases(50), "variables": {"t": thread}}});
        ws.socket
            .feed(Message::Text(m.to_string().into()))
            .await
            .unwrap();
    }
    ws.socket.flush().await.unwrap();
    let second = ws.next_for("q2").await;
    assert_eq!(extensions(&second)["code"], "TOO_MANY_REQUESTS", "{second}");
    assert_eq!(extensions(&second)["retryAfter"], 1);
    let first = ws.next_for("q1").await;
    assert_eq!(first["type"], "next", "{first:.300}");
    assert!(first["payload"]["errors"].is_null(), "{first:.300}");
}

/// Sends `query` over HTTP, which must be refused with `429`, a `Retry-After` of at least a
/// second and `RATE_LIMITED`; the error's extensions.
async fn rate_limited_over_http(srv: &Srv, token: &str, query: &str) -> Value {
    let res = srv
        .http
        .post(srv.url("/graphql"))
        .bearer_auth(token)
        .json(&json!({"query": query}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 429);
    let retry: u64 = res.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1);
    let body: Value = res.json().await.unwrap();
    let x = body["errors"][0]["extensions"].clone();
    assert_eq!(x["code"], "RATE_LIMITED", "{body}");
    x
}

/// Issue 63, item 2: query cost and response bytes per tenant, over both transports, refused
/// with `RATE_LIMITED` and when to retry (HTTP: 429 and `Retry-After`), counted in
/// `forge_server_refusals_total`; another tenant is unaffected. Sabotage: the guard's
/// `validation` not spending the cost lets every request through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_past_its_query_cost_or_bytes_is_rate_limited_on_both_transports() {
    let (otel, _memory) = forge_otel::Otel::in_memory("forge-test", None);
    let scrape = otel.scrape();
    let srv = start(Opts {
        telemetry: Some(otel.telemetry()),
        metrics: Some(Arc::new(move || scrape.render())),
        tune: Some(|c| {
            c.fair_use = forge_server::FairUse {
                cost_per_second: 0.5,
                cost_burst: 10.0,
                cost_per_document: 0.0,
                bytes_per_second: 100.0,
                bytes_burst: 50_000.0,
                principal_share: 1.0,
                ..forge_server::FairUse::default()
            };
        }),
        ..Opts::default()
    })
    .await;
    let a = token("acme", "alice", &[]);
    let b = token("globex", "bob", &[]);
    // `{ agents { name } }` costs 2: five pass, on either transport.
    let cheap = "{ agents { name } }";
    for _ in 0..3 {
        srv.gql(&a, cheap, json!({})).await;
    }
    let (mut ws, _) = Ws::connect(&srv, Some(&a)).await;
    for id in ["w1", "w2"] {
        let m = ask(&mut ws, id, cheap, json!({})).await;
        assert!(m["payload"]["errors"].is_null(), "{m}");
    }
    let m = ask(&mut ws, "w3", cheap, json!({})).await;
    let x = extensions(&m);
    assert_eq!(x["code"], "RATE_LIMITED", "{m}");
    assert_eq!(x["limit"], "cost");
    assert!(x["retryAfter"].as_u64().unwrap() >= 1, "{m}");
    let x = rate_limited_over_http(&srv, &a, cheap).await;
    assert_eq!(x["limit"], "cost", "{x}");
    // Another tenant has its own.
    srv.gql(&b, cheap, json!({})).await;
    // Counted by limit, never by tenant.
    let text = srv.http.get(srv.url("/metrics")).send().await.unwrap();
    let text = text.text().await.unwrap();
    let line = r#"forge_server_refusals_total{limit="cost"}"#;
    assert!(
        text.lines().any(|l| l.starts_with(line)),
        "{line} missing: {text}"
    );
    assert!(!text.contains("acme") && !text.contains("globex"));

    // Bytes: a response larger than the tenant's burst passes once, and leaves it in debt.
    let srv = start(Opts {
        tune: Some(|c| {
            c.fair_use = forge_server::FairUse {
                bytes_per_second: 100.0,
                bytes_burst: 50_000.0,
                ..forge_server::FairUse::default()
            };
        }),
        ..Opts::default()
    })
    .await;
    let big = "y".repeat(60_000);
    let (thread, _) = srv.run_until(&b, "greeter", &big, "completed").await;
    srv.gql(
        &b,
        "query($t: ID!) { thread(id: $t) { messages(first: 1) { nodes { text } } } }",
        json!({"t": thread}),
    )
    .await;
    let (code, message) = srv.gql_error(&b, cheap, json!({})).await;
    assert_eq!(code, "RATE_LIMITED", "{message}");
    assert!(message.contains("bytes"), "{message}");
    srv.gql(&a, cheap, json!({})).await;
}

/// Issue 63: a client that stops reading while its operations have much to send is
/// disconnected after the send timeout, and holds nothing of the store meanwhile beyond its
/// tenant's share: another tenant's reads go on. Sabotage: `deliver` without its timeout keeps
/// the socket open (the read below never ends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_disconnected() {
    let (store, dir) = sqlite_store().await;
    let (otel, _memory) = forge_otel::Otel::in_memory("forge-test", None);
    let scrape = otel.scrape();
    let srv = start(Opts {
        store,
        telemetry: Some(otel.telemetry()),
        metrics: Some(Arc::new(move || scrape.render())),
        tune: Some(|c| {
            c.ws.send_timeout = Duration::from_millis(500);
            c.http.per_tenant = 64;
            // All 20 answers are the one principal's to have.
            c.fair_use.principal_share = 1.0;
        }),
        ..Opts::default()
    })
    .await;
    let a = token("acme", "alice", &[]);
    let b = token("globex", "bob", &[]);
    let big = "z".repeat(60_000);
    let (thread, _) = srv.run_until(&a, "greeter", &big, "completed").await;
    let (b_thread, _) = srv.run_until(&b, "greeter", "hi", "completed").await;
    // 20 answers of 3 MB each: far more than the socket's buffers hold.
    let mut ws = burst(&srv, &a, 20, &aliases(50), &json!({"t": thread})).await;
    srv.gql(
        &b,
        "query($t: ID!) { thread(id: $t) { id } }",
        json!({"t": b_thread}),
    )
    .await;
    // The client reads nothing until the server has given up on it (it counts that).
    let gave_up = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let text = srv.http.get(srv.url("/metrics")).send().await.unwrap();
            let text = text.text().await.unwrap();
            if text.contains(r#"forge_server_refusals_total{limit="slow_reader"}"#) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(
        gave_up.is_ok(),
        "the server never gave up on a client that was not reading"
    );
    // Then reading drains what the buffers held and finds the connection gone. A server still
    // waiting would let the reads go on through all 60 MB and leave the socket open.
    let mut read = 0usize;
    let ended = tokio::time::timeout(Duration::from_secs(60), async {
        use futures_util::StreamExt;
        loop {
            match ws.socket.next().await {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                Some(Ok(m)) => read += m.len(),
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the server kept a client that was not reading ({read} bytes read)"
    );
    assert!(
        read < 40_000_000,
        "the client got {read} bytes: it was never cut off"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A metric's sample on `/metrics`, by its line's start (name and labels).
async fn sample(srv: &Srv, line: &str) -> Option<f64> {
    let text = srv.http.get(srv.url("/metrics")).send().await.unwrap();
    let text = text.text().await.unwrap();
    assert!(!text.contains("acme") && !text.contains("alice"), "{text}");
    text.lines()
        .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
}

/// Issue 63, item 2: a principal may use its part (here half) of each of its tenant's limits —
/// subscriptions, connections, query cost — so a colleague keeps the rest, while the tenant's
/// own limit still bounds them all; the limits and how close the busiest tenant and principal
/// are to each are gauges, with no tenant or principal in them. Sabotage: `Limiter` not taking
/// the principal's place lets alice open four subscriptions; the ledger not checking the
/// principal's bucket lets alice spend the whole tenant's cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_keeps_to_its_part_of_its_tenants_limits() {
    let (otel, _memory) = forge_otel::Otel::in_memory("forge-test", None);
    let scrape = otel.scrape();
    let srv = start(Opts {
        telemetry: Some(otel.telemetry()),
        metrics: Some(Arc::new(move || scrape.render())),
        tune: Some(|c| {
            c.ws.per_tenant = 4;
            c.fair_use.principal_share = 0.5;
        }),
        ..Opts::default()
    })
    .await;
    let alice = token("acme", "alice", &[]);
    let (_, run) = srv
        .run_until(&alice, "assistant", "send the email", "waiting")
        .await;
    let vars = json!({"id": run, "after": 0});
    let open = |who: &'static str, id: &'static str| {
        let (srv, vars) = (&srv, vars.clone());
        async move {
            let (mut ws, _) = Ws::connect(srv, Some(&token("acme", who, &[]))).await;
            let m = ask(&mut ws, id, RUN_EVENTS, vars).await;
            (ws, m)
        }
    };
    let mut held = Vec::new();
    for id in ["a1", "a2"] {
        let (ws, m) = open("alice", id).await;
        assert_eq!(m["type"], "next", "{m}");
        held.push(ws);
    }
    let (_ws, m) = open("alice", "a3").await;
    assert_eq!(extensions(&m)["code"], "TOO_MANY_SUBSCRIPTIONS", "{m}");
    assert!(m.to_string().contains("your subscriptions"), "{m}");
    for id in ["b1", "b2"] {
        let (ws, m) = open("bob", id).await;
        assert_eq!(m["type"], "next", "bob has his own part: {m}");
        held.push(ws);
    }
    let (_ws, m) = open("carol", "c1").await;
    assert_eq!(extensions(&m)["code"], "TOO_MANY_SUBSCRIPTIONS", "{m}");
    assert!(m.to_string().contains("of this tenant"), "{m}");

    // The gauges: each limit, and the busiest tenant's and principal's use of it.
    assert_eq!(
        sample(
            &srv,
            r#"forge_server_limit{limit="principal_subscriptions"}"#
        )
        .await,
        Some(2.0)
    );
    assert_eq!(
        sample(
            &srv,
            r#"forge_server_limit_use_ratio{limit="subscriptions"}"#
        )
        .await,
        Some(1.0)
    );
    assert_eq!(
        sample(
            &srv,
            r#"forge_server_limit_use_ratio{limit="principal_subscriptions"}"#
        )
        .await,
        Some(1.0)
    );
    assert_eq!(
        sample(&srv, r#"forge_server_limit_use_ratio{limit="requests"}"#).await,
        Some(0.0),
        "nothing executing while the scrape is answered"
    );
    assert!(
        sample(
            &srv,
            r#"forge_server_refusals_total{limit="principal_subscriptions"}"#
        )
        .await
        .is_some()
    );
    drop(held);

    // Query cost: alice spends her half of the burst and is told so; bob still has his.
    let srv = start(Opts {
        tune: Some(|c| {
            c.fair_use = forge_server::FairUse {
                cost_per_second: 0.5,
                cost_burst: 8.0,
                cost_per_document: 0.0,
                principal_share: 0.5,
                ..forge_server::FairUse::default()
            };
        }),
        ..Opts::default()
    })
    .await;
    let bob = token("acme", "bob", &[]);
    // `{ agents { name } }` costs 2: two each, then the tenant's 8 are spent.
    let cheap = "{ agents { name } }";
    for _ in 0..2 {
        srv.gql(&alice, cheap, json!({})).await;
    }
    let x = rate_limited_over_http(&srv, &alice, cheap).await;
    assert_eq!(x["limit"], "principal_cost", "{x}");
    for _ in 0..2 {
        srv.gql(&bob, cheap, json!({})).await;
    }
    let (code, message) = srv
        .gql_error(&token("acme", "carol", &[]), cheap, json!({}))
        .await;
    assert_eq!(code, "RATE_LIMITED");
    assert!(message.contains("this tenant"), "{message}");
}

/// Issue 63, item 2: runs in flight per tenant and per principal. With no worker the runs stay
/// queued: of eight a principal starts at once, exactly its part (two of the tenant's four) are
/// created and the rest are told to wait (`RATE_LIMITED`, `limit: "principal_runs"`); a
/// colleague gets the tenant's other two, and the rest of his and a third principal's meet the
/// tenant's limit (`"runs"`); another tenant starts its own. With a worker, a run that waits for a person or
/// ends makes room. Sabotage: `admit_run` not called lets all eight in; `RunsInFlight::admit`
/// without the tenant's turn lets more than two in; the principal's count not
/// checked lets alice take all four.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_past_its_runs_in_flight_is_told_to_wait() {
    let (otel, _memory) = forge_otel::Otel::in_memory("forge-test", None);
    let scrape = otel.scrape();
    // On SQLite: counting and creating each wait on the store, where starts would interleave.
    let (store, dir) = sqlite_store().await;
    let srv = start(Opts {
        store,
        worker: false,
        telemetry: Some(otel.telemetry()),
        metrics: Some(Arc::new(move || scrape.render())),
        tune: Some(|c| {
            c.fair_use.runs_in_flight = 4;
            c.fair_use.principal_share = 0.5;
        }),
        ..Opts::default()
    })
    .await;
    // Eight starts at once by `who`: the answers.
    let eight = |who: &'static str| {
        let srv = &srv;
        async move {
            let t = token("acme", who, &[]);
            let mut threads = Vec::new();
            for _ in 0..8 {
                threads.push(srv.thread(&t).await);
            }
            let begin = |thread: String| {
                let t = t.clone();
                async move {
                    srv.post(
                        Some(&t),
                        "mutation($t: ID!) { startRun(input: {threadId: $t, agent: \"greeter\", message: \"hi\"}) { id status } }",
                        json!({"t": thread}),
                    )
                    .await
                    .1
                }
            };
            futures_util::future::join_all(threads.into_iter().map(begin)).await
        }
    };
    // Alice meets her part; bob takes the tenant's other two, which then has all it may.
    for (who, limit) in [("alice", "principal_runs"), ("bob", "runs")] {
        let answers = eight(who).await;
        let started = answers.iter().filter(|b| b.get("errors").is_none());
        assert_eq!(started.count(), 2, "{who}: {answers:?}");
        for refused in answers.iter().filter(|b| b.get("errors").is_some()) {
            let x = &refused["errors"][0]["extensions"];
            assert_eq!(x["code"], "RATE_LIMITED", "{refused}");
            assert_eq!(x["limit"], limit, "{refused}");
            assert_eq!(x["retryAfter"], 1, "{refused}");
        }
    }
    let answers = eight("carol").await;
    for refused in &answers {
        let x = &refused["errors"][0]["extensions"];
        assert_eq!(x["limit"], "runs", "the tenant's four are taken: {refused}");
    }
    assert_eq!(
        sample(&srv, r#"forge_server_limit_use_ratio{limit="runs"}"#).await,
        Some(1.0)
    );
    assert_eq!(
        sample(&srv, r#"forge_server_limit{limit="principal_runs"}"#).await,
        Some(2.0)
    );
    assert_eq!(
        sample(
            &srv,
            r#"forge_server_refusals_total{limit="principal_runs"}"#
        )
        .await,
        Some(6.0)
    );
    assert_eq!(
        sample(&srv, r#"forge_server_refusals_total{limit="runs"}"#).await,
        Some(14.0)
    );
    // Another tenant has its own.
    let g = token("globex", "gus", &[]);
    let gt = srv.thread(&g).await;
    srv.start_run(&g, &gt, "greeter", "hi").await;
    drop(srv);
    let _ = std::fs::remove_dir_all(&dir);

    // With a worker and room for one: a run waiting for a person is not in flight, and one
    // that ends makes room.
    let srv = start(Opts {
        tune: Some(|c| c.fair_use.runs_in_flight = 1),
        ..Opts::default()
    })
    .await;
    let a = token("acme", "alice", &[]);
    for _ in 0..2 {
        srv.run_until(&a, "assistant", "send the email", "waiting")
            .await;
    }
    for _ in 0..2 {
        srv.run_until(&a, "greeter", "hi", "completed").await;
    }
}
