//! Scoring runs, case results and judge verdicts on SQLite. Completion derives the totals and
//! per-dimension scores from the case rows in one `UPDATE` (`json_each` over each case's
//! dimensions), the rule `forge_eval::score::derive` states.

use async_trait::async_trait;
use forge_core::Error;
use forge_core::scope::Scope;
use forge_core::time::Timestamp;
use forge_eval::judge::{JudgeKey, JudgeVerdict};
use forge_eval::ports::{EvalStore, rules};
use forge_eval::score::{CaseResult, ScoringRun, ScoringRunId};
use forge_sql::eval;
use sqlx::sqlite::SqliteRow;

use crate::SqliteStore;
use crate::rows::db_error;

const COLUMNS: &str = "id, tenant_id, dataset, dataset_version, dataset_sha256, label, started_at, \
                       completed_at, status, totals, dimensions";

/// Derives a run's totals from its case rows: `$1` tenant, `$2` run, `$3` completion time.
const COMPLETE: &str = "UPDATE forge_eval_runs SET status = 'completed', completed_at = $3,
    totals = (
        SELECT json_object(
            'cases', count(*),
            'scored', coalesce(sum(verdict <> 'unscoreable'), 0),
            'passed', coalesce(sum(verdict = 'pass'), 0),
            'failed', coalesce(sum(verdict = 'fail'), 0),
            'unscoreable', coalesce(sum(verdict = 'unscoreable'), 0),
            'score_ppm', coalesce(sum(CASE WHEN verdict <> 'unscoreable' THEN score_ppm END)
                / nullif(sum(verdict <> 'unscoreable'), 0), 0),
            'run_cost_micros', coalesce(sum(run_cost_micros), 0),
            'judge_cost_micros', coalesce(sum(judge_cost_micros), 0),
            'paid_calls', coalesce(sum(paid_calls), 0))
        FROM forge_eval_cases WHERE tenant_id = $1 AND run_id = $2),
    dimensions = (
        SELECT coalesce(json_group_object(dimension, json(stats)), '{}') FROM (
            SELECT d.value AS dimension, json_object(
                'cases', count(*),
                'scored', sum(c.verdict <> 'unscoreable'),
                'passed', sum(c.verdict = 'pass'),
                'unscoreable', sum(c.verdict = 'unscoreable'),
                'score_ppm', coalesce(sum(CASE WHEN c.verdict <> 'unscoreable' THEN c.score_ppm END)
                    / nullif(sum(c.verdict <> 'unscoreable'), 0), 0)) AS stats
            FROM forge_eval_cases c, json_each(c.dimensions) d
            WHERE c.tenant_id = $1 AND c.run_id = $2
            GROUP BY d.value))
    WHERE tenant_id = $1 AND id = $2
    RETURNING id, tenant_id, dataset, dataset_version, dataset_sha256, label, started_at,
        completed_at, status, totals, dimensions";

fn decode(row: &SqliteRow) -> Result<ScoringRun, Error> {
    eval::scoring_run(&crate::rows::Row(row))
}

#[async_trait]
impl EvalStore for SqliteStore {
    async fn insert_scoring(&self, scope: &Scope, run: &ScoringRun) -> Result<(), Error> {
        let inserted = sqlx::query(forge_sql::statements::EVAL_START_RUN)
            .bind(scope.tenant_id().as_str())
            .bind(run.id.to_string())
            .bind(&run.dataset)
            .bind(i64::from(run.dataset_version))
            .bind(&run.dataset_sha256)
            .bind(&run.label)
            .bind(run.started_at.unix_millis())
            .execute(&mut *self.conn().await?)
            .await
            .map_err(db_error)?
            .rows_affected();
        if inserted == 0 {
            return Err(Error::invalid(format!("scoring run {} exists", run.id)));
        }
        Ok(())
    }

