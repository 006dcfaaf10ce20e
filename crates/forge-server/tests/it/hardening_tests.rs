//! The server against clients that misbehave (issue 16, items 5 and 10), each with a real HTTP or
//! WebSocket client: fragment bombs and oversized responses refused while `/healthz` stays fast;
//! bodies that never arrive; tokens not yet valid, expired mid-session or rotated; WebSockets that
//! never initialise or open too many subscriptions; errors that always carry a `code`.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use forge_testkit::graphql::fragment_bomb;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::support::{Opts, RUN_EVENTS, SECRET, Srv, Ws, chrono_now, start, token};

fn keys(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/keys/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn hs256(claims: &Value) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
    )
    .unwrap()
}

async fn healthz_ms(srv: &Srv) -> u128 {
    let started = Instant::now();
    let res = srv.http.get(srv.url("/healthz")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    started.elapsed().as_millis()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fragment_bomb_is_refused_before_validation_and_the_server_stays_responsive() {
    let srv = start(Opts::default()).await;
    let t = token("acme", "alice", &[]);
    let query = fragment_bomb(30);
    assert!(
        query.len() < 2_000,
        "a small document: {} bytes",
        query.len()
    );
    let started = Instant::now();
    let bombs = (0..4).map(|_| srv.post(Some(&t), &query, json!({})));
    let (answers, health) = tokio::join!(futures_util::future::join_all(bombs), async {
        tokio::time::sleep(Duration::from_millis(5)).await;
        healthz_ms(&srv).await
    });
    for (status, body) in answers {
        assert_eq!(status, 200);
        assert_eq!(
            body["errors"][0]["extensions"]["code"], "QUERY_TOO_LARGE",
            "{body}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused at once, not validated: {:?}",
        started.elapsed()
    );
    assert!(health < 100, "/healthz took {health} ms");
}

#[tokio::test]
async fn lists_count_their_limit_toward_complexity_and_responses_have_a_budget() {
    let srv = start(Opts {
        tune: Some(|c| c.http.response_bytes = 2_000),
        ..Opts::default()
    })
    .await;
    let t = token("acme", "alice", &[]);
    let (_, run) = srv
        .run_until(&t, "assistant", "slow sum", "completed")
        .await;
    // 10 aliases of 1,000 events each: within the old field count, far past a list-aware budget.
    let aliases: String = (0..10)
        .map(|i| format!("a{i}: runEvents(runId: $id, limit: 1000) {{ event }} "))
        .collect();
    let (_, body) = srv
        .post(
            Some(&t),
            &format!("query($id: ID!) {{ {aliases} }}"),
            json!({"id": run}),
        )
        .await;
    let e = &body["errors"][0];
    assert_eq!(
        e["extensions"]["code"], "GRAPHQL_VALIDATION_FAILED",
        "{body}"
    );
    assert!(e["message"].as_str().unwrap().contains("complex"), "{body}");
    // Within complexity but past the response budget: an error, not megabytes.
    let (_, body) = srv
        .post(
            Some(&t),
            "query($id: ID!) { runEvents(runId: $id, limit: 50) { event } }",
            json!({"id": run}),
        )
        .await;
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "RESPONSE_TOO_LARGE",
        "{body}"
    );
}

#[tokio::test]
async fn parse_and_validation_errors_carry_a_code_and_413_is_a_graphql_error() {
    let srv = start(Opts::default()).await;
    let t = token("acme", "alice", &[]);
    let (_, body) = srv.post(Some(&t), "query {", json!({})).await;
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "GRAPHQL_PARSE_FAILED",
        "{body}"
    );
    let (_, body) = srv.post(Some(&t), "{ nosuchfield }", json!({})).await;
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "GRAPHQL_VALIDATION_FAILED",
        "{body}"
    );
    let huge = "x".repeat(100 * 1024);
    let (status, body) = srv
        .post(
            Some(&t),
            &format!("{{ agents {{ name }} }} # {huge}"),
            json!({}),
        )
        .await;
    assert_eq!(status, 413);
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "PAYLOAD_TOO_LARGE",
        "{body}"
    );
}

