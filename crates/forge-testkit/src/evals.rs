//! The `evals` conformance suite for [`EvalStore`] adapters: scoring runs record cases by
//! upsert and derive their totals from the recorded rows exactly as `forge_eval::score::derive`
//! does; `latest` is the newest completed run with stable ties; everything stays in its
//! tenant; judge verdicts are cached by their exact key.

use std::sync::Arc;
use std::time::Duration;

use forge_core::ErrorKind;
use forge_core::scope::Scope;
use forge_core::time::{Clock, ManualClock, Timestamp};
use forge_eval::EvalStore;
use forge_eval::dimension::Dimension;
use forge_eval::judge::{JudgeKey, JudgeVerdict};
use forge_eval::score::{
    CaseResult, Grade, GraderRef, Outcome, PPM, ScoringRun, ScoringRunId, ScoringStatus, Verdict,
    derive,
};

use crate::StoreFactory;
use crate::fixtures::scope;

/// A run of dataset `dataset` for `scope`, started now, with id `n`.
pub fn scoring_run(scope: &Scope, clock: &ManualClock, n: u128, dataset: &str) -> ScoringRun {
    ScoringRun {
        id: ScoringRunId(uuid::Uuid::from_u128(n)),
        tenant_id: scope.tenant_id().clone(),
        dataset: dataset.into(),
        dataset_version: 3,
        dataset_sha256: "sha256:abc".into(),
        label: format!("build-{n}"),
        started_at: clock.now(),
        completed_at: None,
        status: ScoringStatus::Running,
        totals: None,
        dimensions: Default::default(),
    }
}

/// A case result with one grade of `ppm`.
pub fn case(id: &str, dims: &[Dimension], verdict: Verdict, ppm: u32, at: Timestamp) -> CaseResult {
    let outcome = match verdict {
        Verdict::Unscoreable => Outcome::Unscoreable {
            reason: "it needs a judge and none is configured".into(),
        },
        _ => Outcome::Scored {
            score_ppm: ppm,
            detail: "fixture".into(),
        },
    };
    CaseResult {
        case_id: id.into(),
        dimensions: dims.to_vec(),
        verdict,
        score_ppm: if verdict == Verdict::Unscoreable {
            0
        } else {
            ppm
        },
        reason: None,
        grades: vec![Grade {
            kind: "contains".into(),
            grader: GraderRef {
                id: "contains".into(),
                version: "1".into(),
            },
            outcome,
            cost_micros: 0,
        }],
        run_id: format!("run-{id}"),
        run_status: "completed".into(),
        latency_ms: Some(12),
        ttft_ms: Some(3),
        tokens: 40,
        run_cost_micros: 7,
        paid_calls: 0,
        judge_cost_micros: 2,
        recorded_at: at,
    }
}

/// A deterministic spread of results: every verdict, scores that do not divide evenly, cases in
/// several dimensions (one listed twice).
fn spread(n: usize, at: Timestamp) -> Vec<CaseResult> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let verdict = match x % 5 {
                0 => Verdict::Unscoreable,
                1 | 2 => Verdict::Pass,
                _ => Verdict::Fail,
            };
            let ppm = if verdict == Verdict::Pass {
                PPM
            } else {
                u32::try_from(x % u64::from(PPM)).expect("below 1.0")
            };
            let mut dims = vec![Dimension::ALL[i % 9]];
            if x.is_multiple_of(3) {
                dims.push(Dimension::ALL[(i + 4) % 9]);
            }
            if x.is_multiple_of(7) {
                dims.push(dims[0]);
            }
            case(&format!("case-{i:03}"), &dims, verdict, ppm, at)
        })
        .collect()
}

