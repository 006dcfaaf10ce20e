//! One `graphql-transport-ws` connection: async-graphql speaks the protocol; this loop around it
//! holds the connection to Forge's rules.
//!
//! - A failed authentication closes with `4403` (the protocol's "forbidden"), as does the token's
//!   expiry: a session never outlives its token.
//! - A connection that has not completed `connection_init` within [`WsLimits::init_timeout`] closes
//!   with `4408`.
//! - At most [`WsLimits::subscriptions`] operations run at once on a connection, and at most
//!   [`WsLimits::per_tenant`] subscriptions across a tenant's connections; a query or mutation
//!   sent in a `subscribe` counts toward the tenant's requests executing, as over HTTP
//!   ([`crate::HttpLimits::per_tenant`]). Another `subscribe` gets an `error` for its id
//!   (`TOO_MANY_SUBSCRIPTIONS`, or `TOO_MANY_REQUESTS` with `retryAfter`), and the connection
//!   stays. Cost, deadline, response budget and error codes are the schema's `guard`, the same
//!   for both transports.
//! - What the operations do is done on behalf of the connection's tenant: their store reads
//!   take its share of the pool (`forge_sql::on_behalf_of`), never all of it.
//! - A client that takes no message for [`WsLimits::send_timeout`] is disconnected: a reader
//!   that stopped reading holds nothing for longer.
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
use forge_core::scope::Scope;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::auth::{Authenticated, Authenticator};
use crate::limiter::{Limiter, Place};
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
    /// Longest wait for a client to take a message the server sends it. A client that reads
    /// nothing for this long is disconnected: until then, what its subscriptions hold (their
    /// share of the store) is held for it.
    pub send_timeout: Duration,
}

