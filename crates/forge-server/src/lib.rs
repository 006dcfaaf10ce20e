//! Forge's server: the GraphQL API (queries, mutations, and subscriptions over
//! `graphql-transport-ws`), bearer-JWT authentication, and health endpoints, on axum.
//!
//! - `POST /graphql` — queries and mutations; `Authorization: Bearer <jwt>` required.
//! - `GET /graphql` (WebSocket, subprotocol `graphql-transport-ws`) — subscriptions; the token in
//!   the `Authorization` header of the upgrade, or as `{"authorization": "Bearer …"}` in the
//!   `connection_init` payload.
//! - `POST /files`, `GET /files/{reference}` — uploads and signed downloads ([`files`]), when
//!   the server stores files.
//! - `GET /healthz` — liveness: the process answers.
//! - `GET /readyz` — readiness: every [`ReadinessCheck`] passes (store reachable, migrations
//!   current, each model provider healthy), as JSON naming each check.
//!
//! Missing, malformed, badly signed and expired tokens get `401` with an RFC 6750
//! `WWW-Authenticate` challenge; request bodies over [`ServerConfig::max_body_bytes`] get `413`;
//! queries deeper or more complex than [`QueryLimits`] are refused; errors carry a `code`
//! extension and never internals.

#![deny(missing_docs)]

pub mod app;
pub mod auth;
mod budget;
mod fair;
pub mod files;
mod guard;
mod http;
mod limiter;
pub mod schema;
mod variables;
pub mod web;
mod ws;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_graphql::http::ALL_WEBSOCKET_PROTOCOLS;
use axum::extract::{DefaultBodyLimit, State, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use forge_engine::Engine;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use tracing::instrument::WithSubscriber as _;

pub use auth::{AuthError, Authenticated, Authenticator, ClaimsMode};
pub use fair::FairUse;
pub use files::FileLimits;
pub use forge_live::{EventBus, LiveTail, StreamSettings, Wake};
pub use http::HttpLimits;
pub use schema::{AppState, ForgeSchema, McpPinnedTool, McpServerState, McpStatus, QueryLimits};
pub use web::{DevSignIn, WebConfig};
pub use ws::{CLOSE_FORBIDDEN, CLOSE_GOING_AWAY, CLOSE_INIT_TIMEOUT, CLOSE_TRY_LATER, WsLimits};

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
    /// `POST /graphql` limits: body time, fragment expansion, per-tenant concurrency, execution
    /// time, response size.
    pub http: HttpLimits,
    /// WebSocket limits: `connection_init` time, subscriptions per connection.
    pub ws: WsLimits,
    /// What each tenant may spend per second, over both transports: query cost and bytes of
    /// response.
    pub fair_use: FairUse,
    /// Longest wait, after shutdown begins, for requests in flight.
    pub drain: std::time::Duration,
    /// Longest time a connection may take to send a request's headers.
    pub header_timeout: std::time::Duration,
    /// Retrieval sources, for `resolveCitation` and `deleteSource` (absent: both answer
    /// `NOT_FOUND`).
    pub retriever: Option<forge_rag::Retriever>,
    /// Stored files: `POST /files`, `GET /files/{reference}`, and GraphQL's file fields (absent:
    /// they answer `NOT_FOUND`).
    pub files: Option<forge_files::Files>,
    /// How slow an upload may be.
    pub file_limits: FileLimits,
    /// `GET /metrics` (Prometheus text); absent, it answers `404`.
    pub metrics: Option<MetricsText>,
    /// The web client, CORS, development sign-in, GraphiQL.
    pub web: WebConfig,
    /// The job queue, for the console's dead letters (`deadLetters`, `replayDeadLetter`,
    /// `discardDeadLetter`; absent: they answer `NOT_AVAILABLE`).
    pub dead_letters: Option<Arc<dyn forge_core::ports::queue::JobQueue>>,
    /// The deployment's MCP servers, for the console's `mcpServers` (absent: an empty list).
    pub mcp: Option<Arc<dyn schema::McpStatus>>,
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
            retriever: None,
            files: None,
            file_limits: FileLimits::default(),
            metrics: None,
            web: WebConfig {
                ui: true,
                ..WebConfig::default()
            },
            http: HttpLimits::default(),
            ws: WsLimits::default(),
            fair_use: FairUse::default(),
            drain: std::time::Duration::from_secs(10),
            header_timeout: std::time::Duration::from_secs(10),
            dead_letters: None,
            mcp: None,
        }
    }
}

