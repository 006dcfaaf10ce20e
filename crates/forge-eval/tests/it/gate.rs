//! The release gate: the decision as a pure function, the committed thresholds, and the trend.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use forge_core::scope::TenantId;
use forge_core::time::Timestamp;
use forge_eval::Dimension;
use forge_eval::gate::{GateFailure, OverrideError, RegressionLimit, Threshold, trend_entry};
use forge_eval::harness::Scored;
use forge_eval::score::{
    CaseResult, Outcome, PPM, ScoringRun, ScoringRunId, ScoringStatus, Verdict, derive,
};
use forge_eval::{
    Dataset, GateInput, GateOutcome, GateReport, Override, Thresholds, Trend, TrendEntry,
    evaluate_gate,
};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn case(id: &str, dims: &[Dimension], ppm: u32) -> CaseResult {
    let verdict = if ppm == PPM {
        Verdict::Pass
    } else {
        Verdict::Fail
    };
    let at = Timestamp::from_unix_millis(0).expect("epoch");
    forge_testkit::evals::case(id, dims, verdict, ppm, at)
}

fn scored(cases: Vec<CaseResult>) -> Scored {
    let (totals, dimensions) = derive(&cases);
    Scored {
        run: ScoringRun {
            id: ScoringRunId(uuid::Uuid::from_u128(1)),
            tenant_id: TenantId::new("eval").expect("tenant"),
            dataset: "core".into(),
            dataset_version: 1,
            dataset_sha256: "sha256:1".into(),
            label: "v2".into(),
            started_at: Timestamp::from_unix_millis(0).expect("epoch"),
            completed_at: Timestamp::from_unix_millis(1),
            status: ScoringStatus::Completed,
            totals: Some(totals),
            dimensions,
        },
        cases,
    }
}

fn threshold(min: f64) -> Threshold {
    Threshold {
        min,
        rationale: "because".into(),
    }
}

fn thresholds(dims: &[(Dimension, f64)], mean: f64) -> Thresholds {
    Thresholds {
        note: String::new(),
        dimensions: dims.iter().map(|(d, m)| (*d, threshold(*m))).collect(),
        overall_mean: threshold(mean),
        max_regressed_cases: RegressionLimit {
            max: 0,
            rationale: "because".into(),
        },
    }
}

fn gate(
    s: &Scored,
    baseline: Option<&TrendEntry>,
    require_baseline: bool,
    t: &Thresholds,
    o: Option<&Override>,
) -> GateReport {
    evaluate_gate(GateInput {
        scores: s,
        baseline,
        require_baseline,
        thresholds: t,
        override_by: o,
    })
}

use Dimension::{Authorization as Authz, TaskCompletion as Task, ToolSelection as Tools};

/// Every dimension above its own line, the mean below the backstop: the gate fails.
#[test]
fn every_dimension_passing_and_the_mean_failing_fails() {
    let s = scored(vec![
        case("a1", &[Task], PPM),
        case("a2", &[Task], 640_000),
        case("b1", &[Tools], PPM),
        case("b2", &[Tools], 720_000),
    ]);
    // task 0.82 ≥ 0.8, tools 0.86 ≥ 0.85; mean 0.84 < 0.9.
    let t = thresholds(&[(Task, 0.8), (Tools, 0.85)], 0.9);
    let r = gate(&s, None, false, &t, None);
    assert_eq!(r.outcome, GateOutcome::Fail);
    assert_eq!(
        r.failures,
        [GateFailure::OverallMean {
            score_ppm: 840_000,
            min_ppm: 900_000
        }]
    );
    assert_eq!(r.dimensions[&Task], (820_000, 800_000));
}

