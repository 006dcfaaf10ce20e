//! Scores: a case's grades and verdict, a scoring run, and the totals derived from its recorded
//! case rows.
//!
//! Scores are integers in parts per million ([`PPM`] is 1.0), so the totals a SQL store derives
//! in one statement and the ones [`derive()`] computes from the same rows are equal to the last
//! digit: a dimension's score is the floor of the mean of its scored cases' scores. Unscoreable
//! cases (a judgement with no judge) count in `cases` and `unscoreable`, never in a mean.

use std::collections::BTreeMap;

use forge_core::scope::TenantId;
use forge_core::time::Timestamp;
use serde::{Deserialize, Serialize};

use crate::dimension::Dimension;

/// A score of 1.0, in parts per million.
pub const PPM: u32 = 1_000_000;

/// A grader and its version; a result records which instrument measured it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GraderRef {
    /// The grader (`contains`, `judge:quality`, …).
    pub id: String,
    /// Its version: bumped whenever it would grade the same evidence differently.
    pub version: String,
}

/// What a grader concluded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// A score, with what it saw.
    Scored {
        /// From 0 to [`PPM`].
        score_ppm: u32,
        /// What it found, for people.
        detail: String,
    },
    /// It could not grade (a judgement with no judge configured).
    Unscoreable {
        /// Why.
        reason: String,
    },
}

/// One expectation's grade.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grade {
    /// The expectation's kind.
    pub kind: String,
    /// Who graded it.
    pub grader: GraderRef,
    /// What it concluded.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// What the judge cost for it, in micro-units (0 for code graders and cached verdicts).
    #[serde(default)]
    pub cost_micros: u64,
}

impl Grade {
    /// The score, when there is one.
    pub fn score_ppm(&self) -> Option<u32> {
        match self.outcome {
            Outcome::Scored { score_ppm, .. } => Some(score_ppm),
            Outcome::Unscoreable { .. } => None,
        }
    }
}

/// A case's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every expectation fully met.
    Pass,
    /// At least one not (fully) met.
    Fail,
    /// At least one could not be graded: a non-pass, counted apart from failures.
    Unscoreable,
}

impl Verdict {
    /// Its stored name.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Unscoreable => "unscoreable",
        }
    }

    /// The verdict with this stored name.
    pub fn parse(name: &str) -> Option<Verdict> {
        [Verdict::Pass, Verdict::Fail, Verdict::Unscoreable]
            .into_iter()
            .find(|v| v.name() == name)
    }
}

/// One case's result in a scoring run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseResult {
    /// The case.
    pub case_id: String,
    /// What it counts toward.
    pub dimensions: Vec<Dimension>,
    /// Its verdict.
    pub verdict: Verdict,
    /// The mean of its grades' scores (0 when unscoreable).
    pub score_ppm: u32,
    /// Why it is unscoreable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// One grade per expectation, in the case's order.
    pub grades: Vec<Grade>,
    /// The run graded.
    pub run_id: String,
    /// Where the run ended (`completed`, `failed`, `waiting`, …).
    pub run_status: String,
    /// The run's latency, in milliseconds.
    #[serde(default)]
    pub latency_ms: Option<u64>,
    /// Its time to first text, in milliseconds.
    #[serde(default)]
    pub ttft_ms: Option<u64>,
    /// Its model tokens.
    #[serde(default)]
    pub tokens: u64,
    /// Its model calls' cost, in micro-units.
    #[serde(default)]
    pub run_cost_micros: u64,
    /// Its calls to a provider other than the scripted one.
    #[serde(default)]
    pub paid_calls: u32,
    /// What the judge cost for it (0 when every verdict was cached or no judge was needed).
    #[serde(default)]
    pub judge_cost_micros: u64,
    /// When it was recorded.
    pub recorded_at: Timestamp,
}

impl CaseResult {
    /// Builds a result from its grades: the score is their mean, the verdict `pass` only when
    /// every one scored 1.0, `unscoreable` when any could not be graded.
    #[allow(clippy::too_many_arguments)]
    pub fn from_grades(
        case_id: impl Into<String>,
        dimensions: Vec<Dimension>,
        grades: Vec<Grade>,
        run: &crate::record::RunRecord,
        observed: &crate::record::Observed,
        recorded_at: Timestamp,
    ) -> CaseResult {
        let unscoreable = grades.iter().find_map(|g| match &g.outcome {
            Outcome::Unscoreable { reason } => Some(format!("{}: {reason}", g.kind)),
            Outcome::Scored { .. } => None,
        });
        let scores: Vec<u32> = grades.iter().filter_map(Grade::score_ppm).collect();
        let (verdict, score_ppm) = match &unscoreable {
            Some(_) => (Verdict::Unscoreable, 0),
            None => {
                let mean = mean(scores.iter().copied());
                let verdict = if scores.iter().all(|s| *s == PPM) {
                    Verdict::Pass
                } else {
                    Verdict::Fail
                };
                (verdict, mean)
            }
        };
        CaseResult {
            case_id: case_id.into(),
            dimensions,
            verdict,
            score_ppm,
            reason: unscoreable,
            judge_cost_micros: grades.iter().map(|g| g.cost_micros).sum(),
            grades,
            run_id: run.run_id.clone(),
            run_status: run.status.name().into(),
            latency_ms: observed.latency_ms,
            ttft_ms: observed.ttft_ms,
            tokens: run.usage.total_tokens(),
            run_cost_micros: run.cost_micros,
            paid_calls: run.paid_calls,
            recorded_at,
        }
    }