struct Shared {
    schema: ForgeSchema,
    /// The same schema with the depth a schema's introspection needs (GraphiQL's nests `ofType`
    /// nine deep), for documents that select nothing else.
    introspection: ForgeSchema,
    max_body_bytes: usize,
    auth: Arc<Authenticator>,
    readiness: Vec<ReadinessCheck>,
    /// The last readiness answer and when it was made, reused for [`READINESS_CACHE`].
    ready_cache: tokio::sync::Mutex<Option<(std::time::Instant, bool, serde_json::Value)>>,
    http: HttpLimits,
    ws: WsLimits,
    /// Every per-tenant and per-principal limit.
    limiters: Arc<limiter::Limiters>,
    shutdown: CancellationToken,
    files: Option<forge_files::Files>,
    file_limits: FileLimits,
    telemetry: forge_core::telemetry::Telemetry,
    metrics: Option<MetricsText>,
    web: Arc<WebConfig>,
}

/// What `GET /metrics` serves: the Prometheus text exposition of the process's instruments.
pub type MetricsText = Arc<dyn Fn() -> String + Send + Sync>;

/// The server: routes over one engine.
pub struct Server {
    shared: Arc<Shared>,
    max_body_bytes: usize,
    tail: Arc<LiveTail>,
    shutdown: CancellationToken,
    drain: std::time::Duration,
    header_timeout: std::time::Duration,
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
        let telemetry = engine.telemetry().clone();
        let state = Arc::new(AppState {
            engine,
            bus: tail.bus().clone(),
            tail: tail.clone(),
            streams: config.streams,
            shutdown: shutdown.clone(),
            cache: Arc::new(forge_live::LogCache::default()),
            retriever: config.retriever,
            files: config.files.clone(),
            dead_letters: config.dead_letters,
            mcp: config.mcp,
        });
        let limiters = Arc::new(limiter::Limiters::new(
            &config.http,
            &config.ws,
            &config.fair_use,
            telemetry.meter.clone(),
        ));
        let guard = guard::Guard(Arc::new(guard::GuardSettings {
            response_bytes: config.http.response_bytes,
            execute_timeout: config.http.execute_timeout,
            ledger: limiters.ledger.clone(),
            meter: telemetry.meter.clone(),
        }));
        Self {
            shared: Arc::new(Shared {
                introspection: schema::build_with(
                    state.clone(),
                    schema::QueryLimits {
                        depth: config.limits.depth.max(schema::INTROSPECTION_DEPTH),
                        ..config.limits
                    },
                    guard::Guard(guard.0.clone()),
                    limiters.runs.clone(),
                ),
                schema: schema::build_with(state, config.limits, guard, limiters.runs.clone()),
                max_body_bytes: config.max_body_bytes,
                auth: Arc::new(config.auth),
                readiness: config.readiness,
                ready_cache: tokio::sync::Mutex::new(None),
                http: config.http,
                limiters,
                ws: config.ws,
                shutdown: shutdown.clone(),
                files: config.files,
                file_limits: config.file_limits,
                telemetry,
                metrics: config.metrics,
                web: Arc::new(config.web),
            }),
            max_body_bytes: config.max_body_bytes,
            tail,
            shutdown,
            drain: config.drain,
            header_timeout: config.header_timeout,
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

    /// The routes. [`Server::serve`] adds the answer to a panicking handler (`500 INTERNAL`); a
    /// host serving this router itself adds its own.
    pub fn router(&self) -> Router {
        let web = self.shared.web.clone();
        let browser = Router::new()
            .route("/auth/config", get(web::auth_config))
            .route("/auth/dev", axum::routing::post(web::dev_sign_in))
            .fallback(web::ui)
            .with_state(web.clone());
        let browser = web::page_headers(browser);
        let api = Router::new()
            .route("/graphql", get(graphql_ws).post(graphql_http))
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics))
            .route("/files", axum::routing::post(files::upload))
            .route("/files/{reference}", get(files::download))
            // The GraphQL handler reads its body itself, after authentication.
            .layer(DefaultBodyLimit::max(self.max_body_bytes))
            .layer(axum::middleware::from_fn_with_state(
                self.shared.clone(),
                count_request,
            ))
            .with_state(self.shared.clone())
            .merge(browser);
        web::strict_headers(api).layer(web::cors(&web))
    }

    /// Serves on `listener` until `stop` fires, then stops accepting, closes WebSockets with
    /// "going away" (clients resume elsewhere), and waits for requests in flight at most the
    /// configured drain time. A connection that does not send a request's headers within the
    /// header timeout is closed. Development sign-in on a listener that is not a loopback
    /// address is refused at once (`InvalidInput`), unless forced ([`DevSignIn::anywhere`]).
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        stop: CancellationToken,
    ) -> std::io::Result<()> {
        self.serve_with(Router::new(), listener, stop).await
    }

    /// [`Server::serve`] with a host application's own routes beside Forge's (merged into
    /// [`Server::router`]; a path both define is a programming error and panics at start). The
    /// host's routes get the same header timeout and drain. A handler that panics (Forge's or the
    /// host's) is answered `500` with the code `INTERNAL`, never a dropped connection, and the
    /// panic's message stays out of the response: it may quote what the request carried.
    pub async fn serve_with(
        self,
        routes: Router,
        listener: tokio::net::TcpListener,
        stop: CancellationToken,
    ) -> std::io::Result<()> {
        if let Some(dev) = &self.shared.web.dev_sign_in {
            dev.check_listener(listener.local_addr()?)?;
        }
        let router = self
            .router()
            .merge(routes)
            .layer(tower_http::catch_panic::CatchPanicLayer::custom(panicked));
        let mut connections = tokio::task::JoinSet::new();
        // The limits' gauges, for an exporter that pushes rather than scrapes `/metrics`.
        let gauges = tokio::spawn({
            let (shared, stop) = (self.shared.clone(), stop.clone());
            async move {
                let mut every = tokio::time::interval(LIMIT_GAUGES_EVERY);
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = every.tick() => shared.limiters.record(shared.telemetry.meter.as_ref()),
                    }
                }
            }
        });
        loop {
            let tcp = tokio::select! {
                _ = stop.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => tcp,
                    // Out of descriptors, a reset before accept: wait a moment, go on.
                    Err(_) => {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            // Streamed events are small writes in quick succession: without TCP_NODELAY, Nagle's
            // algorithm holds the second until the first is acknowledged (up to ~40 ms).
            let _ = tcp.set_nodelay(true);
            let service = hyper_util::service::TowerToHyperService::new(router.clone());
            let (stop, header_timeout) = (stop.clone(), self.header_timeout);
            connections.spawn(async move {
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(header_timeout)
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                    .with_upgrades();
                let mut conn = std::pin::pin!(conn);
                tokio::select! {
                    _ = conn.as_mut() => {}
                    _ = stop.cancelled() => {
                        conn.as_mut().graceful_shutdown();
                        let _ = conn.await;
                    }
                }
            });
            while connections.try_join_next().is_some() {}
        }
        // WebSockets close with 1001 and subscriptions end; requests in flight get the drain.
        self.shutdown.cancel();
        let drained = async { while connections.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(self.drain, drained).await;
        connections.abort_all();
        gauges.abort();
        Ok(())
    }
}

/// How often a serving server sets the limits' gauges (and at each scrape of `/metrics`).
const LIMIT_GAUGES_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// A request that carried no valid bearer token. As a response it is the 401 Forge's own routes
/// give: a `WWW-Authenticate` challenge and the reason, safe to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unauthorized(pub AuthError);

impl IntoResponse for Unauthorized {
    fn into_response(self) -> Response {
        unauthorized(&self.0)
    }
}

impl Authenticator {
    /// The scope of a request's `Authorization: Bearer …` header: how Forge's routes and a host's
    /// own ([`Server::serve_with`]) learn who is asking.
    pub fn authenticate_request(
        &self,
        headers: &HeaderMap,
    ) -> Result<forge_core::scope::Scope, Unauthorized> {
        self.authenticate_header(authorization(headers))
            .map_err(Unauthorized)
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

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    shared.limiters.record(shared.telemetry.meter.as_ref());
    match &shared.metrics {
        Some(text) => scrape(text),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

fn scrape(text: &MetricsText) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text(),
    )
        .into_response()
}

/// Counts each API request by its matched route (never the raw path, which carries ids) and
/// status class, as `forge.http.requests_total`.
async fn count_request(
    State(shared): State<Arc<Shared>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "other".to_owned(), |p| p.as_str().to_owned());
    // Whatever the request logs goes to this server's telemetry (`schema::internal`).
    let response = next
        .run(request)
        .with_subscriber(shared.telemetry.dispatch.clone())
        .await;
    let class = match response.status().as_u16() / 100 {
        1 => "1xx",
        2 => "2xx",
        3 => "3xx",
        4 => "4xx",
        _ => "5xx",
    };
    shared.telemetry.meter.record(
        forge_core::telemetry::Instrument::HttpRequests,
        1.0,
        &[("route", route.as_str()), ("outcome", class)],
    );
    response
}

/// `GET /metrics` alone, for a listener of its own: a `forge worker`'s, or a server's when its
/// scrape is kept off the API port.
pub fn metrics_router(text: MetricsText) -> Router {
    Router::new().route("/metrics", get(move || async move { scrape(&text) }))
}

/// Serves [`metrics_router`] on `listener` until `stop` fires.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    text: MetricsText,
    stop: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, metrics_router(text))
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
}