#[test]
fn every_failure_is_collected_and_regressed_cases_are_named() {
    let baseline = scored(vec![
        case("kept", &[Authz], PPM),
        case("broke", &[Task], PPM),
        case("was-failing", &[Task], 0),
        case("dropped", &[Task], PPM),
    ]);
    let t = thresholds(&[(Authz, 1.0), (Task, 0.8)], 0.9);
    let base_report = gate(&baseline, None, false, &t, None);
    let entry = trend_entry(&baseline, &base_report, &t);
    let now = scored(vec![
        case("kept", &[Authz], 0),
        case("broke", &[Task], 0),
        case("was-failing", &[Task], 0),
        case("added", &[Task], 0),
    ]);
    let r = gate(&now, Some(&entry), true, &t, None);
    assert_eq!(r.outcome, GateOutcome::Fail);
    assert_eq!(
        r.regressed,
        ["broke", "kept"],
        "still failing and new failures are not regressions"
    );
    let checks: Vec<String> = r.failures.iter().map(ToString::to_string).collect();
    assert_eq!(checks.len(), 5, "{checks:?}");
    assert!(
        checks[0].starts_with("task-completion scored 0.000"),
        "{checks:?}"
    );
    assert!(
        checks[1].starts_with("authorization scored 0.000"),
        "{checks:?}"
    );
    assert!(checks[2].starts_with("the overall mean"), "{checks:?}");
    assert_eq!(
        checks[3],
        "2 case(s) passed in the baseline and fail now (at most 0 allowed): broke, kept"
    );
    assert!(
        checks[4].starts_with(
            "1 case(s) of the baseline are gone and the dataset is still version 1: dropped"
        ),
        "{checks:?}"
    );
}

/// The held-out dodge: deleting the failing case from the dataset without changing its version
/// passed with a warning. It fails now; with a new version it passes, and the report says why.
#[test]
fn deleting_a_failing_case_fails_unless_the_datasets_version_changed() {
    let t = thresholds(&[(Task, 0.5)], 0.5);
    let before = scored(vec![case("x", &[Task], PPM), case("y", &[Task], PPM)]);
    let entry = trend_entry(&before, &gate(&before, None, false, &t, None), &t);
    // `y` now fails; the dataset's owner deletes it.
    let after = scored(vec![case("x", &[Task], PPM)]);
    let r = gate(&after, Some(&entry), true, &t, None);
    assert_eq!(r.outcome, GateOutcome::Fail);
    assert_eq!(
        r.failures,
        [GateFailure::CasesRemoved {
            cases: vec!["y".into()],
            version: 1
        }]
    );
    let mut bumped = after.clone();
    bumped.run.dataset_version = 2;
    let r = gate(&bumped, Some(&entry), true, &t, None);
    assert_eq!(r.outcome, GateOutcome::Pass, "{:?}", r.failures);
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("version changed from 1 to 2: y")),
        "{:?}",
        r.warnings
    );
}

#[test]
fn a_case_regressed_beside_an_unrelated_gain_fails_by_name() {
    let t = thresholds(&[(Task, 0.5)], 0.5);
    let before = scored(vec![case("x", &[Task], PPM), case("y", &[Task], 0)]);
    let entry = trend_entry(&before, &gate(&before, None, false, &t, None), &t);
    let after = scored(vec![case("x", &[Task], 0), case("y", &[Task], PPM)]);
    let r = gate(&after, Some(&entry), true, &t, None);
    assert_eq!(r.dimensions[&Task].0, 500_000, "the mean did not move");
    assert_eq!(r.outcome, GateOutcome::Fail);
    assert_eq!(r.regressed, ["x"]);
}

