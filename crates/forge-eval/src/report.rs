//! The text `forge eval` prints: a scoring run's per-dimension table and cost, the cases that
//! did not pass, and the regression report.

use std::fmt::Write;

use crate::compare::Comparison;
use crate::dimension::Dimension;
use crate::gate::{GateOutcome, GateReport};
use crate::score::{CaseResult, Outcome, PPM, ScoringRun, Verdict, fraction};

fn score(ppm: u32) -> String {
    format!("{:.3}", fraction(ppm))
}

/// The run's per-dimension table, its totals and its cost.
pub fn scores(run: &ScoringRun) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<24} {:>6} {:>7} {:>7} {:>12} {:>7}",
        "dimension", "cases", "scored", "passed", "unscoreable", "score"
    );
    for d in Dimension::ALL {
        let Some(s) = run.dimensions.get(&d) else {
            continue;
        };
        let _ = writeln!(
            out,
            "{:<24} {:>6} {:>7} {:>7} {:>12} {:>7}",
            d.name(),
            s.cases,
            s.scored,
            s.passed,
            s.unscoreable,
            score(s.score_ppm)
        );
    }
    if let Some(t) = run.totals {
        let _ = writeln!(
            out,
            "{:<24} {:>6} {:>7} {:>7} {:>12} {:>7}",
            "all cases",
            t.cases,
            t.scored,
            t.passed,
            t.unscoreable,
            score(t.score_ppm)
        );
        let _ = writeln!(
            out,
            "cost: {} micro-units for the agents' model calls ({} paid call(s)), {} for the judge",
            t.run_cost_micros, t.paid_calls, t.judge_cost_micros
        );
    }
    out
}

/// The cases that did not pass, each with what its first unmet expectation found.
pub fn failures(cases: &[CaseResult]) -> String {
    let mut out = String::new();
    for c in cases.iter().filter(|c| c.verdict != Verdict::Pass) {
        let why = c
            .grades
            .iter()
            .find_map(|g| match &g.outcome {
                Outcome::Scored { score_ppm, detail } if *score_ppm < PPM => {
                    Some(format!("{}: {detail}", g.kind))
                }
                Outcome::Unscoreable { reason } => Some(format!("{}: {reason}", g.kind)),
                Outcome::Scored { .. } => None,
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{:<11} {:<32} {} ({})",
            c.verdict.name(),
            c.case_id,
            score(c.score_ppm),
            why
        );
    }
    out
}

/// The regression report.
pub fn comparison(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "baseline  {} ({}) dataset v{}, mean {}",
        c.baseline.id,
        c.baseline.label,
        c.baseline.dataset_version,
        score(c.baseline.score_ppm)
    );
    let _ = writeln!(
        out,
        "candidate {} ({}) dataset v{}, mean {}",
        c.candidate.id,
        c.candidate.label,
        c.candidate.dataset_version,
        score(c.candidate.score_ppm)
    );
    if c.grader_versions_differ {
        let _ = writeln!(
            out,
            "warning: graders differ for {} case(s): this compares two instruments, and the delta cannot be attributed to the platform",
            c.grader_changes.len()
        );
        for g in &c.grader_changes {
            let show = |v: &[crate::score::GraderRef]| {
                v.iter()
                    .map(|r| format!("{}@{}", r.id, r.version))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = writeln!(out, "  {}: {} -> {}", g.case_id, show(&g.from), show(&g.to));
        }
    }
    if c.dataset_changed {
        let _ = writeln!(out, "note: the dataset changed between the runs");
    }
    let _ = writeln!(
        out,
        "{:<24} {:>9} {:>9}",
        "dimension", "baseline", "candidate"
    );
    for (d, (b, a)) in &c.dimensions {
        let show = |v: &Option<u32>| v.map_or_else(|| "-".to_owned(), score);
        let _ = writeln!(out, "{:<24} {:>9} {:>9}", d.name(), show(b), show(a));
    }
    let section = |out: &mut String, title: &str, ids: &[String]| {
        let _ = writeln!(out, "{title} ({}):", ids.len());
        for id in ids {
            let _ = writeln!(out, "  {id}");
        }
    };
    let _ = writeln!(out, "moved ({}):", c.moved.len());
    for m in &c.moved {
        let _ = writeln!(
            out,
            "  {:+.3} {:<32} {} {} -> {} {}",
            m.delta_ppm as f64 / f64::from(PPM),
            m.case_id,
            m.from.name(),
            score(m.from_ppm),
            m.to.name(),
            score(m.to_ppm)
        );
    }
    section(&mut out, "regressed (passed, now fail)", &c.regressed);
    section(&mut out, "new (not counted as improvements)", &c.new_cases);
    section(
        &mut out,
        "removed (not counted as improvements)",
        &c.removed,
    );
    section(&mut out, "unscoreable", &c.unscoreable);
    out
}

/// The gate's decision: every dimension against its threshold, every failure, every warning,
/// and what the scoring cost.
pub fn gate(report: &GateReport, cost_micros: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<24} {:>7} {:>9}", "dimension", "score", "threshold");
    for (d, (s, min)) in &report.dimensions {
        let mark = if s < min { "  below" } else { "" };
        let _ = writeln!(
            out,
            "{:<24} {:>7} {:>9}{mark}",
            d.name(),
            score(*s),
            score(*min)
        );
    }
    let _ = writeln!(
        out,
        "{:<24} {:>7}",
        "mean of dimensions",
        score(report.mean_ppm)
    );
    match &report.baseline {
        Some(b) => {
            let _ = writeln!(out, "baseline: {b}");
        }
        None => {
            let _ = writeln!(out, "baseline: none");
        }
    }
    for w in &report.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    for f in &report.failures {
        let _ = writeln!(out, "failed: {f}");
    }
    if let Some(o) = &report.overridden_by {
        let _ = writeln!(
            out,
            "overridden by {}: {} ({} failure(s) shipped past)",
            o.actor,
            o.reason,
            report.failures.len()
        );
    }
    let _ = writeln!(out, "cost: {cost_micros} micro-units");
    let verdict = match report.outcome {
        GateOutcome::Pass => "PASS",
        GateOutcome::Fail => "FAIL",
        GateOutcome::Overridden => "OVERRIDDEN",
    };
    let _ = writeln!(out, "gate: {verdict}");
    out
}
