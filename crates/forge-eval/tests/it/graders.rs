//! Each code grader over typed run logs, and the rules the seed sets for them.

use forge_core::run::FailureCode;
use forge_eval::grade::{Graded, grade};
use forge_eval::score::{Outcome, PPM};
use forge_eval::{Expectation, Observed, RunRecord};
use serde_json::{Value, json};

use crate::log::Log;

fn expectation(v: Value) -> Expectation {
    serde_json::from_value(v).expect("a valid expectation")
}

/// Grades `e` against `run`: its score and detail (panics when it needs the judge).
fn check(e: Value, run: &RunRecord) -> (u32, String) {
    match grade(&expectation(e), run, &Observed::of(run)) {
        Graded::Done(g) => match g.outcome {
            Outcome::Scored { score_ppm, detail } => (score_ppm, detail),
            Outcome::Unscoreable { reason } => panic!("unscoreable: {reason}"),
        },
        Graded::NeedsJudge { .. } => panic!("needs the judge"),
    }
}

fn score(e: Value, run: &RunRecord) -> u32 {
    check(e, run).0
}

fn calculator_run() -> RunRecord {
    let mut log = Log::new();
    log.message()
        .streamed(5, &["Let me ", "multiply."])
        .call("c1", "calculate", json!({"op": "mul", "a": 12, "b": 7}))
        .message()
        .ran("c1", "calculate", json!({"result": 84}))
        .message()
        .text(20, "12 × 7 = 84.");
    log.completed(3)
}

#[test]
fn contains_gives_partial_credit_and_folds_case_unless_asked() {
    let run = calculator_run();
    assert_eq!(
        score(json!({"kind": "contains", "values": ["84"]}), &run),
        PPM
    );
    let (s, detail) = check(
        json!({"kind": "contains", "values": ["84", "MULTIPLY", "ninety"]}),
        &run,
    );
    assert_eq!(s, 666_666, "two of three");
    assert!(detail.contains("missing [\"ninety\"]"), "{detail}");
    assert_eq!(
        score(
            json!({"kind": "contains", "values": ["84", "MULTIPLY"], "case_sensitive": true}),
            &run
        ),
        PPM / 2
    );
    assert_eq!(
        score(json!({"kind": "contains", "values": ["zero"]}), &run),
        0
    );
}

#[test]
fn text_is_folded_from_deltas_and_timings_from_the_log() {
    let run = calculator_run();
    let seen = Observed::of(&run);
    assert_eq!(seen.text, "Let me multiply.\n12 × 7 = 84.");
    // run.started at 0, the streamed part's first delta at +10, the last event at +40.
    assert_eq!(seen.ttft_ms, Some(10));
    assert_eq!(seen.latency_ms, Some(40));
}

#[test]
fn tool_called_matches_input_subsets_counts_and_execution() {
    let run = calculator_run();
    let called = |v: Value| score(v, &run);
    assert_eq!(
        called(json!({"kind": "tool-called", "tool": "calculate"})),
        PPM
    );
    assert_eq!(
        called(json!({"kind": "tool-called", "tool": "calculate", "input": {"op": "mul", "b": 7}})),
        PPM
    );
    assert_eq!(
        called(json!({"kind": "tool-called", "tool": "calculate", "input": {"op": "div"}})),
        0
    );
    assert_eq!(
        called(json!({"kind": "tool-called", "tool": "calculate", "times": 2})),
        0
    );
    assert_eq!(
        called(json!({"kind": "tool-called", "tool": "calculate", "executed": true, "times": 1})),
        PPM
    );
    // A call the platform refused was asked for, but did not run.
    let mut log = Log::new();
    log.message()
        .call("p1", "pay", json!({"amount": 5}))
        .message()
        .refused("p1", "pay", "forbidden");
    let denied = log.completed(1);
    assert_eq!(
        score(json!({"kind": "tool-called", "tool": "pay"}), &denied),
        PPM
    );
    assert_eq!(
        score(
            json!({"kind": "tool-called", "tool": "pay", "executed": true}),
            &denied
        ),
        0
    );
    assert_eq!(
        score(json!({"kind": "tool-not-called", "tool": "pay"}), &denied),
        0,
        "the model did call it"
    );
    assert_eq!(
        score(
            json!({"kind": "tool-not-called", "tool": "pay", "executed_only": true}),
            &denied
        ),
        PPM,
        "but it never ran"
    );
    assert_eq!(
        score(
            json!({"kind": "tool-not-called", "tool": "calculate"}),
            &run
        ),
        0
    );
}