/// Sends raw bytes and reads the response head.
fn raw(addr: std::net::SocketAddr, request: &[u8], wait: Duration) -> String {
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(wait)).unwrap();
    tcp.write_all(request).unwrap();
    let mut buf = [0u8; 512];
    let n = tcp.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_is_read_only_after_the_token_and_only_for_so_long() {
    let srv = start(Opts {
        tune: Some(|c| c.http.body_timeout = Duration::from_millis(300)),
        ..Opts::default()
    })
    .await;
    // No token: refused without waiting for the (never sent) body.
    let head = tokio::task::spawn_blocking({
        let addr = srv.addr;
        move || {
            raw(
                addr,
                b"POST /graphql HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n",
                Duration::from_secs(5),
            )
        }
    })
    .await
    .unwrap();
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
    // A token, then a body that never comes: 408 after the body timeout.
    let t = token("acme", "alice", &[]);
    let started = Instant::now();
    let head = tokio::task::spawn_blocking({
        let addr = srv.addr;
        move || {
            let req = format!(
                "POST /graphql HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {t}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{"
            );
            raw(addr, req.as_bytes(), Duration::from_secs(5))
        }
    })
    .await
    .unwrap();
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn a_token_not_valid_yet_is_refused() {
    let srv = start(Opts::default()).await;
    let early = hs256(&json!({"sub": "alice", "tenant_id": "acme",
        "nbf": chrono_now() + 3600, "exp": chrono_now() + 7200}));
    let (status, body) = srv
        .post(Some(&early), "{ agents { name } }", json!({}))
        .await;
    assert_eq!(status, 401, "{body}");
    assert!(body.to_string().contains("not valid yet"), "{body}");
}

async fn close_code(ws: &mut Ws) -> u16 {
    loop {
        match ws.next_message().await {
            Message::Close(frame) => return frame.map_or(1005, |f| u16::from(f.code)),
            Message::Text(t) if t.contains("socket_error") => panic!("{t}"),
            _ => {}
        }
    }
}

#[tokio::test]
async fn a_websocket_session_ends_when_its_token_expires() {
    let srv = start(Opts::default()).await;
    // Valid now (30 s of leeway covers clock skew, not the session): expires in 2 s.
    let short = hs256(&json!({"sub": "alice", "tenant_id": "acme", "exp": chrono_now() + 2}));
    let (_, run) = srv
        .run_until(
            &token("acme", "alice", &[]),
            "assistant",
            "send the email",
            "waiting",
        )
        .await;
    let (mut ws, ack) = Ws::connect(&srv, Some(&short)).await;
    assert!(ack.to_string().contains("connection_ack"), "{ack}");
    ws.subscribe("s", RUN_EVENTS, json!({"id": run, "after": 0}))
        .await;
    let started = Instant::now();
    assert_eq!(close_code(&mut ws).await, forge_server::CLOSE_FORBIDDEN);
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn a_websocket_that_never_initialises_is_closed() {
    let srv = start(Opts {
        tune: Some(|c| c.ws.init_timeout = Duration::from_millis(300)),
        ..Opts::default()
    })
    .await;
    let mut ws = Ws::open(&srv).await;
    let started = Instant::now();
    assert_eq!(close_code(&mut ws).await, forge_server::CLOSE_INIT_TIMEOUT);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn subscriptions_per_connection_are_capped() {
    let srv = start(Opts {
        tune: Some(|c| c.ws.subscriptions = 3),
        ..Opts::default()
    })
    .await;
    let t = token("acme", "alice", &[]);
    let (_, run) = srv
        .run_until(&t, "assistant", "send the email", "waiting")
        .await;
    let (mut ws, _) = Ws::connect(&srv, Some(&t)).await;
    for id in ["1", "2", "3", "4"] {
        ws.subscribe(id, RUN_EVENTS, json!({"id": run, "after": 0}))
            .await;
    }
    let m = ws.next_for("4").await;
    assert_eq!(m["type"], "error", "{m}");
    assert_eq!(
        m["payload"][0]["extensions"]["code"],
        "TOO_MANY_SUBSCRIPTIONS"
    );
    // Ending one makes room for another.
    ws.send(json!({"id": "1", "type": "complete"})).await;
    ws.subscribe("5", RUN_EVENTS, json!({"id": run, "after": 0}))
        .await;
    let m = ws.next_for("5").await;
    assert_eq!(m["type"], "next", "{m}");
}

#[tokio::test]
async fn a_rotated_jwks_file_is_picked_up_without_a_restart() {
    let dir = std::env::temp_dir().join(format!("forge-jwks-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("jwks.json");
    std::fs::write(&path, keys("jwks.json")).unwrap();
    let srv = start(Opts {
        auth: Some(forge_server::Authenticator::jwks_file(&path).unwrap()),
        ..Opts::default()
    })
    .await;
    let claims = json!({"sub": "alice", "tenant_id": "acme", "exp": chrono_now() + 600});
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("test-rsa-2".into());
    let rotated = jsonwebtoken::encode(
        &header,
        &claims,
        &EncodingKey::from_rsa_pem(&keys("other-rsa-private.pem")).unwrap(),
    )
    .unwrap();
    let (status, _) = srv
        .post(Some(&rotated), "{ agents { name } }", json!({}))
        .await;
    assert_eq!(status, 401, "the new key is not trusted yet");
    // Rotation: the operator installs the new JWKS (a new file, renamed into place).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let next = dir.join("jwks.json.new");
    std::fs::write(&next, keys("rotated-jwks.json")).unwrap();
    std::fs::rename(&next, &path).unwrap();
    let (status, body) = srv
        .post(Some(&rotated), "{ agents { name } }", json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_nul_character_is_refused_alike_on_every_store() {
    let (sqlite, dir) = crate::support::sqlite_store().await;
    let stores = vec![crate::support::postgres_store().await, sqlite];
    for store in stores {
        let srv = start(Opts {
            store,
            worker: false,
            ..Opts::default()
        })
        .await;
        let t = token("acme", "alice", &[]);
        let thread = srv.thread(&t).await;
        let (code, message) = srv
            .gql_error(
                &t,
                "mutation($t: ID!) { startRun(input: {threadId: $t, agent: \"greeter\", message: \"a\\u0000b\"}) { id } }",
                json!({"t": thread}),
            )
            .await;
        assert_eq!(code, "BAD_REQUEST", "{message}");
        assert!(message.contains("NUL"), "{message}");
        let (code, _) = srv
            .gql_error(
                &t,
                "mutation { createThread(title: \"x\\u0000\") { id } }",
                json!({}),
            )
            .await;
        assert_eq!(code, "BAD_REQUEST");
        let (code, _) = srv
            .gql_error(
                &t,
                "mutation($s: JSON) { createThread(state: $s) { id } }",
                json!({"s": {"k": "v\u{0}"}}),
            )
            .await;
        assert_eq!(code, "BAD_REQUEST");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn subscriptions_per_tenant_are_capped_across_connections() {
    let srv = start(Opts {
        tune: Some(|c| c.ws.per_tenant = 2),
        ..Opts::default()
    })
    .await;
    let t = token("acme", "alice", &[]);
    let (_, run) = srv
        .run_until(&t, "assistant", "send the email", "waiting")
        .await;
    // Three principals, each within its own part (one of the two): the tenant's cap binds.
    let mut sockets = Vec::new();
    for (id, who) in [("1", "alice"), ("2", "bob"), ("3", "carol")] {
        let (mut ws, _) = Ws::connect(&srv, Some(&token("acme", who, &[]))).await;
        ws.subscribe(id, RUN_EVENTS, json!({"id": run, "after": 0}))
            .await;
        let m = ws.next_for(id).await;
        sockets.push((ws, m));
    }
    assert_eq!(sockets[0].1["type"], "next");
    assert_eq!(sockets[1].1["type"], "next");
    assert_eq!(sockets[2].1["type"], "error", "{}", sockets[2].1);
    assert_eq!(
        sockets[2].1["payload"][0]["extensions"]["code"],
        "TOO_MANY_SUBSCRIPTIONS"
    );
    // Another tenant is not held to acme's count.
    let g = token("globex", "gus", &[]);
    let (_, other) = srv.run_until(&g, "greeter", "hi", "completed").await;
    let (mut ws, _) = Ws::connect(&srv, Some(&g)).await;
    ws.subscribe("g", RUN_EVENTS, json!({"id": other, "after": 0}))
        .await;
    let m = ws.next_for("g").await;
    assert_eq!(m["type"], "next", "{m}");
    // A connection that goes away gives its subscriptions back.
    drop(sockets.remove(0));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (mut ws, _) = Ws::connect(&srv, Some(&t)).await;
    ws.subscribe("4", RUN_EVENTS, json!({"id": run, "after": 0}))
        .await;
    let m = ws.next_for("4").await;
    assert_eq!(m["type"], "next", "{m}");
}

/// Authenticated connections per tenant are capped (issue 17, item 8): one past the cap is
/// closed with `1013` (try again later); another tenant is not held to it, and a connection that
/// goes away frees its place.
#[tokio::test]
async fn websocket_connections_per_tenant_are_capped() {
    let srv = start(Opts {
        tune: Some(|c| c.ws.connections_per_tenant = 2),
        ..Opts::default()
    })
    .await;
    // Three principals, each within its own part (one of the two): the tenant's cap binds.
    let t = token("acme", "alice", &[]);
    let (first, _) = Ws::connect(&srv, Some(&t)).await;
    let (_second, _) = Ws::connect(&srv, Some(&token("acme", "bob", &[]))).await;
    let (mut third, _) = Ws::connect(&srv, Some(&token("acme", "carol", &[]))).await;
    assert_eq!(close_code(&mut third).await, forge_server::CLOSE_TRY_LATER);
    // A connection that answers an operation is open (the run does not exist: an error).
    let nowhere = json!({"id": uuid::Uuid::now_v7().to_string(), "after": 0});
    let g = token("globex", "gus", &[]);
    let (mut other, _) = Ws::connect(&srv, Some(&g)).await;
    other.subscribe("g", RUN_EVENTS, nowhere.clone()).await;
    assert_eq!(
        other.next_for("g").await["id"],
        "g",
        "another tenant connects"
    );
    drop(first);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (mut again, _) = Ws::connect(&srv, Some(&t)).await;
    again.subscribe("a", RUN_EVENTS, nowhere).await;
    assert_eq!(
        again.next_for("a").await["id"],
        "a",
        "a freed place is taken"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_finishes_its_headers_is_closed() {
    let srv = start(Opts {
        tune: Some(|c| c.header_timeout = Duration::from_millis(300)),
        ..Opts::default()
    })
    .await;
    let addr = srv.addr;
    let (answer, waited) = tokio::task::spawn_blocking(move || {
        let mut tcp = std::net::TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
            .unwrap();
        let started = Instant::now();
        let mut buf = [0u8; 256];
        let n = tcp.read(&mut buf).unwrap_or(0);
        (
            String::from_utf8_lossy(&buf[..n]).into_owned(),
            started.elapsed(),
        )
    })
    .await
    .unwrap();
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    assert!(waited < Duration::from_secs(5), "closed after {waited:?}");
    // A well-behaved client is unaffected.
    assert!(healthz_ms(&srv).await < 1_000);
}

/// A host's own routes are served beside Forge's, through the same connection handling and the
/// same authentication: both answer, and a connection that never sends its headers is closed on the host's routes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosts_routes_are_served_beside_forges_with_the_same_connection_limits() {
    let auth = std::sync::Arc::new(forge_server::Authenticator::hs256(SECRET.as_bytes()).unwrap());
    let whoami = move |headers: axum::http::HeaderMap| {
        let auth = auth.clone();
        async move {
            use axum::response::IntoResponse;
            match auth.authenticate_request(&headers) {
                Ok(scope) => scope.principal_id().as_str().to_owned().into_response(),
                Err(e) => e.into_response(),
            }
        }
    };
    let routes = axum::Router::new()
        .route("/app/ping", axum::routing::get(|| async { "pong" }))
        .route("/app/whoami", axum::routing::get(whoami));
    let srv = start(Opts {
        host_routes: Some(routes),
        tune: Some(|c| c.header_timeout = Duration::from_millis(300)),
        ..Opts::default()
    })
    .await;
    let pong = srv.http.get(srv.url("/app/ping")).send().await.unwrap();
    assert_eq!(pong.status(), 200);
    assert_eq!(pong.text().await.unwrap(), "pong");
    assert_eq!(
        srv.http
            .get(srv.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    // The host's route authenticates as Forge's do: the caller, or Forge's 401 with its challenge.
    let me = srv
        .http
        .get(srv.url("/app/whoami"))
        .bearer_auth(token("acme", "alice", &[]))
        .send()
        .await
        .unwrap();
    assert_eq!(me.text().await.unwrap(), "alice");
    let anonymous = srv.http.get(srv.url("/app/whoami")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    assert_eq!(
        anonymous.headers()["www-authenticate"],
        "Bearer realm=\"forge\""
    );
    // A slow client's connection is closed after the header timeout.
    let mut tcp = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tcp.write_all(b"GET /app/ping HTTP/1.1\r\n").await.unwrap();
    let mut buf = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut buf)).await;
    assert!(
        closed.is_ok(),
        "the connection stayed open past the header timeout"
    );
    assert!(!String::from_utf8_lossy(&buf).contains("pong"));
}

/// A handler that panics is answered `500 INTERNAL`, the connection stays usable, and nothing of
/// the panic's message (which here quotes the request, as a slicing bug on a document would)
/// reaches the response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_answered_with_an_error_that_quotes_nothing() {
    let routes = axum::Router::new().route(
        "/app/cut",
        axum::routing::post(|body: String| async move {
            if !body.is_empty() {
                panic!("cannot cut inside {body}");
            }
            "nothing to cut"
        }),
    );
    let srv = start(Opts {
        host_routes: Some(routes),
        ..Opts::default()
    })
    .await;
    let answer = srv
        .http
        .post(srv.url("/app/cut"))
        .body("DOCUMENT-TEXT-e9c1")
        .send()
        .await
        .expect("an answer, not a dropped connection");
    assert_eq!(answer.status(), 500);
    let body: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(body["errors"][0]["extensions"]["code"], "INTERNAL");
    assert!(!body.to_string().contains("DOCUMENT-TEXT"), "{body}");
    // The server goes on answering.
    let health = srv.http.get(srv.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

/// Many subscriptions sent at once on one socket all run (issue 73, item 2): past the 16 client
/// messages the server's queue held, the connection used to stop answering anything. And a
/// client's Close is answered with its code (clients saw 1006).
#[tokio::test]
async fn a_burst_of_subscriptions_on_one_socket_all_run_and_a_close_is_answered() {
    let srv = start(Opts::default()).await;
    let t = token("acme", "alice", &[]);
    let (_, run) = srv
        .run_until(&t, "assistant", "send the email", "waiting")
        .await;
    // Written without waiting for any answer.
    let mut ws =
        crate::support::burst(&srv, &t, 60, RUN_EVENTS, &json!({"id": run, "after": 0})).await;
    let mut answered = std::collections::HashSet::new();
    while answered.len() < 60 {
        let m = ws.next_json().await;
        assert_eq!(m["type"], "next", "{m}");
        answered.insert(m["id"].as_str().unwrap().to_owned());
    }
    let close = Message::Close(Some(tokio_tungstenite::tungstenite::protocol::CloseFrame {
        code: 1000.into(),
        reason: "done".into(),
    }));
    futures_util::SinkExt::send(&mut ws.socket, close)
        .await
        .unwrap();
    assert_eq!(close_code(&mut ws).await, 1000);
}

/// A fragment bomb sent as a `subscribe` over graphql-ws is refused as over HTTP, with a code,
/// before async-graphql parses it (issue 73, item 1), and the connection goes on.
#[tokio::test]
async fn a_fragment_bomb_over_graphql_ws_is_refused_with_a_code() {
    let srv = start(Opts::default()).await;
    let t = token("acme", "alice", &[]);
    let (_, run) = srv
        .run_until(&t, "assistant", "send the email", "waiting")
        .await;
    let (mut ws, _) = Ws::connect(&srv, Some(&t)).await;
    let bomb = fragment_bomb(30).replace("query {", "subscription {");
    ws.subscribe("bomb", &bomb, json!({})).await;
    let m = ws.next_for("bomb").await;
    assert_eq!(m["type"], "error", "{m}");
    assert_eq!(
        m["payload"][0]["extensions"]["code"], "QUERY_TOO_LARGE",
        "{m}"
    );
    ws.subscribe("bad", "subscription {", json!({})).await;
    let m = ws.next_for("bad").await;
    assert_eq!(
        m["payload"][0]["extensions"]["code"], "GRAPHQL_PARSE_FAILED",
        "{m}"
    );
    ws.subscribe("ok", RUN_EVENTS, json!({"id": run, "after": 0}))
        .await;
    assert_eq!(ws.next_for("ok").await["type"], "next");
}

/// Tools' introspection (GraphiQL's nests `ofType` nine deep) loads the schema over HTTP; a
/// document that selects anything besides introspection keeps the ordinary depth limit.
#[tokio::test]
async fn a_tools_introspection_query_is_not_too_deep_and_nothing_else_gains_depth() {
    let srv = start(Opts::default()).await;
    let t = token("acme", "alice", &["member"]);
    let type_ref = (0..9).fold(String::from("kind name"), |inner, _| {
        format!("kind name ofType {{ {inner} }}")
    });
    let introspection = format!(
        "query IntrospectionQuery {{ __schema {{ queryType {{ name }} types {{ ...FullType }} }} }}
         fragment FullType on __Type {{ kind name fields(includeDeprecated: true) {{ name
           args {{ name type {{ {type_ref} }} }} type {{ {type_ref} }} }} }}"
    );
    let (status, body) = srv.post(Some(&t), &introspection, json!({})).await;
    assert_eq!(status, 200);
    assert!(body["errors"].is_null(), "{body}");
    assert_eq!(body["data"]["__schema"]["queryType"]["name"], "Query");
    // The same depth with a field of the API beside it: refused.
    let mixed = introspection.replace("queryType { name }", "queryType { name } ");
    let mixed = mixed.replacen(
        "query IntrospectionQuery {",
        "query IntrospectionQuery { agents { name } ",
        1,
    );
    let (_, body) = srv.post(Some(&t), &mixed, json!({})).await;
    assert_eq!(
        body["errors"][0]["message"], "Query is nested too deep.",
        "{body}"
    );
}
