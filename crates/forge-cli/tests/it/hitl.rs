//! Approvals across real processes on a real PostgreSQL: a `forge worker` parks a run; two
//! `forge interactions approve` processes race and exactly one wins; the worker executing the
//! approved call is SIGKILLed right after the call's external write; a new worker resumes the run,
//! and the effect exists once (its idempotency key absorbs the redelivery).

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use forge_core::id::RunId;
use forge_store_postgres::testing::{Flavor, TestDatabase};

use crate::text;

const AGENT: &str = r#"
name = "payer"
version = "1"
instructions = "Record the payment, then confirm."
model = "scripted:payer.script.toml"
tools = ["record_effect"]
approvals = { record_effect = "always" }
"#;

const SCRIPT: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "call_pay", name = "record_effect", input = { note = "pay 5" } }]
[[conversation.turn]]
text = ["paid"]
"#;

fn forge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_forge"))
        .args(args)
        .output()
        .expect("run forge")
}

fn spawn(args: &[&str], env: &[(&str, &str)]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_forge"))
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn forge")
}

async fn wait_for(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_survives_a_worker_kill_and_the_call_takes_effect_once() {
    let db = TestDatabase::create(Flavor::Plain)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let url = db.url().to_owned();
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("hitl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("payer.toml"), AGENT).unwrap();
    std::fs::write(dir.join("payer.script.toml"), SCRIPT).unwrap();
    let agent = dir.join("payer.toml");
    let agent = agent.to_str().unwrap();

    let out = forge(&["submit", "--store", &url, "--agent", agent, "pay 5"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let submitted = text(&out.stdout);
    let run: RunId = submitted
        .split_whitespace()
        .nth(1)
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("a run id in {submitted:?}"));

    let worker_args = [
        "worker",
        "--store",
        &url,
        "--agent",
        agent,
        "--effects-db",
        &url,
        "--lease-ttl-ms",
        "1500",
        "--poll-ms",
        "20",
    ];
    let mut first = spawn(&worker_args, &[]);

    let admin = sqlx::PgPool::connect(db.admin_url()).await.unwrap();
    let pending = || forge(&["interactions", "list", "--store", &url, "--json"]);
    wait_for(
        "the approval request",
        crate::patience(Duration::from_secs(30)),
        async || text(&pending().stdout).trim() != "[]",
    )
    .await;
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&pending().stdout).unwrap();
    let interaction = &listed[0];
    assert_eq!(interaction["request"]["tool_name"], "record_effect");
    assert_eq!(interaction["run_id"], run.to_string());
    let status: String = sqlx::query_scalar("SELECT status FROM forge_runs WHERE id = $1")
        .bind(run.0)
        .fetch_one(&admin)
        .await
        .unwrap();
    assert_eq!(status, "waiting", "the run waits, holding no job");
    let live_jobs: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM forge_jobs WHERE run_id = $1 AND state IN ('ready', 'claimed')",
    )
    .bind(run.0)
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(live_jobs, 0);
    let effects_table: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('forge_example_effects')::text")
            .fetch_one(&admin)
            .await
            .unwrap();
    assert!(
        effects_table.is_some(),
        "the worker created its effects table"
    );
    let effects = async || -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM forge_example_effects")
            .fetch_one(&admin)
            .await
            .unwrap()
    };
    assert_eq!(effects().await, 0, "nothing ran before the approval");

    // Hold the first worker between the external write and its step's commit: the commit inserts
    // run events, which this lock blocks (reads, and everything before the commit, go on). No hook
    // in the shipped binary is needed for it.
    let mut hold = admin.begin().await.unwrap();
    sqlx::query("LOCK TABLE forge_run_events IN EXCLUSIVE MODE")
        .execute(&mut *hold)
        .await
        .unwrap();

    // Two operators approve at once, each with their own key: exactly one decision stands. The
    // worker is paused meanwhile: were it to resume the run first, its step's commit would hold
    // the run row behind the lock above, and the slower approver would wait on that row.
    let signal = |sig: &str, pid: u32| {
        Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
    };
    signal("-STOP", first.id());
    let id = interaction["id"].as_str().unwrap().to_owned();
    let racers: Vec<Child> = ["ann", "ben"]
        .iter()
        .map(|who| {
            Command::new(env!("CARGO_BIN_EXE_forge"))
                .args([
                    "interactions",
                    "approve",
                    &id,
                    "--store",
                    &url,
                    "--actor",
                    who,
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outcomes: Vec<Output> = racers
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    signal("-CONT", first.id());
    let winners = outcomes.iter().filter(|o| o.status.success()).count();
    assert_eq!(
        winners,
        1,
        "exactly one approval wins: {:?}",
        outcomes
            .iter()
            .map(|o| (text(&o.stdout), text(&o.stderr)))
            .collect::<Vec<_>>()
    );
    let loser = outcomes.iter().find(|o| !o.status.success()).unwrap();
    assert!(
        text(&loser.stderr).contains("already resolved"),
        "{}",
        text(&loser.stderr)
    );

    // The first worker claims the resumed run and makes the external write, then is killed.
    wait_for(
        "the approved call's effect",
        crate::patience(Duration::from_secs(30)),
        async || effects().await == 1,
    )
    .await;
    first.kill().unwrap(); // SIGKILL, between the write and the step's commit
    first.wait().unwrap();
    // The dead worker's blocked transaction can never commit: its client is gone.
    hold.rollback().await.unwrap();

    let mut second = spawn(&worker_args, &[]);
    wait_for(
        "the resumed run to complete",
        crate::patience(Duration::from_secs(60)),
        async || {
            let status: String = sqlx::query_scalar("SELECT status FROM forge_runs WHERE id = $1")
                .bind(run.0)
                .fetch_one(&admin)
                .await
                .unwrap();
            status == "completed"
        },
    )
    .await;
    let _ = Command::new("kill")
        .args(["-TERM", &second.id().to_string()])
        .status();
    second.wait().unwrap();

    let (rows, executions): (i64, i64) = sqlx::query_as(
        "SELECT count(*), coalesce(sum(executions), 0)::bigint FROM forge_example_effects",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(rows, 1, "the approved call took effect exactly once");
    assert_eq!(
        executions, 2,
        "it was delivered twice (before and after the kill) under one idempotency key"
    );
    let (n, lo, hi): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), min(seq), max(seq) FROM forge_run_events WHERE run_id = $1",
    )
    .bind(run.0)
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!((lo, hi), (1, n), "the log is gapless");
    let actions: Vec<(String, String)> =
        sqlx::query_as("SELECT action, actor FROM forge_audit ORDER BY seq")
            .fetch_all(&admin)
            .await
            .unwrap();
    let approvals: Vec<&(String, String)> = actions
        .iter()
        .filter(|(a, _)| a == "approval.approved")
        .collect();
    assert_eq!(approvals.len(), 1, "{actions:?}");
    assert!(["ann", "ben"].contains(&approvals[0].1.as_str()));
    assert!(
        actions.iter().any(|(a, _)| a == "tool.external_write"),
        "{actions:?}"
    );
    admin.close().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `forge run` waits for a question's answer given by another process, then finishes.
#[test]
fn forge_run_waits_for_an_answer_from_forge_interactions() {
    use std::io::{BufRead, BufReader};

    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ask-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("ask.toml"),
        "name = \"asker\"\nversion = \"1\"\ninstructions = \"Ask first.\"\n\
         model = \"scripted:ask.script.toml\"\ntools = [\"ask_user\"]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("ask.script.toml"),
        r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "q", name = "ask_user", input = { prompt = "Which account?", answer_schema = { type = "string", enum = ["savings", "checking"] } } }]
[[conversation.turn]]
text = ["Using {{tool_result.answer}}."]
"#,
    )
    .unwrap();
    let store = format!("sqlite://{}", dir.join("forge.db").display());
    let mut run = Command::new(env!("CARGO_BIN_EXE_forge"))
        .args(["run", "--store", &store, "--tenant", "acme", "--agent"])
        .arg(dir.join("ask.toml"))
        .arg("move money")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(run.stdout.take().unwrap()).lines();
    let prompt = lines
        .by_ref()
        .map(|l| l.unwrap())
        .find(|l| l.starts_with("? Which account?"))
        .expect("the question is shown");
    // The command printed is the one to type: the store and the tenant the run used included.
    let printed = prompt.split(" · ").nth(1).expect("a command");
    let words = shlex::split(printed).expect("a shell command");
    assert_eq!(
        &words[..3],
        ["forge", "interactions", "answer"],
        "{printed}"
    );
    assert!(printed.ends_with(" --tenant acme"), "{printed}");
    let as_printed = |answer: &str| -> Vec<String> {
        words[1..]
            .iter()
            .map(|w| {
                if w == "<json>" {
                    answer.to_owned()
                } else {
                    w.clone()
                }
            })
            .collect()
    };
    // An answer outside the schema is refused and changes nothing.
    let bad_words = as_printed("\"cash\"");
    let bad = forge(&bad_words.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("schema"),
        "{}",
        text(&bad.stderr)
    );
    let good_words = as_printed("savings");
    let good = forge(&good_words.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(good.status.success(), "{}", text(&good.stderr));
    assert!(
        text(&good.stdout).contains("the run resumes"),
        "{}",
        text(&good.stdout)
    );
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = run.wait().unwrap();
    assert!(status.success(), "{rest:?}");
    assert!(
        rest.iter().any(|l| l.contains("Using savings.")),
        "{rest:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `forge run` of an agent that asks "Sure?" at once, on a SQLite store in a directory of its
/// own: the directory, the store's URL, the process and its output's lines.
fn asking(
    name: &str,
) -> (
    std::path::PathBuf,
    String,
    std::process::Child,
    std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
) {
    use std::io::{BufRead, BufReader};

    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("ask.toml"),
        "name = \"asker\"\nversion = \"1\"\ninstructions = \"Ask first.\"\n\
         model = \"scripted:ask.script.toml\"\ntools = [\"ask_user\"]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("ask.script.toml"),
        "[[conversation]]\n[[conversation.turn]]\ntool_calls = [{ name = \"ask_user\", input = { prompt = \"Sure?\", answer_schema = { type = \"boolean\" } } }]\n",
    )
    .unwrap();
    let store = format!("sqlite://{}", dir.join("forge.db").display());
    let mut run = Command::new(env!("CARGO_BIN_EXE_forge"))
        .args(["run", "--store", &store, "--agent"])
        .arg(dir.join("ask.toml"))
        .arg("go")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = BufReader::new(run.stdout.take().unwrap()).lines();
    (dir, store, run, lines)
}

/// Ctrl-C on `forge run` while it waits for a person cancels the run durably (exit 130).
#[test]
fn ctrl_c_cancels_a_waiting_run() {
    let (dir, _store, mut run, mut lines) = asking("ask-cancel");
    assert!(
        lines
            .by_ref()
            .map(|l| l.unwrap())
            .any(|l| l.starts_with("? Sure?")),
        "the question is shown"
    );
    let signalled = Command::new("kill")
        .args(["-INT", &run.id().to_string()])
        .status()
        .unwrap();
    assert!(signalled.success());
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert_eq!(run.wait().unwrap().code(), Some(130), "{rest:?}");
    assert!(rest.iter().any(|l| l.contains("■ cancelled")), "{rest:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// From another terminal: `forge runs events --follow` prints a waiting run as it goes on and
/// returns when it ends; `forge runs cancel` ends it, and says so when there is nothing left to
/// cancel.
#[test]
fn another_terminal_follows_a_run_and_cancels_it() {
    use std::io::{BufRead, BufReader};

    let (dir, store, mut run, mut lines) = asking("follow-cancel");
    let first = lines.next().unwrap().unwrap();
    let id = first
        .strip_prefix("▶ run ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("the run's id: {first}"))
        .to_owned();
    assert!(
        lines
            .by_ref()
            .map(|l| l.unwrap())
            .any(|l| l.starts_with("? Sure?")),
        "the question is shown"
    );
    let mut follow = Command::new(env!("CARGO_BIN_EXE_forge"))
        .args(["runs", "events", &id, "--follow", "--store", &store])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut followed = BufReader::new(follow.stdout.take().unwrap()).lines();
    // It has printed the run so far before the run is cancelled.
    assert!(
        followed
            .by_ref()
            .map(|l| l.unwrap())
            .any(|l| l.starts_with("? Sure?")),
        "the follower shows the question"
    );
    // Erasing it now is refused with what to do instead, as a command that works as printed.
    let early = forge(&["runs", "erase", &id, "--store", &store]);
    assert_eq!(early.status.code(), Some(5), "a conflict");
    assert!(
        text(&early.stderr).contains(&format!("run {id} has not ended"))
            && text(&early.stderr).contains(&format!("forge runs cancel {id} --store ")),
        "{}",
        text(&early.stderr)
    );
    let cancel = forge(&["runs", "cancel", &id, "--store", &store]);
    assert!(cancel.status.success(), "{}", text(&cancel.stderr));
    assert!(
        text(&cancel.stdout).contains("asked run"),
        "{}",
        text(&cancel.stdout)
    );
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    run.wait().unwrap();
    assert!(rest.iter().any(|l| l.contains("■ cancelled")), "{rest:?}");
    // The follower returns by itself once the run has ended.
    let tail: Vec<String> = followed.map(|l| l.unwrap()).collect();
    assert!(follow.wait().unwrap().success());
    assert!(tail.iter().any(|l| l.contains("■ cancelled")), "{tail:?}");
    let again = forge(&["runs", "cancel", &id, "--store", &store]);
    assert!(again.status.success());
    assert!(
        text(&again.stdout).contains("is cancelled: nothing to cancel"),
        "{}",
        text(&again.stdout)
    );
    let erased = forge(&["runs", "erase", &id, "--store", &store]);
    assert!(erased.status.success(), "{}", text(&erased.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}
