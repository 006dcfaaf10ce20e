//! Grading recorded runs: 1,000 cases through `Harness::grade` — every code grader over typed
//! run logs — and the same with a tenth of the cases judged from a warm verdict cache.
//!
//! `cargo bench -p forge-eval --bench grade`

#[path = "../tests/it/log.rs"]
#[allow(dead_code)]
mod log;

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use criterion::{Criterion, criterion_group, criterion_main};
use forge_core::id::SequentialIds;
use forge_core::metering::Prices;
use forge_core::ports::model::{
    ModelError, ModelErrorKind, ModelProvider, ModelRequest, ModelStream,
};
use forge_core::scope::Scope;
use forge_core::time::ManualClock;
use forge_eval::judge::{JudgeVerdict, QUALITY};
use forge_eval::{Dataset, EvalStore, Harness, Judge, RunRecord};
use forge_store_memory::MemoryStore;
use serde_json::json;

const CASES: usize = 1000;

fn dataset(judged_every: usize) -> Dataset {
    let mut text = String::from("name = \"bench\"\nversion = 1\nagents = { a = \"a.toml\" }\n");
    for i in 0..CASES {
        text.push_str(&format!(
            "[[case]]\nid = \"case-{i:04}\"\ndimensions = [\"task-completion\", \"external-action-safety\"]\n\
             message = \"Pay invoice INV-{i} for 500, then tell me 12 times 7.\"\nexpect = [\n\
             {{ kind = \"contains\", values = [\"84\", \"INV-{i}\", \"paid\"] }},\n\
             {{ kind = \"tool-called\", tool = \"calculate\", input = {{ op = \"mul\" }}, executed = true, times = 1 }},\n\
             {{ kind = \"requires-approval\", tool = \"pay\" }},\n\
             {{ kind = \"cites-source\", source = \"handbook\", excerpt = \"30 days\" }},\n\
             {{ kind = \"budget\", max_latency_ms = 5000, max_ttft_ms = 1000, max_tokens = 4000 }},\n\
             {{ kind = \"ends\", status = \"completed\" }},\n"
        ));
        if judged_every > 0 && i % judged_every == 0 {
            text.push_str("  { kind = \"judged\", rubric = \"Says what was paid.\" },\n");
        }
        text.push_str("]\n");
    }
    Dataset::parse(
        &text,
        false,
        Path::new("bench.toml"),
        Path::new("."),
        &|_| Ok(String::new()),
    )
    .expect("valid")
}

/// A run like a payments agent's: streamed text, a calculator call, an approved payment, a
/// citation, a final answer.
fn record(i: usize) -> RunRecord {
    let mut log = log::Log::new();
    log.message()
        .streamed(3, &["Let me ", "work ", "that out."])
        .call("c1", "calculate", json!({"op": "mul", "a": 12, "b": 7}))
        .call(
            "p1",
            "pay",
            json!({"invoice": format!("INV-{i}"), "amount": 500}),
        )
        .approval("p1", "pay")
        .message()
        .ran("c1", "calculate", json!({"result": 84}))
        .ran("p1", "pay", json!({"receipt": "rcpt-1"}))
        .citation(
            "handbook",
            "sha256:1",
            (33, 99),
            "Refunds within 30 days of delivery.",
        )
        .message()
        .text(10, &format!("12 × 7 = 84, and INV-{i} is paid."));
    log.completed(2)
}

/// Never called: every verdict the bench needs is in the cache.
struct NoCalls;

#[async_trait]
impl ModelProvider for NoCalls {
    fn name(&self) -> &str {
        "scripted"
    }
    async fn stream(&self, _request: ModelRequest) -> Result<ModelStream, ModelError> {
        Err(ModelErrorKind::BadRequest("the bench judge is never asked".into()).into())
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let clock = Arc::new(ManualClock::at_2026());
    let store = Arc::new(MemoryStore::new(
        clock.clone(),
        Arc::new(SequentialIds::new()),
    ));
    let scope = Scope::parse("acme", "bench", &[]).expect("scope");
    let records: Vec<RunRecord> = (0..CASES).map(record).collect();
    let harness = Harness::new(
        store.clone(),
        scope.clone(),
        clock.clone(),
        Arc::new(SequentialIds::new()),
    );

    let code = dataset(0);
    let mut group = c.benchmark_group("grade");
    group.sample_size(20);
    group.bench_function("1000-cases-code-graders", |b| {
        b.iter(|| {
            rt.block_on(async {
                for (case, run) in code.cases.iter().zip(&records) {
                    let r = harness.grade(case, run).await.expect("graded");
                    assert_eq!(r.verdict, forge_eval::Verdict::Pass);
                }
            })
        })
    });

    // A tenth of the cases judged, every verdict already cached (a re-run of an unchanged
    // dataset): what a gate re-run costs in time, at no model cost.
    let judged = dataset(10);
    let judge = Arc::new(
        Judge::new(
            Arc::new(NoCalls),
            "scripted:judge",
            Prices::default(),
            store.clone(),
        )
        .expect("judge"),
    );
    rt.block_on(async {
        for (case, run) in judged.cases.iter().zip(&records) {
            if case.expect.len() == 7 {
                let text = forge_eval::Observed::of(run).text;
                let key = judge.key(
                    &QUALITY,
                    &case.id,
                    &case.message,
                    Some("Says what was paid."),
                    &text,
                );
                store
                    .put_judgement(
                        &scope,
                        &key,
                        &JudgeVerdict {
                            score_ppm: forge_eval::PPM,
                            reason: "says it".into(),
                            cost_micros: 10,
                            usage: Default::default(),
                        },
                    )
                    .await
                    .expect("cached");
            }
        }
    });
    let with_judge =
        Harness::new(store.clone(), scope, clock, Arc::new(SequentialIds::new())).judge(judge);
    group.bench_function("1000-cases-a-tenth-judged-from-cache", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut cost = 0;
                for (case, run) in judged.cases.iter().zip(&records) {
                    let r = with_judge.grade(case, run).await.expect("graded");
                    assert_eq!(r.verdict, forge_eval::Verdict::Pass, "{:?}", r.grades);
                    cost += r.judge_cost_micros;
                }
                assert_eq!(cost, 0, "cached verdicts cost nothing");
            })
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
