//! One `graphql-transport-ws` connection: async-graphql speaks the protocol; this loop around it
//! holds the connection to Forge's rules.
//!
//! - A failed authentication closes with `4403` (the protocol's "forbidden"), as does the token's
//!   expiry: a session never outlives its token.
//! - A connection that has not completed `connection_init` within [`WsLimits::init_timeout`] closes
//!   with `4408`.
//! - At most [`WsLimits::subscriptions`] operations run at once on a connection, and at most
//!   [`WsLimits::per_tenant`] across a tenant's connections; another `subscribe` gets an `error`
//!   for its id, and the connection stays.
//! - On server shutdown the connection closes with `1001` ("going away"), never by completing its
//!   subscriptions: their runs go on, and a client resumes elsewhere from its cursor.
//! - A client that sends faster than async-graphql takes its messages is simply not read until
//!   there is room (the loop keeps polling async-graphql meanwhile), however many it sends at once.
//! - A client's Close is answered with the same code, completing the closing handshake.
//! - A `subscribe` whose document fails the HTTP path's check (a parse error, or more fields than
//!   the budget once fragments are expanded) gets an `error` with `GRAPHQL_PARSE_FAILED` or
//!   `QUERY_TOO_LARGE` for its id before async-graphql parses it.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_graphql::Data;
use async_graphql::http::{WebSocketProtocols, WsMessage};
use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::auth::{Authenticated, Authenticator};
use crate::schema::ForgeSchema;

/// Close code: authentication failed or the token expired.
pub const CLOSE_FORBIDDEN: u16 = 4403;
/// Close code: `connection_init` did not arrive in time.
pub const CLOSE_INIT_TIMEOUT: u16 = 4408;
/// Close code for a tenant past its connection cap: try again later.
pub const CLOSE_TRY_LATER: u16 = 1013;
/// Close code: the server is going away; reconnect.
pub const CLOSE_GOING_AWAY: u16 = 1001;

/// What one connection may do.
#[derive(Debug, Clone, Copy)]
pub struct WsLimits {
    /// Longest wait for a successful `connection_init`.
    pub init_timeout: Duration,
    /// Operations running at once on one connection.
    pub subscriptions: usize,
    /// Operations running at once across all of one tenant's connections to this server.
    pub per_tenant: usize,
    /// Authenticated connections one tenant may hold open to this server at once; one more is
    /// closed with `1013` (try again later).
    pub connections_per_tenant: usize,
}

impl Default for WsLimits {
    fn default() -> Self {
        Self {
            init_timeout: Duration::from_secs(10),
            subscriptions: 100,
            per_tenant: 2_000,
            connections_per_tenant: 2_000,
        }
    }
}

/// Everything a session needs.
pub(crate) struct Session {
    pub(crate) schema: ForgeSchema,
    pub(crate) protocol: WebSocketProtocols,
    pub(crate) auth: std::sync::Arc<Authenticator>,
    /// The caller, when the upgrade request carried a valid token.
    pub(crate) from_header: Option<Authenticated>,
    pub(crate) limits: WsLimits,
    /// Fields a subscription's document may select once its fragments are expanded (the HTTP
    /// path's budget).
    pub(crate) expanded_fields: usize,
    /// Subscriptions per tenant across this server's connections.
    pub(crate) tenants: std::sync::Arc<crate::http::TenantLimiter>,
    /// Connections per tenant to this server.
    pub(crate) connections: std::sync::Arc<crate::http::TenantLimiter>,
    pub(crate) shutdown: CancellationToken,
}

fn close(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: reason.to_owned().into(),
    }))
}

/// Time left until `exp` (Unix seconds).
fn until(exp: i64) -> Duration {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    Duration::from_secs(exp.saturating_sub(now).max(0) as u64)
}

/// The `id` and `type` of a client message, if it is one.
fn operation(bytes: &[u8]) -> Option<(String, String, Option<String>)> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    Some((
        v.get("id")?.as_str()?.to_owned(),
        v.get("type")?.as_str()?.to_owned(),
        v.pointer("/payload/query")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned),
    ))
}

