//! A real S3-compatible server for tests: moto's server (PyPI `moto[server]`), installed into a
//! virtualenv by `s3/install.sh` the first time a test asks, started per test on a free port
//! with one empty bucket, and stopped when dropped.

use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A running moto server.
pub struct Moto {
    child: Child,
    port: u16,
    bucket: String,
}

impl std::fmt::Debug for Moto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Moto").field("port", &self.port).finish()
    }
}

fn home() -> std::path::PathBuf {
    crate::python::home("FORGE_MOTO_HOME", "/var/tmp/forge-moto")
}

fn install() {
    static DONE: OnceLock<()> = OnceLock::new();
    crate::python::install(
        &DONE,
        "s3/install.sh",
        "the S3 adapter's tests need a real S3-compatible server (moto)",
    );
}

fn request(port: u16, head: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(head.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

impl Moto {
    /// Starts a server with an empty bucket. Panics with what is missing when it cannot.
    pub fn start() -> Self {
        install();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(home().join("bin/moto_server"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server starts");
        let bucket = format!("forge-{}", uuid::Uuid::new_v4().simple());
        let mut moto = Self {
            child,
            port,
            bucket,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let created = request(
                port,
                &format!(
                    "PUT /{} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    moto.bucket
                ),
            );
            if created.is_some_and(|r| r.starts_with("HTTP/1.1 200")) {
                break;
            }
            if let Ok(Some(status)) = moto.child.try_wait() {
                panic!("moto_server exited ({status}) before answering");
            }
            assert!(Instant::now() < deadline, "moto did not answer within 60 s");
            std::thread::sleep(Duration::from_millis(200));
        }
        moto
    }

    /// Its endpoint, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The bucket it was started with.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The keys of the bucket's objects (a listing over plain HTTP).
    pub fn keys(&self) -> Vec<String> {
        let listing = request(
            self.port,
            &format!(
                "GET /{}?list-type=2 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                self.bucket
            ),
        )
        .unwrap_or_default();
        listing
            .split("<Key>")
            .skip(1)
            .filter_map(|s| s.split_once("</Key>").map(|(k, _)| k.to_owned()))
            .collect()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
