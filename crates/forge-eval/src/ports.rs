//! The store port of evaluation, [`EvalStore`], and the row mapping its SQL adapters share.
//!
//! Its rules, which every adapter keeps and the `evals` conformance suite checks:
//! - everything is confined to the caller's tenant;
//! - [`EvalStore::record_case`] upserts on (scoring run, case): a resumed scoring run cannot
//!   count a case twice, and a re-scored case replaces its verdict; recording into a completed
//!   run re-opens it (its totals are cleared until it completes again), so a completed run's
//!   totals always agree with its rows;
//! - [`EvalStore::complete_scoring`] derives the totals and per-dimension scores from the
//!   recorded rows in one statement, exactly as [`crate::score::derive`] does; completing again
//!   recomputes;
//! - [`EvalStore::latest_scoring`] returns completed runs only, the newest by completion, ties
//!   broken by start, then id;
//! - judge verdicts are cached by their exact key, the first verdict kept.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::scope::Scope;
use forge_core::time::Timestamp;

use crate::judge::{JudgeKey, JudgeVerdict};
use crate::score::{CaseResult, ScoringRun, ScoringRunId};

/// Port: scoring runs, their case results, and the judge's verdict cache.
#[async_trait]
pub trait EvalStore: Send + Sync {
    /// Stores a new scoring run (of the caller's tenant, `running`); an id already stored is a
    /// conflict. A run of another tenant than the scope's is refused here
    /// ([`rules::check_tenant`]), for every adapter.
    async fn start_scoring(&self, scope: &Scope, run: &ScoringRun) -> Result<(), Error> {
        rules::check_tenant(scope, run)?;
        self.insert_scoring(scope, run).await
    }

    /// The adapter's write of [`EvalStore::start_scoring`], given a run already checked to be of
    /// the scope's tenant. Callers use `start_scoring`.
    async fn insert_scoring(&self, scope: &Scope, run: &ScoringRun) -> Result<(), Error>;

    /// Records a case's result by upsert on (run, case), re-opening a completed run.
    /// `NotFound` when the run is not the tenant's.
    async fn record_case(
        &self,
        scope: &Scope,
        run: ScoringRunId,
        result: &CaseResult,
    ) -> Result<(), Error>;

    /// Completes the run at `at`, deriving its totals from its recorded cases in one statement,
    /// and returns it.
    async fn complete_scoring(
        &self,
        scope: &Scope,
        run: ScoringRunId,
        at: Timestamp,
    ) -> Result<ScoringRun, Error>;

    /// A scoring run, or `None`.
    async fn scoring_run(
        &self,
        scope: &Scope,
        run: ScoringRunId,
    ) -> Result<Option<ScoringRun>, Error>;

    /// A run's case results, by case id.
    async fn case_results(
        &self,
        scope: &Scope,
        run: ScoringRunId,
    ) -> Result<Vec<CaseResult>, Error>;

    /// The newest completed scoring run of `dataset` (by completion, then start, then id).
    async fn latest_scoring(
        &self,
        scope: &Scope,
        dataset: &str,
    ) -> Result<Option<ScoringRun>, Error>;

    /// Scoring runs (of `dataset`, or all), newest started first, at most `limit`.
    async fn list_scoring(
        &self,
        scope: &Scope,
        dataset: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ScoringRun>, Error>;

    /// A cached verdict for exactly this input.
    async fn judgement(&self, scope: &Scope, key: &JudgeKey)
    -> Result<Option<JudgeVerdict>, Error>;

    /// Caches a verdict; a key already cached keeps its first verdict.
    async fn put_judgement(
        &self,
        scope: &Scope,
        key: &JudgeKey,
        verdict: &JudgeVerdict,
    ) -> Result<(), Error>;
}

/// The rules every adapter applies (memory and SQL alike), written once; the SQL stores' row
/// mapping is `forge_sql::eval`'s.
pub mod rules {
    use forge_core::Error;
    use forge_core::scope::Scope;

    use crate::score::{CaseResult, ScoringRun};

    /// Refuses a run of another tenant than `scope`'s.
    pub fn check_tenant(scope: &Scope, run: &ScoringRun) -> Result<(), Error> {
        if &run.tenant_id == scope.tenant_id() {
            Ok(())
        } else {
            Err(Error::invalid(
                "a scoring run must belong to the caller's tenant",
            ))
        }
    }

    /// The result as stored: dimensions sorted and unique, so a dimension counts once in
    /// every store's derivation.
    pub fn normalize(result: &CaseResult) -> CaseResult {
        let mut r = result.clone();
        r.dimensions.sort();
        r.dimensions.dedup();
        r
    }
}
