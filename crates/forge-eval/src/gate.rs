//! The release gate: a scoring run judged against thresholds and the last recorded release.
//!
//! [`evaluate_gate`] is the decision, a pure function — no clock, no store, no process exit —
//! that collects every failure before it returns (a gate re-run costs what the gate costs, so
//! one failure per run would be a real bill). `forge gate` only reads the files, prints, appends
//! to the trend and sets the exit code.
//!
//! - Thresholds are data ([`Thresholds`], `evals/thresholds.json`): a minimum and a rationale per
//!   dimension, an overall-mean backstop (many dimensions each a hair above their line is a way
//!   to degrade indefinitely), and the most cases allowed to regress (zero, and the file says
//!   why).
//! - A dimension can sit above its threshold while a case that passed in the baseline now
//!   fails: both are checked, and the case is named.
//! - The baseline is the newest release recorded in the trend — passed or overridden: what
//!   shipped — not the newest passing one (a regression shipped past the gate once must not
//!   be held against forever as if the release before it were still the standard), and never
//!   a failed gate (it shipped nothing; comparing with it would forgive its own regression on
//!   a re-run). Whether one is required is an input — the first release of a dataset has none
//!   to compare with; a later release without one has lost its comparison — and `forge gate`
//!   decides it from whether the trend has releases. Either way the thresholds apply.
//! - An override names who and why ([`Override`], both required, both trimmed). Overridden is
//!   its own outcome carrying the failures it overrode; on a green run an override changes
//!   nothing.
//! - The trend ([`Trend`], `evals/trend.json`) is committed and append-only; each small
//!   [`TrendEntry`] carries the thresholds in force, so "quality improved" and "the bar moved"
//!   read differently in its history.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::dataset::Dataset;
use crate::dimension::Dimension;
use crate::error::Error;
use crate::harness::Scored;
use crate::score::{PPM, ScoringStatus, Verdict, fraction};

/// A minimum with its reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Threshold {
    /// The lowest acceptable score, from 0 to 1.
    pub min: f64,
    /// Why this number: what a miss means.
    pub rationale: String,
}

impl Threshold {
    /// The minimum in parts per million.
    pub fn min_ppm(&self) -> u32 {
        (self.min * f64::from(PPM)).round() as u32
    }
}

/// The most regressed cases allowed, with its reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegressionLimit {
    /// Cases that passed in the baseline and may fail now.
    pub max: u32,
    /// Why.
    pub rationale: String,
}

/// The thresholds a release is held to (`evals/thresholds.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thresholds {
    /// What the numbers are, and who may change them.
    #[serde(default)]
    pub note: String,
    /// Per dimension.
    pub dimensions: BTreeMap<Dimension, Threshold>,
    /// The mean of the gated dimensions' scores.
    pub overall_mean: Threshold,
    /// Cases allowed to regress.
    pub max_regressed_cases: RegressionLimit,
}

impl Thresholds {
    /// Parses and checks thresholds: every minimum within [0, 1], every rationale stated.
    pub fn parse(text: &str, origin: &str) -> Result<Thresholds, Error> {
        let t: Thresholds =
            serde_json::from_str(text).map_err(|e| Error::invalid(origin, e.to_string()))?;
        let mut problems = Vec::new();
        let all = t
            .dimensions
            .iter()
            .map(|(d, th)| (d.name().to_owned(), th))
            .chain(std::iter::once((
                "overall_mean".to_owned(),
                &t.overall_mean,
            )));
        for (name, th) in all {
            if !(0.0..=1.0).contains(&th.min) {
                problems.push(format!("{name}: min {} is not between 0 and 1", th.min));
            }
            if th.rationale.trim().is_empty() {
                problems.push(format!("{name}: no rationale"));
            }
        }
        if t.max_regressed_cases.rationale.trim().is_empty() {
            problems.push("max_regressed_cases: no rationale".into());
        }
        if problems.is_empty() {
            Ok(t)
        } else {
            Err(Error::invalid(origin, problems.join("; ")))
        }
    }

