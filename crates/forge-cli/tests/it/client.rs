//! A `graphql-transport-ws` client of a `forge serve` process that reads live run streams item by
//! item, as a browser would.

use std::time::Duration;

use forge_core::stream::StreamItem;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// One subscription's socket.
pub(crate) struct StreamClient {
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    field: &'static str,
}

impl StreamClient {
    /// Subscribes to `runEvents` of `run` after committed sequence `after`.
    pub(crate) async fn run(addr: &str, token: &str, run: &str, after: u64) -> Self {
        let query = "subscription($id: ID!, $after: Int!) { runEvents(runId: $id, afterSeq: $after) { item } }";
        Self::open(
            addr,
            token,
            "runEvents",
            query,
            json!({"id": run, "after": after}),
        )
        .await
    }

    /// Subscribes to `threadEvents` of `thread` from its start.
    pub(crate) async fn thread(addr: &str, token: &str, thread: &str) -> Self {
        let query = "subscription($id: ID!) { threadEvents(threadId: $id) { item } }";
        Self::open(addr, token, "threadEvents", query, json!({"id": thread})).await
    }

    async fn open(addr: &str, token: &str, field: &'static str, query: &str, vars: Value) -> Self {
        let mut req = format!("ws://{addr}/graphql")
            .into_client_request()
            .unwrap();
        req.headers_mut().insert(
            "sec-websocket-protocol",
            "graphql-transport-ws".parse().unwrap(),
        );
        req.headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
        let send = |v: Value| Message::Text(v.to_string().into());
        ws.send(send(json!({"type": "connection_init", "payload": {}})))
            .await
            .unwrap();
        loop {
            let m = ws.next().await.expect("closed before the ack").unwrap();
            if let Message::Text(t) = m
                && t.contains("connection_ack")
            {
                break;
            }
        }
        ws.send(send(json!({"id": "1", "type": "subscribe", "payload": {
            "query": query, "variables": vars}})))
            .await
            .unwrap();
        Self { ws, field }
    }

    /// The next item, or `None` when the subscription completed or the socket closed (a server
    /// that went away).
    pub(crate) async fn next(&mut self) -> Option<StreamItem> {
        loop {
            let m = tokio::time::timeout(crate::patience(Duration::from_secs(60)), self.ws.next())
                .await
                .expect("an item within 60 s")?;
            let Ok(Message::Text(t)) = m else {
                match m {
                    Ok(Message::Close(_)) | Err(_) => return None,
                    _ => continue,
                }
            };
            let v: Value = serde_json::from_str(&t).unwrap();
            match v["type"].as_str() {
                Some("next") => {
                    assert!(v["payload"]["errors"].is_null(), "{v}");
                    let item = v["payload"]["data"][self.field]["item"].clone();
                    return Some(serde_json::from_value(item).unwrap());
                }
                Some("complete") => return None,
                Some("error") => panic!("subscription refused: {v}"),
                _ => {}
            }
        }
    }
}
