//! What a browser gets: the web client at `/` (every page path, its assets, strict headers),
//! CORS for the configured origins only, development sign-in only when enabled, GraphiQL on a
//! plain `GET /graphql` only when enabled.

use serde_json::json;

use crate::support::{Opts, start, token};

#[tokio::test]
async fn the_client_is_served_at_every_page_path_with_strict_headers() {
    let srv = start(Opts::default()).await;
    for path in [
        "/",
        "/threads/01a23500-0000-7000-8000-000000000001",
        "/sign-in",
    ] {
        let r = srv.http.get(srv.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let h = r.headers().clone();
        assert_eq!(h["content-type"], "text/html; charset=utf-8");
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
            "{csp}"
        );
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["x-frame-options"], "DENY");
        assert_eq!(h["referrer-policy"], "no-referrer");
        let body = r.text().await.unwrap();
        assert!(body.contains("/assets/app.js"), "{body}");
    }
    let js = srv
        .http
        .get(srv.url("/assets/app.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(js.status(), 200);
    assert_eq!(
        js.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    let tag = js.headers()["etag"].to_str().unwrap().to_owned();
    assert!(!js.bytes().await.unwrap().is_empty());
    // Revalidation with the tag costs no body.
    let again = srv
        .http
        .get(srv.url("/assets/app.js"))
        .header("if-none-match", &tag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    for missing in ["/assets/nope.js", "/favicon.ico"] {
        let r = srv.http.get(srv.url(missing)).send().await.unwrap();
        assert_eq!(r.status(), 404, "{missing}");
    }
    // The API's answers carry the strict headers too, but not the pages' policy; a download
    // keeps the sandboxing policy its handler sets.
    let api = srv.http.get(srv.url("/healthz")).send().await.unwrap();
    let h = api.headers();
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["x-frame-options"], "DENY");
    assert_eq!(h["referrer-policy"], "no-referrer");
    assert!(h.get("content-security-policy").is_none(), "{h:?}");
    // The API keeps its routes: a plain GET of /graphql is not the page.
    let r = srv.http.get(srv.url("/graphql")).send().await.unwrap();
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn without_the_ui_the_pages_are_not_served() {
    let srv = start(Opts {
        tune: Some(|c| c.web.ui = false),
        ..Opts::default()
    })
    .await;
    let r = srv.http.get(srv.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn cors_answers_the_configured_origins_only() {
    let srv = start(Opts {
        tune: Some(|c| c.web.cors_origins = vec!["https://app.example.com".into()]),
        ..Opts::default()
    })
    .await;
    let preflight = |origin: &'static str| {
        srv.http
            .request(reqwest::Method::OPTIONS, srv.url("/graphql"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization, content-type",
            )
            .send()
    };
    let ok = preflight("https://app.example.com").await.unwrap();
    assert!(ok.status().is_success(), "{}", ok.status());
    assert_eq!(
        ok.headers()["access-control-allow-origin"],
        "https://app.example.com"
    );
    assert!(
        ok.headers()["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .contains("authorization")
    );
    // Another origin's preflight is answered without a grant: the browser refuses it.
    let refused = preflight("https://evil.example").await.unwrap();
    assert!(
        refused
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
    // A real request from an allowed origin carries the header; from another it does not.
    let t = token("acme", "alice", &[]);
    for (origin, allowed) in [
        ("https://app.example.com", true),
        ("https://evil.example", false),
    ] {
        let r = srv
            .http
            .post(srv.url("/graphql"))
            .header("origin", origin)
            .bearer_auth(&t)
            .json(&json!({"query": "{ agents { name } }"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.headers().get("access-control-allow-origin").is_some(),
            allowed,
            "{origin}"
        );
    }
}

#[tokio::test]
async fn development_sign_in_answers_only_when_enabled() {
    let off = start(Opts::default()).await;
    let config: serde_json::Value = off
        .http
        .get(off.url("/auth/config"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(config, json!({"dev_sign_in": false}));
    let r = off
        .http
        .post(off.url("/auth/dev"))
        .json(&json!({"tenant": "acme", "principal": "alice"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    let on = start(Opts {
        tune: Some(|c| {
            c.web.dev_sign_in = Some(forge_server::DevSignIn {
                secret: crate::support::SECRET.as_bytes().to_vec(),
                ttl_secs: 600,
                anywhere: false,
            });
        }),
        ..Opts::default()
    })
    .await;
    let body: serde_json::Value = on
        .http
        .post(on.url("/auth/dev"))
        .json(&json!({"tenant": "acme", "principal": "alice", "roles": ["finance"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let t = body["token"].as_str().unwrap();
    let d = on.gql(t, "{ threads { nodes { id } } }", json!({})).await;
    assert_eq!(d["threads"]["nodes"], json!([]));
    let bad = on
        .http
        .post(on.url("/auth/dev"))
        .json(&json!({"tenant": "", "principal": "alice"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
}

#[tokio::test]
async fn graphiql_is_served_on_a_plain_get_only_when_enabled() {
    let srv = start(Opts {
        tune: Some(|c| c.web.graphiql = true),
        ..Opts::default()
    })
    .await;
    let r = srv.http.get(srv.url("/graphql")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("script-src 'self';"), "{csp}");
    let page = r.text().await.unwrap();
    // Its own bundle, nothing from a CDN.
    assert!(page.contains("/assets/graphiql.js"), "{page}");
    assert!(!page.contains("https://"), "{page}");
    let script = srv
        .http
        .get(srv.url("/assets/graphiql.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(script.status(), 200);
    assert!(script.text().await.unwrap().len() > 100_000);

    // Off: neither the page nor its bundle.
    let off = start(Opts::default()).await;
    let r = off.http.get(off.url("/graphql")).send().await.unwrap();
    assert_eq!(r.status(), 400);
    for path in ["/assets/graphiql.js", "/graphiql.html"] {
        let r = off.http.get(off.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
}

/// Development sign-in hands out tokens for anyone: a server refuses to start it on a listener
/// that is not a loopback address unless forced, and says why.
#[tokio::test]
async fn development_sign_in_is_refused_off_loopback_unless_forced() {
    fn dev(anywhere: bool) -> forge_server::DevSignIn {
        forge_server::DevSignIn {
            secret: crate::support::SECRET.as_bytes().to_vec(),
            ttl_secs: 600,
            anywhere,
        }
    }
    let refused = start(Opts {
        tune: Some(|c| c.web.dev_sign_in = Some(dev(false))),
        listen: "0.0.0.0:0",
        ..Opts::default()
    })
    .await;
    // Stopped at once: a server that (wrongly) served would end cleanly now, not hang the test.
    refused.stop.cancel();
    let panic = refused
        .task
        .await
        .expect_err("serve refuses to start")
        .into_panic();
    let why = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .unwrap_or_default();
    assert!(why.contains("not a loopback address"), "{why}");

    let forced = start(Opts {
        tune: Some(|c| c.web.dev_sign_in = Some(dev(true))),
        listen: "0.0.0.0:0",
        ..Opts::default()
    })
    .await;
    let config: serde_json::Value = forced
        .http
        .get(format!(
            "http://127.0.0.1:{}/auth/config",
            forced.addr.port()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(config["dev_sign_in"], true, "forced, it serves");
}