/// The id of a server message that ends an operation (`complete` or `error`).
fn ended(text: &str) -> Option<String> {
    // async-graphql writes the `type` first: only these two are parsed.
    if !(text.starts_with(r#"{"type":"complete""#) || text.starts_with(r#"{"type":"error""#)) {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    Some(v.get("id")?.as_str()?.to_owned())
}

impl Session {
    /// Serves the connection until either side ends it.
    pub(crate) async fn serve(self, socket: WebSocket) {
        let (mut sink, mut source) = socket.split();
        let (to_graphql, from_client) = mpsc::channel::<Vec<u8>>(16);
        let (expiry_tx, mut expiry_rx) = mpsc::channel::<i64>(1);
        let (tenant_tx, mut tenant_rx) = mpsc::channel::<forge_core::scope::TenantId>(1);
        let from_header = self.from_header.clone();
        let auth = self.auth.clone();
        let init = move |payload: serde_json::Value| async move {
            let who = match from_header {
                Some(who) => who,
                None => {
                    let token = payload
                        .get("authorization")
                        .or_else(|| payload.get("Authorization"))
                        .and_then(|v| v.as_str());
                    auth.verify_header(token)
                        .map_err(|e| async_graphql::Error::new(format!("unauthenticated: {e}")))?
                }
            };
            let _ = expiry_tx.try_send(who.expires_at);
            let _ = tenant_tx.try_send(who.scope.tenant_id().clone());
            let mut data = Data::default();
            data.insert(who.scope);
            Ok(data)
        };
        let input = tokio_stream_from(from_client);
        let graphql = async_graphql::http::WebSocket::new(self.schema, input, self.protocol)
            .on_connection_init(init);
        let mut graphql = std::pin::pin!(graphql);
        let mut active: HashMap<String, Option<tokio::sync::OwnedSemaphorePermit>> = HashMap::new();
        let mut tenant: Option<forge_core::scope::TenantId> = None;
        // Held for the connection's life once its tenant is known.
        let mut _connection: Option<tokio::sync::OwnedSemaphorePermit> = None;
        let init_deadline = tokio::time::sleep(self.limits.init_timeout);
        tokio::pin!(init_deadline);
        let mut acked = false;
        // A client message async-graphql's input queue had no room for: the client is not read
        // again until it is handed over, while async-graphql (polled below) drains the queue.
        // Awaiting the hand-off in place would stop the polling that frees the room, silencing
        // the connection once a client sends more than the queue holds at once.
        let mut pending: Option<Vec<u8>> = None;
        // Armed when the token is known (at `connection_ack`).
        let expiry = tokio::time::sleep(Duration::from_secs(60 * 60 * 24 * 365));
        tokio::pin!(expiry);
        loop {
            let out = tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => {
                    let _ = sink.send(close(CLOSE_GOING_AWAY, "server shutting down")).await;
                    return;
                }
                _ = &mut init_deadline, if !acked => {
                    let _ = sink
                        .send(close(CLOSE_INIT_TIMEOUT, "connection initialisation timeout"))
                        .await;
                    return;
                }
                _ = &mut expiry, if acked => {
                    let _ = sink.send(close(CLOSE_FORBIDDEN, "token expired")).await;
                    return;
                }
                Some(t) = tenant_rx.recv() => {
                    match self.connections.try_acquire(&t) {
                        Some(permit) => _connection = Some(permit),
                        None => {
                            let reason = format!(
                                "at most {} connections at once for a tenant",
                                self.limits.connections_per_tenant
                            );
                            let _ = sink.send(close(CLOSE_TRY_LATER, &reason)).await;
                            return;
                        }
                    }
                    tenant = Some(t);
                    continue;
                }
                Some(exp) = expiry_rx.recv() => {
                    expiry.as_mut().reset(tokio::time::Instant::now() + until(exp));
                    continue;
                }
                room = to_graphql.reserve(), if pending.is_some() => {
                    match (room, pending.take()) {
                        (Ok(room), Some(bytes)) => room.send(bytes),
                        (Err(_), _) => return,
                        (Ok(_), None) => {}
                    }
                    continue;
                }
                incoming = source.next(), if pending.is_none() => {
                    let bytes = match incoming {
                        Some(Ok(Message::Text(t))) => t.as_bytes().to_vec(),
                        Some(Ok(Message::Binary(b))) => b.to_vec(),
                        Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                        // The closing handshake: the client's Close is answered with its code.
                        Some(Ok(Message::Close(frame))) => {
                            // The socket may have queued its own reply already; either way,
                            // flushed before the connection is dropped.
                            let _ = sink.send(Message::Close(frame)).await;
                            let _ = sink.close().await;
                            return;
                        }
                        Some(Err(_)) | None => return,
                    };
                    match operation(&bytes) {
                        Some((id, kind, query)) if kind == "subscribe" || kind == "start" => {
                            // The HTTP path's document check first, before async-graphql parses
                            // and validates it (whose cost a fragment bomb makes exponential).
                            let document = query.as_deref().map(|q| {
                                crate::http::check_document(q, self.expanded_fields)
                            });
                            let refusal = if let Some(Err(e)) = document {
                                Some(match e {
                                    crate::http::DocumentError::Parse(why) => ("GRAPHQL_PARSE_FAILED", why),
                                    crate::http::DocumentError::TooLarge => ("QUERY_TOO_LARGE", format!(
                                        "the document selects more than {} fields once its fragments are expanded",
                                        self.expanded_fields
                                    )),
                                })
                            } else if active.contains_key(&id) {
                                None
                            } else if active.len() >= self.limits.subscriptions {
                                Some(("TOO_MANY_SUBSCRIPTIONS", format!("at most {} subscriptions run at once on a connection", self.limits.subscriptions)))
                            } else {
                                // Before `connection_ack` there is no tenant; async-graphql refuses
                                // the operation itself then.
                                match &tenant {
                                    Some(t) => match self.tenants.try_acquire(t) {
                                        Some(permit) => {
                                            active.insert(id.clone(), Some(permit));
                                            None
                                        }
                                        None => Some(("TOO_MANY_SUBSCRIPTIONS", format!("at most {} subscriptions run at once for a tenant", self.limits.per_tenant))),
                                    },
                                    None => {
                                        active.insert(id.clone(), None);
                                        None
                                    }
                                }
                            };
                            if let Some((code, message)) = refusal {
                                let refused = serde_json::json!({"id": id, "type": "error", "payload": [{
                                    "message": message,
                                    "extensions": {"code": code},
                                }]});
                                if sink.send(Message::Text(refused.to_string().into())).await.is_err() {
                                    return;
                                }
                                continue;
                            }
                        }
                        Some((id, kind, _)) if kind == "complete" || kind == "stop" => {
                            active.remove(&id);
                        }
                        _ => {}
                    }
                    match to_graphql.try_send(bytes) {
                        Ok(()) => {}
                        Err(mpsc::error::TrySendError::Full(bytes)) => pending = Some(bytes),
                        Err(mpsc::error::TrySendError::Closed(_)) => return,
                    }
                    continue;
                }
                out = graphql.next() => out,
            };
            let message = match out {
                None => return,
                Some(WsMessage::Text(text)) => {
                    if !acked && text.contains(r#""type":"connection_ack""#) {
                        acked = true;
                    }
                    if let Some(id) = ended(&text) {
                        active.remove(&id);
                    }
                    Message::Text(text.into())
                }
                Some(WsMessage::Close(code, reason)) => {
                    let code = if reason.starts_with("unauthenticated") {
                        CLOSE_FORBIDDEN
                    } else {
                        code
                    };
                    let _ = sink.send(close(code, &reason)).await;
                    return;
                }
            };
            if sink.send(message).await.is_err() {
                return;
            }
        }
    }
}

/// A stream of what the channel receives.
fn tokio_stream_from(
    rx: mpsc::Receiver<Vec<u8>>,
) -> impl futures_util::Stream<Item = Vec<u8>> + Send + 'static {
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) })
}
