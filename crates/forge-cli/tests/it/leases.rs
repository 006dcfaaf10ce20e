//! `forge worker --leases redis://…`: the worker that sweeps holds the sweep lease in Redis, and
//! gives it up when it stops, so another worker takes the sweeps over at once.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use forge_core::ports::lease::LeaseStore;
use forge_core::scope::SystemScope;
use forge_engine::worker::SWEEP_LEASE;
use forge_store_redis::RedisLeaseStore;

use crate::live::{redis_url, require_redis};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeping_worker_holds_the_lease_in_redis_until_it_stops() {
    require_redis();
    let prefix = format!("forge-test-{}", uuid::Uuid::new_v4());
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("leases-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut worker = Command::new(env!("CARGO_BIN_EXE_forge"))
        .args(["worker", "--store"])
        .arg(format!("sqlite://{}", dir.join("forge.db").display()))
        .arg("--agent")
        .arg(crate::repo().join("examples/agents/calculator.toml"))
        .args(["--leases", &redis_url(), "--leases-prefix", &prefix])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let leases = RedisLeaseStore::connect(&redis_url(), &prefix)
        .await
        .unwrap();
    let sys = SystemScope::new("test");
    let ttl = Duration::from_secs(30);
    // Someone else cannot take the lease while the worker sweeps.
    let started = Instant::now();
    loop {
        match leases.acquire(&sys, SWEEP_LEASE, "intruder", ttl).await {
            Err(forge_core::Error::LeaseHeld { .. }) => break,
            Ok(lease) => {
                // The worker has not swept yet: give it back and look again.
                leases.release(&sys, &lease).await.unwrap();
            }
            Err(e) => panic!("{e}"),
        }
        assert!(
            started.elapsed() < crate::patience(Duration::from_secs(20)),
            "the worker never took the sweep lease"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ok = Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let status = worker.wait().unwrap();
    assert!(status.success(), "{status}");
    // Stopped, it gave the lease up: it is free at once, not after its lease expires.
    let lease = leases
        .acquire(&sys, SWEEP_LEASE, "successor", ttl)
        .await
        .unwrap_or_else(|e| panic!("the stopped worker still holds the lease: {e}"));
    leases.release(&sys, &lease).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
