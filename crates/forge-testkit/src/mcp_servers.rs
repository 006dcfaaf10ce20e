//! The real MCP servers tests run against, installed on first use by `mcp-servers/install.sh`
//! (also run by `.ci/run`): `@modelcontextprotocol/server-everything` from npm at two published
//! versions (`everything-2025-9`, `everything-2026-8`), `mcp-server-time` from PyPI,
//! `ledger_server.py` on the official Python SDK, and `drift_server.py` on the JSON-RPC wire.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The directory holding the servers, installed (once per machine; a file lock keeps parallel
/// test binaries apart). Panics, naming what to install, when installing fails.
pub fn dir() -> PathBuf {
    static DONE: OnceLock<()> = OnceLock::new();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp-servers");
    DONE.get_or_init(|| {
        let out = Command::new("flock")
            .arg(dir.join(".install.lock"))
            .arg(dir.join("install.sh"))
            .output();
        let ok = match &out {
            Ok(o) if o.status.success() => true,
            Ok(o) => {
                eprintln!("{}", String::from_utf8_lossy(&o.stderr));
                false
            }
            Err(e) => {
                eprintln!("cannot run flock (util-linux): {e}");
                false
            }
        };
        assert!(
            ok,
            "installing the MCP test servers failed: they need npm (Node.js 20) and python3 with venv, and the npm and PyPI registries; run {} to see why",
            dir.join("install.sh").display()
        );
    });
    dir
}

/// The entry point of a server-everything version (`2025-9` or `2026-8`), run with `node`.
pub fn everything(version: &str) -> String {
    dir()
        .join(format!("node_modules/everything-{version}/dist/index.js"))
        .display()
        .to_string()
}

/// The virtual environment's `python`.
pub fn python() -> String {
    dir().join(".venv/bin/python").display().to_string()
}

/// The `mcp-server-time` executable.
pub fn time_server() -> String {
    dir()
        .join(".venv/bin/mcp-server-time")
        .display()
        .to_string()
}

/// `drift_server.py`, which changes a tool while a client uses it; run with [`python`] (it needs
/// nothing beyond the standard library).
pub fn drift_server() -> String {
    dir().join("drift_server.py").display().to_string()
}

/// `ledger_server.py`, run with [`python`].
pub fn ledger_server() -> String {
    dir().join("ledger_server.py").display().to_string()
}
