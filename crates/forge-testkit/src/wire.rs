//! A wire-transcript replay server: real HTTP on loopback, canned responses byte for byte.
//!
//! Provider contract tests start a [`WireServer`] with the responses a provider would send, point
//! an adapter at its base URL, and then assert both what the adapter parsed and what it sent
//! ([`WireServer::requests`]). Replies are written as given — status line, headers, body — so
//! malformed streams, error events inside a 200 and odd line endings reach the adapter untouched.
//! A reply can be cut into small writes, delayed, or stalled part-way to exercise timeouts and
//! cancellation. Each connection serves one request and is then closed.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One canned HTTP response.
#[derive(Debug, Clone)]
pub struct Reply {
    head: Vec<String>,
    body: Vec<u8>,
    piece: Option<usize>,
    piece_delay: Duration,
    head_delay: Duration,
    stall_after: Option<usize>,
}

impl Reply {
    /// A reply with this status line (`HTTP/1.1 200 OK`), no headers and `body`.
    pub fn new(status_line: &str, body: impl Into<Vec<u8>>) -> Self {
        Self {
            head: vec![status_line.to_owned()],
            body: body.into(),
            piece: None,
            piece_delay: Duration::ZERO,
            head_delay: Duration::ZERO,
            stall_after: None,
        }
    }

    /// A `200` event stream.
    pub fn sse(body: impl Into<Vec<u8>>) -> Self {
        Self::new("HTTP/1.1 200 OK", body).header("content-type", "text/event-stream")
    }

    /// A JSON response with `status`.
    pub fn json(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Self::new(&format!("HTTP/1.1 {status} {}", reason(status)), body)
            .header("content-type", "application/json")
    }

    /// A recorded `.http` transcript: status line, headers, a blank line, the body. Framing headers
    /// (`content-length`, `transfer-encoding`, `connection`, `content-encoding`) are dropped: the
    /// server frames the body itself.
    pub fn from_http(transcript: &[u8]) -> Option<Self> {
        let (split, skip) = find(transcript, b"\r\n\r\n")
            .map(|i| (i, 4))
            .or_else(|| find(transcript, b"\n\n").map(|i| (i, 2)))?;
        let head = std::str::from_utf8(&transcript[..split]).ok()?;
        let mut lines = head.lines();
        let mut reply = Self::new(
            lines.next()?.trim_end(),
            transcript[split + skip..].to_vec(),
        );
        for line in lines {
            let (name, value) = line.split_once(':')?;
            let lower = name.trim().to_ascii_lowercase();
            if !matches!(
                lower.as_str(),
                "content-length" | "transfer-encoding" | "connection" | "content-encoding"
            ) {
                reply = reply.header(name.trim(), value.trim());
            }
        }
        Some(reply)
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.head.push(format!("{name}: {value}"));
        self
    }

    /// Writes the body in pieces of `bytes`, with `delay` between them.
    pub fn in_pieces(mut self, bytes: usize, delay: Duration) -> Self {
        self.piece = Some(bytes.max(1));
        self.piece_delay = delay;
        self
    }

    /// Waits before writing anything.
    pub fn head_delay(mut self, delay: Duration) -> Self {
        self.head_delay = delay;
        self
    }

    /// Writes only the first `bytes` of the body, then holds the connection open without writing.
    pub fn stall_after(mut self, bytes: usize) -> Self {
        self.stall_after = Some(bytes);
        self
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A request the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// `GET`, `POST`…
    pub method: String,
    /// The path and query.
    pub path: String,
    /// Headers, names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl RecordedRequest {
    /// The first header called `name` (lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// The replay server.
#[derive(Debug)]
pub struct WireServer {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<RecordedRequest>>>,
    task: tokio::task::JoinHandle<()>,
}

impl WireServer {
    /// Listens on a free loopback port and answers requests with `replies`, in order. A request
    /// after the last reply gets a `500` saying so.
    pub async fn start(replies: Vec<Reply>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let queue = Arc::new(Mutex::new(VecDeque::from(replies)));
        let recorded = Arc::clone(&requests);
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let queue = Arc::clone(&queue);
                let recorded = Arc::clone(&recorded);
                tokio::spawn(async move {
                    let _ = serve(socket, queue, recorded).await;
                });
            }
        });
        Ok(Self {
            addr,
            requests,
            task,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.requests.lock().clone()
    }
}

impl Drop for WireServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    mut socket: TcpStream,
    queue: Arc<Mutex<VecDeque<Reply>>>,
    recorded: Arc<Mutex<Vec<RecordedRequest>>>,
) -> std::io::Result<()> {
    let Some(request) = read_request(&mut socket).await? else {
        return Ok(());
    };
    recorded.lock().push(request);
    let reply = queue
        .lock()
        .pop_front()
        .unwrap_or_else(|| Reply::json(500, r#"{"error":"the wire server has no reply left"}"#));
    tokio::time::sleep(reply.head_delay).await;
    let mut head = reply.head.join("\r\n");
    head.push_str(&format!(
        "\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        reply.body.len()
    ));
    socket.write_all(head.as_bytes()).await?;
    let body = match reply.stall_after {
        Some(n) => &reply.body[..n.min(reply.body.len())],
        None => &reply.body[..],
    };
    match reply.piece {
        None => socket.write_all(body).await?,
        Some(size) => {
            for piece in body.chunks(size) {
                socket.write_all(piece).await?;
                socket.flush().await?;
                tokio::time::sleep(reply.piece_delay).await;
            }
        }
    }
    socket.flush().await?;
    if reply.stall_after.is_some() {
        // Hold the connection open, silent, until the client gives up.
        let mut sink = [0u8; 64];
        while socket.read(&mut sink).await? > 0 {}
    }
    Ok(())
}

async fn read_request(socket: &mut TcpStream) -> std::io::Result<Option<RecordedRequest>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i;
        }
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.lines();
    let mut first = lines.next().unwrap_or_default().split_whitespace();
    let method = first.next().unwrap_or_default().to_owned();
    let path = first.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok(Some(RecordedRequest {
        method,
        path,
        headers,
        body,
    }))
}
