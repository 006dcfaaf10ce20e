//! What a browser needs besides GraphQL: the web client (a production bundle of `web/`,
//! committed under `crates/forge-server/ui/` and compiled into the binary), CORS for a client
//! served from another origin, a development sign-in, and GraphiQL.
//!
//! - `GET /` and every path no other route claims: the client's `index.html` (it routes in the
//!   browser); `GET /assets/…`: its script and styles (`rust-embed`). The pages get a
//!   same-origin CSP and `ETag`s over the content so a reload revalidates cheaply; every
//!   response, the API's too, gets no sniffing, no framing and no referrer (`tower-http`).
//! - CORS (`tower-http`): an `Origin` in [`WebConfig::cors_origins`] gets the
//!   `Access-Control-*` answers, preflights included; any other origin gets none (the browser
//!   then refuses the response).
//! - `GET /auth/config` says whether development sign-in is on; `POST /auth/dev` with
//!   `{"tenant", "principal", "roles"}` answers `{"token"}` signed with the server's HS256
//!   secret — only when [`WebConfig::dev_sign_in`] is set, never in production.
//! - `GET /graphql` without a WebSocket upgrade serves GraphiQL when [`WebConfig::graphiql`].

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tower_http::set_header::SetResponseHeaderLayer;

/// Settings for browsers.
#[derive(Debug, Clone, Default)]
pub struct WebConfig {
    /// Serve the web client at `/`.
    pub ui: bool,
    /// Origins (`https://app.example.com`) allowed to call the API from a browser.
    pub cors_origins: Vec<String>,
    /// Serve GraphiQL on `GET /graphql`.
    pub graphiql: bool,
    /// Development sign-in: tokens for any tenant and principal, signed with this secret.
    pub dev_sign_in: Option<DevSignIn>,
}

/// Development sign-in: `POST /auth/dev` hands out a token for any tenant, principal and roles.
/// The server refuses to serve it on a listener that is not a loopback address unless
/// [`DevSignIn::anywhere`] forces it (see [`crate::Server::serve`]).
#[derive(Clone)]
pub struct DevSignIn {
    /// The HS256 secret the server verifies with.
    pub secret: Vec<u8>,
    /// How long a token lives, in seconds.
    pub ttl_secs: i64,
    /// Serve it on any listener, not only a loopback one: anyone who reaches the server can
    /// then sign in as anyone.
    pub anywhere: bool,
}

impl DevSignIn {
    /// Refuses development sign-in on a listener at `at` that is not a loopback address, unless
    /// forced ([`DevSignIn::anywhere`]).
    pub fn check_listener(&self, at: std::net::SocketAddr) -> std::io::Result<()> {
        if self.anywhere || at.ip().is_loopback() {
            return Ok(());
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "development sign-in lets anyone sign in as anyone: refused on {at}, which is \
                 not a loopback address (listen on 127.0.0.1, or force it)"
            ),
        ))
    }
}

impl std::fmt::Debug for DevSignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevSignIn")
            .field("ttl_secs", &self.ttl_secs)
            .field("anywhere", &self.anywhere)
            .finish_non_exhaustive()
    }
}

/// The bundle, as `npm run build` in `web/` writes it under `ui/`, compiled into the binary
/// (`rust-embed`, in debug builds too): each file's SHA-256 and media type come with it.
#[derive(rust_embed::Embed)]
#[folder = "ui/"]
struct Bundle;

/// The content security policy of the client's pages: its own scripts and styles only, its
/// own API (HTTP and WebSocket), nothing framed.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'none'; \
                   form-action 'self'";

/// Headers every response carries unless its handler chose its own (`tower-http`): no type
/// sniffing, no framing, no referrer.
pub(crate) fn strict_headers<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    router
        .layer(SetResponseHeaderLayer::if_not_present(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::X_FRAME_OPTIONS,
            HeaderValue::from_static("DENY"),
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ))
}

/// The browser's pages get the client's content security policy on top.
pub(crate) fn page_headers<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    router.layer(SetResponseHeaderLayer::if_not_present(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    ))
}

/// A strong `ETag` from the file's SHA-256 (its first 12 bytes are plenty to tell versions apart).
fn etag(file: &rust_embed::EmbeddedFile) -> String {
    let hex: String = file.metadata.sha256_hash()[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("\"{hex}\"")
}

/// The media type, with the charset for text (the bundle is UTF-8).
fn media_type(file: &rust_embed::EmbeddedFile) -> String {
    let media = file.metadata.mimetype();
    if media.starts_with("text/") || media == "application/json" {
        format!("{media}; charset=utf-8")
    } else {
        media.to_owned()
    }
}

fn asset_response(file: rust_embed::EmbeddedFile, headers: &HeaderMap) -> Response {
    let tag = etag(&file);
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(header::CONTENT_TYPE, media_type(&file))],
            Body::from(file.data.into_owned()),
        )
            .into_response()
    };
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&tag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The client: an asset by path, else `index.html` for any page path (the client routes).
pub(crate) async fn ui(
    State(web): State<Arc<WebConfig>>,
    method: Method,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Response {
    let path = uri.path().trim_start_matches('/');
    let wanted = if is_graphiql(path) {
        web.graphiql
    } else {
        web.ui
    };
    if !wanted || !(method == Method::GET || method == Method::HEAD) {
        return StatusCode::NOT_FOUND.into_response();
    }
    if path == "graphiql.html" {
        return graphiql(&headers);
    }
    if let Some(file) = Bundle::get(path).filter(|_| !path.is_empty()) {
        return asset_response(file, &headers);
    }
    if path.starts_with("assets/") || path.contains('.') {
        return StatusCode::NOT_FOUND.into_response();
    }
    match Bundle::get("index.html") {
        Some(index) => asset_response(index, &headers),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// CORS for the configured origins (`tower-http`'s layer): preflights from them answered with
/// the methods and headers the API takes, their requests annotated; any other origin gets no
/// `Access-Control-*` header, so the browser refuses the response. An origin that is not a valid
/// header value matches nothing.
pub(crate) fn cors(web: &WebConfig) -> tower_http::cors::CorsLayer {
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let origins: Vec<HeaderValue> = web
        .cors_origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(o).ok())
        .collect();
    CorsLayer::new()
        .allow_origin(AllowOrigin::list(origins))
        .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::HeaderName::from_static("traceparent"),
        ])
        .max_age(std::time::Duration::from_secs(600))
}

