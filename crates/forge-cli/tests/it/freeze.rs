//! A worker frozen past its lease (SIGSTOP) while its runs wait on the model, then resumed
//! (SIGCONT) after another worker took the runs over and completed them: the frozen worker must
//! not deliver its steps' tool calls again (issue 17, item 9). Idempotency keys would absorb a
//! second delivery; the effects table counts deliveries, so the test sees one.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use forge_core::agent::AgentRef;
use forge_core::part::Part;
use forge_core::ports::store::{NewRun, NewThread, RunStore, ThreadStore};
use forge_core::scope::Scope;
use forge_store_postgres::testing::{Flavor, TestDatabase};
use forge_store_postgres::{Mode, PostgresStore};

const RUNS: usize = 4;

const AGENT: &str = r#"
name = "frozen"
version = "1"
instructions = "Record one effect, then say so."
model = "scripted:frozen.script.toml"
tools = ["record_effect"]
"#;

/// The model takes 1.5 s before it answers with the call: the window in which the worker freezes.
const SCRIPT: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ name = "record_effect", input = { note = "once" } }]
chunk_delay_ms = 1500
[[conversation.turn]]
text = ["recorded"]
"#;

fn spawn_worker(store_url: &str, agent: &std::path::Path, stderr: Stdio) -> Child {
    Command::new(env!("CARGO_BIN_EXE_forge"))
        .args(["worker", "--store", store_url, "--agent"])
        .arg(agent)
        .args([
            "--effects-db",
            store_url,
            "--concurrency",
            "4",
            "--lease-ttl-ms",
            "1000",
            "--poll-ms",
            "20",
        ])
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn forge worker")
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill {sig} failed");
}

async fn count(admin: &sqlx::PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(admin)
        .await
        .unwrap()
}

async fn wait_for(admin: &sqlx::PgPool, sql: &str, want: i64, within: Duration, what: &str) {
    let started = Instant::now();
    while count(admin, sql).await != want {
        assert!(started.elapsed() < within, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_resumed_after_its_runs_were_taken_over_delivers_no_tool_call() {
    let db = TestDatabase::create(Flavor::Plain)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("freeze-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("frozen.toml"), AGENT).unwrap();
    std::fs::write(dir.join("frozen.script.toml"), SCRIPT).unwrap();
    let agent_file = dir.join("frozen.toml");
    let store = PostgresStore::connect(db.url(), Mode::Rls).await.unwrap();
    let scope = Scope::parse("frozen-tenant", "frozen-user", &[]).unwrap();
    for i in 0..RUNS {
        let thread = store
            .create_thread(&scope, NewThread::default())
            .await
            .unwrap();
        let agent = AgentRef {
            name: "frozen".into(),
            version: "1".into(),
        };
        let new = NewRun::new(thread.id, agent, vec![Part::text(format!("run {i}"))]);
        store.create_run(&scope, new).await.unwrap();
    }
    let admin = sqlx::PgPool::connect(db.admin_url()).await.unwrap();

    // Worker A takes every run and is frozen while the model is still thinking.
    let mut a = spawn_worker(db.url(), &agent_file, Stdio::piped());
    // Its log lines, read as they come.
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let log = log.clone();
        let mut pipe = a.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                log.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    wait_for(
        &admin,
        "SELECT count(*) FROM forge_runs WHERE lease_holder IS NOT NULL AND last_seq = 0",
        RUNS as i64,
        crate::patience(Duration::from_secs(20)),
        "worker A leases every run (its first step is not committed before the model answers)",
    )
    .await;
    signal(&a, "-STOP");
    // Its leases lapse; worker B takes the runs over and completes them.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let mut b = spawn_worker(db.url(), &agent_file, Stdio::null());
    wait_for(
        &admin,
        "SELECT count(*) FROM forge_runs WHERE status = 'completed'",
        RUNS as i64,
        crate::patience(Duration::from_secs(30)),
        "worker B completes every run",
    )
    .await;
    signal(&b, "-TERM");
    b.wait().unwrap();
    // A wakes: its model answers, and it must not deliver the calls. It logs each takeover.
    signal(&a, "-CONT");
    let takeovers = || {
        log.lock()
            .unwrap()
            .matches(r#""event":"worker.taken_over""#)
            .count()
    };
    let woke = Instant::now();
    while takeovers() < RUNS && woke.elapsed() < crate::patience(Duration::from_secs(20)) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    signal(&a, "-TERM");
    a.wait().unwrap();
    reader.join().unwrap();
    let stderr = log.lock().unwrap().clone();

    let (effects, deliveries): (i64, i64) = sqlx::query_as(
        "SELECT count(*), coalesce(sum(executions), 0)::bigint FROM forge_example_effects",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(effects, RUNS as i64, "one effect per run");
    assert_eq!(
        deliveries, RUNS as i64,
        "the frozen worker delivered calls of runs another worker had taken over:\n{stderr}"
    );
    assert_eq!(
        takeovers(),
        RUNS,
        "worker A reports each takeover as a log event:\n{stderr}"
    );
    admin.close().await;
    store.close().await;
    std::fs::remove_dir_all(&dir).unwrap();
}
