//! The regression report: two scoring runs compared case by case, because an aggregate hides a
//! regression offset by an unrelated gain.
//!
//! - Cases scored in both runs whose score moved are listed by how far they moved, the largest
//!   regression first, then by id — stable, so a report diffs cleanly.
//! - A case only in the candidate is new, never an improvement (adding easy cases is not
//!   progress); a case only in the baseline is removed, never an improvement either (a dataset
//!   that shrinks quietly is a gate that weakens quietly). Unscoreable cases are listed apart.
//! - A comparison across a grader change (any grader's id or version differing for a case in
//!   both) is flagged: that compares two instruments, and the delta cannot be attributed to the
//!   platform. Flagged rather than refused, since sometimes it is the only comparison there is.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::dimension::Dimension;
use crate::score::{CaseResult, GraderRef, ScoringRun, Verdict};

/// One side of a comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Side {
    /// The scoring run.
    pub id: String,
    /// Its label.
    pub label: String,
    /// The dataset's version.
    pub dataset_version: u32,
    /// The dataset's hash.
    pub dataset_sha256: String,
    /// Its mean score over scored cases.
    pub score_ppm: u32,
}

/// A case whose score moved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Movement {
    /// The case.
    pub case_id: String,
    /// Its score in the baseline.
    pub from_ppm: u32,
    /// Its score in the candidate.
    pub to_ppm: u32,
    /// `to - from`: negative is a regression.
    pub delta_ppm: i64,
    /// Its verdict in the baseline.
    pub from: Verdict,
    /// Its verdict in the candidate.
    pub to: Verdict,
}

/// A grader that differs between the runs for a case in both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraderChange {
    /// The case.
    pub case_id: String,
    /// The baseline's graders of it.
    pub from: Vec<GraderRef>,
    /// The candidate's.
    pub to: Vec<GraderRef>,
}

/// Two scoring runs compared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comparison {
    /// The earlier run.
    pub baseline: Side,
    /// The run under judgement.
    pub candidate: Side,
    /// Cases scored in both whose score moved, largest regression first, then by id.
    pub moved: Vec<Movement>,
    /// Cases that passed in the baseline and fail in the candidate, by id.
    pub regressed: Vec<String>,
    /// Cases only in the candidate, by id.
    pub new_cases: Vec<String>,
    /// Cases only in the baseline, by id.
    pub removed: Vec<String>,
    /// Cases unscoreable in either run, by id.
    pub unscoreable: Vec<String>,
    /// Whether any grader differs for a case in both runs.
    pub grader_versions_differ: bool,
    /// Which cases, and how.
    pub grader_changes: Vec<GraderChange>,
    /// Whether the dataset's hash differs.
    pub dataset_changed: bool,
    /// Each dimension's score in the baseline and the candidate (absent where a run has none).
    pub dimensions: BTreeMap<Dimension, (Option<u32>, Option<u32>)>,
}

impl Comparison {
    /// Cases whose score went down, largest first.
    pub fn regressions(&self) -> impl Iterator<Item = &Movement> {
        self.moved.iter().filter(|m| m.delta_ppm < 0)
    }

    /// Cases whose score went up.
    pub fn improvements(&self) -> impl Iterator<Item = &Movement> {
        self.moved.iter().filter(|m| m.delta_ppm > 0)
    }
}

fn side(run: &ScoringRun) -> Side {
    Side {
        id: run.id.to_string(),
        label: run.label.clone(),
        dataset_version: run.dataset_version,
        dataset_sha256: run.dataset_sha256.clone(),
        score_ppm: run.totals.map_or(0, |t| t.score_ppm),
    }
}

/// Compares `candidate` with `baseline`, case by case.
pub fn compare(
    baseline: (&ScoringRun, &[CaseResult]),
    candidate: (&ScoringRun, &[CaseResult]),
) -> Comparison {
    let before: BTreeMap<&str, &CaseResult> =
        baseline.1.iter().map(|c| (c.case_id.as_str(), c)).collect();
    let after: BTreeMap<&str, &CaseResult> = candidate
        .1
        .iter()
        .map(|c| (c.case_id.as_str(), c))
        .collect();
    let mut moved = Vec::new();
    let mut unscoreable = BTreeSet::new();
    let mut grader_changes = Vec::new();
    for (id, b) in &before {
        let Some(a) = after.get(id) else { continue };
        let graders = |c: &CaseResult| {
            c.grades
                .iter()
                .map(|g| g.grader.clone())
                .collect::<Vec<_>>()
        };
        let (gb, ga) = (graders(b), graders(a));
        if gb != ga {
            grader_changes.push(GraderChange {
                case_id: (*id).to_owned(),
                from: gb,
                to: ga,
            });
        }
        if !b.scored() || !a.scored() {
            unscoreable.insert((*id).to_owned());
            continue;
        }
        let delta = i64::from(a.score_ppm) - i64::from(b.score_ppm);
        if delta != 0 || a.verdict != b.verdict {
            moved.push(Movement {
                case_id: (*id).to_owned(),
                from_ppm: b.score_ppm,
                to_ppm: a.score_ppm,
                delta_ppm: delta,
                from: b.verdict,
                to: a.verdict,
            });
        }
    }
    moved.sort_by(|x, y| {
        x.delta_ppm
            .cmp(&y.delta_ppm)
            .then(x.case_id.cmp(&y.case_id))
    });
    let new_cases: Vec<String> = after
        .iter()
        .filter(|(id, _)| !before.contains_key(*id))
        .map(|(id, c)| {
            if !c.scored() {
                unscoreable.insert((*id).to_owned());
            }
            (*id).to_owned()
        })
        .collect();
    let removed: Vec<String> = before
        .keys()
        .filter(|id| !after.contains_key(*id))
        .map(|id| (*id).to_owned())
        .collect();
    let regressed = {
        let mut r: Vec<String> = moved
            .iter()
            .filter(|m| m.from == Verdict::Pass && m.to == Verdict::Fail)
            .map(|m| m.case_id.clone())
            .collect();
        r.sort();
        r
    };
    let mut dimensions: BTreeMap<Dimension, (Option<u32>, Option<u32>)> = BTreeMap::new();
    for (d, s) in &baseline.0.dimensions {
        dimensions.entry(*d).or_default().0 = Some(s.score_ppm);
    }
    for (d, s) in &candidate.0.dimensions {
        dimensions.entry(*d).or_default().1 = Some(s.score_ppm);
    }
    Comparison {
        baseline: side(baseline.0),
        candidate: side(candidate.0),
        regressed,
        moved,
        new_cases,
        removed,
        unscoreable: unscoreable.into_iter().collect(),
        grader_versions_differ: !grader_changes.is_empty(),
        grader_changes,
        dataset_changed: baseline.0.dataset_sha256 != candidate.0.dataset_sha256,
        dimensions,
    }
}