    /// Whether a comparison can use its score.
    pub fn scored(&self) -> bool {
        self.verdict != Verdict::Unscoreable
    }
}

/// The floor of the mean (0 for none).
pub fn mean(scores: impl Iterator<Item = u32>) -> u32 {
    let (sum, n) = scores.fold((0u64, 0u64), |(s, n), x| (s + u64::from(x), n + 1));
    sum.checked_div(n)
        .map_or(0, |m| u32::try_from(m).unwrap_or(PPM))
}

/// A scoring run's id (a UUIDv7, so ids sort by creation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ScoringRunId(pub uuid::Uuid);

impl std::fmt::Display for ScoringRunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::str::FromStr for ScoringRunId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(ScoringRunId)
    }
}

/// Where a scoring run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScoringStatus {
    /// Cases are being recorded; its totals are not derived (or are stale and cleared).
    Running,
    /// Completed: its totals are derived from every recorded case.
    Completed,
}

impl ScoringStatus {
    /// Its stored name.
    pub fn name(&self) -> &'static str {
        match self {
            ScoringStatus::Running => "running",
            ScoringStatus::Completed => "completed",
        }
    }
}

/// Totals over a scoring run's recorded cases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Cases recorded.
    pub cases: u32,
    /// Of those, scored (not unscoreable).
    pub scored: u32,
    /// Passed.
    pub passed: u32,
    /// Failed.
    pub failed: u32,
    /// Unscoreable.
    pub unscoreable: u32,
    /// The floor of the mean score of the scored cases.
    pub score_ppm: u32,
    /// The cases' runs' model cost, in micro-units.
    pub run_cost_micros: u64,
    /// The judge's cost, in micro-units.
    pub judge_cost_micros: u64,
    /// Calls to a provider other than the scripted one.
    pub paid_calls: u64,
}

/// One dimension's score.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DimensionScore {
    /// Cases counting toward it.
    pub cases: u32,
    /// Of those, scored.
    pub scored: u32,
    /// Passed.
    pub passed: u32,
    /// Unscoreable.
    pub unscoreable: u32,
    /// The floor of the mean score of its scored cases.
    pub score_ppm: u32,
}

/// A scoring run: one dataset scored once, against some build of the agents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScoringRun {
    /// Its id.
    pub id: ScoringRunId,
    /// The tenant it belongs to.
    pub tenant_id: TenantId,
    /// The dataset's name.
    pub dataset: String,
    /// The dataset's version.
    pub dataset_version: u32,
    /// The dataset's hash.
    pub dataset_sha256: String,
    /// What was scored (a git revision, a release tag).
    pub label: String,
    /// When it started.
    pub started_at: Timestamp,
    /// When it was last completed.
    #[serde(default)]
    pub completed_at: Option<Timestamp>,
    /// Where it stands.
    pub status: ScoringStatus,
    /// Totals, once completed.
    #[serde(default)]
    pub totals: Option<Totals>,
    /// Per-dimension scores, once completed.
    #[serde(default)]
    pub dimensions: BTreeMap<Dimension, DimensionScore>,
}

impl ScoringRun {
    /// A new, running scoring run.
    pub fn start(
        id: ScoringRunId,
        tenant_id: TenantId,
        dataset: &crate::dataset::Dataset,
        label: impl Into<String>,
        at: Timestamp,
    ) -> ScoringRun {
        ScoringRun {
            id,
            tenant_id,
            dataset: dataset.name.clone(),
            dataset_version: dataset.version,
            dataset_sha256: dataset.sha256.clone(),
            label: label.into(),
            started_at: at,
            completed_at: None,
            status: ScoringStatus::Running,
            totals: None,
            dimensions: BTreeMap::new(),
        }
    }
}

impl ScoringRun {
    /// Back to running, its totals cleared: what recording a case into it does, so stored totals
    /// never disagree with the rows they came from.
    pub fn reopen(&mut self) {
        self.status = ScoringStatus::Running;
        self.completed_at = None;
        self.totals = None;
        self.dimensions.clear();
    }
}