/// Whether development sign-in is on.
pub(crate) async fn auth_config(State(web): State<Arc<WebConfig>>) -> Response {
    axum::Json(serde_json::json!({"dev_sign_in": web.dev_sign_in.is_some()})).into_response()
}

/// A development token for the scope asked for.
pub(crate) async fn dev_sign_in(
    State(web): State<Arc<WebConfig>>,
    body: axum::body::Bytes,
) -> Response {
    let Some(dev) = &web.dev_sign_in else {
        return StatusCode::NOT_FOUND.into_response();
    };
    #[derive(serde::Deserialize)]
    struct Ask {
        tenant: String,
        principal: String,
        #[serde(default)]
        roles: Vec<String>,
    }
    let bad = |m: &str| crate::http::error_response(StatusCode::BAD_REQUEST, "BAD_REQUEST", m);
    let Ok(ask) = serde_json::from_slice::<Ask>(&body) else {
        return bad("send {\"tenant\": …, \"principal\": …, \"roles\": […]}");
    };
    let roles: Vec<&str> = ask.roles.iter().map(String::as_str).collect();
    let Ok(scope) = forge_core::scope::Scope::parse(&ask.tenant, &ask.principal, &roles) else {
        return bad("tenant, principal and roles must be 1-256 characters without controls");
    };
    if scope.tenant_id().is_reserved() {
        return bad("tenant ids starting with \"_\" are reserved");
    }
    let now = chrono_now();
    match crate::auth::sign_hs256(&dev.secret, &scope, dev.ttl_secs, now) {
        Ok(token) => axum::Json(serde_json::json!({"token": token})).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

fn chrono_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// GraphiQL's page: the client's policy, with the inline styles and embedded fonts its editor
/// uses.
const GRAPHIQL_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                            img-src 'self' data:; font-src 'self' data:; connect-src 'self' ws: wss:; \
                            frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// GraphiQL, pointed at this server's endpoint: its page and bundle (`graphiql.html`,
/// `assets/graphiql.*`) are part of the embedded bundle, so it works with no network. It takes
/// the web client's session when this browser has one, else asks for a bearer token in its
/// headers editor.
pub(crate) fn graphiql(headers: &HeaderMap) -> Response {
    let Some(page) = Bundle::get("graphiql.html") else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let mut response = asset_response(page, headers);
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(GRAPHIQL_CSP),
    );
    response
}

/// Whether `path` (without its leading `/`) belongs to GraphiQL's bundle.
fn is_graphiql(path: &str) -> bool {
    path == "graphiql.html" || path.starts_with("assets/graphiql.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_in_the_binary_and_the_page_loads_only_its_own() {
        let index = Bundle::get("index.html").expect("index.html is embedded");
        let index = std::str::from_utf8(&index.data).expect("utf-8");
        assert!(index.contains("/assets/app.js"), "{index}");
        assert!(index.contains("/assets/app.css"), "{index}");
        assert!(!index.contains("http://") && !index.contains("https://"));
        for name in Bundle::iter() {
            let file = Bundle::get(&name).expect("listed files are embedded");
            assert!(!file.data.is_empty(), "{name}");
        }
    }

    #[test]
    fn graphiql_is_in_the_binary_and_loads_nothing_from_elsewhere() {
        let page = Bundle::get("graphiql.html").expect("graphiql.html is embedded");
        let page = std::str::from_utf8(&page.data).expect("utf-8");
        assert!(page.contains("/assets/graphiql.js"), "{page}");
        assert!(!page.contains("http://") && !page.contains("https://"));
        for name in ["assets/graphiql.js", "assets/graphiql.css"] {
            assert!(
                Bundle::get(name).is_some_and(|f| !f.data.is_empty()),
                "{name}"
            );
            assert!(is_graphiql(name));
        }
        assert!(!is_graphiql("assets/app.js") && !is_graphiql("index.html"));
    }

    #[test]
    fn development_sign_in_is_for_loopback_listeners_unless_forced() {
        let dev = |anywhere| DevSignIn {
            secret: vec![],
            ttl_secs: 1,
            anywhere,
        };
        for ok in ["127.0.0.1:8080", "[::1]:8080", "127.0.0.2:1"] {
            assert!(
                dev(false)
                    .check_listener(ok.parse().expect("an address"))
                    .is_ok(),
                "{ok}"
            );
        }
        for refused in ["0.0.0.0:8080", "[::]:8080", "192.168.1.5:80"] {
            let at = refused.parse().expect("an address");
            let err = dev(false).check_listener(at).expect_err(refused);
            assert!(err.to_string().contains("not a loopback address"), "{err}");
            assert!(dev(true).check_listener(at).is_ok(), "forced: {refused}");
        }
    }
}