#[test]
fn the_baseline_is_the_newest_release_not_the_newest_passing_nor_a_failed_gate() {
    let t = thresholds(&[(Task, 0.4)], 0.4);
    let entry =
        |cases: Vec<CaseResult>, label: &str, o: Option<&Override>, base: Option<&TrendEntry>| {
            let s = scored(cases);
            let r = gate(&s, base, base.is_some(), &t, o);
            let mut e = trend_entry(&s, &r, &t);
            e.label = label.into();
            e
        };
    let all = || vec![case("x", &[Task], PPM), case("y", &[Task], PPM)];
    let v1 = entry(all(), "v1", None, None);
    assert_eq!(v1.outcome, GateOutcome::Pass);
    // v2 regressed y and shipped past the gate.
    let o = Override {
        actor: "alice".into(),
        reason: "accepted".into(),
    };
    let y_broken = || vec![case("x", &[Task], PPM), case("y", &[Task], 0)];
    let v2 = entry(y_broken(), "v2", Some(&o), Some(&v1));
    assert_eq!(v2.outcome, GateOutcome::Overridden);
    // v3 regressed x as well and failed: it released nothing.
    let v3 = entry(
        vec![case("x", &[Task], 0), case("y", &[Task], 0)],
        "v3",
        None,
        Some(&v2),
    );
    assert_eq!(v3.outcome, GateOutcome::Fail);
    let trend = Trend {
        entries: vec![v1, v2, v3],
    };
    assert!(trend.has_releases());
    let baseline = trend.baseline("core").expect("baseline");
    assert_eq!(
        baseline.label, "v2",
        "the newest release, overridden or not, and no failed gate"
    );
    assert!(trend.baseline("other").is_none());
    // Against v2, y's regression is history; a re-run of v3 still names x.
    let r = gate(
        &scored(vec![case("x", &[Task], 0), case("y", &[Task], 0)]),
        Some(baseline),
        true,
        &t,
        None,
    );
    assert_eq!(r.regressed, ["x"]);
    let failed_only = Trend {
        entries: vec![trend.entries[2].clone()],
    };
    assert!(!failed_only.has_releases());
    assert!(failed_only.baseline("core").is_none());
}

#[test]
fn a_missing_baseline_fails_a_later_release_and_exempts_only_a_first_one() {
    let t = thresholds(&[(Task, 0.9)], 0.5);
    let green = scored(vec![case("x", &[Task], PPM)]);
    let later = gate(&green, None, true, &t, None);
    assert_eq!(later.outcome, GateOutcome::Fail);
    assert_eq!(
        later.failures,
        [GateFailure::NoBaseline {
            dataset: "core".into()
        }]
    );
    assert_eq!(
        gate(&green, None, false, &t, None).outcome,
        GateOutcome::Pass
    );
    // A first release is exempt from the comparison, not from the bar.
    let red = scored(vec![case("x", &[Task], 0)]);
    let first = gate(&red, None, false, &t, None);
    assert_eq!(first.outcome, GateOutcome::Fail);
    assert!(matches!(first.failures[0], GateFailure::Dimension { .. }));
}

#[test]
fn an_override_is_its_own_outcome_carrying_what_it_overrode() {
    let t = thresholds(&[(Task, 0.9)], 0.5);
    let o = Override::from_values(Some("  alice "), Some(" the judge was down \n"))
        .expect("valid")
        .expect("given");
    assert_eq!(
        o,
        Override {
            actor: "alice".into(),
            reason: "the judge was down".into()
        }
    );
    let red = scored(vec![case("x", &[Task], 0)]);
    let r = gate(&red, None, false, &t, Some(&o));
    assert_eq!(r.outcome, GateOutcome::Overridden);
    assert_eq!(
        r.failures.len(),
        2,
        "the failures it overrode are kept: the dimension and the mean"
    );
    assert_eq!(r.overridden_by.as_ref(), Some(&o));
    let entry = trend_entry(&red, &r, &t);
    assert_eq!(entry.outcome, GateOutcome::Overridden);
    assert_eq!(entry.overridden_by.as_ref(), Some(&o));
    assert_eq!(entry.failures.len(), 2);
    // On a green run an override changes nothing.
    let green = scored(vec![case("x", &[Task], PPM)]);
    let r = gate(&green, None, false, &t, Some(&o));
    assert_eq!((r.outcome, r.overridden_by), (GateOutcome::Pass, None));
}

