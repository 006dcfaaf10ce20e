//! Scoring a dataset: each case run through a [`CaseRunner`], graded, and recorded as it
//! finishes; then the scoring run completed, its totals derived from what was recorded.
//!
//! Cases are recorded by upsert, so a scoring run interrupted half-way is resumed by naming it:
//! the cases it already recorded are not run again, and none is counted twice. A case the
//! runner cannot execute stops the scoring run with an error (resume it once fixed): a case
//! nobody ran is not evidence of anything, and counting it as a failure would blame the agent
//! for the harness.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::id::IdGenerator;
use forge_core::scope::Scope;
use forge_core::time::Clock;
use futures_util::StreamExt;

use crate::dataset::{Case, Dataset};
use crate::error::Error;
use crate::grade::{self, Graded};
use crate::judge::Judge;
use crate::ports::EvalStore;
use crate::record::{Observed, RunRecord};
use crate::score::{CaseResult, Grade, GraderRef, Outcome, ScoringRun, ScoringRunId};

/// Executes a case and returns what its run recorded.
#[async_trait]
pub trait CaseRunner: Send + Sync {
    /// Runs `case` to its end (or until its time runs out: the run is then graded as it stands).
    async fn run_case(&self, dataset: &Dataset, case: &Case) -> Result<RunRecord, Error>;
}

/// What scoring reports as it goes.
#[derive(Debug)]
pub enum Progress<'a> {
    /// Scoring begins: `total` cases, of which `skipped` were recorded before (a resume).
    Started {
        /// The scoring run.
        run: &'a ScoringRun,
        /// Cases in the dataset.
        total: usize,
        /// Already recorded.
        skipped: usize,
    },
    /// A case was recorded.
    Case {
        /// Its result.
        result: &'a CaseResult,
        /// Cases recorded so far (including skipped ones).
        done: usize,
        /// Cases in the dataset.
        total: usize,
    },
}

/// A completed scoring run and its case results.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Scored {
    /// The run, with its totals.
    pub run: ScoringRun,
    /// Its cases, by id.
    pub cases: Vec<CaseResult>,
}

/// Scores datasets into a store, as one scope.
pub struct Harness {
    store: Arc<dyn EvalStore>,
    scope: Scope,
    judge: Option<Arc<Judge>>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGenerator>,
    concurrency: usize,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("scope", &self.scope)
            .field("judge", &self.judge)
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

impl Harness {
    /// A harness recording into `store` as `scope`, with time and ids from `clock` and `ids`,
    /// one case at a time and no judge.
    pub fn new(
        store: Arc<dyn EvalStore>,
        scope: Scope,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Harness {
        Harness {
            store,
            scope,
            judge: None,
            clock,
            ids,
            concurrency: 1,
        }
    }

    /// Judges what code cannot grade with `judge`.
    pub fn judge(mut self, judge: Arc<Judge>) -> Self {
        self.judge = Some(judge);
        self
    }

    /// Runs up to `n` cases at once.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Grades one case's run: every expectation by its code grader, or by the judge where only
    /// prose shows it (unscoreable, with the reason, when there is no judge).
    pub async fn grade(&self, case: &Case, run: &RunRecord) -> Result<CaseResult, Error> {
        let seen = Observed::of(run);
        let mut grades = Vec::with_capacity(case.expect.len());
        for e in &case.expect {
            let g = match grade::grade(e, run, &seen) {
                Graded::Done(g) => g,
                Graded::NeedsJudge {
                    kind,
                    prompt,
                    rubric,
                } => match &self.judge {
                    Some(judge) => {
                        judge
                            .grade(
                                &self.scope,
                                kind,
                                prompt,
                                &case.id,
                                &case.message,
                                rubric.as_deref(),
                                &seen.text,
                            )
                            .await?
                    }
                    None => Grade {
                        kind: kind.into(),
                        grader: GraderRef {
                            id: format!("judge:{}", prompt.id),
                            version: format!("{}:none", prompt.tag()),
                        },
                        outcome: Outcome::Unscoreable {
                            reason: "it needs a judge and none is configured".into(),
                        },
                        cost_micros: 0,
                    },
                },
            };
            grades.push(g);
        }
        Ok(CaseResult::from_grades(
            case.id.clone(),
            case.dimensions.clone(),
            grades,
            run,
            &seen,
            self.clock.now(),
        ))
    }

    /// Scores `dataset` through `runner` as a new scoring run labelled `label`, or resumes
    /// `resume` (running only the cases it has not recorded); completes it and returns it with
    /// its cases.
    pub async fn score(
        &self,
        dataset: &Dataset,
        runner: &dyn CaseRunner,
        label: &str,
        resume: Option<ScoringRunId>,
        progress: &(dyn Fn(Progress<'_>) + Send + Sync),
    ) -> Result<Scored, Error> {
        let (run, recorded) = match resume {
            None => {
                let run = ScoringRun::start(
                    ScoringRunId(self.ids.next_uuid()),
                    self.scope.tenant_id().clone(),
                    dataset,
                    label,
                    self.clock.now(),
                );
                self.store.start_scoring(&self.scope, &run).await?;
                (run, BTreeSet::new())
            }
            Some(id) => {
                let run = self
                    .store
                    .scoring_run(&self.scope, id)
                    .await?
                    .ok_or_else(|| forge_core::Error::not_found("scoring run", id))?;
                if run.dataset != dataset.name || run.dataset_sha256 != dataset.sha256 {
                    return Err(Error::invalid(
                        dataset.path.display().to_string(),
                        format!(
                            "scoring run {id} scored {} {}; this dataset is {} {}: start a new run",
                            run.dataset, run.dataset_sha256, dataset.name, dataset.sha256
                        ),
                    ));
                }
                let done: BTreeSet<String> = self
                    .store
                    .case_results(&self.scope, id)
                    .await?
                    .into_iter()
                    .map(|c| c.case_id)
                    .collect();
                (run, done)
            }
        };
        let total = dataset.cases.len();
        let pending: Vec<&Case> = dataset
            .cases
            .iter()
            .filter(|c| !recorded.contains(&c.id))
            .collect();
        let skipped = total - pending.len();
        progress(Progress::Started {
            run: &run,
            total,
            skipped,
        });
        let mut results = futures_util::stream::iter(pending)
            .map(|case| async move {
                let record = runner.run_case(dataset, case).await?;
                let result = self.grade(case, &record).await?;
                self.store.record_case(&self.scope, run.id, &result).await?;
                Ok::<_, Error>(result)
            })
            .buffer_unordered(self.concurrency);
        let mut done = skipped;
        while let Some(result) = results.next().await {
            let result = result?;
            done += 1;
            progress(Progress::Case {
                result: &result,
                done,
                total,
            });
        }
        drop(results);
        let run = self
            .store
            .complete_scoring(&self.scope, run.id, self.clock.now())
            .await?;
        let cases = self.store.case_results(&self.scope, run.id).await?;
        Ok(Scored { run, cases })
    }
}