    /// Reads and checks a thresholds file.
    pub fn load(path: &std::path::Path) -> Result<Thresholds, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        Thresholds::parse(&text, &path.display().to_string())
    }

    /// The dimensions `dataset` counts toward that have no threshold: each is a dimension that
    /// would silently not gate.
    pub fn ungated(&self, dataset: &Dataset) -> Vec<Dimension> {
        dataset
            .dimensions()
            .into_iter()
            .filter(|d| !self.dimensions.contains_key(d))
            .collect()
    }
}

/// A person's decision to ship past a failing gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Override {
    /// Who (in CI, the person who asked for the run).
    pub actor: String,
    /// Why, in their words.
    pub reason: String,
}

/// Why an override was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverrideError {
    /// One of the two was given without the other.
    #[error("half an override: {given} is set but {missing} is not; give both, or neither")]
    Half {
        /// The variable that is set.
        given: &'static str,
        /// The one that is not.
        missing: &'static str,
    },
    /// A field is empty once trimmed.
    #[error("{0} is blank: an override needs a name and a reason")]
    Blank(&'static str),
}

/// The variable naming who overrides.
pub const OVERRIDE_ACTOR: &str = "FORGE_GATE_OVERRIDE_ACTOR";
/// The variable saying why.
pub const OVERRIDE_REASON: &str = "FORGE_GATE_OVERRIDE_REASON";

impl Override {
    /// The override the two values make: none when neither is set; refused when only one is,
    /// or when either is blank once trimmed.
    pub fn from_values(
        actor: Option<&str>,
        reason: Option<&str>,
    ) -> Result<Option<Override>, OverrideError> {
        match (actor, reason) {
            (None, None) => Ok(None),
            (Some(_), None) => Err(OverrideError::Half {
                given: OVERRIDE_ACTOR,
                missing: OVERRIDE_REASON,
            }),
            (None, Some(_)) => Err(OverrideError::Half {
                given: OVERRIDE_REASON,
                missing: OVERRIDE_ACTOR,
            }),
            (Some(a), Some(r)) => {
                let (a, r) = (a.trim(), r.trim());
                if a.is_empty() {
                    return Err(OverrideError::Blank(OVERRIDE_ACTOR));
                }
                if r.is_empty() {
                    return Err(OverrideError::Blank(OVERRIDE_REASON));
                }
                Ok(Some(Override {
                    actor: a.to_owned(),
                    reason: r.to_owned(),
                }))
            }
        }
    }
}

/// How a gate ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateOutcome {
    /// Every check passed.
    Pass,
    /// At least one failed.
    Fail,
    /// At least one failed, and a person shipped past it: not a pass.
    Overridden,
}

impl GateOutcome {
    /// Its name.
    pub fn name(&self) -> &'static str {
        match self {
            GateOutcome::Pass => "pass",
            GateOutcome::Fail => "fail",
            GateOutcome::Overridden => "overridden",
        }
    }
}

/// One failed check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "check", rename_all = "snake_case")]
pub enum GateFailure {
    /// A dimension scored below its threshold.
    Dimension {
        /// The dimension.
        dimension: Dimension,
        /// Its score.
        score_ppm: u32,
        /// Its minimum.
        min_ppm: u32,
    },
    /// The mean of the gated dimensions is below the backstop.
    OverallMean {
        /// The mean.
        score_ppm: u32,
        /// Its minimum.
        min_ppm: u32,
    },
    /// Cases that passed in the baseline fail now, more than allowed.
    Regressed {
        /// The cases, by id.
        cases: Vec<String>,
        /// How many are allowed.
        max: u32,
    },
    /// The trend has releases, but none of this dataset to compare with.
    NoBaseline {
        /// The dataset.
        dataset: String,
    },
    /// The scoring run is not completed: its totals are partial.
    Incomplete,
    /// A dimension with a threshold has cases, and none of them could be scored (no judge, or
    /// `--judge none`): the release would ship with it unmeasured.
    Unmeasured {
        /// The dimension.
        dimension: Dimension,
        /// Its cases.
        cases: u32,
    },
    /// Cases of the baseline are gone while the dataset's version stayed the same: deleting a
    /// failing case is not a way past the gate. Changing the version says the dataset changed
    /// on purpose (and the report says so).
    CasesRemoved {
        /// The cases, by id.
        cases: Vec<String>,
        /// The dataset's version, in the baseline and now.
        version: u32,
    },
}