/// The totals and per-dimension scores of `cases`: what completing a scoring run stores, and
/// the rule every store's completion follows.
pub fn derive(cases: &[CaseResult]) -> (Totals, BTreeMap<Dimension, DimensionScore>) {
    let count = |f: &dyn Fn(&CaseResult) -> bool| {
        u32::try_from(cases.iter().filter(|c| f(c)).count()).unwrap_or(u32::MAX)
    };
    let totals = Totals {
        cases: u32::try_from(cases.len()).unwrap_or(u32::MAX),
        scored: count(&|c| c.scored()),
        passed: count(&|c| c.verdict == Verdict::Pass),
        failed: count(&|c| c.verdict == Verdict::Fail),
        unscoreable: count(&|c| c.verdict == Verdict::Unscoreable),
        score_ppm: mean(cases.iter().filter(|c| c.scored()).map(|c| c.score_ppm)),
        run_cost_micros: cases.iter().map(|c| c.run_cost_micros).sum(),
        judge_cost_micros: cases.iter().map(|c| c.judge_cost_micros).sum(),
        paid_calls: cases.iter().map(|c| u64::from(c.paid_calls)).sum(),
    };
    let mut dimensions: BTreeMap<Dimension, DimensionScore> = BTreeMap::new();
    let mut sums: BTreeMap<Dimension, u64> = BTreeMap::new();
    for c in cases {
        // A dimension listed twice on a case counts once.
        let mut seen = std::collections::BTreeSet::new();
        for d in c.dimensions.iter().filter(|d| seen.insert(**d)) {
            let s = dimensions.entry(*d).or_default();
            s.cases += 1;
            match c.verdict {
                Verdict::Unscoreable => s.unscoreable += 1,
                v => {
                    s.scored += 1;
                    s.passed += u32::from(v == Verdict::Pass);
                    *sums.entry(*d).or_default() += u64::from(c.score_ppm);
                }
            }
        }
    }
    for (d, s) in &mut dimensions {
        s.score_ppm = sums
            .get(d)
            .copied()
            .unwrap_or(0)
            .checked_div(u64::from(s.scored))
            .map_or(0, |m| u32::try_from(m).unwrap_or(PPM));
    }
    (totals, dimensions)
}

/// A score as a fraction, for people.
pub fn fraction(ppm: u32) -> f64 {
    f64::from(ppm) / f64::from(PPM)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn result(id: &str, dims: &[Dimension], verdict: Verdict, ppm: u32) -> CaseResult {
        CaseResult {
            case_id: id.into(),
            dimensions: dims.to_vec(),
            verdict,
            score_ppm: ppm,
            reason: None,
            grades: vec![],
            run_id: "r".into(),
            run_status: "completed".into(),
            latency_ms: None,
            ttft_ms: None,
            tokens: 0,
            run_cost_micros: 3,
            paid_calls: 0,
            judge_cost_micros: 1,
            recorded_at: Timestamp::from_unix_millis(0).expect("epoch"),
        }
    }

    #[test]
    fn totals_and_dimensions_come_from_the_cases_and_skip_unscoreable_ones_in_means() {
        use Dimension::*;
        let cases = [
            result("a", &[TaskCompletion, ToolSelection], Verdict::Pass, PPM),
            result("b", &[TaskCompletion], Verdict::Fail, 500_000),
            result(
                "c",
                &[TaskCompletion, DomainQuality],
                Verdict::Unscoreable,
                0,
            ),
            result("d", &[ToolSelection, ToolSelection], Verdict::Fail, 0),
        ];
        let (t, d) = derive(&cases);
        assert_eq!(
            t,
            Totals {
                cases: 4,
                scored: 3,
                passed: 1,
                failed: 2,
                unscoreable: 1,
                score_ppm: 500_000,
                run_cost_micros: 12,
                judge_cost_micros: 4,
                paid_calls: 0,
            }
        );
        assert_eq!(
            d[&TaskCompletion],
            DimensionScore {
                cases: 3,
                scored: 2,
                passed: 1,
                unscoreable: 1,
                score_ppm: 750_000
            }
        );
        assert_eq!(
            d[&ToolSelection].cases, 2,
            "a dimension listed twice counts once"
        );
        assert_eq!(d[&ToolSelection].score_ppm, 500_000);
        assert_eq!(
            d[&DomainQuality],
            DimensionScore {
                cases: 1,
                scored: 0,
                passed: 0,
                unscoreable: 1,
                score_ppm: 0
            }
        );
        assert_eq!(mean([1, 2].into_iter()), 1, "the floor of the mean");
    }
}
