//! The code graders: one per structural expectation kind, pure functions over what a run
//! recorded. What only prose shows goes to the [judge] instead.
//!
//! | kind | reads |
//! | --- | --- |
//! | `contains` | the assistant's text parts, with partial credit |
//! | `tool-called` / `tool-not-called` | tool-call parts (and, with `executed`, the tool's own results) |
//! | `requires-approval` | approval requests — the request, not the call: a call that ran before its approval was asked for did not require it |
//! | `cites-source` | citation parts and their fields |
//! | `structured-valid` | the structured-output part, validated against the agent's schema |
//! | `refuses` | a forbidden, rejected, expired or mismatched call, or a run waiting for approval; in prose only through the judge |
//! | `budget` | the run's own timings and usage |
//! | `ends` | the run's status and failure code |

use forge_core::part::Part;
use forge_core::run::{RunStatus, WaitReason};
use serde_json::Value;

use crate::dataset::{EndStatus, Expectation};
use crate::judge::{self, Prompt};
use crate::record::{Observed, REFUSAL_CODES, RunRecord};
use crate::score::{Grade, GraderRef, Outcome, PPM};

/// Each code grader's version. Bump one whenever it would grade the same evidence differently:
/// comparisons across a change are flagged.
pub const VERSIONS: [(&str, &str); 9] = [
    ("contains", "1"),
    ("tool-called", "1"),
    ("tool-not-called", "1"),
    ("requires-approval", "1"),
    ("cites-source", "1"),
    ("structured-valid", "1"),
    ("refuses", "1"),
    ("budget", "1"),
    ("ends", "1"),
];

/// The code grader of `kind`.
pub fn grader(kind: &str) -> GraderRef {
    let version = VERSIONS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or("0", |(_, v)| v);
    GraderRef {
        id: kind.into(),
        version: version.into(),
    }
}

/// What grading an expectation came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Graded {
    /// A code grader decided.
    Done(Grade),
    /// Only the judge can: the prompt to ask it with, the rubric, and the answer to judge.
    NeedsJudge {
        /// The expectation's kind.
        kind: &'static str,
        /// The judge's prompt.
        prompt: &'static Prompt,
        /// What a good answer does, for `judged`.
        rubric: Option<String>,
    },
}

fn scored(kind: &str, score_ppm: u32, detail: impl Into<String>) -> Graded {
    Graded::Done(Grade {
        kind: kind.into(),
        grader: grader(kind),
        outcome: Outcome::Scored {
            score_ppm,
            detail: detail.into(),
        },
        cost_micros: 0,
    })
}

fn pass_if(kind: &str, ok: bool, detail: impl Into<String>) -> Graded {
    scored(kind, if ok { PPM } else { 0 }, detail)
}

/// `n` of `of`, in parts per million.
fn ratio(n: usize, of: usize) -> u32 {
    if of == 0 {
        return PPM;
    }
    u32::try_from((n.min(of) as u64 * u64::from(PPM)) / of as u64).unwrap_or(PPM)
}

