//! ClamAV's daemon as the [`Scanner`]: its `INSTREAM` command over a Unix socket or TCP — the
//! command `zINSTREAM\0`, then the file in chunks each preceded by its length (4 bytes, big
//! endian), then a zero length; the answer `stream: OK`, `stream: <signature> FOUND` or
//! `… ERROR`, ended by a NUL. A daemon that cannot be reached, does not answer within the
//! timeout or answers with an error is a [`ScanError`], and the upload is refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::ports::{ScanError, Scanner, Verdict};

/// Where clamd listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClamdAddress {
    /// A Unix socket (`LocalSocket`).
    Unix(PathBuf),
    /// A TCP address (`TCPSocket`/`TCPAddr`), `host:port`.
    Tcp(String),
}

impl std::str::FromStr for ClamdAddress {
    type Err = String;

    /// `unix:/path/clamd.sock` or `tcp:host:port`.
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            Ok(Self::Unix(path.into()))
        } else if let Some(addr) = s.strip_prefix("tcp:") {
            Ok(Self::Tcp(addr.into()))
        } else {
            Err(format!(
                "{s:?}: expected unix:/path/to/clamd.sock or tcp:host:port"
            ))
        }
    }
}

/// A clamd scanner.
#[derive(Debug, Clone)]
pub struct ClamdScanner {
    address: ClamdAddress,
    timeout: Duration,
    chunk: usize,
}

/// The answer of a scan, which clamd caps; longer is an error.
const MAX_REPLY: usize = 4096;

impl ClamdScanner {
    /// A scanner at `address`, each scan (connection, transfer and answer) within `timeout`.
    pub fn new(address: ClamdAddress, timeout: Duration) -> Self {
        Self {
            address,
            timeout,
            chunk: 64 * 1024,
        }
    }

    async fn scan_over<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        mut stream: S,
        path: &Path,
    ) -> Result<Verdict, ScanError> {
        let unavailable = |e: std::io::Error| ScanError::Unavailable(e.to_string());
        let mut file = tokio::fs::File::open(path)
            .await
            .map_err(|e| ScanError::Refused(format!("opening the upload: {e}")))?;
        stream
            .write_all(b"zINSTREAM\0")
            .await
            .map_err(unavailable)?;
        let mut buf = vec![0u8; self.chunk];
        loop {
            let n = file
                .read(&mut buf)
                .await
                .map_err(|e| ScanError::Refused(format!("reading the upload: {e}")))?;
            let len = u32::try_from(n).map_err(|_| ScanError::Refused("chunk too large".into()))?;
            stream
                .write_all(&len.to_be_bytes())
                .await
                .map_err(unavailable)?;
            if n == 0 {
                break;
            }
            // clamd may stop reading and answer early (a size limit): the answer decides.
            if stream.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        stream.flush().await.ok();
        let mut reply = Vec::new();
        let mut byte = [0u8; 1];
        loop {
            match stream.read(&mut byte).await.map_err(unavailable)? {
                0 => break,
                _ if byte[0] == 0 => break,
                _ => reply.push(byte[0]),
            }
            if reply.len() > MAX_REPLY {
                return Err(ScanError::Refused("clamd's answer is too long".into()));
            }
        }
        parse_reply(&String::from_utf8_lossy(&reply))
    }
}

/// Sends `zPING` on `stream` and reads the answer, which must be `PONG`.
async fn ping_over<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S) -> Result<(), ScanError> {
    let unavailable = |e: std::io::Error| ScanError::Unavailable(e.to_string());
    stream.write_all(b"zPING\0").await.map_err(unavailable)?;
    stream.flush().await.ok();
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while reply.len() <= 16 {
        match stream.read(&mut byte).await.map_err(unavailable)? {
            0 => break,
            _ if byte[0] == 0 => break,
            _ => reply.push(byte[0]),
        }
    }
    if reply.trim_ascii() == b"PONG" {
        Ok(())
    } else {
        Err(ScanError::Unavailable(
            "clamd did not answer PING with PONG".into(),
        ))
    }
}

/// clamd's answer to `INSTREAM`.
fn parse_reply(reply: &str) -> Result<Verdict, ScanError> {
    let reply = reply.trim();
    let body = reply.strip_prefix("stream: ").unwrap_or(reply);
    if body == "OK" {
        Ok(Verdict::Clean)
    } else if let Some(signature) = body.strip_suffix(" FOUND") {
        Ok(Verdict::Infected(signature.trim().to_owned()))
    } else if body.is_empty() {
        Err(ScanError::Unavailable(
            "clamd closed the connection without an answer".into(),
        ))
    } else {
        Err(ScanError::Refused(body.chars().take(200).collect()))
    }
}

#[async_trait]
impl Scanner for ClamdScanner {
    fn name(&self) -> &str {
        "clamd"
    }

    async fn scan(&self, path: &Path) -> Result<Verdict, ScanError> {
        let scan = async {
            match &self.address {
                ClamdAddress::Unix(socket) => {
                    let s = tokio::net::UnixStream::connect(socket).await.map_err(|e| {
                        ScanError::Unavailable(format!("{}: {e}", socket.display()))
                    })?;
                    self.scan_over(s, path).await
                }
                ClamdAddress::Tcp(addr) => {
                    let s = tokio::net::TcpStream::connect(addr)
                        .await
                        .map_err(|e| ScanError::Unavailable(format!("{addr}: {e}")))?;
                    s.set_nodelay(true).ok();
                    self.scan_over(s, path).await
                }
            }
        };
        tokio::time::timeout(self.timeout, scan)
            .await
            .map_err(|_| ScanError::Unavailable(format!("no answer within {:?}", self.timeout)))?
    }

    async fn health(&self) -> Result<(), ScanError> {
        let ping = async {
            match &self.address {
                ClamdAddress::Unix(socket) => {
                    let s = tokio::net::UnixStream::connect(socket).await.map_err(|e| {
                        ScanError::Unavailable(format!("{}: {e}", socket.display()))
                    })?;
                    ping_over(s).await
                }
                ClamdAddress::Tcp(addr) => {
                    let s = tokio::net::TcpStream::connect(addr)
                        .await
                        .map_err(|e| ScanError::Unavailable(format!("{addr}: {e}")))?;
                    ping_over(s).await
                }
            }
        };
        tokio::time::timeout(self.timeout, ping)
            .await
            .map_err(|_| ScanError::Unavailable(format!("no answer within {:?}", self.timeout)))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read() {
        assert_eq!(parse_reply("stream: OK").unwrap(), Verdict::Clean);
        assert_eq!(
            parse_reply("stream: Eicar-Signature FOUND").unwrap(),
            Verdict::Infected("Eicar-Signature".into())
        );
        assert!(matches!(
            parse_reply("INSTREAM size limit exceeded. ERROR"),
            Err(ScanError::Refused(_))
        ));
        assert!(matches!(parse_reply(""), Err(ScanError::Unavailable(_))));
        assert_eq!(
            "unix:/run/clamd.sock".parse::<ClamdAddress>().unwrap(),
            ClamdAddress::Unix("/run/clamd.sock".into())
        );
        assert!("clamd.sock".parse::<ClamdAddress>().is_err());
    }
}