impl std::fmt::Display for GateFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GateFailure::Dimension {
                dimension,
                score_ppm,
                min_ppm,
            } => write!(
                f,
                "{dimension} scored {:.3}, below its threshold {:.3}",
                fraction(*score_ppm),
                fraction(*min_ppm)
            ),
            GateFailure::OverallMean { score_ppm, min_ppm } => write!(
                f,
                "the overall mean {:.3} is below {:.3}",
                fraction(*score_ppm),
                fraction(*min_ppm)
            ),
            GateFailure::Regressed { cases, max } => write!(
                f,
                "{} case(s) passed in the baseline and fail now (at most {max} allowed): {}",
                cases.len(),
                cases.join(", ")
            ),
            GateFailure::NoBaseline { dataset } => write!(
                f,
                "the trend has releases but none of {dataset}: the regression check would be lost (gate its first release deliberately, with --first-release)"
            ),
            GateFailure::Incomplete => write!(f, "the scoring run is not completed"),
            GateFailure::Unmeasured { dimension, cases } => write!(
                f,
                "{dimension} has a threshold and none of its {cases} case(s) could be scored: it \
                 is unmeasured (give a judge; --judge none leaves it so)"
            ),
            GateFailure::CasesRemoved { cases, version } => write!(
                f,
                "{} case(s) of the baseline are gone and the dataset is still version {version}: \
                 {} (raise the dataset's version if the change is deliberate)",
                cases.len(),
                cases.join(", ")
            ),
        }
    }
}

/// What the gate decided, with everything it found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateReport {
    /// The outcome.
    pub outcome: GateOutcome,
    /// Every failed check (also on an overridden gate: what the override overrode).
    pub failures: Vec<GateFailure>,
    /// What does not fail the gate but must be seen: ungated dimensions, unscoreable cases,
    /// removed cases.
    pub warnings: Vec<String>,
    /// Each gated dimension's score and minimum.
    pub dimensions: BTreeMap<Dimension, (u32, u32)>,
    /// The mean of the gated dimensions' scores.
    pub mean_ppm: u32,
    /// Cases that passed in the baseline and fail now.
    pub regressed: Vec<String>,
    /// The baseline compared with, by label.
    pub baseline: Option<String>,
    /// The override, when one was applied.
    pub overridden_by: Option<Override>,
}

/// One release in the trend: small (case ids, no verdicts), with the thresholds it was judged
/// against.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrendEntry {
    /// The dataset.
    pub dataset: String,
    /// Its version.
    pub dataset_version: u32,
    /// Its hash.
    pub dataset_sha256: String,
    /// The release (a tag, a revision).
    pub label: String,
    /// When the scoring run completed.
    pub at: String,
    /// The outcome.
    pub outcome: GateOutcome,
    /// Each dimension's score, as a fraction.
    pub scores: BTreeMap<Dimension, f64>,
    /// The mean of the gated dimensions' scores.
    pub mean: f64,
    /// The thresholds in force: per dimension, the overall mean and the regression limit.
    pub thresholds: TrendThresholds,
    /// Every case scored, by id.
    pub cases: Vec<String>,
    /// The cases that did not pass (failed), by id.
    pub failed: Vec<String>,
    /// The cases that could not be scored, by id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unscoreable: Vec<String>,
    /// What failed, on a failed or overridden gate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<String>,
    /// Who shipped past it, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overridden_by: Option<Override>,
    /// What the scoring cost (the agents' model calls and the judge), in micro-units.
    pub cost_micros: u64,
}

/// The thresholds an entry was judged against.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrendThresholds {
    /// Per dimension.
    pub dimensions: BTreeMap<Dimension, f64>,
    /// The overall mean.
    pub overall_mean: f64,
    /// Cases allowed to regress.
    pub max_regressed_cases: u32,
}

/// The committed, append-only history of releases (`evals/trend.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Trend {
    /// Oldest first.
    pub entries: Vec<TrendEntry>,
}

