//! Forge evaluation: quality measured from what runs record, not asserted.
//!
//! - [`dataset`]: datasets as versioned TOML or JSON files under `evals/` — cases with an input
//!   (agent, message, thread state, scope, sources), expectations, the [`Dimension`]s they count
//!   toward, and injected faults for recovery cases. Loading checks every case.
//! - [`record`]: [`RunRecord`], what a case's run left behind (its committed events, usage and
//!   cost), and [`Observed`], the parts, approvals and timings graders read from it.
//! - [`grade`]: one code grader per structural expectation kind (`contains` with partial
//!   credit, `tool-called`, `tool-not-called`, `requires-approval` read from the approval part,
//!   `cites-source`, `structured-valid`, structural `refuses`, `budget`, `ends`), each with a
//!   version recorded on its result.
//! - [`judge`]: the model judge for what only prose shows (a refusal in words, domain quality):
//!   pinned model, prompt and prompt version, temperature zero, and a durable cache keyed on
//!   (case, output, prompt version, model) whose hits cost nothing.
//! - [`score`]: case results, scoring runs and their totals, derived from the recorded case rows.
//! - [`ports`]: [`EvalStore`], implemented by every store adapter and held to one conformance
//!   suite (`forge_testkit::evals`), and the row mapping the SQL adapters share.
//! - [`harness`]: scoring a dataset through a [`CaseRunner`] (the real engine, in `forge eval`),
//!   recording each case by upsert so a resumed scoring run never counts a case twice.
//! - [`compare`](mod@compare): the regression report between two scoring runs, naming cases.
//! - [`gate`]: the release gate — [`evaluate_gate`], a pure function over scores, the baseline
//!   release, thresholds and an accountable override — and the committed trend.
//! - [`report`]: the tables `forge eval` and `forge gate` print.

#![deny(missing_docs)]

pub mod compare;
pub mod dataset;
pub mod dimension;
mod error;
pub mod gate;
pub mod grade;
pub mod harness;
pub mod judge;
pub mod ports;
pub mod record;
pub mod report;
pub mod score;

pub use compare::{Comparison, Movement, compare};
pub use dataset::{Case, Dataset, Expectation};
pub use dimension::Dimension;
pub use error::{Error, ErrorKind};
pub use gate::{
    GateInput, GateOutcome, GateReport, Override, Thresholds, Trend, TrendEntry, evaluate_gate,
};
pub use harness::{CaseRunner, Harness, Progress};
pub use judge::{Judge, JudgeKey, JudgeVerdict, Prompt};
pub use ports::EvalStore;
pub use record::{Observed, RunRecord};
pub use score::{
    CaseResult, DimensionScore, Grade, GraderRef, Outcome, PPM, ScoringRun, ScoringRunId,
    ScoringStatus, Totals, Verdict,
};