/// The trace a request joins: its `traceparent` header, when valid (else it starts one).
fn incoming_trace(headers: &HeaderMap) -> Option<forge_core::telemetry::TraceContext> {
    headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(forge_core::telemetry::TraceContext::parse)
}

/// The caller's trace for the runs a GraphQL request starts when this server makes no spans of
/// its own: its `traceparent` goes on to the job as it came, so a traced worker still continues
/// the caller's trace. A tracing server runs the request within its `http.request` span, and
/// the runs' enqueue spans hang under that instead.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestTrace(pub(crate) Option<forge_core::telemetry::TraceContext>);

async fn graphql_http(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let parent = incoming_trace(&headers);
    let span = shared.telemetry.span(
        forge_core::telemetry::SpanName::HttpRequest,
        forge_core::telemetry::Parent::Remote(parent.as_ref()),
    );
    span.set("http.route", "/graphql".into());
    let trace = RequestTrace(if span.context().is_some() {
        None
    } else {
        parent
    });
    let response = graphql_http_traced(&shared, headers, body, trace)
        .instrument(span.as_tracing().clone())
        .await;
    span.set(
        "http.status_code",
        i64::from(response.status().as_u16()).into(),
    );
    span.end();
    response
}

async fn graphql_http_traced(
    shared: &Arc<Shared>,
    headers: HeaderMap,
    body: axum::body::Body,
    trace: RequestTrace,
) -> Response {
    // Who is asking comes first: nothing of an unauthenticated request's body is read.
    let scope = match shared.auth.authenticate_request(&headers) {
        Ok(scope) => scope,
        Err(e) => return e.into_response(),
    };
    let limit = shared.max_body_bytes;
    let body =
        match tokio::time::timeout(shared.http.body_timeout, axum::body::to_bytes(body, limit))
            .await
        {
            Ok(Ok(body)) => body,
            Ok(Err(_)) => {
                return http::error_response(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "PAYLOAD_TOO_LARGE",
                    &format!("the request body is larger than {limit} bytes"),
                );
            }
            Err(_) => {
                return http::error_response(
                    StatusCode::REQUEST_TIMEOUT,
                    "TIMEOUT",
                    "the request body did not arrive in time",
                );
            }
        };
    // The tenant's limit before the body is decoded and parsed, which is the costly part of refusing.
    let _place = match shared.limiters.requests.try_acquire(&scope) {
        Ok(place) => place,
        Err(whose) => {
            guard::count_refusal(shared.telemetry.meter.as_ref(), whose.limit("requests"));
            return too_many_requests(whose);
        }
    };
    let mut request: async_graphql::Request = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(_) => {
            return http::error_response(
                StatusCode::BAD_REQUEST,
                "BAD_REQUEST",
                "the body must be a JSON GraphQL request: {\"query\": …, \"variables\": …}",
            );
        }
    };
    match http::check_document(
        &request.query,
        request.operation_name.as_deref(),
        shared.http.expanded_fields,
    ) {
        Ok(_) => {}
        Err(http::DocumentError::Parse(why)) => {
            return http::error_response(StatusCode::OK, "GRAPHQL_PARSE_FAILED", &why);
        }
        Err(http::DocumentError::TooLarge) => {
            return http::error_response(
                StatusCode::OK,
                "QUERY_TOO_LARGE",
                &format!(
                    "the document selects more than {} fields once its fragments are expanded",
                    shared.http.expanded_fields
                ),
            );
        }
    }
    if let Some(query) = variables::omit_unset(
        &request.query,
        request.operation_name.as_deref(),
        &request.variables,
    ) {
        request.query = query;
    }
    // Held to the guard's deadline and response budget; its store reads count toward the
    // tenant's share of the pool.
    let tenant = scope.tenant_id().clone();
    let schema = if request.query.contains("__")
        && http::introspection_only(&request.query, request.operation_name.as_deref())
    {
        &shared.introspection
    } else {
        &shared.schema
    };
    let executing = schema.execute(request.data(scope).data(trace));
    let response = forge_sql::on_behalf_of(tenant.as_str(), executing).await;
    match serde_json::to_vec(&response) {
        Ok(bytes) if bytes.len() <= shared.http.response_bytes => {
            // A tenant past its spending is told so in HTTP's terms too.
            let retry = response.errors.iter().find_map(|e| {
                let x = e.extensions.as_ref()?;
                match x.get("code")? {
                    async_graphql::Value::String(c) if c == "RATE_LIMITED" => {
                        Some(x.get("retryAfter")?.to_string())
                    }
                    _ => None,
                }
            });
            match retry {
                Some(seconds) => (
                    StatusCode::TOO_MANY_REQUESTS,
                    [
                        (header::CONTENT_TYPE, "application/json".to_owned()),
                        (header::RETRY_AFTER, seconds),
                    ],
                    bytes,
                )
                    .into_response(),
                None => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
            }
        }
        Ok(_) => response_too_large(shared.http.response_bytes),
        Err(_) => http::error_response(
            StatusCode::OK,
            "INTERNAL",
            "the response could not be encoded",
        ),
    }
}

