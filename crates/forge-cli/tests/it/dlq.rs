//! Dead letters end to end with real processes: a run whose worker is killed holding it, with no
//! attempt left, is dead-lettered with that as its reason; an operator replays it, or discards it.

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

/// A worker process, killed if the test fails before stopping it.
struct Worker(Option<Child>);

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn worker(dir: &Path, agent: &str) -> Worker {
    Worker(Some(
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
                "--lease-ttl-ms",
                "300",
            ])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ))
}

fn stop(mut worker: Worker) {
    let Some(mut child) = worker.0.take() else {
        return;
    };
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "a worker stops cleanly on SIGTERM: {status}"
    );
}

/// Polls `check` every 50 ms, for up to 20 s on an idle machine (`crate::patience`).
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < crate::patience(Duration::from_secs(20)),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Submits a run of ghost@7 with one attempt, lets a worker take it and kills that worker (SIGKILL)
/// mid-run; another worker, which lacks ghost@7 and so never claims it, dead-letters it once its
/// claim lapses.
fn dead_letter_by_crash(dir: &Path, message: &str) {
    let (ok, out, err) = forge_in(
        dir,
        &[
            "submit",
            "--store",
            "sqlite://forge.db",
            "--agent",
            "ghost.toml",
            "--max-attempts",
            "1",
            message,
        ],
    );
    assert!(ok, "{err}");
    let run = out.split_whitespace().nth(1).unwrap().to_owned();
    let mut doomed = worker(dir, "ghost.toml");
    let doomed = doomed.0.as_mut().unwrap();
    eventually("the ghost worker to hold the run", || {
        forge_in(dir, &["runs", "show", "--store", "sqlite://forge.db", &run])
            .1
            .contains("lease     worker-")
    });
    doomed.kill().unwrap();
    doomed.wait().unwrap();
    let w = worker(dir, "calculator.toml");
    eventually("the job to be dead-lettered", || dead_job(dir).is_some());
    stop(w);
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
    std::fs::write(dir.join("ghost.toml"), "name = \"ghost\"\nversion = \"7\"\ninstructions = \"x\"\nmodel = \"scripted:ghost.script.toml\"\n").unwrap();
    // Slow enough to be killed mid-run.
    std::fs::write(
        dir.join("ghost.script.toml"),
        "[[conversation]]\n[[conversation.turn]]\ntext = [\"boo\"]\nchunk_delay_ms = 1500\n",
    )
    .unwrap();

    // A run of ghost@7 whose worker dies holding it, with no attempt left.
    dead_letter_by_crash(&dir, "hello");
    let job = dead_job(&dir).unwrap();
    let (_, shown, _) = forge_in(&dir, &["dlq", "show", "--store", "sqlite://forge.db", &job]);
    assert!(
        shown.contains("state    dead") && shown.contains("attempts 1/1"),
        "{shown}"
    );
    assert!(
        shown.contains("error    lease expired (worker lost)"),
        "{shown}"
    );
    assert!(
        shown.contains("agent ghost@7"),
        "the run is untouched: {shown}"
    );

    // The operator replays; a healthy worker completes the run.
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
    dead_letter_by_crash(&dir, "again");
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
