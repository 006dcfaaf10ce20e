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
    /// ([`rows::check_tenant`]), for every adapter.
    async fn start_scoring(&self, scope: &Scope, run: &ScoringRun) -> Result<(), Error> {
        rows::check_tenant(scope, run)?;
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

/// Row mapping every adapter shares: a scoring run's columns, and results and verdicts stored
/// whole as JSON beside the columns completion derives totals from.
pub mod rows {
    use std::collections::BTreeMap;

    use forge_core::Error;
    use forge_core::scope::{Scope, TenantId};
    use forge_core::time::Timestamp;

    use crate::dimension::Dimension;
    use crate::judge::JudgeVerdict;
    use crate::score::{
        CaseResult, DimensionScore, ScoringRun, ScoringRunId, ScoringStatus, Totals,
    };

    /// A result as the JSON value stored beside its columns.
    pub fn case_value(result: &CaseResult) -> Result<serde_json::Value, Error> {
        serde_json::to_value(result).map_err(|e| Error::invalid(format!("case result: {e}")))
    }

    /// A verdict as the JSON value stored.
    pub fn verdict_value(v: &JudgeVerdict) -> Result<serde_json::Value, Error> {
        serde_json::to_value(v).map_err(|e| Error::invalid(format!("judge verdict: {e}")))
    }

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

    /// A result's stored body.
    pub fn encode_case(result: &CaseResult) -> Result<String, Error> {
        serde_json::to_string(result).map_err(|e| Error::invalid(format!("case result: {e}")))
    }

    /// A stored result.
    pub fn decode_case(body: &str) -> Result<CaseResult, Error> {
        serde_json::from_str(body).map_err(|e| Error::invalid(format!("stored case result: {e}")))
    }

    /// A result's dimensions, as the JSON array the derivation reads.
    pub fn encode_dimensions(result: &CaseResult) -> Result<String, Error> {
        serde_json::to_string(&result.dimensions)
            .map_err(|e| Error::invalid(format!("case dimensions: {e}")))
    }

    /// A verdict's stored body.
    pub fn encode_verdict(v: &JudgeVerdict) -> Result<String, Error> {
        serde_json::to_string(v).map_err(|e| Error::invalid(format!("judge verdict: {e}")))
    }

    /// A stored verdict.
    pub fn decode_verdict(body: &str) -> Result<JudgeVerdict, Error> {
        serde_json::from_str(body).map_err(|e| Error::invalid(format!("stored judge verdict: {e}")))
    }

    /// A scoring run's columns, as read back.
    #[derive(Debug, Clone)]
    pub struct RunColumns {
        /// `id`.
        pub id: uuid::Uuid,
        /// `tenant_id`.
        pub tenant_id: String,
        /// `dataset`.
        pub dataset: String,
        /// `dataset_version`.
        pub dataset_version: i64,
        /// `dataset_sha256`.
        pub dataset_sha256: String,
        /// `label`.
        pub label: String,
        /// `started_at`.
        pub started_at: Timestamp,
        /// `completed_at`.
        pub completed_at: Option<Timestamp>,
        /// `status`.
        pub status: String,
        /// `totals`, JSON.
        pub totals: Option<String>,
        /// `dimensions`, JSON.
        pub dimensions: Option<String>,
    }

    /// The run the columns describe.
    pub fn decode_run(c: RunColumns) -> Result<ScoringRun, Error> {
        let bad = |what: &str, e: String| Error::invalid(format!("stored scoring run {what}: {e}"));
        let status = match c.status.as_str() {
            "running" => ScoringStatus::Running,
            "completed" => ScoringStatus::Completed,
            other => return Err(bad("status", other.to_owned())),
        };
        let totals: Option<Totals> = c
            .totals
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| bad("totals", e.to_string()))?;
        let dimensions: BTreeMap<Dimension, DimensionScore> = c
            .dimensions
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| bad("dimensions", e.to_string()))?
            .unwrap_or_default();
        Ok(ScoringRun {
            id: ScoringRunId(c.id),
            tenant_id: TenantId::new(c.tenant_id).map_err(|e| bad("tenant", e.to_string()))?,
            dataset: c.dataset,
            dataset_version: u32::try_from(c.dataset_version)
                .map_err(|e| bad("dataset version", e.to_string()))?,
            dataset_sha256: c.dataset_sha256,
            label: c.label,
            started_at: c.started_at,
            completed_at: c.completed_at,
            status,
            totals,
            dimensions,
        })
    }
}
