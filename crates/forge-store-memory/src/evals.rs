//! Scoring runs, case results and judge verdicts in memory: the executable specification of
//! [`EvalStore`]. Completion derives totals with [`forge_eval::score::derive`], the rule the SQL
//! adapters express in one statement.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use forge_core::Error;
use forge_core::scope::{Scope, TenantId};
use forge_core::time::Timestamp;
use forge_eval::judge::{JudgeKey, JudgeVerdict};
use forge_eval::ports::{EvalStore, rules};
use forge_eval::score::{CaseResult, ScoringRun, ScoringRunId, ScoringStatus, derive};

use crate::MemoryStore;

/// The evaluation state.
#[derive(Debug, Default)]
pub(crate) struct Evals {
    runs: BTreeMap<(TenantId, ScoringRunId), ScoringRun>,
    /// Results by run and case id (ordered, so listings are by case id).
    cases: BTreeMap<(TenantId, ScoringRunId, String), CaseResult>,
    verdicts: HashMap<(TenantId, JudgeKey), JudgeVerdict>,
}

fn missing(run: ScoringRunId) -> Error {
    Error::not_found("scoring run", run)
}

#[async_trait]
impl EvalStore for MemoryStore {
    async fn insert_scoring(&self, scope: &Scope, run: &ScoringRun) -> Result<(), Error> {
        let mut st = self.lock();
        let key = (scope.tenant_id().clone(), run.id);
        if st.evals.runs.contains_key(&key) {
            return Err(Error::invalid(format!("scoring run {} exists", run.id)));
        }
        let mut stored = run.clone();
        stored.reopen();
        st.evals.runs.insert(key, stored);
        Ok(())
    }

    async fn record_case(
        &self,
        scope: &Scope,
        run: ScoringRunId,
        result: &CaseResult,
    ) -> Result<(), Error> {
        let tenant = scope.tenant_id().clone();
        let mut st = self.lock();
        let stored = st
            .evals
            .runs
            .get_mut(&(tenant.clone(), run))
            .ok_or_else(|| missing(run))?;
        stored.reopen();
        st.evals.cases.insert(
            (tenant, run, result.case_id.clone()),
            rules::normalize(result),
        );
        Ok(())
    }

    async fn complete_scoring(
        &self,
        scope: &Scope,
        run: ScoringRunId,
        at: Timestamp,
    ) -> Result<ScoringRun, Error> {
        let tenant = scope.tenant_id().clone();
        let mut st = self.lock();
        let cases: Vec<CaseResult> = st
            .evals
            .cases
            .iter()
            .filter(|((t, r, _), _)| *t == tenant && *r == run)
            .map(|(_, c)| c.clone())
            .collect();
        let stored = st
            .evals
            .runs
            .get_mut(&(tenant, run))
            .ok_or_else(|| missing(run))?;
        let (totals, dimensions) = derive(&cases);
        stored.status = ScoringStatus::Completed;
        stored.completed_at = Some(at);
        stored.totals = Some(totals);
        stored.dimensions = dimensions;
        Ok(stored.clone())
    }

    async fn scoring_run(
        &self,
        scope: &Scope,
        run: ScoringRunId,
    ) -> Result<Option<ScoringRun>, Error> {
        Ok(self
            .lock()
            .evals
            .runs
            .get(&(scope.tenant_id().clone(), run))
            .cloned())
    }

    async fn case_results(
        &self,
        scope: &Scope,
        run: ScoringRunId,
    ) -> Result<Vec<CaseResult>, Error> {
        let tenant = scope.tenant_id();
        Ok(self
            .lock()
            .evals
            .cases
            .iter()
            .filter(|((t, r, _), _)| t == tenant && *r == run)
            .map(|(_, c)| c.clone())
            .collect())
    }

    async fn latest_scoring(
        &self,
        scope: &Scope,
        dataset: &str,
    ) -> Result<Option<ScoringRun>, Error> {
        let tenant = scope.tenant_id();
        Ok(self
            .lock()
            .evals
            .runs
            .iter()
            .filter(|((t, _), r)| {
                t == tenant && r.dataset == dataset && r.status == ScoringStatus::Completed
            })
            .map(|(_, r)| r)
            .max_by(|a, b| {
                a.completed_at
                    .cmp(&b.completed_at)
                    .then(a.started_at.cmp(&b.started_at))
                    .then(a.id.cmp(&b.id))
            })
            .cloned())
    }

    async fn list_scoring(
        &self,
        scope: &Scope,
        dataset: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ScoringRun>, Error> {
        let tenant = scope.tenant_id();
        let mut runs: Vec<ScoringRun> = self
            .lock()
            .evals
            .runs
            .iter()
            .filter(|((t, _), r)| t == tenant && dataset.is_none_or(|d| r.dataset == d))
            .map(|(_, r)| r.clone())
            .collect();
        runs.sort_by(|a, b| b.started_at.cmp(&a.started_at).then(b.id.cmp(&a.id)));
        runs.truncate(limit);
        Ok(runs)
    }

    async fn judgement(
        &self,
        scope: &Scope,
        key: &JudgeKey,
    ) -> Result<Option<JudgeVerdict>, Error> {
        Ok(self
            .lock()
            .evals
            .verdicts
            .get(&(scope.tenant_id().clone(), key.clone()))
            .cloned())
    }

    async fn put_judgement(
        &self,
        scope: &Scope,
        key: &JudgeKey,
        verdict: &JudgeVerdict,
    ) -> Result<(), Error> {
        self.lock()
            .evals
            .verdicts
            .entry((scope.tenant_id().clone(), key.clone()))
            .or_insert_with(|| verdict.clone());
        Ok(())
    }
}
