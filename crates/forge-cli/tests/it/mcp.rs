//! MCP through the `forge` binary, against the real `mcp-server-time` (PyPI) over stdio:
//! `forge mcp diff | pin | list`, an imported tool called in `forge run`, and drift — the time
//! server names its local time zone in its tools' argument descriptions, so a different `TZ`
//! is a different catalog: the changed tools are not offered, and the drift is reported and
//! audited.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use forge_testkit::mcp_servers;

use crate::text;

fn workdir() -> PathBuf {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("mcp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_config(dir: &Path, tz: &str) -> String {
    let path = dir.join("mcp.toml");
    std::fs::write(
        &path,
        format!(
            "[[servers]]\nname = \"time\"\ntransport = \"stdio\"\ncommand = {:?}\nenv = {{ TZ = {tz:?} }}\n\
             [servers.tools.get_current_time]\nclassification = \"read\"\n",
            mcp_servers::time_server()
        ),
    )
    .unwrap();
    path.display().to_string()
}

fn forge_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_forge"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

#[test]
fn pinned_tools_run_in_forge_run_and_drift_disables_them() {
    let dir = workdir();
    let config = write_config(&dir, "UTC");
    std::fs::write(
        dir.join("a.toml"),
        "name = \"a\"\nversion = \"1\"\ninstructions = \"i\"\nmodel = \"scripted:a.script.toml\"\ntools = [\"time__get_current_time\"]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("a.script.toml"),
        "[[conversation]]\n[[conversation.turn]]\ntool_calls = [{ id = \"call_1\", name = \"time__get_current_time\", input = { timezone = \"Asia/Tokyo\" } }]\n[[conversation.turn]]\ntext = [\"It is {{tool_result}}\"]\n",
    )
    .unwrap();
    let agent = dir.join("a.toml").display().to_string();

    // Nothing pinned yet: every live tool is new, so the catalog differs.
    let out = forge_in(&dir, &["mcp", "diff", "--mcp", &config]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("get_current_time"),
        "{}",
        text(&out.stdout)
    );

    let out = forge_in(
        &dir,
        &[
            "mcp",
            "pin",
            "--mcp",
            &config,
            "--store",
            "sqlite://forge.db",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lock: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("mcp.lock")).unwrap()).unwrap();
    assert!(
        lock["servers"]["time"]["tools"]["convert_time"]["hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    let out = forge_in(&dir, &["mcp", "diff", "--mcp", &config]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let out = forge_in(&dir, &["mcp", "list", "--mcp", &config, "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = |tool: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["tool"] == tool)
            .cloned()
            .unwrap()
    };
    assert_eq!(row("get_current_time")["status"], "pinned");
    assert_eq!(row("get_current_time")["classification"], "read");
    assert_eq!(
        (
            row("convert_time")["classification"].clone(),
            row("convert_time")["approval"].clone()
        ),
        (
            serde_json::json!("external_write"),
            serde_json::json!("always")
        ),
        "an unclassified tool needs approval on every call"
    );

    let out = forge_in(
        &dir,
        &[
            "run",
            "--agent",
            &agent,
            "--mcp",
            &config,
            "What time is it?",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("day_of_week"),
        "the server answered: {}",
        text(&out.stdout)
    );

    // The server's catalog changes (another local time zone in its descriptions).
    let config = write_config(&dir, "Europe/Paris");
    let out = forge_in(&dir, &["mcp", "diff", "--mcp", &config, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let diff: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        diff[0]["changed"],
        serde_json::json!(["convert_time", "get_current_time"])
    );
    let out = forge_in(&dir, &["tools", "list", "--mcp", &config, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !text(&out.stdout).contains("time__get_current_time"),
        "{}",
        text(&out.stdout)
    );
    let out = forge_in(
        &dir,
        &[
            "run",
            "--agent",
            &agent,
            "--mcp",
            &config,
            "What time is it?",
        ],
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("catalog differs from its pins") && stderr.contains("get_current_time"),
        "{stderr}"
    );
    assert!(
        !text(&out.stdout).contains("day_of_week"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stdout).contains("forbidden"),
        "{}",
        text(&out.stdout)
    );
    let out = forge_in(
        &dir,
        &[
            "audit",
            "list",
            "--store",
            "sqlite://forge.db",
            "--tenant",
            "_deployment",
            "--json",
        ],
    );
    let audit = text(&out.stdout);
    assert!(
        audit.contains("mcp.drift") && audit.contains("mcp.pinned"),
        "{audit}{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
