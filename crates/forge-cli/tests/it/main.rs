//! The `forge` binary, run as a user would run it.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Command, Output};

use forge_core::event::{RunEvent, RunEventKind};

/// How long a test waits for something before it gives up, given how long it would take at most
/// on an idle machine: `idle` times `FORGE_TEST_PATIENCE` (default 4). A deadline only bounds a
/// failure — a test returns as soon as what it waits for happens — so a generous one costs a
/// passing run nothing, and a machine whose cores are busy with other work still passes.
pub(crate) fn patience(idle: std::time::Duration) -> std::time::Duration {
    let factor = std::env::var("FORGE_TEST_PATIENCE")
        .ok()
        .and_then(|f| f.parse::<u32>().ok())
        .filter(|f| *f >= 1)
        .unwrap_or(4);
    idle * factor
}

pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `forge` in a fresh working directory (so the default `sqlite://forge.db` is new), with
/// `examples/…` arguments resolved against the repository.
pub(crate) fn forge(args: &[&str]) -> Output {
    forge_with_env(args, &[])
}

/// [`forge`] with extra environment variables.
pub(crate) fn forge_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "cli-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let args: Vec<String> = args
        .iter()
        .map(|a| {
            if a.starts_with("examples/") {
                repo().join(a).display().to_string()
            } else {
                (*a).to_owned()
            }
        })
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_forge"))
        .args(&args)
        .envs(env.iter().copied())
        .current_dir(&dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    out
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The committed events `forge run --json` printed: its stream items folded by the reference
/// reducer (which refuses duplicates and gaps), with nothing provisional left over.
pub(crate) fn run_events(stdout: &[u8]) -> Vec<RunEvent> {
    let mut transcript = forge_core::stream::Transcript::new();
    let mut run = None;
    for line in text(stdout).lines() {
        let item: forge_core::stream::StreamItem =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        run = Some(item.run_id());
        transcript
            .apply(&item)
            .unwrap_or_else(|e| panic!("protocol broken: {e}"));
    }
    let run = run.expect("forge run printed nothing");
    let events = transcript.events(run);
    assert_eq!(
        events,
        transcript.committed(run),
        "nothing provisional left"
    );
    events
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
fn json_output_is_the_stream_of_the_run_with_gapless_sequence_numbers() {
    let out = forge(&[
        "run",
        "--json",
        "--agent",
        "examples/agents/calculator.toml",
        "What is 12 times 7?",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let events = run_events(&out.stdout);
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
            "misspelled.toml",
            Some(
                "name = \"a\"\nversion = \"1\"\ninstructions = \"x\"\nmodel = \"scripted:s.toml\"\ntoolz = [\"calculate\"]\n",
            ),
            "unknown key `toolz` at line 5",
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

/// A command that fails says each cause once: a missing credential is not named twice.
#[test]
fn a_missing_credential_is_named_once() {
    let dir = std::env::temp_dir().join(format!("forge-cli-cred-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let agent = dir.join("a.toml");
    std::fs::write(
        &agent,
        "name = \"a\"\nversion = \"1\"\ninstructions = \"x\"\nmodel = \"openai:gpt-4o-mini\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_forge"))
        .args([
            "run",
            "--agent",
            agent.to_str().unwrap(),
            "--store",
            "memory",
            "hi",
        ])
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.matches("OPENAI_API_KEY").count(), 1, "{stderr}");
    assert!(stderr.contains("is not set"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Commands whose output would be useless refuse, saying why: a token for a secret `forge
/// serve` refuses, a run submitted to a store that ends with the command.
#[test]
fn outputs_that_could_not_be_used_are_refused() {
    let weak = forge_with_env(&["token"], &[("FORGE_JWT_SECRET", "short-secret")]);
    assert_eq!(weak.status.code(), Some(2), "{}", text(&weak.stderr));
    assert!(text(&weak.stdout).is_empty(), "no token is printed");
    assert!(
        text(&weak.stderr).contains("at least 32 bytes"),
        "{}",
        text(&weak.stderr)
    );
    let strong = forge_with_env(
        &["token"],
        &[("FORGE_JWT_SECRET", "a-secret-of-thirty-two-bytes-or-more")],
    );
    assert!(strong.status.success(), "{}", text(&strong.stderr));
    assert_eq!(text(&strong.stdout).matches('.').count(), 2, "a JWT");
    let vanishing = forge(&[
        "submit",
        "--agent",
        "examples/agents/calculator.toml",
        "--store",
        "memory",
        "What is 2 times 3?",
    ]);
    assert_eq!(vanishing.status.code(), Some(2));
    assert!(
        text(&vanishing.stderr).contains("memory store ends with this command"),
        "{}",
        text(&vanishing.stderr)
    );
}

/// `forge --version` names the commit it was built from; `forge completions SHELL` prints a
/// script the shell loads, covering every subcommand.
#[test]
fn the_version_names_its_commit_and_completions_load() {
    let version = text(&forge(&["--version"]).stdout);
    let commit = version
        .trim()
        .strip_prefix(&format!("forge {} (", env!("CARGO_PKG_VERSION")))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{version}"));
    if repo().join(".git").exists() {
        assert!(
            commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit()),
            "{version}"
        );
    }
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = forge(&["completions", shell]);
        assert!(script.status.success(), "{shell}: {}", text(&script.stderr));
        assert!(text(&script.stdout).contains("cancel"), "{shell}");
    }
    let loaded = Command::new("bash")
        .args([
            "-c",
            &format!(
                "source <({} completions bash) && complete -p forge",
                env!("CARGO_BIN_EXE_forge")
            ),
        ])
        .output()
        .unwrap();
    assert!(
        text(&loaded.stdout).contains("-F _forge forge"),
        "{}",
        text(&loaded.stderr)
    );
}

mod access;
mod audit;
mod chaos;
mod client;
mod dlq;
mod eval;
mod fairness;
mod files;
mod freeze;
mod gate;
mod hitl;
mod leases;
mod live;
mod mcp;
mod providers;
mod rag;
mod scripting;
mod serve;
mod telemetry;
mod threads;
mod usage;

mod stores {
    //! `forge` against its durable stores.

    use std::process::{Command, Stdio};

    use forge_store_postgres::testing::{Flavor, TestDatabase};

    use super::{forge, text};

    #[tokio::test]
    async fn eight_processes_migrating_one_empty_database_at_once_apply_each_migration_once() {
        // RLS mode: the administrator migrates (as `forge_owner`), so each process is given its
        // URL.
        let db = TestDatabase::create_unprovisioned(Flavor::Plain)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let children: Vec<_> = (0..8)
            .map(|_| {
                Command::new(env!("CARGO_BIN_EXE_forge"))
                    .args([
                        "migrate",
                        "--store",
                        db.url(),
                        "--admin-url",
                        db.admin_url(),
                    ])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut applied = 0;
        for child in children {
            let out = child.wait_with_output().unwrap();
            let stdout = text(&out.stdout);
            assert!(
                out.status.success(),
                "a process failed to start: {stdout}{}",
                text(&out.stderr)
            );
            let n: usize = stdout
                .lines()
                .find_map(|l| l.strip_prefix("applied "))
                .and_then(|r| r.split(' ').next())
                .unwrap()
                .parse()
                .unwrap();
            let latest = forge_store_postgres::migrations(forge_store_postgres::Mode::Rls).latest();
            assert!(
                stdout
                    .trim_end()
                    .ends_with(&format!("schema at version {latest}")),
                "{stdout}"
            );
            applied += n;
        }
        let expected = forge_store_postgres::migrations(forge_store_postgres::Mode::Rls).list();
        assert_eq!(
            applied,
            expected.len(),
            "each migration is applied by exactly one process"
        );
        let pool = sqlx::PgPool::connect(db.admin_url()).await.unwrap();
        let ledger: Vec<(i64, String)> =
            sqlx::query_as("SELECT version, description FROM forge_migrations ORDER BY version")
                .fetch_all(&pool)
                .await
                .unwrap();
        let names: Vec<(i64, String)> = expected
            .iter()
            .map(|m| (m.version, m.name.to_string()))
            .collect();
        assert_eq!(ledger, names);
        pool.close().await;
    }

    /// RLS mode's system role is an administrator's to create: without it `forge migrate` says
    /// how, and `--admin-url` provisions it for the store URL's role before migrating.
    #[tokio::test]
    async fn forge_migrate_provisions_the_system_role_with_an_admin_url() {
        let db = TestDatabase::create_unprovisioned(Flavor::Plain)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let out = forge(&["migrate", "--store", db.url()]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("forge migrate --store <app URL> --admin-url"),
            "{stderr}"
        );
        assert!(
            !stderr.contains("forge_test@"),
            "no password printed: {stderr}"
        );

        let out = forge(&[
            "migrate",
            "--store",
            db.url(),
            "--admin-url",
            db.admin_url(),
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(
            stdout.starts_with(
                "provisioned forge_system and forge_owner for role forge_test_app\n\
                 applied 36 migration(s); schema at version 36"
            ),
            "{stdout}"
        );
        let out = forge(&[
            "run",
            "--store",
            db.url(),
            "--agent",
            "examples/agents/calculator.toml",
            "What is 2 times 3?",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }

    #[tokio::test]
    async fn forge_run_on_postgres_commits_the_run_to_the_database() {
        let db = TestDatabase::create(Flavor::Plain)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let out = forge(&[
            "run",
            "--json",
            "--store",
            db.url(),
            "--agent",
            "examples/agents/calculator.toml",
            "What is 12 times 7?",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let printed = crate::run_events(&out.stdout).len() as i64;
        let pool = sqlx::PgPool::connect(db.admin_url()).await.unwrap();
        let (events, status): (i64, String) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM forge_run_events), (SELECT status FROM forge_runs)",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(
            (events, status.as_str()),
            (printed, "completed"),
            "every printed event is in the log"
        );
        pool.close().await;
    }

    /// `forge run` on a shared store executes its own run only (issue 17, item 1): a run another
    /// user submitted earlier, first in the queue, stays queued for a worker.
    #[tokio::test]
    async fn forge_run_on_a_shared_store_executes_only_its_own_run() {
        let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cli-own-run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("forge.db").display());
        let agent = "examples/agents/calculator.toml";
        let out = forge(&[
            "submit",
            "--store",
            &url,
            "--agent",
            agent,
            "--tenant",
            "other",
            "What is 1 plus 1?",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let submitted = text(&out.stdout)
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_owned();
        let out = forge(&[
            "run",
            "--store",
            &url,
            "--agent",
            agent,
            "What is 12 times 7?",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let db = rusqlite::Connection::open(url.trim_start_matches("sqlite://")).unwrap();
        let statuses: Vec<(String, String)> = db
            .prepare("SELECT id, status FROM forge_runs ORDER BY created_at")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        drop(db);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(statuses.len(), 2, "{statuses:?}");
        assert_eq!(
            statuses[0],
            (submitted, "queued".to_owned()),
            "the other tenant's run is untouched"
        );
        assert_eq!(statuses[1].1, "completed");
    }

    /// Operators see runs without SQL (issue 17, item 7): a tenant's runs by state, one run's
    /// detail, and its events as `forge run` printed them.
    #[test]
    fn forge_runs_lists_shows_and_prints_a_tenants_runs() {
        let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cli-runs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("forge.db").display());
        let agent = "examples/agents/calculator.toml";
        let out = forge(&[
            "run",
            "--store",
            &url,
            "--agent",
            agent,
            "What is 12 times 7?",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let printed_by_run = text(&out.stdout);
        let out = forge(&[
            "submit",
            "--store",
            &url,
            "--agent",
            agent,
            "What is 1 plus 1?",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let queued = text(&out.stdout)
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_owned();

        let out = forge(&["runs", "list", "--store", &url]);
        let listed = text(&out.stdout);
        let lines: Vec<&str> = listed.lines().collect();
        assert_eq!(lines.len(), 2, "{listed}");
        assert!(
            lines[0].starts_with(&queued) && lines[0].contains("queued"),
            "newest first: {listed}"
        );
        assert!(
            lines[1].contains("completed") && lines[1].contains("calculator@"),
            "{listed}"
        );
        let done = lines[1].split_whitespace().next().unwrap().to_owned();

        // Issue 68, item 2: a reader that goes away (`forge runs list | head -1` after its line)
        // ends the command quietly, with the status of a process SIGPIPE stopped, not a panic.
        // Sabotage: the panic hook without its broken-pipe case exits 101 with the bug report.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_forge"))
            .args(["runs", "list", "--store", &url])
            .stdout(writer)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(141), "{}", text(&out.stderr));
        assert_eq!(text(&out.stderr), "", "nothing said about it");

        let out = forge(&["runs", "list", "--store", &url, "--status", "completed"]);
        assert_eq!(text(&out.stdout).lines().count(), 1);
        let out = forge(&["runs", "list", "--store", &url, "--tenant", "someone-else"]);
        assert_eq!(text(&out.stdout).trim(), "no runs");
        let out = forge(&["runs", "list", "--store", &url, "--status", "sleeping"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            text(&out.stderr).contains("unknown run status"),
            "{}",
            text(&out.stderr)
        );

        let out = forge(&["runs", "show", "--store", &url, &done]);
        let shown = text(&out.stdout);
        assert!(shown.contains("status    completed"), "{shown}");
        assert!(shown.contains("lease     -"), "{shown}");

        let out = forge(&["runs", "events", "--store", &url, &done]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout),
            printed_by_run,
            "the same lines forge run printed"
        );
        let out = forge(&["runs", "events", "--store", &url, "--json", &done]);
        assert!(text(&out.stdout).lines().count() > 3);

        // Erasure: a queued run is refused, the completed one goes, and it is audited.
        let out = forge(&["runs", "erase", "--store", &url, &queued]);
        assert!(!out.status.success());
        assert!(
            text(&out.stderr).contains(&format!("run {queued} has not ended")),
            "{}",
            text(&out.stderr)
        );
        let out = forge(&[
            "runs", "erase", "--store", &url, "--json", "--actor", "dpo", &done,
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let erased: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(erased["runs"], 1);
        assert_eq!(
            erased["messages"], 4,
            "input, call, result, answer: {erased}"
        );
        assert_eq!(erased["model_calls_unlinked"], 2);
        let out = forge(&["runs", "show", "--store", &url, &done]);
        assert!(!out.status.success(), "the erased run is gone");
        let out = forge(&["runs", "list", "--store", &url]);
        assert_eq!(text(&out.stdout).lines().count(), 1);
        let out = forge(&[
            "audit", "list", "--store", &url, "--tenant", "local", "--json",
        ]);
        let audit = text(&out.stdout);
        assert!(
            audit.contains("run.erased") && audit.contains("\"dpo\""),
            "{audit}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn forge_run_twice_on_one_sqlite_file_reuses_its_schema() {
        let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cli-sqlite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("forge.db").display());
        for _ in 0..2 {
            let out = forge(&[
                "run",
                "--store",
                &url,
                "--agent",
                "examples/agents/calculator.toml",
                "What is 12 times 7?",
            ]);
            assert!(out.status.success(), "{}", text(&out.stderr));
        }
        let out = forge(&["migrate", "--store", &url]);
        assert_eq!(
            text(&out.stdout).trim(),
            format!(
                "applied 0 migration(s); schema at version {}",
                forge_store_sqlite::migrations().latest()
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unknown_store_is_a_clear_error() {
        let out = forge(&["migrate", "--store", "mysql://root:hunter2@db/x"]);
        assert_eq!(out.status.code(), Some(2));
        let stderr = text(&out.stderr);
        assert_eq!(
            stderr.trim(),
            r#"error: --store must be memory, sqlite://PATH or postgres://…, not "mysql://…@db/x""#
        );
    }
}
