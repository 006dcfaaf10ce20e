//! Bearer tokens: missing, malformed, badly signed, expired, `alg: none`, the wrong key type;
//! RS256 and ES256 from a JWKS file; Supabase claims; and another tenant's ids, which behave
//! exactly like ids that do not exist.

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use crate::support::{Opts, SECRET, Ws, chrono_now, start, token};

fn keys(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/keys/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn claims(exp_offset: i64) -> Value {
    json!({"sub": "alice", "tenant_id": "acme", "roles": ["member"], "exp": chrono_now() + exp_offset})
}

fn sign(alg: Algorithm, kid: Option<&str>, key: &EncodingKey, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

const WHO: &str = "{ agents { name } }";

async fn status_and_challenge(
    srv: &crate::support::Srv,
    auth: Option<&str>,
) -> (u16, String, Value) {
    let mut req = srv
        .http
        .post(srv.url("/graphql"))
        .json(&json!({"query": WHO}));
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    let challenge = res
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, challenge, res.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn bad_tokens_are_refused_with_standard_errors() {
    let srv = start(Opts::default()).await;
    let (status, challenge, body) = status_and_challenge(&srv, None).await;
    assert_eq!(status, 401);
    assert_eq!(challenge, "Bearer realm=\"forge\"");
    assert_eq!(body["errors"][0]["extensions"]["code"], "UNAUTHENTICATED");

    let cases = [
        ("Basic dXNlcjpwYXNz".to_owned(), "the authorization scheme must be Bearer"),
        ("Bearer not.a.jwt".to_owned(), "malformed token"),
        (
            format!(
                "Bearer {}",
                sign(
                    Algorithm::HS256,
                    None,
                    &EncodingKey::from_secret(b"another-secret-another-secret-0123456").unwrap(),
                    &claims(600)
                )
            ),
            "bad signature",
        ),
        (
            format!(
                "Bearer {}",
                sign(
                    Algorithm::HS256,
                    None,
                    &EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
                    &claims(-600)
                )
            ),
            "the token has expired",
        ),
        (
            format!(
                "Bearer {}",
                sign(
                    Algorithm::HS256,
                    None,
                    &EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
                    &json!({"sub": "alice", "exp": chrono_now() + 600})
                )
            ),
            "missing claim tenant_id",
        ),
        (
            // alg "none": header {"alg":"none"}, no signature.
            "Bearer eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJhbGljZSIsInRlbmFudF9pZCI6ImFjbWUiLCJleHAiOjQxMDI0NDQ4MDB9.".to_owned(),
            "malformed token",
        ),
    ];
    for (header, why) in cases {
        let (status, challenge, body) = status_and_challenge(&srv, Some(&header)).await;
        assert_eq!(status, 401, "{header}: {body}");
        assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
        let message = body["errors"][0]["message"].as_str().unwrap();
        assert!(message.contains(why), "{header}: {message}");
    }
    // An RS256 token is not accepted by an HS256 server (no algorithm confusion).
    let rs = sign(
        Algorithm::RS256,
        Some("test-rsa"),
        &EncodingKey::from_rsa_pem(&keys("rsa-private.pem")).unwrap(),
        &claims(600),
    );
    let (status, _, _) = status_and_challenge(&srv, Some(&format!("Bearer {rs}"))).await;
    assert_eq!(status, 401);
    let (status, _, _) = status_and_challenge(
        &srv,
        Some(&format!("Bearer {}", token("acme", "alice", &[]))),
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn rs256_and_es256_tokens_verify_against_a_jwks_file() {
    let jwks = String::from_utf8(keys("jwks.json")).unwrap();
    let srv = start(Opts {
        auth: Some(forge_server::Authenticator::jwks(&jwks).unwrap()),
        ..Opts::default()
    })
    .await;
    let rs = sign(
        Algorithm::RS256,
        Some("test-rsa"),
        &EncodingKey::from_rsa_pem(&keys("rsa-private.pem")).unwrap(),
        &claims(600),
    );
    let es = sign(
        Algorithm::ES256,
        Some("test-ec"),
        &EncodingKey::from_ec_pem(&keys("ec-private.pem")).unwrap(),
        &claims(600),
    );
    for t in [&rs, &es] {
        let d = srv.gql(t, WHO, json!({})).await;
        assert_eq!(d["agents"][0]["name"], "assistant");
    }
    let forged = sign(
        Algorithm::RS256,
        Some("test-rsa"),
        &EncodingKey::from_rsa_pem(&keys("other-rsa-private.pem")).unwrap(),
        &claims(600),
    );
    let (status, _, body) = status_and_challenge(&srv, Some(&format!("Bearer {forged}"))).await;
    assert_eq!(status, 401);
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("bad signature")
    );
    let unknown_kid = sign(
        Algorithm::RS256,
        Some("rotated-away"),
        &EncodingKey::from_rsa_pem(&keys("rsa-private.pem")).unwrap(),
        &claims(600),
    );
    let (status, _, _) = status_and_challenge(&srv, Some(&format!("Bearer {unknown_kid}"))).await;
    assert_eq!(status, 401);
    // HS256 signed with the public key's bytes (the classic confusion) is refused.
    let hs = sign(
        Algorithm::HS256,
        Some("test-rsa"),
        &EncodingKey::from_secret(jwks.as_bytes()).unwrap(),
        &claims(600),
    );
    let (status, _, _) = status_and_challenge(&srv, Some(&format!("Bearer {hs}"))).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn supabase_claims_come_from_app_metadata() {
    let auth = forge_server::Authenticator::hs256(SECRET.as_bytes())
        .unwrap()
        .mode(forge_server::ClaimsMode::Supabase)
        .audience("authenticated");
    let srv = start(Opts {
        auth: Some(auth),
        ..Opts::default()
    })
    .await;
    let key = EncodingKey::from_secret(SECRET.as_bytes()).unwrap();
    let supabase = json!({
        "sub": "5a1e0000-0000-4000-8000-000000000001", "aud": "authenticated", "role": "authenticated",
        "exp": chrono_now() + 600, "app_metadata": {"tenant_id": "acme", "roles": ["member"]},
        // A user can write user_metadata; it must not pick the tenant.
        "user_metadata": {"tenant_id": "globex"}, "tenant_id": "globex"
    });
    let t = sign(Algorithm::HS256, None, &key, &supabase);
    let thread = srv.thread(&t).await;
    let supa = |tenant: &str| {
        sign(
            Algorithm::HS256,
            None,
            &key,
            &json!({"sub": "someone", "aud": "authenticated", "exp": chrono_now() + 600,
                    "app_metadata": {"tenant_id": tenant}}),
        )
    };
    let (acme, globex) = (supa("acme"), supa("globex"));
    // A plain token (tenant at the top level) is not a Supabase token.
    let (status, _, _) = status_and_challenge(
        &srv,
        Some(&format!("Bearer {}", token("acme", "alice", &[]))),
    )
    .await;
    assert_eq!(status, 401);
    let q = "query($id: ID!) { thread(id: $id) { id } }";
    assert_eq!(
        srv.gql(&acme, q, json!({"id": thread})).await["thread"]["id"],
        thread.as_str()
    );
    let (code, _) = srv.gql_error(&globex, q, json!({"id": thread})).await;
    assert_eq!(code, "NOT_FOUND");
    let wrong_aud = sign(
        Algorithm::HS256,
        None,
        &key,
        &json!({"sub": "u", "aud": "anon", "exp": chrono_now() + 600, "app_metadata": {"tenant_id": "acme"}}),
    );
    let (status, _, _) = status_and_challenge(&srv, Some(&format!("Bearer {wrong_aud}"))).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn another_tenants_ids_behave_like_ids_that_do_not_exist() {
    let srv = start(Opts::default()).await;
    let acme = token("acme", "alice", &[]);
    let globex = token("globex", "mallory", &[]);
    let thread = srv.thread(&acme).await;
    let run = srv.start_run(&acme, &thread, "greeter", "hi").await;
    srv.wait_status(&acme, &run, "completed").await;
    let missing = uuid::Uuid::now_v7().to_string();

    let probes = [
        ("query($id: ID!) { thread(id: $id) { id } }", "thread"),
        ("query($id: ID!) { run(id: $id) { id } }", "run"),
        ("query($id: ID!) { runEvents(runId: $id) { seq } }", "run"),
        ("mutation($id: ID!) { cancelRun(runId: $id) }", "run"),
        (
            "mutation($id: ID!) { startRun(input: {threadId: $id, agent: \"greeter\", message: \"x\"}) { id } }",
            "thread",
        ),
        (
            "mutation($id: ID!) { resolveApproval(interactionId: $id, approve: true, key: \"k\") { id } }",
            "run",
        ),
    ];
    for (query, kind) in probes {
        let real = if kind == "thread" { &thread } else { &run };
        let foreign = srv.post(Some(&globex), query, json!({"id": real})).await;
        let absent = srv.post(Some(&globex), query, json!({"id": missing})).await;
        assert_eq!(
            foreign.1["errors"][0]["extensions"]["code"], "NOT_FOUND",
            "{query}: {}",
            foreign.1
        );
        assert_eq!(
            foreign.1["errors"][0]["message"], absent.1["errors"][0]["message"],
            "{query}: another tenant's id must look absent"
        );
        assert_eq!(foreign.0, absent.0);
    }
    // Nothing of acme's is listed for globex.
    let d = srv
        .gql(
            &globex,
            "{ pendingInteractions { nodes { id } } }",
            json!({}),
        )
        .await;
    assert!(
        d["pendingInteractions"]["nodes"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // Nor can a globex subscriber attach to acme's run.
    let (mut ws, ack) = Ws::connect(&srv, Some(&globex)).await;
    assert!(ack.to_string().contains("connection_ack"), "{ack}");
    let refused = ws.subscribe_refused(&run).await;
    assert_eq!(refused["extensions"]["code"], "NOT_FOUND", "{refused}");
    assert_eq!(refused["message"], "not found", "{refused}");
}

#[tokio::test]
async fn a_websocket_without_a_valid_token_is_closed() {
    let srv = start(Opts::default()).await;
    for t in [None, Some("garbage")] {
        let (_ws, first) = Ws::connect(&srv, t).await;
        match first {
            tokio_tungstenite::tungstenite::Message::Close(Some(frame)) => {
                assert!(frame.reason.contains("unauthenticated"), "{frame:?}");
                assert_eq!(u16::from(frame.code), forge_server::CLOSE_FORBIDDEN);
            }
            other => panic!("expected a close, got {other:?}"),
        }
    }
}

/// The server over a Supabase-mode PostgreSQL store, with Supabase tokens: the tenant from
/// `app_metadata` reaches the database's own policies (`request.jwt.claims`), runs execute and
/// stream, and another tenant sees nothing — enforced by the database too.
#[tokio::test]
async fn a_supabase_deployment_streams_runs_and_isolates_tenants() {
    use forge_store_postgres::testing::{Flavor, TestDatabase};
    let db = TestDatabase::create(Flavor::Supabase)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let store = forge_store_postgres::PostgresStore::connect(
        db.url(),
        forge_store_postgres::Mode::Supabase,
    )
    .await
    .unwrap()
    .with_guard(db);
    let auth = forge_server::Authenticator::hs256(SECRET.as_bytes())
        .unwrap()
        .mode(forge_server::ClaimsMode::Supabase);
    let srv = start(Opts {
        store: std::sync::Arc::new(store),
        auth: Some(auth),
        ..Opts::default()
    })
    .await;
    let key = EncodingKey::from_secret(SECRET.as_bytes()).unwrap();
    let supa = |tenant: &str, user: &str| {
        sign(
            Algorithm::HS256,
            None,
            &key,
            &json!({"sub": user, "role": "authenticated", "exp": chrono_now() + 600,
                    "app_metadata": {"tenant_id": tenant}}),
        )
    };
    let (acme, globex) = (
        supa("acme", "5a1e0000-0000-4000-8000-00000000000a"),
        supa("globex", "5a1e0000-0000-4000-8000-00000000000b"),
    );
    let thread = srv.thread(&acme).await;
    let run = srv.start_run(&acme, &thread, "greeter", "hi").await;
    let (mut ws, _) = Ws::connect(&srv, Some(&acme)).await;
    ws.subscribe(
        "s",
        crate::support::RUN_EVENTS,
        json!({"id": run, "after": 0}),
    )
    .await;
    let (items, completed) = ws.collect("s", "runEvents", None).await;
    assert!(completed);
    let mut transcript = forge_core::stream::Transcript::new();
    crate::support::fold(&mut transcript, &items);
    let log = srv.log(&acme, &run).await;
    assert_eq!(crate::support::committed(&transcript, &run), log);
    let q = "query($id: ID!) { run(id: $id) { id } }";
    let (code, _) = srv.gql_error(&globex, q, json!({"id": run})).await;
    assert_eq!(code, "NOT_FOUND");
    let d = srv
        .gql(
            &globex,
            "{ pendingInteractions { nodes { id } } }",
            json!({}),
        )
        .await;
    assert!(
        d["pendingInteractions"]["nodes"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

/// Policies decide, within a tenant, who reads a thread and who acts on it: the example
/// policies plus one that hides threads from a role.
#[tokio::test]
async fn policies_decide_who_reads_and_who_acts_on_a_thread() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies");
    let mut texts: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    texts.push((
        "hidden.cedar".into(),
        r#"forbid(principal in Forge::Role::"contractor", action == Forge::Action::"read", resource is Forge::Thread);"#.into(),
    ));
    let policies = forge_policy::CedarAuthorizer::from_sources(
        texts.iter().map(|(n, t)| (n.as_str(), t.as_str())),
    )
    .unwrap();
    let srv = start(Opts {
        authorizer: Some(std::sync::Arc::new(policies)),
        ..Opts::default()
    })
    .await;
    let owner = token("acme", "alice", &["member"]);
    let auditor = token("acme", "audrey", &["auditor"]);
    let contractor = token("acme", "carl", &["contractor"]);
    let (thread, run) = srv.run_until(&owner, "greeter", "hi", "completed").await;
    let read = "query($id: ID!) { thread(id: $id) { id runs { nodes { id } } } }";
    assert_eq!(
        srv.gql(&auditor, read, json!({"id": thread})).await["thread"]["id"],
        thread.as_str()
    );
    let start_run = "mutation($t: ID!) { startRun(input: {threadId: $t, agent: \"greeter\", message: \"x\"}) { id } }";
    let (code, message) = srv
        .gql_error(&auditor, start_run, json!({"t": thread}))
        .await;
    assert_eq!(
        (code.as_str(), message.as_str()),
        ("FORBIDDEN", "not permitted")
    );
    let (code, _) = srv
        .gql_error(
            &auditor,
            "mutation($id: ID!) { cancelRun(runId: $id) }",
            json!({"id": run}),
        )
        .await;
    assert_eq!(code, "FORBIDDEN");
    // Hidden from contractors: exactly like a thread that does not exist.
    let missing = uuid::Uuid::now_v7().to_string();
    for (query, id) in [
        (read, &thread),
        ("query($id: ID!) { run(id: $id) { id } }", &run),
        ("query($id: ID!) { runEvents(runId: $id) { seq } }", &run),
    ] {
        let (code, message) = srv.gql_error(&contractor, query, json!({"id": id})).await;
        let (_, absent) = srv
            .gql_error(&contractor, query, json!({"id": missing}))
            .await;
        assert_eq!(code, "NOT_FOUND", "{query}");
        assert_eq!(message, absent, "{query}");
    }
    let (code, _) = srv
        .gql_error(&contractor, start_run, json!({"t": thread}))
        .await;
    assert_eq!(code, "NOT_FOUND");
    let (mut ws, _) = Ws::connect(&srv, Some(&contractor)).await;
    let refused = ws.subscribe_refused(&run).await;
    assert_eq!(refused["extensions"]["code"], "NOT_FOUND", "{refused}");
    // And the owner is unaffected.
    assert_eq!(
        srv.gql(&owner, read, json!({"id": thread})).await["thread"]["runs"]["nodes"][0]["id"],
        run.as_str()
    );
}

/// Administration is a policy decision (issue 62, item 12): with policies configured, the role
/// named `admin` grants nothing by itself — the example policies give administrators every power
/// and auditors the audit trail, and a policy set without them gives no one any.
#[tokio::test]
async fn policies_decide_who_administers() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies");
    let load = |skip: Option<&str>| {
        let texts: Vec<(String, String)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| Some(p.file_name().unwrap().to_str().unwrap()) != skip)
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&p).unwrap())
            })
            .collect();
        forge_policy::CedarAuthorizer::from_sources(
            texts.iter().map(|(n, t)| (n.as_str(), t.as_str())),
        )
        .unwrap()
    };
    let audit = "{ auditRecords(limit: 1) }";
    let admin = token("acme", "ada", &["admin"]);
    let auditor = token("acme", "audrey", &["auditor"]);
    let member = token("acme", "bob", &["member"]);
    let srv = start(Opts {
        authorizer: Some(std::sync::Arc::new(load(None))),
        ..Opts::default()
    })
    .await;
    assert!(srv.gql(&admin, audit, json!({})).await["auditRecords"].is_array());
    assert!(srv.gql(&auditor, audit, json!({})).await["auditRecords"].is_array());
    let (code, _) = srv.gql_error(&member, audit, json!({})).await;
    assert_eq!(code, "FORBIDDEN");
    let (thread, _) = srv.run_until(&member, "greeter", "hi", "completed").await;
    let erase = "mutation($id: ID!) { eraseThread(id: $id) { runs } }";
    let (code, _) = srv.gql_error(&auditor, erase, json!({"id": thread})).await;
    assert_eq!(
        code, "FORBIDDEN",
        "auditors read the trail and erase nothing"
    );

    let srv = start(Opts {
        authorizer: Some(std::sync::Arc::new(load(Some("administration.cedar")))),
        ..Opts::default()
    })
    .await;
    let (code, _) = srv.gql_error(&admin, audit, json!({})).await;
    assert_eq!(code, "FORBIDDEN", "the role's name alone grants nothing");
}

/// Tenant ids starting with `_` are Forge's own (issue 73, item 6): a token naming
/// `_deployment`, even with the role `admin`, is refused before it reads the deployment's audit.
#[tokio::test]
async fn a_token_for_a_reserved_tenant_is_refused() {
    let srv = start(Opts::default()).await;
    let reserved = token("_deployment", "mallory", &["admin"]);
    let (status, _, body) = status_and_challenge(&srv, Some(&format!("Bearer {reserved}"))).await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("reserved"),
        "{body}"
    );
    let fine = token("acme_", "ada", &["admin"]);
    let d = srv
        .gql(&fine, "{ auditRecords(limit: 1) }", json!({}))
        .await;
    assert!(d["auditRecords"].is_array(), "{d}");
    // A NUL in a filter is a clear refusal, not an internal error.
    let (code, _) = srv
        .gql_error(
            &fine,
            "{ auditRecords(action: \"config.\\u0000\") }",
            json!({}),
        )
        .await;
    assert_eq!(code, "BAD_REQUEST");
}