    async fn record_case(
        &self,
        scope: &Scope,
        run: ScoringRunId,
        result: &CaseResult,
    ) -> Result<(), Error> {
        let result = rules::normalize(result);
        let (_gate, mut tx) = self.write_tx().await?;
        // Recording re-opens the run: its totals must agree with its rows.
        let reopened = sqlx::query(forge_sql::statements::EVAL_REOPEN_RUN)
            .bind(scope.tenant_id().as_str())
            .bind(run.to_string())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?
            .rows_affected();
        if reopened == 0 {
            return Err(Error::not_found("scoring run", run));
        }
        sqlx::query(forge_sql::statements::EVAL_UPSERT_CASE)
            .bind(scope.tenant_id().as_str())
            .bind(run.to_string())
            .bind(&result.case_id)
            .bind(result.verdict.name())
            .bind(i64::from(result.score_ppm))
            .bind(eval::encode_dimensions(&result)?)
            .bind(i64::try_from(result.run_cost_micros).unwrap_or(i64::MAX))
            .bind(i64::try_from(result.judge_cost_micros).unwrap_or(i64::MAX))
            .bind(i64::from(result.paid_calls))
            .bind(eval::encode_case(&result)?)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)
    }

    async fn complete_scoring(
        &self,
        scope: &Scope,
        run: ScoringRunId,
        at: Timestamp,
    ) -> Result<ScoringRun, Error> {
        let row = sqlx::query(COMPLETE)
            .bind(scope.tenant_id().as_str())
            .bind(run.to_string())
            .bind(at.unix_millis())
            .fetch_optional(&mut *self.conn().await?)
            .await
            .map_err(db_error)?
            .ok_or_else(|| Error::not_found("scoring run", run))?;
        decode(&row)
    }

    async fn scoring_run(
        &self,
        scope: &Scope,
        run: ScoringRunId,
    ) -> Result<Option<ScoringRun>, Error> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM forge_eval_runs WHERE tenant_id = $1 AND id = $2"
        )))
        .bind(scope.tenant_id().as_str())
        .bind(run.to_string())
        .fetch_optional(&mut *self.conn().await?)
        .await
        .map_err(db_error)?;
        row.as_ref().map(decode).transpose()
    }

    async fn case_results(
        &self,
        scope: &Scope,
        run: ScoringRunId,
    ) -> Result<Vec<CaseResult>, Error> {
        let bodies: Vec<String> = sqlx::query_scalar(
            "SELECT body FROM forge_eval_cases WHERE tenant_id = $1 AND run_id = $2
             ORDER BY case_id",
        )
        .bind(scope.tenant_id().as_str())
        .bind(run.to_string())
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(db_error)?;
        bodies.iter().map(|b| eval::decode_case(b)).collect()
    }

    async fn latest_scoring(
        &self,
        scope: &Scope,
        dataset: &str,
    ) -> Result<Option<ScoringRun>, Error> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM forge_eval_runs
             WHERE tenant_id = $1 AND dataset = $2 AND status = 'completed'
             ORDER BY completed_at DESC, started_at DESC, id DESC LIMIT 1"
        )))
        .bind(scope.tenant_id().as_str())
        .bind(dataset)
        .fetch_optional(&mut *self.conn().await?)
        .await
        .map_err(db_error)?;
        row.as_ref().map(decode).transpose()
    }

    async fn list_scoring(
        &self,
        scope: &Scope,
        dataset: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ScoringRun>, Error> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM forge_eval_runs
             WHERE tenant_id = $1 AND ($2 IS NULL OR dataset = $2)
             ORDER BY started_at DESC, id DESC LIMIT $3"
        )))
        .bind(scope.tenant_id().as_str())
        .bind(dataset)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(db_error)?;
        rows.iter().map(decode).collect()
    }

    async fn judgement(
        &self,
        scope: &Scope,
        key: &JudgeKey,
    ) -> Result<Option<JudgeVerdict>, Error> {
        let body: Option<String> = sqlx::query_scalar(
            "SELECT verdict FROM forge_eval_judgements WHERE tenant_id = $1 AND case_id = $2
                 AND input_sha256 = $3 AND prompt = $4 AND model = $5",
        )
        .bind(scope.tenant_id().as_str())
        .bind(&key.case_id)
        .bind(&key.input_sha256)
        .bind(&key.prompt)
        .bind(&key.model)
        .fetch_optional(&mut *self.conn().await?)
        .await
        .map_err(db_error)?;
        body.as_deref().map(eval::decode_verdict).transpose()
    }

    async fn put_judgement(
        &self,
        scope: &Scope,
        key: &JudgeKey,
        verdict: &JudgeVerdict,
    ) -> Result<(), Error> {
        sqlx::query(forge_sql::statements::EVAL_PUT_VERDICT)
            .bind(scope.tenant_id().as_str())
            .bind(&key.case_id)
            .bind(&key.input_sha256)
            .bind(&key.prompt)
            .bind(&key.model)
            .bind(eval::encode_verdict(verdict)?)
            .bind(self.clock.now().unix_millis())
            .execute(&mut *self.conn().await?)
            .await
            .map_err(db_error)?;
        Ok(())
    }
}
