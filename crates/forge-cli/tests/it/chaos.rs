//! Chaos: real worker processes killed with SIGKILL while they run, on a real PostgreSQL.
//!
//! 3 `forge worker` processes execute 300 runs of a 3-step agent whose tool performs an external
//! write keyed by its idempotency key. A supervisor kills a random worker every ~300 ms and starts a
//! new one. Every run must complete, every effect exist exactly once per (run, tool call), and every
//! run's event log be gapless from 1.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use forge_core::agent::AgentRef;
use forge_core::part::Part;
use forge_core::ports::store::{NewRun, NewThread, RunStore, ThreadStore};
use forge_core::scope::Scope;
use forge_store_postgres::testing::{Flavor, TestDatabase};
use forge_store_postgres::{Mode, PostgresStore};

const RUNS: usize = 300;
const WORKERS: usize = 3;

const AGENT: &str = r#"
name = "chaos"
version = "1"
instructions = "Record three effects, then say so."
model = "scripted:chaos.script.toml"
tools = ["record_effect"]
"#;

const SCRIPT: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ name = "record_effect", input = { note = "one" } }]
chunk_delay_ms = 8
[[conversation.turn]]
tool_calls = [{ name = "record_effect", input = { note = "two" } }]
chunk_delay_ms = 8
[[conversation.turn]]
tool_calls = [{ name = "record_effect", input = { note = "three" } }]
chunk_delay_ms = 8
[[conversation.turn]]
text = ["all ", "three ", "recorded"]
chunk_delay_ms = 8
"#;

fn spawn_worker(store_url: &str, agent: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_forge"))
        .args(["worker", "--store", store_url, "--agent"])
        .arg(agent)
        .args([
            "--effects-db",
            store_url,
            "--concurrency",
            "4",
            "--lease-ttl-ms",
            "1500",
            "--poll-ms",
            "20",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn forge worker")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_workers_lose_no_run_repeat_no_effect_and_leave_no_gap() {
    let db = TestDatabase::create(Flavor::Plain)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("chaos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("chaos.toml"), AGENT).unwrap();
    std::fs::write(dir.join("chaos.script.toml"), SCRIPT).unwrap();
    let agent_file = dir.join("chaos.toml");

    // Submit every run up front, each on its own thread, as the application role.
    let store = PostgresStore::connect(db.url(), Mode::Rls).await.unwrap();
    let scope = Scope::parse("chaos-tenant", "chaos-user", &[]).unwrap();
    for i in 0..RUNS {
        let thread = store
            .create_thread(&scope, NewThread::default())
            .await
            .unwrap();
        let agent = AgentRef {
            name: "chaos".into(),
            version: "1".into(),
        };
        let mut new = NewRun::new(thread.id, agent, vec![Part::text(format!("run {i}"))]);
        new.max_attempts = 50;
        store.create_run(&scope, new).await.unwrap();
    }

    let admin = sqlx::PgPool::connect(db.admin_url()).await.unwrap();
    let mut workers: Vec<Child> = (0..WORKERS)
        .map(|_| spawn_worker(db.url(), &agent_file))
        .collect();
    let started = Instant::now();
    let mut kills = 0u32;
    let mut rng = 0x2545_f491_4f6c_dd1du64 ^ u64::from(std::process::id());
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let done: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM forge_runs WHERE status IN ('completed', 'failed', 'cancelled')",
        )
        .fetch_one(&admin)
        .await
        .unwrap();
        if done as usize == RUNS {
            break;
        }
        assert!(
            started.elapsed() < crate::patience(Duration::from_secs(240)),
            "only {done} of {RUNS} runs ended in time"
        );
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let victim = (rng % WORKERS as u64) as usize;
        workers[victim].kill().unwrap(); // SIGKILL
        workers[victim].wait().unwrap();
        kills += 1;
        workers[victim] = spawn_worker(db.url(), &agent_file);
    }
    let elapsed = started.elapsed();
    for w in &mut workers {
        let _ = Command::new("kill")
            .args(["-TERM", &w.id().to_string()])
            .status();
    }
    for w in &mut workers {
        w.wait().unwrap();
    }

    let completed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM forge_runs WHERE status = 'completed'")
            .fetch_one(&admin)
            .await
            .unwrap();
    assert_eq!(completed as usize, RUNS, "every run completed");
    let (effects, runs_with_effects, deliveries, redelivered): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT run_id), coalesce(sum(executions), 0)::bigint, count(*) FILTER (WHERE executions > 1) \
         FROM forge_example_effects",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(
        (effects, runs_with_effects),
        (3 * RUNS as i64, RUNS as i64),
        "exactly one effect per (run, tool call)"
    );
    let uneven: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT run_id FROM forge_example_effects GROUP BY run_id HAVING count(*) <> 3) t",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(uneven, 0, "every run recorded exactly three effects");
    let (logs, gapped): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE n <> hi OR lo <> 1) FROM \
         (SELECT run_id, count(*) AS n, min(seq) AS lo, max(seq) AS hi FROM forge_run_events GROUP BY run_id) t",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(
        (logs, gapped),
        (RUNS as i64, 0),
        "every run's log is gapless from 1 (duplicates are refused by the key)"
    );
    let (runs_ok, steps): (i64, i64) = sqlx::query_as(
        "SELECT count(*), coalesce(sum((checkpoint->>'step')::bigint), 0)::bigint FROM forge_runs WHERE status = 'completed'",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(
        steps,
        4 * runs_ok,
        "every completed run made exactly four model calls"
    );
    eprintln!(
        "chaos: {RUNS} runs, {WORKERS} workers, {kills} SIGKILLs in {:.1} s; {effects} effects, {deliveries} tool deliveries \
         ({redelivered} effects delivered more than once, absorbed by the idempotency key); {logs} gapless logs",
        elapsed.as_secs_f64()
    );
    admin.close().await;
    store.close().await;
    std::fs::remove_dir_all(&dir).unwrap();
}
