//! Dead letters end to end with real processes: a run whose agent version no worker has is
//! dead-lettered; an operator replays it after deploying that version, or discards it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::text;

fn forge_in(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_forge"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

fn worker(dir: &Path, agent: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_forge"))
        .args([
            "worker",
            "--store",
            "sqlite://forge.db",
            "--agent",
            agent,
            "--poll-ms",
            "20",
            "--backoff-ms",
            "10",
        ])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "a worker stops cleanly on SIGTERM: {status}"
    );
}

/// Polls `check` every 50 ms for up to 20 s.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn dead_job(dir: &Path) -> Option<String> {
    let (_, out, _) = forge_in(dir, &["dlq", "list", "--store", "sqlite://forge.db"]);
    out.lines()
        .find(|l| !l.starts_with("no "))
        .map(|l| l.split_whitespace().next().unwrap().to_owned())
}

#[test]
fn a_poison_run_is_dead_lettered_then_replayed_or_discarded() {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("dlq-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let examples = super::repo().join("examples/agents");
    std::fs::copy(
        examples.join("calculator.toml"),
        dir.join("calculator.toml"),
    )
    .unwrap();
    std::fs::copy(
        examples.join("calculator.script.toml"),
        dir.join("calculator.script.toml"),
    )
    .unwrap();
    std::fs::write(dir.join("ghost.toml"), "name = \"ghost\"\nversion = \"7\"\ninstructions = \"x\"\nmodel = \"scripted:calculator.script.toml\"\n").unwrap();

    // A run of ghost@7, which the running worker does not have.
    let (ok, out, err) = forge_in(
        &dir,
        &[
            "submit",
            "--store",
            "sqlite://forge.db",
            "--agent",
            "ghost.toml",
            "--max-attempts",
            "2",
            "hello",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.starts_with("run ") && out.contains("(active)"), "{out}");
    let w = worker(&dir, "calculator.toml");
    eventually("the job to be dead-lettered", || dead_job(&dir).is_some());
    stop(w);
    let job = dead_job(&dir).unwrap();
    let (_, shown, _) = forge_in(&dir, &["dlq", "show", "--store", "sqlite://forge.db", &job]);
    assert!(
        shown.contains("state    dead") && shown.contains("attempts 2/2"),
        "{shown}"
    );
    assert!(
        shown.contains("error    agent ghost version 7 is not registered"),
        "{shown}"
    );
    assert!(
        shown.contains("(queued) agent ghost@7"),
        "the run waits, untouched: {shown}"
    );

    // The version is deployed; the operator replays.
    let (ok, out, err) = forge_in(
        &dir,
        &[
            "dlq",
            "replay",
            "--store",
            "sqlite://forge.db",
            "--all",
            "--actor",
            "ann",
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        format!(
            "replayed 1/1: job {job} (run {}) is ready again",
            shown_run(&shown)
        )
    );
    let w = worker(&dir, "ghost.toml");
    eventually("the replayed run to complete", || {
        forge_in(&dir, &["dlq", "show", "--store", "sqlite://forge.db", &job])
            .1
            .contains("(completed)")
    });
    stop(w);
    let (_, shown, _) = forge_in(&dir, &["dlq", "show", "--store", "sqlite://forge.db", &job]);
    assert!(
        shown.contains("state    completed") && shown.contains("job.replayed by ann"),
        "{shown}"
    );

    // Another poison run, discarded this time: its run fails and says why.
    let (ok, _, err) = forge_in(
        &dir,
        &[
            "submit",
            "--store",
            "sqlite://forge.db",
            "--agent",
            "ghost.toml",
            "--max-attempts",
            "1",
            "again",
        ],
    );
    assert!(ok, "{err}");
    let w = worker(&dir, "calculator.toml");
    eventually("the second job to be dead-lettered", || {
        dead_job(&dir).is_some()
    });
    stop(w);
    let job = dead_job(&dir).unwrap();
    let (ok, out, err) = forge_in(
        &dir,
        &[
            "dlq",
            "discard",
            "--store",
            "sqlite://forge.db",
            &job,
            "--actor",
            "bob",
            "--reason",
            "ghost was retired",
        ],
    );
    assert!(ok, "{err}");
    assert!(
        out.starts_with("discarded 1/1: job ") && out.trim_end().ends_with("failed"),
        "{out}"
    );
    let (_, shown, _) = forge_in(&dir, &["dlq", "show", "--store", "sqlite://forge.db", &job]);
    assert!(
        shown.contains("state    discarded") && shown.contains("failure  ghost was retired"),
        "{shown}"
    );
    assert!(shown.contains("job.discarded by bob"), "{shown}");
    assert_eq!(
        forge_in(&dir, &["dlq", "list", "--store", "sqlite://forge.db"])
            .1
            .trim(),
        "no dead-lettered jobs"
    );

    // Replaying a job that is not dead is refused with the reason.
    let (ok, _, err) = forge_in(
        &dir,
        &["dlq", "replay", "--store", "sqlite://forge.db", &job],
    );
    assert!(!ok && err.contains("is discarded, not dead"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn shown_run(shown: &str) -> String {
    shown
        .lines()
        .find_map(|l| l.strip_prefix("run      "))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}