impl Trend {
    /// Parses a trend file.
    pub fn parse(text: &str, origin: &str) -> Result<Trend, Error> {
        serde_json::from_str(text).map_err(|e| Error::invalid(origin, e.to_string()))
    }

    /// The baseline of `dataset`: its newest release (an entry that passed or was overridden;
    /// a failed gate released nothing).
    pub fn baseline(&self, dataset: &str) -> Option<&TrendEntry> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.dataset == dataset && e.outcome != GateOutcome::Fail)
    }

    /// Whether any release is recorded: then a dataset without a baseline has lost it.
    pub fn has_releases(&self) -> bool {
        self.entries.iter().any(|e| e.outcome != GateOutcome::Fail)
    }

    /// The file's text: one entry per line, so each release is one line of the diff.
    pub fn render(&self) -> Result<String, Error> {
        let mut out = String::from("{\"entries\": [\n");
        for (i, e) in self.entries.iter().enumerate() {
            let line =
                serde_json::to_string(e).map_err(|e| Error::invalid("trend", e.to_string()))?;
            out.push_str("  ");
            out.push_str(&line);
            out.push_str(if i + 1 == self.entries.len() {
                "\n"
            } else {
                ",\n"
            });
        }
        out.push_str("]}\n");
        Ok(out)
    }
}

/// What the gate decides on.
#[derive(Debug, Clone, Copy)]
pub struct GateInput<'a> {
    /// The scoring run and its cases.
    pub scores: &'a Scored,
    /// The dataset's newest release in the trend, if any ([`Trend::baseline`]).
    pub baseline: Option<&'a TrendEntry>,
    /// Whether a missing baseline fails (a later release), or not (a first release).
    pub require_baseline: bool,
    /// The thresholds.
    pub thresholds: &'a Thresholds,
    /// A person's override, already checked.
    pub override_by: Option<&'a Override>,
}