/// The answer to a tenant with as many requests executing as it may have.
fn too_many_requests(whose: limiter::Whose) -> Response {
    let body = serde_json::json!({"errors": [{
        "message": whose.too_many("requests", "are executing"),
        "extensions": {"code": "TOO_MANY_REQUESTS", "retryAfter": 1},
    }]});
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, "1")],
        Json(body),
    )
        .into_response()
}

fn response_too_large(limit: usize) -> Response {
    http::error_response(
        StatusCode::OK,
        "RESPONSE_TOO_LARGE",
        &format!("the response is larger than {limit} bytes: select less, or page with limit"),
    )
}

async fn graphql_ws(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let Ok(upgrade) = upgrade else {
        if shared.web.graphiql {
            return web::graphiql(&headers);
        }
        return (
            StatusCode::BAD_REQUEST,
            "use a WebSocket with the graphql-transport-ws subprotocol, or POST",
        )
            .into_response();
    };
    let protocol = headers
        .get(header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.split(',').find_map(|p| {
                p.trim()
                    .parse::<async_graphql::http::WebSocketProtocols>()
                    .ok()
            })
        });
    let Some(protocol) = protocol else {
        return (
            StatusCode::BAD_REQUEST,
            "use a WebSocket with the graphql-transport-ws subprotocol, or POST",
        )
            .into_response();
    };
    // A token on the upgrade must be valid; without one, connection_init must carry it.
    let from_header = match authorization(&headers) {
        None => None,
        Some(h) => match shared.auth.verify_header(Some(h)) {
            Ok(who) => Some(who),
            Err(e) => return unauthorized(&e),
        },
    };
    let limit = shared.max_body_bytes;
    upgrade
        .protocols(ALL_WEBSOCKET_PROTOCOLS)
        // Client messages are held to the body limit; small buffers keep 1,000 idle sockets cheap.
        .max_message_size(limit)
        .max_frame_size(limit)
        .read_buffer_size(8 * 1024)
        .write_buffer_size(8 * 1024)
        .on_upgrade(move |socket| {
            ws::Session {
                schema: shared.schema.clone(),
                protocol,
                auth: shared.auth.clone(),
                from_header,
                limits: shared.ws,
                expanded_fields: shared.http.expanded_fields,
                requests: shared.limiters.requests.clone(),
                meter: shared.telemetry.meter.clone(),
                tenants: shared.limiters.subscriptions.clone(),
                connections: shared.limiters.connections.clone(),
                shutdown: shared.shutdown.clone(),
            }
            .serve(socket)
            .with_subscriber(shared.telemetry.dispatch.clone())
        })
}

