//! Test support for applications built on Forge (feature `testing`): an application's server
//! as its users start it — the binary, a fresh data directory, the address it says it listens
//! on — stopped and cleaned up when dropped; and [`Client`], its Forge API as tests drive it.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

mod client;

pub use client::{Answer, Client, Pending};

/// A server process started by [`Served::start`]; killed, and its data directory removed, when
/// dropped.
#[derive(Debug)]
pub struct Served {
    child: Child,
    url: String,
    dir: PathBuf,
}

impl Served {
    /// Starts `program` with `args` followed by `--data <a fresh directory>`, and waits until it
    /// prints a line starting with `ready` followed by its URL on standard error (what it prints
    /// later is read and dropped, so it never blocks on a full pipe). When it exits first, the
    /// error is its exit status and everything it printed.
    pub fn start(program: impl AsRef<OsStr>, args: &[&str], ready: &str) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!(
            "forge-served-{}-{}",
            std::process::id(),
            free_port()
        ));
        let (child, url) = spawn(program.as_ref(), args, ready, &dir).inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&dir);
        })?;
        Ok(Self { child, url, dir })
    }

    /// Kills it at once (`SIGKILL`: no drain, nothing flushed, as a crash or an out-of-memory
    /// kill ends it), then starts `program` with `args` again on the same data directory, as
    /// [`Served::start`] does: what a restart after a crash finds.
    pub fn kill_and_restart(
        &mut self,
        program: impl AsRef<OsStr>,
        args: &[&str],
        ready: &str,
    ) -> Result<(), String> {
        let _ = self.child.kill();
        self.child.wait().map_err(|e| e.to_string())?;
        let (child, url) = spawn(program.as_ref(), args, ready, &self.dir)?;
        self.child = child;
        self.url = url;
        Ok(())
    }

    /// The URL it listens on (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its process id (to signal it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its data directory.
    pub fn data(&self) -> &Path {
        &self.dir
    }

    /// Waits for it to exit.
    pub fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts `program` with `args` and `--data dir`; once it prints `ready` and its URL on standard
/// error, the process and the URL (see [`Served::start`]).
fn spawn(
    program: &OsStr,
    args: &[&str],
    ready: &str,
    dir: &Path,
) -> Result<(Child, String), String> {
    let mut child = Command::new(program)
        .args(args)
        .arg("--data")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("the binary did not start: {e}"))?;
    let Some(stderr) = child.stderr.take() else {
        return Err("no standard error to read".into());
    };
    let mut lines = BufReader::new(stderr).lines();
    let mut printed = String::new();
    for line in lines.by_ref() {
        let Ok(line) = line else { break };
        if let Some(rest) = line.strip_prefix(ready) {
            let url = rest.split('/').take(3).collect::<Vec<_>>().join("/");
            std::thread::spawn(move || lines.for_each(drop));
            return Ok((child, url));
        }
        printed.push_str(&line);
        printed.push('\n');
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    Err(format!("{status}: {printed}"))
}

/// A port nobody listens on now, on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or(0, |a| a.port())
}

/// What every application server on Forge must do as its users start it, checked against
/// `serve(listen, args)` (which starts it with `--listen listen` and `args`): development
/// sign-in only when asked (`--dev-sign-in`) and only on a loopback listener unless forced
/// (`--dev-sign-in-anywhere`), and on SIGTERM a drain and a clean exit (`0`). The first check
/// that does not hold is the error.
pub fn check_server(serve: impl Fn(&str, &[&str]) -> Result<Served, String>) -> Result<(), String> {
    let off = serve("127.0.0.1:0", &[])?;
    let status = dev_sign_in(off.url())?;
    if status != 404 {
        return Err(format!(
            "development sign-in answered {status} without --dev-sign-in"
        ));
    }
    let on = serve("127.0.0.1:0", &["--dev-sign-in"])?;
    let status = dev_sign_in(on.url())?;
    if status != 200 {
        return Err(format!(
            "development sign-in answered {status} with --dev-sign-in"
        ));
    }
    match serve("0.0.0.0:0", &["--dev-sign-in"]) {
        Ok(_) => return Err("development sign-in was served on every interface".into()),
        Err(why) if !why.contains("not a loopback address") => {
            return Err(format!("refused off loopback without saying why: {why}"));
        }
        Err(_) => {}
    }
    let forced = serve("0.0.0.0:0", &["--dev-sign-in", "--dev-sign-in-anywhere"])?;
    let port = forced.url().rsplit(':').next().unwrap_or_default();
    let status = dev_sign_in(&format!("http://127.0.0.1:{port}"))?;
    if status != 200 {
        return Err(format!("forced development sign-in answered {status}"));
    }
    let mut serving = on;
    let sent = Command::new("kill")
        .args(["-TERM", &serving.pid().to_string()])
        .status()
        .map_err(|e| format!("kill: {e}"))?;
    if !sent.success() {
        return Err("kill -TERM failed".into());
    }
    // Killed by the signal, the process would have no exit code; drained, it exits 0.
    let exited = serving.wait().map_err(|e| e.to_string())?;
    if exited.code() != Some(0) {
        return Err(format!("SIGTERM did not drain and exit 0: {exited}"));
    }
    Ok(())
}

/// `POST /auth/dev` at `url` (`http://HOST:PORT`) for a principal asking for every role: the
/// status code.
fn dev_sign_in(url: &str) -> Result<u16, String> {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let body = r#"{"tenant": "acme", "principal": "mallory", "roles": ["admin", "manager"]}"#;
    let mut tcp = std::net::TcpStream::connect(addr).map_err(|e| format!("{addr}: {e}"))?;
    write!(
        tcp,
        "POST /auth/dev HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).map_err(|e| e.to_string())?;
    answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not an HTTP answer: {answer:.80}"))
}