#[test]
fn half_an_override_or_a_blank_one_is_refused() {
    assert_eq!(Override::from_values(None, None), Ok(None));
    assert_eq!(
        Override::from_values(Some("alice"), None),
        Err(OverrideError::Half {
            given: "FORGE_GATE_OVERRIDE_ACTOR",
            missing: "FORGE_GATE_OVERRIDE_REASON"
        })
    );
    assert!(matches!(
        Override::from_values(None, Some("because")),
        Err(OverrideError::Half { .. })
    ));
    assert_eq!(
        Override::from_values(Some("alice"), Some("   ")),
        Err(OverrideError::Blank("FORGE_GATE_OVERRIDE_REASON"))
    );
    assert_eq!(
        Override::from_values(Some(""), Some("because")),
        Err(OverrideError::Blank("FORGE_GATE_OVERRIDE_ACTOR"))
    );
    let msg = Override::from_values(Some("alice"), None)
        .expect_err("half")
        .to_string();
    assert!(msg.contains("FORGE_GATE_OVERRIDE_REASON is not"), "{msg}");
}

/// Unscoreable cases warn; a dimension with a threshold none of whose cases could be scored (the
/// held-out dodge: `--judge none`) fails; one without a threshold warns.
#[test]
fn an_unmeasured_required_dimension_fails_and_unscoreable_cases_warn() {
    let mut u = case("judged", &[Dimension::DomainQuality], 0);
    u.verdict = Verdict::Unscoreable;
    let s = scored(vec![case("x", &[Task], PPM), u, case("z", &[Tools], PPM)]);
    let t = thresholds(&[(Task, 0.9), (Dimension::DomainQuality, 0.8)], 0.9);
    let r = gate(&s, None, false, &t, None);
    assert_eq!(r.outcome, GateOutcome::Fail);
    assert_eq!(
        r.failures,
        [GateFailure::Unmeasured {
            dimension: Dimension::DomainQuality,
            cases: 1
        }]
    );
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("could not be scored (no judge?): judged"))
    );
    assert!(
        r.warnings
            .iter()
            .any(|w| w.starts_with("tool-selection has no threshold"))
    );
    assert!(!r.dimensions.contains_key(&Dimension::DomainQuality));
    let mut open = s.clone();
    open.run.status = ScoringStatus::Running;
    assert_eq!(
        gate(&open, None, false, &t, None).failures[0],
        GateFailure::Incomplete
    );
}

/// The same scores judged against other thresholds are a different story, and read differently.
#[test]
fn two_entries_with_the_same_scores_and_other_thresholds_differ() {
    let s = scored(vec![case("x", &[Task], PPM)]);
    let t1 = thresholds(&[(Task, 0.8)], 0.9);
    let t2 = thresholds(&[(Task, 0.6)], 0.9);
    let e1 = trend_entry(&s, &gate(&s, None, false, &t1, None), &t1);
    let e2 = trend_entry(&s, &gate(&s, None, false, &t2, None), &t2);
    assert_eq!(e1.scores, e2.scores);
    assert_ne!(e1, e2);
    assert_ne!(
        serde_json::to_string(&e1).expect("json"),
        serde_json::to_string(&e2).expect("json")
    );
    assert_eq!(e1.thresholds.dimensions[&Task], 0.8);
    assert_eq!(e2.thresholds.dimensions[&Task], 0.6);
}

/// An entry holds case ids, never verdicts: however much each result says, an entry stays
/// within a few dozen bytes a case.
#[test]
fn a_trend_entrys_serialized_size_is_bounded() {
    let cases: Vec<CaseResult> = (0..200)
        .map(|i| {
            let mut c = case(&format!("case-{i:03}"), &[Task, Tools, Authz], PPM);
            c.grades[0].outcome = Outcome::Scored {
                score_ppm: PPM,
                detail: "x".repeat(10_000),
            };
            c
        })
        .collect();
    let s = scored(cases);
    let t = thresholds(&[(Task, 0.8), (Tools, 0.8), (Authz, 1.0)], 0.9);
    let entry = trend_entry(&s, &gate(&s, None, false, &t, None), &t);
    let size = serde_json::to_string(&entry).expect("json").len();
    assert!(size <= 1_024 + 200 * 16, "{size} bytes for 200 cases");
    assert!(
        !serde_json::to_string(&entry)
            .expect("json")
            .contains("xxxx")
    );
}