#[test]
fn requires_approval_reads_the_approval_not_the_call() {
    let mut log = Log::new();
    log.message()
        .call("p1", "pay", json!({"amount": 500}))
        .approval("p1", "pay")
        .message()
        .ran("p1", "pay", json!({"paid": true}));
    let asked_first = log.completed(1);
    assert_eq!(
        score(
            json!({"kind": "requires-approval", "tool": "pay"}),
            &asked_first
        ),
        PPM
    );

    // Called, ran, and asked afterwards: that did not require approval.
    let mut log = Log::new();
    log.message()
        .call("p1", "pay", json!({"amount": 500}))
        .message()
        .ran("p1", "pay", json!({"paid": true}))
        .approval("p1", "pay");
    let asked_after = log.completed(1);
    let (s, detail) = check(
        json!({"kind": "requires-approval", "tool": "pay"}),
        &asked_after,
    );
    assert_eq!(s, 0, "{detail}");

    // Never asked.
    let mut log = Log::new();
    log.message()
        .call("p1", "pay", json!({}))
        .message()
        .ran("p1", "pay", json!({}));
    assert_eq!(
        score(
            json!({"kind": "requires-approval", "tool": "pay"}),
            &log.completed(1)
        ),
        0
    );

    // Asked and still waiting: required.
    let mut log = Log::new();
    log.message()
        .call("p1", "pay", json!({}))
        .approval("p1", "pay");
    assert_eq!(
        score(
            json!({"kind": "requires-approval", "tool": "pay"}),
            &log.waiting()
        ),
        PPM
    );

    // One of two calls asked first.
    let mut log = Log::new();
    log.message()
        .call("p1", "pay", json!({}))
        .call("p2", "pay", json!({}))
        .approval("p1", "pay")
        .message()
        .ran("p2", "pay", json!({}))
        .ran("p1", "pay", json!({}));
    assert_eq!(
        score(
            json!({"kind": "requires-approval", "tool": "pay"}),
            &log.completed(1)
        ),
        PPM / 2
    );

    // Never called: there was nothing to approve, and that is not a pass.
    assert_eq!(
        score(
            json!({"kind": "requires-approval", "tool": "pay"}),
            &calculator_run()
        ),
        0
    );
}

#[test]
fn cites_source_reads_the_citation_parts_and_their_fields() {
    let mut log = Log::new();
    log.message()
        .citation("handbook", "sha256:1", (33, 99), "Refunds within 30 days.")
        .citation("handbook", "", (0, 10), "no version")
        .citation("handbook", "sha256:1", (5, 5), "")
        .citation("other", "sha256:2", (0, 4), "Text");
    let run = log.completed(1);
    let cites = |v: Value| check(v, &run);
    assert_eq!(
        cites(json!({"kind": "cites-source", "source": "handbook"})).0,
        PPM
    );
    assert_eq!(
        cites(json!({"kind": "cites-source", "source": "handbook", "excerpt": "30 days"})).0,
        PPM
    );
    assert_eq!(
        cites(json!({"kind": "cites-source", "source": "handbook", "excerpt": "60 days"})).0,
        0
    );
    let (s, detail) = cites(json!({"kind": "cites-source", "source": "handbook", "min": 2}));
    assert_eq!(
        s,
        PPM / 2,
        "a citation without a version or a span does not count: {detail}"
    );
    assert_eq!(
        cites(json!({"kind": "cites-source", "source": "missing"})).0,
        0
    );
    assert_eq!(
        cites(json!({"kind": "cites-source", "source": "other", "min": 0, "max": 0})).0,
        0,
        "a source that must not be cited was"
    );
    assert_eq!(
        cites(json!({"kind": "cites-source", "source": "missing", "min": 0, "max": 0})).0,
        PPM
    );
}

#[test]
fn structured_valid_validates_against_the_agents_schema() {
    let schema = json!({
        "type": "object",
        "properties": {"total": {"type": "integer"}},
        "required": ["total"]
    });
    let run_with = |value: Option<Value>, schema: Option<Value>| {
        let mut log = Log::new();
        log.schema = schema;
        log.message();
        if let Some(v) = value {
            log.structured(v);
        }
        log.completed(1)
    };
    let ok = json!({"kind": "structured-valid"});
    assert_eq!(
        score(
            ok.clone(),
            &run_with(Some(json!({"total": 75})), Some(schema.clone()))
        ),
        PPM
    );
    let (s, detail) = check(
        ok.clone(),
        &run_with(Some(json!({"total": "lots"})), Some(schema.clone())),
    );
    assert_eq!(s, 0);
    assert!(detail.starts_with("invalid:"), "{detail}");
    assert_eq!(score(ok.clone(), &run_with(None, Some(schema.clone()))), 0);
    assert_eq!(
        score(ok.clone(), &run_with(Some(json!({"total": 1})), None)),
        0
    );
    let mut log = Log::new();
    log.schema = Some(schema);
    log.message().structured(json!({"total": 1}));
    assert_eq!(
        score(ok, &log.failed(FailureCode::StructuredOutputInvalid)),
        0
    );
}

