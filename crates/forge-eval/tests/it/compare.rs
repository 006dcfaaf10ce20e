//! The regression report: it names cases, whatever the means say.

use forge_core::scope::TenantId;
use forge_core::time::Timestamp;
use forge_eval::Dimension;
use forge_eval::score::{
    CaseResult, PPM, ScoringRun, ScoringRunId, ScoringStatus, Verdict, derive,
};
use forge_eval::{Comparison, compare};

fn case(id: &str, ppm: u32, grader_version: &str) -> CaseResult {
    let verdict = if ppm == PPM {
        Verdict::Pass
    } else {
        Verdict::Fail
    };
    let at = Timestamp::from_unix_millis(0).expect("epoch");
    let mut c = forge_testkit::evals::case(id, &[Dimension::TaskCompletion], verdict, ppm, at);
    c.grades[0].grader.version = grader_version.into();
    c
}

fn unscoreable(id: &str) -> CaseResult {
    CaseResult {
        verdict: Verdict::Unscoreable,
        score_ppm: 0,
        ..case(id, 0, "1")
    }
}

fn run(n: u128, cases: &[CaseResult]) -> ScoringRun {
    let (totals, dimensions) = derive(cases);
    ScoringRun {
        id: ScoringRunId(uuid::Uuid::from_u128(n)),
        tenant_id: TenantId::new("acme").expect("tenant"),
        dataset: "core".into(),
        dataset_version: 1,
        dataset_sha256: "sha256:1".into(),
        label: format!("build-{n}"),
        started_at: Timestamp::from_unix_millis(0).expect("epoch"),
        completed_at: Timestamp::from_unix_millis(1),
        status: ScoringStatus::Completed,
        totals: Some(totals),
        dimensions,
    }
}

fn report(before: &[CaseResult], after: &[CaseResult]) -> Comparison {
    compare((&run(1, before), before), (&run(2, after), after))
}

#[test]
fn identical_means_with_one_case_regressed_still_name_the_case() {
    let before = [case("a", PPM, "1"), case("b", 0, "1"), case("c", PPM, "1")];
    let after = [case("a", 0, "1"), case("b", PPM, "1"), case("c", PPM, "1")];
    let r = report(&before, &after);
    assert_eq!(
        r.baseline.score_ppm, r.candidate.score_ppm,
        "the means are equal"
    );
    assert_eq!(r.regressed, ["a"]);
    let moved: Vec<(&str, i64)> = r
        .moved
        .iter()
        .map(|m| (m.case_id.as_str(), m.delta_ppm))
        .collect();
    assert_eq!(
        moved,
        [("a", -1_000_000), ("b", 1_000_000)],
        "largest regression first"
    );
    assert_eq!(r.regressions().count(), 1);
    assert_eq!(r.improvements().count(), 1);
    assert!(!r.grader_versions_differ);
    let text = forge_eval::report::comparison(&r);
    assert!(
        text.contains("regressed (passed, now fail) (1):\n  a\n"),
        "{text}"
    );
}

#[test]
fn moves_are_ordered_by_how_far_then_by_id() {
    let before = [
        case("d", PPM, "1"),
        case("b", PPM, "1"),
        case("a", PPM, "1"),
        case("c", 0, "1"),
    ];
    let after = [
        case("d", 500_000, "1"),
        case("b", 0, "1"),
        case("a", 500_000, "1"),
        case("c", 250_000, "1"),
    ];
    let r = report(&before, &after);
    let order: Vec<&str> = r.moved.iter().map(|m| m.case_id.as_str()).collect();
    assert_eq!(order, ["b", "a", "d", "c"]);
    assert_eq!(r.regressed, ["a", "b", "d"]);
}

#[test]
fn new_removed_and_unscoreable_cases_are_listed_apart_and_never_improvements() {
    let before = [
        case("kept", PPM, "1"),
        case("dropped", 0, "1"),
        unscoreable("judged"),
    ];
    let after = [
        case("kept", PPM, "1"),
        case("added", PPM, "1"),
        case("judged", PPM, "1"),
        unscoreable("new-judged"),
    ];
    let r = report(&before, &after);
    assert_eq!(r.new_cases, ["added", "new-judged"]);
    assert_eq!(r.removed, ["dropped"]);
    assert_eq!(r.unscoreable, ["judged", "new-judged"]);
    assert!(r.moved.is_empty(), "{:?}", r.moved);
    assert_eq!(r.improvements().count(), 0);
    assert!(r.regressed.is_empty());
}

#[test]
fn a_grader_change_is_flagged_not_refused() {
    let before = [case("a", PPM, "1"), case("b", PPM, "1")];
    let after = [case("a", PPM, "2"), case("b", 0, "1")];
    let r = report(&before, &after);
    assert!(r.grader_versions_differ);
    assert_eq!(r.grader_changes.len(), 1);
    assert_eq!(r.grader_changes[0].case_id, "a");
    assert_eq!(r.regressed, ["b"], "the comparison is still made");
    let text = forge_eval::report::comparison(&r);
    assert!(
        text.contains("warning: graders differ for 1 case(s)"),
        "{text}"
    );
    assert!(text.contains("a: contains@1 -> contains@2"), "{text}");
}

#[test]
fn dimension_scores_are_side_by_side() {
    let before = [case("a", PPM, "1")];
    let after = [case("a", 0, "1")];
    let r = report(&before, &after);
    assert_eq!(
        r.dimensions[&Dimension::TaskCompletion],
        (Some(PPM), Some(0))
    );
    assert!(!r.dataset_changed);
}