async fn healthz() -> &'static str {
    "ok"
}

/// Longest a readiness probe may take before it counts as failed.
pub const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
/// How long a readiness answer is reused: frequent probes do not each call every provider.
pub const READINESS_CACHE: std::time::Duration = std::time::Duration::from_secs(2);

async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    // One answer at a time, reused briefly: concurrent probes wait for it instead of repeating it.
    let mut cached = shared.ready_cache.lock().await;
    let (ready, checks) = match &*cached {
        Some((at, ready, checks)) if at.elapsed() < READINESS_CACHE => (*ready, checks.clone()),
        _ => {
            // The checks run at once, each within its own deadline.
            let outcomes = futures_util::future::join_all(shared.readiness.iter().map(|check| {
                let probe = (check.probe)();
                async move {
                    match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
                        Ok(outcome) => outcome,
                        Err(_) => Err(format!("no answer within {} s", PROBE_TIMEOUT.as_secs())),
                    }
                }
            }))
            .await;
            let mut checks = serde_json::Map::new();
            let mut ready = true;
            for (check, outcome) in shared.readiness.iter().zip(outcomes) {
                ready &= outcome.is_ok();
                checks.insert(
                    check.name.clone(),
                    match outcome {
                        Ok(()) => serde_json::json!({"ok": true}),
                        Err(why) => serde_json::json!({"ok": false, "error": why}),
                    },
                );
            }
            let checks = serde_json::Value::Object(checks);
            *cached = Some((std::time::Instant::now(), ready, checks.clone()));
            (ready, checks)
        }
    };
    drop(cached);
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

/// The answer to a request whose handler panicked: the panic's payload is dropped unread.
fn panicked(_payload: Box<dyn std::any::Any + Send + 'static>) -> axum::response::Response {
    http::error_response(
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "INTERNAL",
        "the server failed while handling this request (a bug; the details are withheld)",
    )
}
