//! 1,000 concurrent subscribers on one server while runs execute: every subscriber receives every
//! event of its run, in order, once (folded by the reference reducer, which refuses duplicates and
//! gaps), live as the steps stream and confirmed by their commits. (Latency and memory are measured by `forge-bench
//! subscribers`, not here.)
//!
//! The runs park on an approval first, so every subscriber is attached before they go on: what
//! follows the approvals is delivered live, not replayed from a finished log.

use std::sync::Arc;

use serde_json::json;
use tokio::sync::Barrier;

use forge_core::stream::Transcript;

use crate::support::{Opts, RUN_EVENTS, Ws, committed, fold, start, token};

const SUBSCRIBERS: usize = 1000;
const RUNS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_subscribers_each_receive_every_event() {
    // The check at the end reads 1,000 logs at `limit: 1000` (2,000 of query cost each) at
    // once: more than the default fair use allows one tenant, which is not what this measures.
    let srv = Arc::new(
        start(Opts {
            tune: Some(|c| c.fair_use.cost_burst = 1e9),
            ..Opts::default()
        })
        .await,
    );
    let t = token("acme", "alice", &[]);
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        let (_, run) = srv
            .run_until(&t, "assistant", "send the email", "waiting")
            .await;
        let parked = srv.log(&t, &run).await;
        runs.push((run, parked.len()));
    }
    let attached = Arc::new(Barrier::new(SUBSCRIBERS + 1));
    let mut tasks = Vec::new();
    for i in 0..SUBSCRIBERS {
        let (srv, t, attached) = (srv.clone(), t.clone(), attached.clone());
        let (run, parked) = runs[i % RUNS].clone();
        tasks.push(tokio::spawn(async move {
            let (mut ws, ack) = Ws::connect(&srv, Some(&t)).await;
            assert!(ack.to_string().contains("connection_ack"));
            ws.subscribe("s", RUN_EVENTS, json!({"id": run, "after": 0}))
                .await;
            // Everything committed before the run parked: the subscription is live from here.
            let (mut events, completed) = ws.collect("s", "runEvents", Some(parked)).await;
            assert!(!completed);
            attached.wait().await;
            let (rest, completed) = ws.collect("s", "runEvents", None).await;
            assert!(completed);
            assert!(!rest.is_empty(), "events after the approval arrived live");
            let live = rest.iter().any(|e| e["kind"] == "PROVISIONAL");
            events.extend(rest);
            let mut transcript = Transcript::new();
            fold(&mut transcript, &events);
            let seqs = committed(&transcript, &run)
                .into_iter()
                .map(|(s, _)| s)
                .collect::<Vec<_>>();
            (run, seqs, live)
        }));
    }
    attached.wait().await;
    // Every subscriber is attached: let the runs go on (approved by someone other than alice,
    // who started them).
    let approver = token("acme", "bob", &[]);
    let pending = srv
        .gql(
            &approver,
            "{ pendingInteractions { nodes { id request } } }",
            json!({}),
        )
        .await;
    let pending = pending["pendingInteractions"]["nodes"].as_array().unwrap();
    assert_eq!(pending.len(), RUNS);
    for i in pending {
        srv.gql(
            &approver,
            "mutation($id: ID!, $h: String) { resolveApproval(interactionId: $id, approve: true, key: \"go\", inputHash: $h) { status } }",
            json!({"id": i["id"], "h": i["request"]["input_hash"]}),
        )
        .await;
    }
    let mut complete = 0;
    let mut live = 0;
    for task in tasks {
        let (run, seqs, provisional) = task.await.unwrap();
        live += usize::from(provisional);
        let log = srv.log(&t, &run).await;
        assert_eq!(log.last().unwrap().1, "run.completed");
        assert_eq!(
            seqs,
            (1..=log.len() as u64).collect::<Vec<_>>(),
            "run {run}"
        );
        complete += 1;
    }
    assert_eq!(complete, SUBSCRIBERS);
    // The final step streams for ~80 ms before its commit; subscribers that keep up see it live.
    eprintln!("{live} of {SUBSCRIBERS} subscribers received provisional events");
    assert!(
        live > 0,
        "the fan-out carries the live tail, not only commits"
    );
}
