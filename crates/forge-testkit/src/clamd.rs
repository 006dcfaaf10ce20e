//! A real ClamAV daemon for tests, with a signature database generated here (the machines reach
//! no signature mirror, so there is no `freshclam`): the standard EICAR test file by its MD5
//! (`Forge.Test.EICAR`) and a marker string of Forge's own by its bytes (`Forge.Test.Marker`).
//!
//! [`Clamd::start`] runs `clamd` in the foreground on a Unix socket in a directory of its own,
//! waits until it answers, and stops it when dropped; `clamd` comes from Debian's
//! `clamav-daemon` (`.ci/run` installs it).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The standard EICAR anti-virus test file (68 bytes).
pub const EICAR: &[u8] = br"X5O!P%@AP[4\PZX54(P^)7CC)7}$EICAR-STANDARD-ANTIVIRUS-TEST-FILE!$H+H*";

/// A byte string the generated database's own signature matches anywhere in a file.
pub const MARKER: &[u8] = b"FORGE-TEST-MALWARE-MARKER";

/// A running clamd, stopped on drop.
pub struct Clamd {
    child: Child,
    dir: PathBuf,
}

impl std::fmt::Debug for Clamd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clamd").field("dir", &self.dir).finish()
    }
}

fn md5_hex(bytes: &[u8]) -> String {
    // clamd's .hdb signatures are MD5s; computing one is a test fixture, not cryptography.
    let out = Command::new("md5sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().expect("stdin").write_all(bytes)?;
            c.wait_with_output()
        })
        .expect("md5sum (coreutils) runs");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

impl Clamd {
    /// Starts clamd with the generated database. Panics with what to install when it cannot.
    pub fn start() -> Self {
        let binary = ["/usr/sbin/clamd", "/usr/bin/clamd"]
            .into_iter()
            .find(|p| Path::new(p).is_file())
            .unwrap_or_else(|| {
                panic!(
                    "clamd is not installed: run `bash scripts/test-services.sh` (or apt-get install clamav-daemon); the \
                     malware scanner's tests need a real daemon"
                )
            });
        let dir =
            std::env::temp_dir().join(format!("forge-clamd-{}", uuid::Uuid::new_v4().simple()));
        let db = dir.join("db");
        std::fs::create_dir_all(&db).expect("clamd directory");
        std::fs::write(
            db.join("forge-test.hdb"),
            format!("{}:{}:Forge.Test.EICAR\n", md5_hex(EICAR), EICAR.len()),
        )
        .expect("hdb");
        let hex: String = MARKER.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::write(
            db.join("forge-test.ndb"),
            format!("Forge.Test.Marker:0:*:{hex}\n"),
        )
        .expect("ndb");
        let socket = dir.join("clamd.sock");
        std::fs::write(
            dir.join("clamd.conf"),
            format!(
                "Foreground yes\nLocalSocket {}\nDatabaseDirectory {}\nLogFile {}\n\
                 StreamMaxLength 32M\nMaxThreads 4\n",
                socket.display(),
                db.display(),
                dir.join("clamd.log").display()
            ),
        )
        .expect("clamd.conf");
        let child = Command::new(binary)
            .arg("-c")
            .arg(dir.join("clamd.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("clamd starts");
        let mut clamd = Self { child, dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !clamd.answers() {
            if let Ok(Some(status)) = clamd.child.try_wait() {
                let log = std::fs::read_to_string(clamd.dir.join("clamd.log")).unwrap_or_default();
                panic!("clamd exited ({status}) before answering:\n{log}");
            }
            assert!(
                Instant::now() < deadline,
                "clamd did not answer within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        clamd
    }

    /// Its socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("clamd.sock")
    }

    /// Whether it answers `PING` with `PONG`.
    pub fn answers(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut s) = std::os::unix::net::UnixStream::connect(self.socket()) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let mut reply = [0u8; 5];
        s.write_all(b"zPING\0").is_ok()
            && s.read_exact(&mut reply).is_ok()
            && &reply[..4] == b"PONG"
    }

    /// Stops it (as a crash would: the socket stays, nothing answers).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Clamd {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
