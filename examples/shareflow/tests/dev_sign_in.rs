//! `shareflow serve` hands out development tokens only when asked (`--dev-sign-in`), and only on a
//! loopback listener unless forced (`--dev-sign-in-anywhere`); and it stops cleanly on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A `shareflow serve` process, killed when dropped.
struct Serving {
    child: Child,
    url: String,
    _dir: TempDir,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory removed when dropped.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("an address").port()
}

/// Starts `shareflow serve` with `args` on a fresh data directory: the process and the URL it
/// says it listens on, or everything it printed before it exited.
fn serve(listen: &str, args: &[&str]) -> Result<Serving, String> {
    let dir = TempDir(std::env::temp_dir().join(format!(
        "shareflow-dev-sign-in-{}-{}",
        std::process::id(),
        free_port()
    )));
    let publisher = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_shareflow"))
        .args(["serve", "--data"])
        .arg(&dir.0)
        .args(["--listen", listen, "--publisher-listen", &publisher])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut printed = String::new();
    for line in lines.by_ref() {
        let line = line.expect("stderr is text");
        if let Some(rest) = line.strip_prefix("shareflow: listening on ") {
            let url = rest.split('/').take(3).collect::<Vec<_>>().join("/");
            // Whatever it prints later is read and dropped, so that it never blocks on a full pipe.
            std::thread::spawn(move || lines.for_each(drop));
            return Ok(Serving {
                child,
                url,
                _dir: dir,
            });
        }
        printed.push_str(&line);
        printed.push('\n');
    }
    let status = child.wait().expect("it exits");
    Err(format!("{status}: {printed}"))
}

async fn sign_in(url: &str) -> reqwest::StatusCode {
    forge::providers::http::install_crypto_provider();
    reqwest::Client::new()
        .post(format!("{url}/auth/dev"))
        .json(&serde_json::json!({"tenant": "acme", "principal": "mallory", "roles": ["admin"]}))
        .send()
        .await
        .expect("the server answers")
        .status()
}

#[tokio::test]
async fn serve_hands_out_no_development_token_unless_asked() {
    let off = serve("127.0.0.1:0", &[]).expect("serves");
    assert_eq!(sign_in(&off.url).await, reqwest::StatusCode::NOT_FOUND);
    let on = serve("127.0.0.1:0", &["--dev-sign-in"]).expect("serves");
    assert_eq!(sign_in(&on.url).await, reqwest::StatusCode::OK);
}

#[tokio::test]
async fn development_sign_in_is_refused_off_loopback_unless_forced() {
    let why = serve("0.0.0.0:0", &["--dev-sign-in"])
        .err()
        .expect("refused on a listener every interface reaches");
    assert!(why.contains("not a loopback address"), "{why}");
    let forced = serve("0.0.0.0:0", &["--dev-sign-in", "--dev-sign-in-anywhere"]).expect("serves");
    let port = forced.url.rsplit(':').next().expect("a port").to_owned();
    assert_eq!(
        sign_in(&format!("http://127.0.0.1:{port}")).await,
        reqwest::StatusCode::OK
    );
}

#[tokio::test]
async fn sigterm_drains_and_exits_cleanly() {
    let mut serving = serve("127.0.0.1:0", &[]).expect("serves");
    let pid = serving.child.id().to_string();
    let sent = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    // Killed by the signal, the process would have no exit code; drained, it exits 0.
    let status = serving.child.wait().expect("it exits");
    assert_eq!(status.code(), Some(0), "{status}");
}