/// Decides the gate: every check run, every failure collected.
pub fn evaluate_gate(input: GateInput<'_>) -> GateReport {
    let GateInput {
        scores,
        baseline,
        require_baseline,
        thresholds,
        override_by,
    } = input;
    let mut failures = Vec::new();
    let mut warnings = Vec::new();
    if scores.run.status != ScoringStatus::Completed {
        failures.push(GateFailure::Incomplete);
    }
    let mut dimensions = BTreeMap::new();
    for (d, s) in &scores.run.dimensions {
        let Some(t) = thresholds.dimensions.get(d) else {
            warnings.push(format!(
                "{d} has no threshold: its {} case(s) gate nothing",
                s.cases
            ));
            continue;
        };
        if s.scored == 0 {
            if s.cases > 0 {
                failures.push(GateFailure::Unmeasured {
                    dimension: *d,
                    cases: s.cases,
                });
            }
            continue;
        }
        let min = t.min_ppm();
        dimensions.insert(*d, (s.score_ppm, min));
        if s.score_ppm < min {
            failures.push(GateFailure::Dimension {
                dimension: *d,
                score_ppm: s.score_ppm,
                min_ppm: min,
            });
        }
    }
    let mean_ppm = crate::score::mean(dimensions.values().map(|(s, _)| *s));
    let mean_min = thresholds.overall_mean.min_ppm();
    if !dimensions.is_empty() && mean_ppm < mean_min {
        failures.push(GateFailure::OverallMean {
            score_ppm: mean_ppm,
            min_ppm: mean_min,
        });
    }
    let unscoreable: Vec<&str> = scores
        .cases
        .iter()
        .filter(|c| c.verdict == Verdict::Unscoreable)
        .map(|c| c.case_id.as_str())
        .collect();
    if !unscoreable.is_empty() {
        warnings.push(format!(
            "{} case(s) could not be scored (no judge?): {}",
            unscoreable.len(),
            unscoreable.join(", ")
        ));
    }
    let mut regressed = Vec::new();
    match baseline {
        None if require_baseline => failures.push(GateFailure::NoBaseline {
            dataset: scores.run.dataset.clone(),
        }),
        None => warnings.push("a first release: no baseline to compare with".into()),
        Some(b) => {
            let passed_before: BTreeSet<&str> = b
                .cases
                .iter()
                .map(String::as_str)
                .filter(|id| {
                    !b.failed.iter().any(|f| f == id) && !b.unscoreable.iter().any(|u| u == id)
                })
                .collect();
            regressed = scores
                .cases
                .iter()
                .filter(|c| {
                    c.verdict == Verdict::Fail && passed_before.contains(c.case_id.as_str())
                })
                .map(|c| c.case_id.clone())
                .collect();
            regressed.sort();
            if regressed.len() > thresholds.max_regressed_cases.max as usize {
                failures.push(GateFailure::Regressed {
                    cases: regressed.clone(),
                    max: thresholds.max_regressed_cases.max,
                });
            }
            let now: BTreeSet<&str> = scores.cases.iter().map(|c| c.case_id.as_str()).collect();
            let removed: Vec<&str> = b
                .cases
                .iter()
                .map(String::as_str)
                .filter(|id| !now.contains(id))
                .collect();
            if !removed.is_empty() && b.dataset_version == scores.run.dataset_version {
                failures.push(GateFailure::CasesRemoved {
                    cases: removed.iter().map(|c| (*c).to_owned()).collect(),
                    version: b.dataset_version,
                });
            } else if !removed.is_empty() {
                warnings.push(format!(
                    "{} case(s) of the baseline are gone (not an improvement), allowed because \
                     the dataset's version changed from {} to {}: {}",
                    removed.len(),
                    b.dataset_version,
                    scores.run.dataset_version,
                    removed.join(", ")
                ));
            }
            if b.dataset_version != scores.run.dataset_version {
                warnings.push(format!(
                    "the baseline scored dataset version {}, this run version {}",
                    b.dataset_version, scores.run.dataset_version
                ));
            }
        }
    }
    let outcome = match (failures.is_empty(), override_by) {
        (true, _) => GateOutcome::Pass,
        (false, Some(_)) => GateOutcome::Overridden,
        (false, None) => GateOutcome::Fail,
    };
    GateReport {
        overridden_by: (outcome == GateOutcome::Overridden)
            .then(|| override_by.cloned())
            .flatten(),
        outcome,
        failures,
        warnings,
        dimensions,
        mean_ppm,
        regressed,
        baseline: baseline.map(|b| b.label.clone()),
    }
}

/// The trend entry recording `report` for `scores`.
pub fn trend_entry(scores: &Scored, report: &GateReport, thresholds: &Thresholds) -> TrendEntry {
    let ids = |v: Verdict| {
        scores
            .cases
            .iter()
            .filter(|c| c.verdict == v)
            .map(|c| c.case_id.clone())
            .collect::<Vec<_>>()
    };
    let totals = scores.run.totals.unwrap_or_default();
    TrendEntry {
        dataset: scores.run.dataset.clone(),
        dataset_version: scores.run.dataset_version,
        dataset_sha256: scores.run.dataset_sha256.clone(),
        label: scores.run.label.clone(),
        at: scores
            .run
            .completed_at
            .map_or_else(String::new, |t| t.to_string()),
        outcome: report.outcome,
        scores: scores
            .run
            .dimensions
            .iter()
            .map(|(d, s)| (*d, round(fraction(s.score_ppm))))
            .collect(),
        mean: round(fraction(report.mean_ppm)),
        thresholds: TrendThresholds {
            dimensions: thresholds
                .dimensions
                .iter()
                .map(|(d, t)| (*d, t.min))
                .collect(),
            overall_mean: thresholds.overall_mean.min,
            max_regressed_cases: thresholds.max_regressed_cases.max,
        },
        cases: scores.cases.iter().map(|c| c.case_id.clone()).collect(),
        failed: ids(Verdict::Fail),
        unscoreable: ids(Verdict::Unscoreable),
        failures: report.failures.iter().map(|f| f.to_string()).collect(),
        overridden_by: report.overridden_by.clone(),
        cost_micros: totals.run_cost_micros + totals.judge_cost_micros,
    }
}

fn round(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}