/// Grades one expectation against a run.
pub fn grade(expectation: &Expectation, run: &RunRecord, seen: &Observed) -> Graded {
    let kind = expectation.kind();
    match expectation {
        Expectation::Contains {
            values,
            case_sensitive,
        } => {
            let fold = |s: &str| {
                if *case_sensitive {
                    s.to_owned()
                } else {
                    s.to_lowercase()
                }
            };
            let text = fold(&seen.text);
            let missing: Vec<&String> =
                values.iter().filter(|v| !text.contains(&fold(v))).collect();
            let found = values.len() - missing.len();
            let detail = if missing.is_empty() {
                format!("mentions all {}", values.len())
            } else {
                format!("mentions {found} of {}; missing {missing:?}", values.len())
            };
            scored(kind, ratio(found, values.len()), detail)
        }
        Expectation::ToolCalled {
            tool,
            input,
            times,
            executed,
        } => {
            let matching = seen
                .calls(tool)
                .filter(|(_, c)| input.as_ref().is_none_or(|want| subset(want, &c.input)))
                .filter(|(_, c)| !executed || seen.ran(&c.tool_call_id.0))
                .count();
            let what = if *executed { "ran" } else { "was called" };
            match times {
                Some(n) => pass_if(
                    kind,
                    matching == *n as usize,
                    format!("{tool} {what} {matching} time(s), expected {n}"),
                ),
                None => pass_if(
                    kind,
                    matching > 0,
                    format!("{tool} {what} {matching} time(s)"),
                ),
            }
        }
        Expectation::ToolNotCalled {
            tool,
            executed_only,
        } => {
            let offending = seen
                .calls(tool)
                .filter(|(_, c)| !executed_only || seen.ran(&c.tool_call_id.0))
                .count();
            let what = if *executed_only { "ran" } else { "was called" };
            pass_if(
                kind,
                offending == 0,
                format!("{tool} {what} {offending} time(s)"),
            )
        }
        Expectation::RequiresApproval { tool } => {
            let calls: Vec<_> = seen.calls(tool).collect();
            if calls.is_empty() {
                return scored(
                    kind,
                    0,
                    format!("{tool} was never called: nothing to approve"),
                );
            }
            let approved_first = calls
                .iter()
                .filter(|(_, c)| {
                    let id = c.tool_call_id.0.as_str();
                    let asked = seen
                        .approvals
                        .iter()
                        .filter(|a| a.tool_call_id == id && a.tool_name == *tool)
                        .map(|a| a.seq)
                        .min();
                    let ran = seen
                        .results(id)
                        .filter(|(_, r)| r.tool_version.is_some())
                        .map(|(seq, _)| seq)
                        .min();
                    match (asked, ran) {
                        (Some(a), Some(r)) => a < r,
                        (Some(_), None) => true,
                        (None, _) => false,
                    }
                })
                .count();
            scored(
                kind,
                ratio(approved_first, calls.len()),
                format!(
                    "{approved_first} of {} call(s) of {tool} asked for approval before running",
                    calls.len()
                ),
            )
        }
        Expectation::CitesSource {
            source,
            excerpt,
            min,
            max,
        } => {
            let cited: Vec<_> = seen
                .parts
                .iter()
                .filter_map(|p| match &p.part {
                    Part::Citation(c) if c.source_id == *source => Some(c),
                    _ => None,
                })
                .collect();
            let good = cited
                .iter()
                .filter(|c| {
                    !c.source_version.is_empty()
                        && c.span.end > c.span.start
                        && !c.excerpt.is_empty()
                        && excerpt
                            .as_ref()
                            .is_none_or(|e| c.excerpt.contains(e.as_str()))
                })
                .count();
            match max {
                Some(max) if cited.len() > *max as usize => scored(
                    kind,
                    0,
                    format!(
                        "{} citation(s) of {source}, at most {max} allowed",
                        cited.len()
                    ),
                ),
                _ => scored(
                    kind,
                    ratio(good, *min as usize),
                    format!("{good} citation(s) of {source}, at least {min} wanted"),
                ),
            }
        }
        Expectation::StructuredValid => structured(run, seen),
        Expectation::Refuses { prose } => {
            let structural = seen
                .error_codes()
                .find(|c| REFUSAL_CODES.contains(c))
                .map(str::to_owned)
                .or_else(|| {
                    (run.status == RunStatus::Waiting(WaitReason::Approval))
                        .then(|| "approval_required".to_owned())
                });
            match (structural, prose) {
                (Some(code), _) => scored(kind, PPM, format!("refused structurally: {code}")),
                (None, true) => Graded::NeedsJudge {
                    kind: "refuses",
                    prompt: &judge::REFUSAL,
                    rubric: None,
                },
                (None, false) => scored(kind, 0, "no forbidden, rejected or pending call"),
            }
        }
        Expectation::Judged { rubric } => Graded::NeedsJudge {
            kind: "judged",
            prompt: &judge::QUALITY,
            rubric: Some(rubric.clone()),
        },
        Expectation::Budget {
            max_latency_ms,
            max_ttft_ms,
            max_cost_micros,
            max_tokens,
        } => {
            let checks = [
                ("latency_ms", *max_latency_ms, seen.latency_ms),
                ("ttft_ms", *max_ttft_ms, seen.ttft_ms),
                ("cost_micros", *max_cost_micros, Some(run.cost_micros)),
                ("tokens", *max_tokens, Some(run.usage.total_tokens())),
            ];
            let mut met = 0;
            let mut of = 0;
            let mut notes = Vec::new();
            for (name, max, actual) in checks {
                let Some(max) = max else { continue };
                of += 1;
                match actual {
                    Some(a) if a <= max => {
                        met += 1;
                        notes.push(format!("{name} {a} ≤ {max}"));
                    }
                    Some(a) => notes.push(format!("{name} {a} > {max}")),
                    None => notes.push(format!("{name} unknown (none produced)")),
                }
            }
            scored(kind, ratio(met, of), notes.join(", "))
        }
        Expectation::Ends { status, code } => {
            let actual = run.status;
            let status_ok = match status {
                EndStatus::Completed => actual == RunStatus::Completed,
                EndStatus::Failed => actual == RunStatus::Failed,
                EndStatus::Cancelled => actual == RunStatus::Cancelled,
                EndStatus::WaitingApproval => actual == RunStatus::Waiting(WaitReason::Approval),
                EndStatus::WaitingQuestion => actual == RunStatus::Waiting(WaitReason::Question),
            };
            let failure = run.failure.as_ref().map(|f| f.code.name());
            let code_ok = code.as_deref().is_none_or(|c| failure == Some(c));
            let detail = match failure {
                Some(f) => format!("ended {} ({f})", actual.name()),
                None => format!("ended {}", actual.name()),
            };
            pass_if(kind, status_ok && code_ok, detail)
        }
    }
}

fn structured(run: &RunRecord, seen: &Observed) -> Graded {
    let kind = "structured-valid";
    let Some(schema) = &run.output_schema else {
        return scored(kind, 0, "the agent has no output schema");
    };
    if run
        .failure
        .as_ref()
        .is_some_and(|f| f.code.name() == "structured_output_invalid")
    {
        return scored(kind, 0, "the run failed with structured_output_invalid");
    }
    let Some(value) = seen.parts.iter().rev().find_map(|p| match &p.part {
        Part::StructuredOutput(s) => Some(&s.value),
        _ => None,
    }) else {
        return scored(kind, 0, "the run has no structured output");
    };
    match jsonschema::validator_for(schema) {
        Err(e) => scored(kind, 0, format!("the output schema is invalid: {e}")),
        Ok(validator) => {
            let errors: Vec<String> = validator
                .iter_errors(value)
                .map(|e| e.to_string())
                .take(3)
                .collect();
            if errors.is_empty() {
                scored(kind, PPM, "valid against the output schema")
            } else {
                scored(kind, 0, format!("invalid: {}", errors.join("; ")))
            }
        }
    }
}

/// Whether every field of `want` is in `have` with an equal value (objects recursively).
pub fn subset(want: &Value, have: &Value) -> bool {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w
            .iter()
            .all(|(k, v)| h.get(k).is_some_and(|hv| subset(v, hv))),
        (w, h) => w == h,
    }
}