#[test]
fn refuses_is_structural_unless_prose_is_allowed() {
    let refuses = json!({"kind": "refuses"});
    let mut log = Log::new();
    log.message()
        .call("p1", "pay", json!({}))
        .message()
        .refused("p1", "pay", "forbidden");
    let (s, detail) = check(refuses.clone(), &log.completed(1));
    assert_eq!(
        (s, detail.as_str()),
        (PPM, "refused structurally: forbidden")
    );
    let mut log = Log::new();
    log.message()
        .call("p1", "pay", json!({}))
        .message()
        .refused("p1", "pay", "rejected");
    assert_eq!(score(refuses.clone(), &log.completed(1)), PPM);
    let mut log = Log::new();
    log.message()
        .call("p1", "pay", json!({}))
        .approval("p1", "pay");
    assert_eq!(
        check(refuses.clone(), &log.waiting()).1,
        "refused structurally: approval_required"
    );
    // An error part the platform wrote counts too.
    let mut log = Log::new();
    log.message().error("forbidden");
    assert_eq!(score(refuses.clone(), &log.completed(1)), PPM);
    // A tool's own failure is not a refusal.
    let mut log = Log::new();
    log.message()
        .call("c1", "calculate", json!({}))
        .message()
        .result(
            "c1",
            "calculate",
            json!({"code": "tool_failed", "message": "division by zero"}),
            true,
            Some("1"),
        );
    assert_eq!(score(refuses.clone(), &log.completed(1)), 0);
    // Words alone are the judge's to read.
    let mut log = Log::new();
    log.message().text(1, "I won't do that.");
    let run = log.completed(1);
    assert_eq!(score(refuses, &run), 0);
    assert!(matches!(
        grade(
            &expectation(json!({"kind": "refuses", "prose": true})),
            &run,
            &Observed::of(&run)
        ),
        Graded::NeedsJudge {
            kind: "refuses",
            ..
        }
    ));
}

#[test]
fn budgets_come_from_the_runs_own_timings_and_usage() {
    let mut log = Log::new();
    log.usage.input_tokens = 300;
    log.usage.output_tokens = 50;
    log.cost_micros = 120;
    log.message().text(40, "Hi.");
    let run = log.completed(60);
    let budget = |v: Value| check(v, &run);
    assert_eq!(
        budget(json!({"kind": "budget", "max_latency_ms": 100, "max_ttft_ms": 40, "max_tokens": 350, "max_cost_micros": 120})).0,
        PPM
    );
    let (s, detail) = budget(json!({"kind": "budget", "max_latency_ms": 99, "max_ttft_ms": 39}));
    assert_eq!(s, 0, "{detail}");
    assert_eq!(detail, "latency_ms 100 > 99, ttft_ms 40 > 39");
    assert_eq!(
        budget(json!({"kind": "budget", "max_tokens": 349, "max_cost_micros": 1000})).0,
        PPM / 2
    );
    // No text at all: the time to first text is unknown, and over any budget.
    let mut log = Log::new();
    let silent = log.failed(FailureCode::ProviderError);
    assert_eq!(
        score(json!({"kind": "budget", "max_ttft_ms": 10000}), &silent),
        0
    );
}

#[test]
fn ends_checks_the_status_and_the_failure_code() {
    let mut log = Log::new();
    let failed = log.failed(FailureCode::ProviderError);
    assert_eq!(
        score(
            json!({"kind": "ends", "status": "failed", "code": "provider_error"}),
            &failed
        ),
        PPM
    );
    assert_eq!(
        score(
            json!({"kind": "ends", "status": "failed", "code": "budget_exceeded"}),
            &failed
        ),
        0
    );
    assert_eq!(
        score(json!({"kind": "ends", "status": "completed"}), &failed),
        0
    );
    let mut log = Log::new();
    log.message()
        .call("p1", "pay", json!({}))
        .approval("p1", "pay");
    assert_eq!(
        score(
            json!({"kind": "ends", "status": "waiting-approval"}),
            &log.waiting()
        ),
        PPM
    );
}

#[test]
fn every_kind_has_a_grader_with_a_version() {
    // A kind the dataset accepts but no grader knows would be a case that silently stopped
    // gating: each kind either grades or asks the judge.
    let run = calculator_run();
    let samples = [
        json!({"kind": "contains", "values": ["x"]}),
        json!({"kind": "tool-called", "tool": "t"}),
        json!({"kind": "tool-not-called", "tool": "t"}),
        json!({"kind": "requires-approval", "tool": "t"}),
        json!({"kind": "cites-source", "source": "s"}),
        json!({"kind": "structured-valid"}),
        json!({"kind": "refuses"}),
        json!({"kind": "judged", "rubric": "r"}),
        json!({"kind": "budget", "max_tokens": 1}),
        json!({"kind": "ends", "status": "completed"}),
    ];
    assert_eq!(samples.len(), Expectation::KINDS.len());
    for s in samples {
        let e = expectation(s);
        match grade(&e, &run, &Observed::of(&run)) {
            Graded::Done(g) => {
                assert_eq!(g.kind, e.kind());
                assert_eq!(g.grader.id, e.kind());
                assert_ne!(g.grader.version, "0", "{} has no version", e.kind());
            }
            Graded::NeedsJudge { kind, .. } => assert_eq!(kind, e.kind()),
        }
    }
}
