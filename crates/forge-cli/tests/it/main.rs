//! The `forge` binary, run as a user would run it.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Command, Output};

use forge_core::event::{RunEvent, RunEventKind};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn forge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_forge"))
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn readme_run_command_streams_a_complete_run_with_a_tool_call() {
    let out = forge(&[
        "run",
        "--agent",
        "examples/agents/calculator.toml",
        "What is 12 times 7?",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("is the scripted provider"),
        "scripted use must be announced: {stderr}"
    );
    assert!(
        stdout.contains(r#"→ calculate {"a":12,"b":7,"op":"mul"}"#),
        "{stdout}"
    );
    assert!(stdout.contains(r#"← calculate {"result":84}"#), "{stdout}");
    assert!(stdout.contains("assistant: 12 × 7 = 84."), "{stdout}");
    assert!(
        stdout
            .trim_end()
            .lines()
            .last()
            .unwrap()
            .starts_with("✓ completed"),
        "{stdout}"
    );
}

#[test]
fn json_output_is_the_event_stream_with_gapless_sequence_numbers() {
    let out = forge(&[
        "run",
        "--json",
        "--agent",
        "examples/agents/calculator.toml",
        "What is 12 times 7?",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let events: Vec<RunEvent> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1);
    }
    let types: Vec<&str> = events.iter().map(|e| e.kind.type_name()).collect();
    assert_eq!(types.first(), Some(&"run.started"));
    assert!(types.contains(&"run.checkpointed"));
    match &events.last().unwrap().kind {
        RunEventKind::RunCompleted { text, .. } => assert_eq!(text, "12 × 7 = 84."),
        other => panic!("expected run.completed, got {other:?}"),
    }
}

#[test]
fn a_tool_failure_is_shown_and_the_run_still_answers() {
    let out = forge(&[
        "run",
        "--agent",
        "examples/agents/calculator.toml",
        "divide 1 by 0",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains(r#"✗ calculate {"code":"tool_failed","message":"division by zero"}"#),
        "{stdout}"
    );
    assert!(
        stdout.contains("assistant: I can't: division by zero."),
        "{stdout}"
    );
}

#[test]
fn a_bad_agent_file_is_a_clear_error_with_exit_code_2() {
    let dir = std::env::temp_dir().join(format!("forge-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("missing.toml", None, "failed to read agent file"),
        (
            "no_model.toml",
            Some("name = \"a\"\nversion = \"1\"\ninstructions = \"x\"\nmodel = \"gpt\"\n"),
            "must look like provider:model",
        ),
        (
            "typo.toml",
            Some(
                "name = \"a\"\nversion = \"1\"\ninstructions = \"x\"\nmodel = \"scripted:s.toml\"\n[limits]\nmax_stepz = 3\n",
            ),
            "unknown field `max_stepz`",
        ),
        (
            "no_script.toml",
            Some(
                "name = \"a\"\nversion = \"1\"\ninstructions = \"x\"\nmodel = \"scripted:nope.toml\"\n",
            ),
            "could not read script",
        ),
        (
            "no_tool.toml",
            Some(
                "name = \"a\"\nversion = \"1\"\ninstructions = \"x\"\nmodel = \"scripted:s.toml\"\ntools = [\"rm_rf\"]\n",
            ),
            "tool rm_rf is not registered",
        ),
    ];
    std::fs::write(
        dir.join("s.toml"),
        "[[conversation]]\n[[conversation.turn]]\ntext = [\"hi\"]\n",
    )
    .unwrap();
    for (name, body, want) in cases {
        let path = dir.join(name);
        if let Some(body) = body {
            std::fs::write(&path, body).unwrap();
        }
        let out = forge(&["run", "--agent", path.to_str().unwrap(), "hi"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(want),
            "{name}: {stderr}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
