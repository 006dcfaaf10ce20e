//! Forge's server: the GraphQL API (queries, mutations, and subscriptions over
//! `graphql-transport-ws`), bearer-JWT authentication, and health endpoints, on axum.
//!
//! - `POST /graphql` — queries and mutations; `Authorization: Bearer <jwt>` required.
//! - `GET /graphql` (WebSocket, subprotocol `graphql-transport-ws`) — subscriptions; the token in
//!   the `Authorization` header of the upgrade, or as `{"authorization": "Bearer …"}` in the
//!   `connection_init` payload.
//! - `GET /healthz` — liveness: the process answers.
//! - `GET /readyz` — readiness: every [`ReadinessCheck`] passes (store reachable, migrations
//!   current, each model provider healthy), as JSON naming each check.
//!
//! Missing, malformed, badly signed and expired tokens get `401` with an RFC 6750
//! `WWW-Authenticate` challenge; request bodies over [`ServerConfig::max_body_bytes`] get `413`;
//! queries deeper or more complex than [`QueryLimits`] are refused; errors carry a `code`
//! extension and never internals.

#![deny(missing_docs)]

pub mod auth;
pub mod schema;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_graphql::Data;
use async_graphql::http::ALL_WEBSOCKET_PROTOCOLS;
use async_graphql_axum::{GraphQLProtocol, GraphQLResponse, GraphQLWebSocket};
use axum::extract::{DefaultBodyLimit, State, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use forge_engine::Engine;
use tokio_util::sync::CancellationToken;

pub use auth::{AuthError, Authenticator, ClaimsMode};
pub use forge_engine::live::{EventBus, LiveTail, StreamSettings, Wake};
pub use schema::{AppState, ForgeSchema, QueryLimits};

/// What a readiness probe returns: `Err` says why the server is not ready.
pub type ProbeFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// One readiness check: a name and an async probe.
pub struct ReadinessCheck {
    /// What it checks, for example `store` or `provider openai`.
    pub name: String,
    /// The probe.
    pub probe: Box<dyn Fn() -> ProbeFuture + Send + Sync>,
}

impl std::fmt::Debug for ReadinessCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadinessCheck")
            .field("name", &self.name)
            .finish()
    }
}

/// How the server is set up.
pub struct ServerConfig {
    /// Verifies bearer tokens.
    pub auth: Authenticator,
    /// Query depth and complexity limits.
    pub limits: QueryLimits,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// How subscriptions read the log.
    pub streams: StreamSettings,
    /// What `/readyz` checks.
    pub readiness: Vec<ReadinessCheck>,
}

impl ServerConfig {
    /// Defaults around `auth`: 64 KiB bodies, default limits and streams, no readiness checks.
    pub fn new(auth: Authenticator) -> Self {
        Self {
            auth,
            limits: QueryLimits::default(),
            max_body_bytes: 64 * 1024,
            streams: StreamSettings::default(),
            readiness: Vec::new(),
        }
    }
}

struct Shared {
    schema: ForgeSchema,
    max_body_bytes: usize,
    auth: Authenticator,
    readiness: Vec<ReadinessCheck>,
}

/// The server: routes over one engine.
pub struct Server {
    shared: Arc<Shared>,
    max_body_bytes: usize,
    tail: Arc<LiveTail>,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").finish_non_exhaustive()
    }
}

impl Server {
    /// A server over `engine`, streaming the step in flight from `tail` and waking subscribers
    /// on its bus. A tail nothing feeds gives committed events only.
    pub fn new(engine: Arc<Engine>, tail: Arc<LiveTail>, config: ServerConfig) -> Self {
        let shutdown = CancellationToken::new();
        let state = Arc::new(AppState {
            engine,
            bus: tail.bus().clone(),
            tail: tail.clone(),
            streams: config.streams,
            shutdown: shutdown.clone(),
            cache: Arc::new(forge_engine::live::LogCache::default()),
        });
        Self {
            shared: Arc::new(Shared {
                schema: schema::build(state, config.limits),
                max_body_bytes: config.max_body_bytes,
                auth: config.auth,
                readiness: config.readiness,
            }),
            max_body_bytes: config.max_body_bytes,
            tail,
            shutdown,
        }
    }