/// Completion stores exactly the totals and per-dimension scores the rule derives from the
/// recorded rows, whatever the mix of verdicts, uneven scores and repeated dimensions.
pub async fn completion_derives_what_the_rule_derives<F: StoreFactory>() {
    let clock = Arc::new(ManualClock::at_2026());
    let store = F::make(clock.clone()).await;
    let a = scope("tenant-a");
    let run = scoring_run(&a, &clock, 1, "core");
    store.start_scoring(&a, &run).await.expect("start");
    let cases = spread(60, clock.now());
    for c in &cases {
        store.record_case(&a, run.id, c).await.expect("record");
    }
    let done = store
        .complete_scoring(&a, run.id, clock.now())
        .await
        .expect("complete");
    let recorded = store.case_results(&a, run.id).await.expect("cases");
    assert_eq!(recorded.len(), 60);
    let (totals, dimensions) = derive(&recorded);
    assert_eq!(done.totals, Some(totals));
    assert_eq!(done.dimensions, dimensions);
    assert_eq!(done.status, ScoringStatus::Completed);
    assert_eq!(done.completed_at, Some(clock.now()));
    assert!(totals.unscoreable > 0 && totals.passed > 0 && totals.failed > 0);
    let mut ids: Vec<&str> = recorded.iter().map(|c| c.case_id.as_str()).collect();
    let sorted = {
        let mut s = ids.clone();
        s.sort();
        s
    };
    assert_eq!(ids, sorted, "results come back by case id");
    ids.dedup();
    assert_eq!(ids.len(), 60);
    assert_eq!(
        store.scoring_run(&a, run.id).await.expect("get"),
        Some(done)
    );
}