impl Default for WsLimits {
    fn default() -> Self {
        Self {
            init_timeout: Duration::from_secs(10),
            subscriptions: 100,
            per_tenant: 2_000,
            connections_per_tenant: 2_000,
            send_timeout: Duration::from_secs(10),
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
    /// Queries and mutations executing per tenant and principal (the HTTP path's limiter).
    pub(crate) requests: std::sync::Arc<Limiter>,
    /// Where refusals are counted.
    pub(crate) meter: std::sync::Arc<dyn forge_core::telemetry::Meter>,
    /// Subscriptions per tenant and principal across this server's connections.
    pub(crate) tenants: std::sync::Arc<Limiter>,
    /// Connections per tenant and principal to this server.
    pub(crate) connections: std::sync::Arc<Limiter>,
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

/// What a client message says about an operation.
struct ClientOperation {
    id: String,
    kind: String,
    /// The document of a `subscribe`.
    query: Option<String>,
    /// The operation of the document to run.
    name: Option<String>,
}

/// The operation a client message concerns, if it is one.
fn operation(bytes: &[u8]) -> Option<ClientOperation> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let text = |pointer: &str| {
        v.pointer(pointer)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    Some(ClientOperation {
        id: v.get("id")?.as_str()?.to_owned(),
        kind: v.get("type")?.as_str()?.to_owned(),
        query: text("/payload/query"),
        name: text("/payload/operationName"),
    })
}

/// A `subscribe` (or `start`) message with every argument bound to an omitted variable cut out of
/// its document, as over HTTP ([`crate::variables::omit_unset`]): the argument's default applies.
/// Anything else, or a message with nothing to cut, is passed on as it came.
fn omitting_unset(bytes: Vec<u8>) -> Vec<u8> {
    let Ok(mut message) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return bytes;
    };
    let kind = message.get("type").and_then(serde_json::Value::as_str);
    if !matches!(kind, Some("subscribe" | "start")) {
        return bytes;
    }
    let Some(payload) = message.get_mut("payload") else {
        return bytes;
    };
    let Some(query) = payload.get("query").and_then(serde_json::Value::as_str) else {
        return bytes;
    };
    let operation = payload
        .get("operationName")
        .and_then(serde_json::Value::as_str);
    let variables = async_graphql::Variables::from_json(
        payload
            .get("variables")
            .cloned()
            .unwrap_or(serde_json::Value::Null),
    );
    match crate::variables::omit_unset(query, operation, &variables) {
        Some(cut) => {
            payload["query"] = serde_json::Value::String(cut);
            serde_json::to_vec(&message).unwrap_or(bytes)
        }
        None => bytes,
    }
}

/// Sends `message`, unless the client takes nothing for `wait`: `false` when the connection is
/// over (it failed, or the client is not reading).
async fn deliver(
    sink: &mut futures_util::stream::SplitSink<WebSocket, Message>,
    message: Message,
    wait: Duration,
    meter: &dyn forge_core::telemetry::Meter,
) -> bool {
    match tokio::time::timeout(wait, sink.send(message)).await {
        Ok(sent) => sent.is_ok(),
        Err(_) => {
            crate::guard::count_refusal(meter, "slow_reader");
            false
        }
    }
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

/// The id of a `next` message: for a query or mutation, its one result, after which the
/// operation no longer executes. Only the id, the message's second field, is parsed.
fn answered(text: &str) -> Option<String> {
    let rest = text.strip_prefix(r#"{"type":"next","id":"#)?;
    serde_json::Deserializer::from_str(rest)
        .into_iter::<String>()
        .next()?
        .ok()
}

/// An operation running on the connection: its place among the tenant's subscriptions or
/// requests executing, if it holds one.
struct Held {
    permit: Option<Place>,
    /// A query or mutation: its place is given back with its result, not at `complete`.
    request: bool,
}

impl Session {
    /// Serves the connection until either side ends it.
    pub(crate) async fn serve(self, socket: WebSocket) {
        let (mut sink, mut source) = socket.split();
        let (to_graphql, from_client) = mpsc::channel::<Vec<u8>>(16);
        let (expiry_tx, mut expiry_rx) = mpsc::channel::<i64>(1);
        let (caller_tx, mut caller_rx) = mpsc::channel::<Scope>(1);
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
            let _ = caller_tx.try_send(who.scope.clone());
            let mut data = Data::default();
            data.insert(who.scope);
            Ok(data)
        };
        let input = tokio_stream_from(from_client);
        let graphql =
            async_graphql::http::WebSocket::new(self.schema.clone(), input, self.protocol)
                .on_connection_init(init);
        let mut graphql = std::pin::pin!(graphql);
        let mut active: HashMap<String, Held> = HashMap::new();
        // The caller, once `connection_init` has said who it is.
        let mut caller: Option<Scope> = None;
        // Held for the connection's life once its tenant is known.
        let mut _connection: Option<Place> = None;
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
                    let _ = deliver(&mut sink, close(CLOSE_GOING_AWAY, "server shutting down"), self.limits.send_timeout, self.meter.as_ref()).await;
                    return;
                }
                _ = &mut init_deadline, if !acked => {
                    let _ = deliver(&mut sink, close(CLOSE_INIT_TIMEOUT, "connection initialisation timeout"), self.limits.send_timeout, self.meter.as_ref()).await;
                    return;
                }
                _ = &mut expiry, if acked => {
                    let _ = deliver(&mut sink, close(CLOSE_FORBIDDEN, "token expired"), self.limits.send_timeout, self.meter.as_ref()).await;
                    return;
                }
                Some(t) = caller_rx.recv() => {
                    match self.connections.try_acquire(&t) {
                        Ok(place) => _connection = Some(place),
                        Err(whose) => {
                            crate::guard::count_refusal(self.meter.as_ref(), whose.limit("connections"));
                            let reason = whose.too_many("connections", "are open");
                            let _ = deliver(&mut sink, close(CLOSE_TRY_LATER, &reason), self.limits.send_timeout, self.meter.as_ref()).await;
                            return;
                        }
                    }
                    caller = Some(t);
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
                            let _ = deliver(&mut sink, Message::Close(frame), self.limits.send_timeout, self.meter.as_ref()).await;
                            let _ = sink.close().await;
                            return;
                        }
                        Some(Err(_)) | None => return,
                    };
                    match operation(&bytes) {
                        Some(op) if op.kind == "subscribe" || op.kind == "start" => {
                            if let Err(Refusal { code, limit, message }) = self.admit(&op, caller.as_ref(), &mut active) {
                                crate::guard::count_refusal(self.meter.as_ref(), limit);
                                let mut error = serde_json::json!({
                                    "message": message,
                                    "extensions": {"code": code},
                                });
                                if code == "TOO_MANY_REQUESTS" {
                                    error["extensions"]["retryAfter"] = 1.into();
                                }
                                let refused = serde_json::json!({"id": op.id, "type": "error", "payload": [error]});
                                let refused = Message::Text(refused.to_string().into());
                                if !deliver(&mut sink, refused, self.limits.send_timeout, self.meter.as_ref()).await {
                                    return;
                                }
                                continue;
                            }
                        }
                        Some(op) if op.kind == "complete" || op.kind == "stop" => {
                            active.remove(&op.id);
                        }
                        _ => {}
                    }
                    let bytes = omitting_unset(bytes);
                    match to_graphql.try_send(bytes) {
                        Ok(()) => {}
                        Err(mpsc::error::TrySendError::Full(bytes)) => pending = Some(bytes),
                        Err(mpsc::error::TrySendError::Closed(_)) => return,
                    }
                    continue;
                }
                // What the operations do (their store reads above all) is done on behalf of the
                // connection's tenant, within its share of the store.
                out = async {
                    match &caller {
                        Some(t) => forge_sql::on_behalf_of(t.tenant_id().as_str(), graphql.next()).await,
                        None => graphql.next().await,
                    }
                } => out,
            };
            let message = match out {
                None => return,
                Some(WsMessage::Text(text)) => {
                    if !acked && text.contains(r#""type":"connection_ack""#) {
                        acked = true;
                    }
                    if let Some(id) = ended(&text) {
                        active.remove(&id);
                    } else if let Some(id) = answered(&text)
                        && let Some(held) = active.get_mut(&id)
                        && held.request
                    {
                        // Given back before the result is sent: a client that asks again as
                        // soon as it reads the answer finds its place free, as over HTTP.
                        held.permit = None;
                    }
                    Message::Text(text.into())
                }
                Some(WsMessage::Close(code, reason)) => {
                    let code = if reason.starts_with("unauthenticated") {
                        CLOSE_FORBIDDEN
                    } else {
                        code
                    };
                    let _ = deliver(
                        &mut sink,
                        close(code, &reason),
                        self.limits.send_timeout,
                        self.meter.as_ref(),
                    )
                    .await;
                    return;
                }
            };
            if !deliver(
                &mut sink,
                message,
                self.limits.send_timeout,
                self.meter.as_ref(),
            )
            .await
            {
                return;
            }
        }
    }

    /// Whether a `subscribe` may start: it fits in the connection's and the tenant's (and its
    /// principal's) operations (a subscription) or requests executing (a query or mutation),
    /// and its document passes the HTTP path's check. The limits come first, read from the
    /// document's first keyword, so a refusal costs no parse. Holds its place in `active` when
    /// it may; the refusal when not.
    fn admit(
        &self,
        op: &ClientOperation,
        caller: Option<&Scope>,
        active: &mut HashMap<String, Held>,
    ) -> Result<(), Refusal> {
        if active.contains_key(&op.id) {
            // async-graphql refuses a duplicate id itself.
            return Ok(());
        }
        if active.len() >= self.limits.subscriptions {
            return Err(Refusal {
                code: "TOO_MANY_SUBSCRIPTIONS",
                limit: "subscriptions",
                message: format!(
                    "at most {} subscriptions run at once on a connection",
                    self.limits.subscriptions
                ),
            });
        }
        let query = op.query.as_deref().unwrap_or_default();
        let mut permit = None;
        let guessed = crate::http::first_operation_is_subscription(query);
        if let (Some(caller), Some(subscription)) = (caller, guessed) {
            permit = Some(self.acquire(caller, subscription)?);
        }
        // The HTTP path's document check, before async-graphql parses and validates it (whose
        // cost a fragment bomb makes exponential).
        let refused = |code, message| Refusal {
            code,
            limit: "document",
            message,
        };
        let subscription = match crate::http::check_document(
            query,
            op.name.as_deref(),
            self.expanded_fields,
        ) {
            Err(crate::http::DocumentError::Parse(why)) => {
                return Err(refused("GRAPHQL_PARSE_FAILED", why));
            }
            Err(crate::http::DocumentError::TooLarge) => {
                return Err(refused(
                    "QUERY_TOO_LARGE",
                    format!(
                        "the document selects more than {} fields once its fragments are expanded",
                        self.expanded_fields
                    ),
                ));
            }
            Ok(subscription) => subscription,
        };
        if let Some(caller) = caller
            && guessed != Some(subscription)
        {
            // A fragment came first, or the operation named is not the first: now it is known.
            permit = Some(self.acquire(caller, subscription)?);
        }
        // Before `connection_ack` there is no caller (and no permit); async-graphql refuses the
        // operation itself then.
        active.insert(
            op.id.clone(),
            Held {
                permit,
                request: !subscription,
            },
        );
        Ok(())
    }

    /// A place among the caller's subscriptions or its requests executing, or the refusal.
    fn acquire(&self, caller: &Scope, subscription: bool) -> Result<Place, Refusal> {
        if subscription {
            self.tenants.try_acquire(caller).map_err(|whose| Refusal {
                code: "TOO_MANY_SUBSCRIPTIONS",
                limit: whose.limit("subscriptions"),
                message: whose.too_many("subscriptions", "are running"),
            })
        } else {
            self.requests.try_acquire(caller).map_err(|whose| Refusal {
                code: "TOO_MANY_REQUESTS",
                limit: whose.limit("requests"),
                message: whose.too_many("requests", "are executing"),
            })
        }
    }
}

/// Why an operation was refused: the `code` its client gets, the `limit` counted in
/// `forge.server.refusals_total`, and what the client is told.
struct Refusal {
    code: &'static str,
    limit: &'static str,
    message: String,
}

/// A stream of what the channel receives.
fn tokio_stream_from(
    rx: mpsc::Receiver<Vec<u8>>,
) -> impl futures_util::Stream<Item = Vec<u8>> + Send + 'static {
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_next_message_gives_its_id_and_only_that_is_parsed() {
        let next = r#"{"type":"next","id":"q\"1","payload":{"data":{"a":"x"}}}"#;
        assert_eq!(answered(next).as_deref(), Some("q\"1"));
        assert_eq!(answered(r#"{"type":"complete","id":"q1"}"#), None);
        assert_eq!(answered(r#"{"type":"next","id":7}"#), None);
        // The payload is never read: a broken one does not matter.
        assert_eq!(
            answered(r#"{"type":"next","id":"q2","payload":{"#).as_deref(),
            Some("q2")
        );
        assert_eq!(
            ended(r#"{"type":"complete","id":"q1"}"#).as_deref(),
            Some("q1")
        );
        assert_eq!(ended(next), None);
    }
}
