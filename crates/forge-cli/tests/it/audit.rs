//! `forge worker` records the configuration it runs with when it changed, and `forge audit list`
//! shows it (issue 16, item 9).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use super::text;

fn start_worker(dir: &std::path::Path, extra: &[&str]) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_forge"))
        .args([
            "worker",
            "--store",
            "sqlite://forge.db",
            "--agent",
            "agent.toml",
        ])
        .args(extra)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    // It has recorded its configuration once it says it started.
    loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("the worker exited before starting"))
            .unwrap();
        if line.contains("started") {
            break;
        }
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    child.wait().unwrap();
}

fn config_records(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_forge"))
        .args([
            "audit",
            "list",
            "--store",
            "sqlite://forge.db",
            "--tenant",
            "_deployment",
            "--action",
            "config.",
            "--json",
        ])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_changed_configuration_is_on_the_audit_trail_once() {
    let dir = std::env::temp_dir().join(format!("forge-audit-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = crate::repo().join("examples/agents/calculator.script.toml");
    std::fs::copy(&script, dir.join("calculator.script.toml")).unwrap();
    let agent = |version: &str| {
        format!(
            "name = \"calculator\"\nversion = \"{version}\"\ninstructions = \"Add.\"\nmodel = \"scripted:calculator.script.toml\"\ntools = [\"calculate\"]\n"
        )
    };
    std::fs::write(dir.join("agent.toml"), agent("1")).unwrap();
    start_worker(&dir, &[]);
    start_worker(&dir, &[]);
    let records = config_records(&dir);
    assert_eq!(
        records.len(),
        1,
        "an unchanged configuration is recorded once: {records:?}"
    );
    assert_eq!(records[0]["detail"]["agents"][0]["version"], "1");
    assert!(
        records[0]["actor"]
            .as_str()
            .unwrap()
            .starts_with("forge worker"),
        "{records:?}"
    );

    std::fs::write(dir.join("agent.toml"), agent("2")).unwrap();
    start_worker(&dir, &["--allow-self-approval"]);
    let records = config_records(&dir);
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0]["detail"]["agents"][0]["version"], "2");
    assert_eq!(records[0]["detail"]["self_approval_allowed"], true);

    // The process's own switches are on record too (issue 62, item 12): file inspection and
    // retention here; a change of one alone is a new record.
    let settings = &records[0]["detail"]["settings"];
    assert_eq!(
        settings["files"]["on_active_content"], "refuse",
        "{settings}"
    );
    assert_eq!(
        settings["source_retention"],
        serde_json::json!([]),
        "{settings}"
    );
    start_worker(
        &dir,
        &[
            "--allow-self-approval",
            "--on-active-content",
            "flag",
            "--source-retention",
            "acme=30",
        ],
    );
    let records = config_records(&dir);
    assert_eq!(records.len(), 3, "{records:?}");
    let settings = &records[0]["detail"]["settings"];
    assert_eq!(settings["files"]["on_active_content"], "flag", "{settings}");
    assert_eq!(settings["source_retention"][0], "acme=30", "{settings}");
    let _ = std::fs::remove_dir_all(&dir);
}