    /// The bus its subscriptions wake on.
    pub fn bus(&self) -> &EventBus {
        self.tail.bus()
    }

    /// The live tail its subscriptions follow.
    pub fn tail(&self) -> &Arc<LiveTail> {
        &self.tail
    }

    /// Cancelled when the server shuts down; open subscriptions end with it.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// The routes.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/graphql", get(graphql_ws).post(graphql_http))
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .layer(DefaultBodyLimit::max(self.max_body_bytes))
            .with_state(self.shared.clone())
    }

    /// Serves on `listener` until `stop` fires, then stops accepting, ends subscriptions and waits
    /// for requests in flight.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        stop: CancellationToken,
    ) -> std::io::Result<()> {
        let shutdown = self.shutdown.clone();
        let router = self.router();
        // Streamed events are small writes in quick succession: without TCP_NODELAY, Nagle's
        // algorithm holds the second until the first is acknowledged (up to a delayed ACK, ~40 ms).
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                stop.cancelled().await;
                shutdown.cancel();
            })
            .await
    }
}

fn unauthorized(e: &AuthError) -> Response {
    let body = serde_json::json!({
        "errors": [{"message": e.to_string(), "extensions": {"code": "UNAUTHENTICATED"}}]
    });
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, e.challenge())],
        Json(body),
    )
        .into_response()
}

fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

async fn graphql_http(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let scope = match shared.auth.authenticate_header(authorization(&headers)) {
        Ok(scope) => scope,
        Err(e) => return unauthorized(&e),
    };
    // The body was read through `DefaultBodyLimit` (413 past it); only JSON is accepted.
    let request: async_graphql::Request = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(_) => {
            let body = serde_json::json!({"errors": [{
                "message": "the body must be a JSON GraphQL request: {\"query\": …, \"variables\": …}",
                "extensions": {"code": "BAD_REQUEST"}
            }]});
            return (StatusCode::BAD_REQUEST, Json(body)).into_response();
        }
    };
    let response = shared.schema.execute(request.data(scope)).await;
    GraphQLResponse::from(response).into_response()
}

async fn graphql_ws(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    protocol: Result<GraphQLProtocol, StatusCode>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let Ok(protocol) = protocol else {
        return (
            StatusCode::BAD_REQUEST,
            "use a WebSocket with the graphql-transport-ws subprotocol, or POST",
        )
            .into_response();
    };
    // A token on the upgrade must be valid; without one, connection_init must carry it.
    let from_header = match authorization(&headers) {
        None => None,
        Some(h) => match shared.auth.authenticate_header(Some(h)) {
            Ok(scope) => Some(scope),
            Err(e) => return unauthorized(&e),
        },
    };
    let schema = shared.schema.clone();
    let limit = shared.max_body_bytes;
    upgrade
        .protocols(ALL_WEBSOCKET_PROTOCOLS)
        // Client messages are held to the body limit; small buffers keep 1,000 idle sockets cheap.
        .max_message_size(limit)
        .max_frame_size(limit)
        .read_buffer_size(8 * 1024)
        .write_buffer_size(8 * 1024)
        .on_upgrade(move |socket| async move {
            let init_shared = shared.clone();
            GraphQLWebSocket::new(socket, schema, protocol)
                .on_connection_init(move |payload| async move {
                    let scope = match from_header {
                        Some(scope) => scope,
                        None => {
                            let token = payload
                                .get("authorization")
                                .or_else(|| payload.get("Authorization"))
                                .and_then(|v| v.as_str());
                            init_shared.auth.authenticate_header(token).map_err(|e| {
                                async_graphql::Error::new(format!("unauthenticated: {e}"))
                            })?
                        }
                    };
                    let mut data = Data::default();
                    data.insert(scope);
                    Ok(data)
                })
                .serve()
                .await;
        })
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    let mut checks = serde_json::Map::new();
    let mut ready = true;
    for check in &shared.readiness {
        let outcome = (check.probe)().await;
        ready &= outcome.is_ok();
        checks.insert(
            check.name.clone(),
            match outcome {
                Ok(()) => serde_json::json!({"ok": true}),
                Err(why) => serde_json::json!({"ok": false, "error": why}),
            },
        );
    }
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(serde_json::json!({"ready": ready, "checks": checks})),
    )
        .into_response()
}
