//! A real OTLP receiver for telemetry tests: `otlp/receiver.py`, on the official protobuf
//! definitions (PyPI `opentelemetry-proto`, with `grpcio`), installed into a virtualenv by
//! `otlp/install.sh` the first time a test asks. It listens for OTLP/HTTP and OTLP/gRPC on free
//! loopback ports and keeps every export request twice: the bytes that arrived, and their decoded
//! form as JSON (ids in hex). Stopped when dropped.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running receiver.
pub struct Receiver {
    child: Child,
    dir: PathBuf,
    http_port: u16,
    grpc_port: u16,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("http_port", &self.http_port)
            .field("grpc_port", &self.grpc_port)
            .finish()
    }
}

fn home() -> PathBuf {
    crate::python::home("FORGE_OTLP_HOME", "/var/tmp/forge-otlp")
}

fn install() {
    static DONE: OnceLock<()> = OnceLock::new();
    crate::python::install(
        &DONE,
        "otlp/install.sh",
        "the telemetry tests export to a real OTLP receiver",
    );
}

/// One export request as it arrived.
#[derive(Debug, Clone)]
pub struct Export {
    /// `traces`, `metrics` or `logs`.
    pub signal: String,
    /// `http` or `grpc`.
    pub transport: String,
    /// The request body's bytes (decompressed).
    pub raw: Vec<u8>,
    /// The decoded request.
    pub decoded: Value,
}

/// A span from an export, flattened with its resource's `service.name`.
#[derive(Debug, Clone)]
pub struct Span {
    /// The exporting process's `service.name`.
    pub service: String,
    /// The span's name.
    pub name: String,
    /// Its kind as OTLP spells it (`SPAN_KIND_SERVER`, …).
    pub kind: String,
    /// Trace id, hex.
    pub trace_id: String,
    /// Span id, hex.
    pub span_id: String,
    /// Parent span id, hex (empty for a root).
    pub parent_span_id: String,
    /// String, integer and boolean attributes, as text.
    pub attributes: Vec<(String, String)>,
}

impl Span {
    /// An attribute's value as text.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

fn any_value(v: &Value) -> String {
    for key in ["stringValue", "intValue", "boolValue", "doubleValue"] {
        if let Some(x) = v.get(key) {
            return match x {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
        }
    }
    v.to_string()
}

fn attributes(v: &Value) -> Vec<(String, String)> {
    v.get("attributes")
        .and_then(Value::as_array)
        .map(|attrs| {
            attrs
                .iter()
                .map(|a| {
                    (
                        a["key"].as_str().unwrap_or_default().to_owned(),
                        any_value(&a["value"]),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn service(resource: &Value) -> String {
    attributes(&resource["resource"])
        .into_iter()
        .find(|(k, _)| k == "service.name")
        .map(|(_, v)| v)
        .unwrap_or_default()
}

impl Receiver {
    /// Starts a receiver writing under a new temporary directory. Panics with what is missing
    /// when it cannot.
    pub fn start() -> Self {
        install();
        let dir = std::env::temp_dir().join(format!("forge-otlp-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("a directory for the receiver");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/otlp/receiver.py");
        let mut child = Command::new(home().join("bin/python"))
            .arg(script)
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the OTLP receiver starts");
        let stdout = child.stdout.take().expect("its stdout");
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let ports: Vec<u16> = line
            .strip_prefix("ready ")
            .unwrap_or_else(|| panic!("the OTLP receiver did not start: {line:?}"))
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        assert_eq!(ports.len(), 2, "ports from {line:?}");
        Self {
            child,
            dir,
            http_port: ports[0],
            grpc_port: ports[1],
        }
    }

    /// `OTEL_EXPORTER_OTLP_ENDPOINT` for OTLP/HTTP.
    pub fn http_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// `OTEL_EXPORTER_OTLP_ENDPOINT` for OTLP/gRPC.
    pub fn grpc_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }

    /// Every export request received so far, in arrival order.
    pub fn exports(&self) -> Vec<Export> {
        let mut names: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "json"))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
            .into_iter()
            .filter_map(|json| {
                let stem = json.file_stem()?.to_string_lossy().into_owned();
                let mut parts = stem.splitn(3, '-').skip(1);
                let signal = parts.next()?.to_owned();
                let transport = parts.next()?.to_owned();
                let decoded = serde_json::from_slice(&std::fs::read(&json).ok()?).ok()?;
                let raw = std::fs::read(json.with_extension("pb")).ok()?;
                Some(Export {
                    signal,
                    transport,
                    raw,
                    decoded,
                })
            })
            .collect()
    }

    /// Every span received, by either transport.
    pub fn spans(&self) -> Vec<Span> {
        self.exports()
            .iter()
            .filter(|e| e.signal == "traces")
            .flat_map(|e| {
                let mut out = Vec::new();
                for rs in e.decoded["resourceSpans"].as_array().into_iter().flatten() {
                    let service = service(rs);
                    for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                        for s in ss["spans"].as_array().into_iter().flatten() {
                            out.push(Span {
                                service: service.clone(),
                                name: s["name"].as_str().unwrap_or_default().to_owned(),
                                kind: s["kind"].as_str().unwrap_or_default().to_owned(),
                                trace_id: s["traceId"].as_str().unwrap_or_default().to_owned(),
                                span_id: s["spanId"].as_str().unwrap_or_default().to_owned(),
                                parent_span_id: s["parentSpanId"]
                                    .as_str()
                                    .unwrap_or_default()
                                    .to_owned(),
                                attributes: attributes(s),
                            });
                        }
                    }
                }
                out
            })
            .collect()
    }

    /// Every metric received: (service, name, unit), repeated per export.
    pub fn metrics(&self) -> Vec<(String, String, String)> {
        self.exports()
            .iter()
            .filter(|e| e.signal == "metrics")
            .flat_map(|e| {
                let mut out = Vec::new();
                for rm in e.decoded["resourceMetrics"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let service = service(rm);
                    for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
                        for m in sm["metrics"].as_array().into_iter().flatten() {
                            out.push((
                                service.clone(),
                                m["name"].as_str().unwrap_or_default().to_owned(),
                                m["unit"].as_str().unwrap_or_default().to_owned(),
                            ));
                        }
                    }
                }
                out
            })
            .collect()
    }

    /// Every log record received: (event name, attributes).
    pub fn logs(&self) -> Vec<(String, Vec<(String, String)>)> {
        self.exports()
            .iter()
            .filter(|e| e.signal == "logs")
            .flat_map(|e| {
                let mut out = Vec::new();
                for rl in e.decoded["resourceLogs"].as_array().into_iter().flatten() {
                    for sl in rl["scopeLogs"].as_array().into_iter().flatten() {
                        for r in sl["logRecords"].as_array().into_iter().flatten() {
                            out.push((
                                r["eventName"].as_str().unwrap_or_default().to_owned(),
                                attributes(r),
                            ));
                        }
                    }
                }
                out
            })
            .collect()
    }

    /// Polls until `done` holds of what arrived (up to `within`); panics with what did arrive.
    pub fn wait_for<T>(&self, within: Duration, mut done: impl FnMut(&Self) -> Option<T>) -> T {
        let deadline = Instant::now() + within;
        loop {
            if let Some(t) = done(self) {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "the receiver did not get what was expected in {within:?}; it has spans {:#?}",
                self.spans()
                    .iter()
                    .map(|s| (&s.service, &s.name, &s.trace_id))
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