/// Recording is an upsert on (run, case): a resumed run cannot count a case twice, a re-scored
/// case takes its new verdict, recording re-opens a completed run (clearing its totals), and
/// completing again recomputes.
pub async fn a_rescored_case_replaces_its_verdict_and_completion_recomputes<F: StoreFactory>() {
    let clock = Arc::new(ManualClock::at_2026());
    let store = F::make(clock.clone()).await;
    let a = scope("tenant-a");
    let run = scoring_run(&a, &clock, 1, "core");
    store.start_scoring(&a, &run).await.expect("start");
    let at = clock.now();
    let dims = [Dimension::ToolSelection];
    store
        .record_case(&a, run.id, &case("x", &dims, Verdict::Pass, PPM, at))
        .await
        .expect("record");
    store
        .record_case(&a, run.id, &case("y", &dims, Verdict::Fail, 0, at))
        .await
        .expect("record");
    let first = store
        .complete_scoring(&a, run.id, at)
        .await
        .expect("complete");
    assert_eq!(first.totals.map(|t| (t.cases, t.passed)), Some((2, 1)));
    assert_eq!(
        first.dimensions[&Dimension::ToolSelection].score_ppm,
        PPM / 2
    );

    // The fixed grader re-scores y: recorded again, it replaces the verdict and re-opens the run.
    clock.advance(Duration::from_secs(5));
    store
        .record_case(
            &a,
            run.id,
            &case("y", &dims, Verdict::Pass, PPM, clock.now()),
        )
        .await
        .expect("re-record");
    let reopened = store
        .scoring_run(&a, run.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(reopened.status, ScoringStatus::Running);
    assert_eq!((reopened.totals, reopened.completed_at), (None, None));
    assert!(reopened.dimensions.is_empty());
    assert_eq!(
        store.latest_scoring(&a, "core").await.expect("latest"),
        None,
        "a re-opened run is not a completed one"
    );
    let results = store.case_results(&a, run.id).await.expect("cases");
    assert_eq!(results.len(), 2, "upsert, not a second row");
    assert_eq!(
        results.iter().find(|c| c.case_id == "y").map(|c| c.verdict),
        Some(Verdict::Pass)
    );
    let second = store
        .complete_scoring(&a, run.id, clock.now())
        .await
        .expect("complete again");
    assert_eq!(second.totals.map(|t| (t.cases, t.passed)), Some((2, 2)));
    assert_eq!(second.dimensions[&Dimension::ToolSelection].score_ppm, PPM);
    assert_eq!(second.completed_at, Some(clock.now()));
    let again = store.start_scoring(&a, &run).await;
    assert!(again.is_err(), "an id is stored once");
}

/// `latest` is completed runs only, newest by completion; two runs completed in the same
/// instant are ordered by start, then id — never by the order they were stored in; other
/// datasets do not count.
pub async fn latest_is_the_newest_completed_run_with_stable_ties<F: StoreFactory>() {
    let clock = Arc::new(ManualClock::at_2026());
    let store = F::make(clock.clone()).await;
    let a = scope("tenant-a");
    let t0 = clock.now();
    let at = |s: u64| t0.plus(Duration::from_secs(s));
    let started = |n: u128, s: u64| {
        let mut r = scoring_run(&a, &clock, n, "core");
        r.started_at = at(s);
        r
    };
    let early = started(1, 0);
    store.start_scoring(&a, &early).await.expect("start");
    store
        .record_case(
            &a,
            early.id,
            &case("x", &[Dimension::Recovery], Verdict::Pass, PPM, t0),
        )
        .await
        .expect("record");
    assert_eq!(
        store.latest_scoring(&a, "core").await.expect("latest"),
        None
    );
    store
        .complete_scoring(&a, early.id, at(5))
        .await
        .expect("complete");
    let latest = |s: Option<ScoringRun>| s.map(|r| r.id);
    assert_eq!(
        latest(store.latest_scoring(&a, "core").await.expect("latest")),
        Some(early.id)
    );
    // Started later, still running: not the latest.
    let running = started(2, 6);
    store.start_scoring(&a, &running).await.expect("start");
    assert_eq!(
        latest(store.latest_scoring(&a, "core").await.expect("latest")),
        Some(early.id)
    );
    // Three runs completing in the same instant, stored in an order their ties do not follow:
    // `winner` started last (with `twin`, whose id is smaller); `older` started first and
    // has the greatest id.
    let winner = started(5, 3);
    let older = started(9, 1);
    let twin = started(3, 3);
    for r in [&winner, &older, &twin] {
        store.start_scoring(&a, r).await.expect("start");
        store
            .complete_scoring(&a, r.id, at(10))
            .await
            .expect("complete");
    }
    for _ in 0..3 {
        assert_eq!(
            latest(store.latest_scoring(&a, "core").await.expect("latest")),
            Some(winner.id),
            "by completion, then start, then id, every time"
        );
    }
    // A later completion wins whatever its start.
    store
        .complete_scoring(&a, early.id, at(11))
        .await
        .expect("complete again");
    assert_eq!(
        latest(store.latest_scoring(&a, "core").await.expect("latest")),
        Some(early.id)
    );
    // Another dataset's newer run does not count.
    let other = scoring_run(&a, &clock, 4, "other");
    store.start_scoring(&a, &other).await.expect("start");
    store
        .complete_scoring(&a, other.id, at(60))
        .await
        .expect("complete");
    assert_eq!(
        latest(store.latest_scoring(&a, "core").await.expect("latest")),
        Some(early.id)
    );
    let listed: Vec<ScoringRunId> = store
        .list_scoring(&a, Some("core"), 3)
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(
        listed,
        vec![running.id, winner.id, twin.id],
        "newest started first, then id"
    );
    assert_eq!(
        store.list_scoring(&a, None, 10).await.expect("list").len(),
        6
    );
}

/// Another tenant can neither see, list, record into nor complete a run, nor read its verdicts;
/// and no run is stored under another tenant's id.
pub async fn scoring_runs_are_confined_to_their_tenant<F: StoreFactory>() {
    let clock = Arc::new(ManualClock::at_2026());
    let store = F::make(clock.clone()).await;
    let (a, b) = (scope("tenant-a"), scope("tenant-b"));
    let run = scoring_run(&a, &clock, 1, "core");
    store.start_scoring(&a, &run).await.expect("start");
    let at = clock.now();
    let c = case("x", &[Dimension::Authorization], Verdict::Pass, PPM, at);
    store.record_case(&a, run.id, &c).await.expect("record");
    assert_eq!(store.scoring_run(&b, run.id).await.expect("get"), None);
    assert!(
        store
            .case_results(&b, run.id)
            .await
            .expect("cases")
            .is_empty()
    );
    assert!(
        store
            .list_scoring(&b, None, 10)
            .await
            .expect("list")
            .is_empty()
    );
    let kind = |r: Result<(), forge_core::Error>| r.map_err(|e| e.kind());
    assert_eq!(
        kind(store.record_case(&b, run.id, &c).await),
        Err(ErrorKind::NotFound)
    );
    assert_eq!(
        store
            .complete_scoring(&b, run.id, at)
            .await
            .map(|_| ())
            .map_err(|e| e.kind()),
        Err(ErrorKind::NotFound)
    );
    store
        .complete_scoring(&a, run.id, at)
        .await
        .expect("complete");
    assert_eq!(
        store.latest_scoring(&b, "core").await.expect("latest"),
        None
    );
    assert_eq!(
        kind(store.start_scoring(&b, &run).await),
        Err(ErrorKind::Invalid),
        "a run of tenant A cannot be stored by tenant B"
    );
    let key = judge_key("refusal@1", "scripted:judge");
    store
        .put_judgement(&a, &key, &verdict(PPM, "declines"))
        .await
        .expect("put");
    assert_eq!(store.judgement(&b, &key).await.expect("get"), None);
    // B's own verdict under the same key is B's.
    store
        .put_judgement(&b, &key, &verdict(0, "complies"))
        .await
        .expect("put");
    assert_eq!(
        store
            .judgement(&a, &key)
            .await
            .expect("get")
            .map(|v| v.score_ppm),
        Some(PPM)
    );
}

fn judge_key(prompt: &str, model: &str) -> JudgeKey {
    JudgeKey {
        case_id: "refuses.prose".into(),
        input_sha256: "sha256:00ff".into(),
        prompt: prompt.into(),
        model: model.into(),
    }
}

fn verdict(score_ppm: u32, reason: &str) -> JudgeVerdict {
    JudgeVerdict {
        score_ppm,
        reason: reason.into(),
        cost_micros: 42,
        usage: Default::default(),
    }
}

/// A verdict is found only under its exact key (a new prompt version or model misses), and the
/// first verdict cached under a key stays.
pub async fn judge_verdicts_are_cached_by_their_exact_key<F: StoreFactory>() {
    let clock = Arc::new(ManualClock::at_2026());
    let store = F::make(clock.clone()).await;
    let a = scope("tenant-a");
    let key = judge_key("refusal@1", "scripted:judge");
    assert_eq!(store.judgement(&a, &key).await.expect("get"), None);
    store
        .put_judgement(&a, &key, &verdict(PPM, "declines"))
        .await
        .expect("put");
    assert_eq!(
        store.judgement(&a, &key).await.expect("get"),
        Some(verdict(PPM, "declines"))
    );
    for other in [
        judge_key("refusal@2", "scripted:judge"),
        judge_key("refusal@1", "openai:gpt-4o-mini"),
        JudgeKey {
            input_sha256: "sha256:0100".into(),
            ..key.clone()
        },
        JudgeKey {
            case_id: "another".into(),
            ..key.clone()
        },
    ] {
        assert_eq!(
            store.judgement(&a, &other).await.expect("get"),
            None,
            "{other:?}"
        );
    }
    store
        .put_judgement(&a, &key, &verdict(0, "changed its mind"))
        .await
        .expect("put again");
    assert_eq!(
        store.judgement(&a, &key).await.expect("get"),
        Some(verdict(PPM, "declines")),
        "the first verdict stays"
    );
}