#[test]
fn the_trend_renders_one_line_per_release_and_reads_back() {
    let t = thresholds(&[(Task, 0.8)], 0.9);
    let s = scored(vec![case("x", &[Task], PPM)]);
    let e = trend_entry(&s, &gate(&s, None, false, &t, None), &t);
    let trend = Trend {
        entries: vec![e.clone(), e],
    };
    let text = trend.render().expect("render");
    assert_eq!(text.lines().count(), 4, "{text}");
    assert_eq!(Trend::parse(&text, "trend").expect("parse"), trend);
    assert_eq!(
        Trend::parse("{\"entries\": []}", "t").expect("empty"),
        Trend::default()
    );
}

// ── The committed thresholds and datasets ──────────────────────────────────────────────────

fn committed() -> Thresholds {
    Thresholds::load(&repo().join("evals/thresholds.json")).expect("evals/thresholds.json")
}

/// Lowering either safety threshold means deleting this test, not editing a number.
#[test]
fn both_safety_thresholds_are_one() {
    let t = committed();
    assert_eq!(t.dimensions[&Dimension::Authorization].min, 1.0);
    assert_eq!(t.dimensions[&Dimension::ExternalActionSafety].min, 1.0);
    assert_eq!(t.max_regressed_cases.max, 0);
}

/// Every dimension a dataset in `evals/` counts toward has a threshold with a rationale (the
/// gate only warns at run time; here it can still be fixed cheaply).
#[test]
fn every_dataset_dimension_has_a_threshold_with_a_rationale() {
    let t = committed();
    let mut checked = 0;
    for entry in std::fs::read_dir(repo().join("evals"))
        .expect("evals/")
        .flatten()
    {
        let p = entry.path();
        let name = p.file_name().expect("name").to_string_lossy().into_owned();
        let dataset = (name.ends_with(".toml") || name.ends_with(".json"))
            && !["thresholds.json", "trend.json"].contains(&name.as_str());
        if !dataset {
            continue;
        }
        let d = Dataset::load(&p).expect("a valid dataset");
        assert_eq!(
            t.ungated(&d),
            Vec::<Dimension>::new(),
            "{name}: dimensions without a threshold"
        );
        for dim in d.dimensions() {
            assert!(
                !t.dimensions[&dim].rationale.trim().is_empty(),
                "{dim} has no rationale"
            );
        }
        checked += 1;
    }
    assert!(checked > 0);
}

#[test]
fn thresholds_without_a_rationale_or_out_of_range_are_refused() {
    let text = |min: &str, why: &str| {
        format!(
            "{{\"dimensions\": {{\"authorization\": {{\"min\": {min}, \"rationale\": \"{why}\"}}}},
              \"overall_mean\": {{\"min\": 0.9, \"rationale\": \"r\"}},
              \"max_regressed_cases\": {{\"max\": 0, \"rationale\": \"r\"}}}}"
        )
    };
    assert!(Thresholds::parse(&text("1.0", "r"), "t").is_ok());
    let err = Thresholds::parse(&text("1.0", "  "), "t")
        .expect_err("blank")
        .to_string();
    assert_eq!(err, "t: authorization: no rationale");
    let err = Thresholds::parse(&text("1.5", "r"), "t")
        .expect_err("range")
        .to_string();
    assert!(err.contains("min 1.5 is not between 0 and 1"), "{err}");
    let d: BTreeMap<Dimension, Threshold> = BTreeMap::new();
    let t = Thresholds {
        note: String::new(),
        dimensions: d,
        overall_mean: threshold(0.9),
        max_regressed_cases: RegressionLimit {
            max: 0,
            rationale: "r".into(),
        },
    };
    let dataset = Dataset::load(&repo().join("evals/core.toml")).expect("core");
    assert_eq!(
        t.ungated(&dataset).len(),
        9,
        "no thresholds: every dimension ungated"
    );
}
