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
use rusqlite::params;

use crate::SqliteStore;
use crate::db;

/// The columns [`decode`] reads.
macro_rules! columns {
    () => {
        "id, tenant_id, dataset, dataset_version, dataset_sha256, label, started_at, \
         completed_at, status, totals, dimensions"
    };
}

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

fn decode(row: &rusqlite::Row<'_>) -> Result<ScoringRun, Error> {
    eval::scoring_run(&crate::rows::Row(row))
}

#[async_trait]
impl EvalStore for SqliteStore {
    async fn insert_scoring(&self, scope: &Scope, run: &ScoringRun) -> Result<(), Error> {
        let tenant = scope.tenant_id().to_string();
        let run = run.clone();
        self.write(move |conn| {
            let inserted = db::execute(
                conn,
                forge_sql::statements::EVAL_START_RUN,
                params![
                    tenant,
                    run.id.to_string(),
                    run.dataset,
                    i64::from(run.dataset_version),
                    run.dataset_sha256,
                    run.label,
                    run.started_at.unix_millis()
                ],
            )?;
            if inserted == 0 {
                return Err(Error::invalid(format!("scoring run {} exists", run.id)));
            }
            Ok(())
        })
        .await
    }

    async fn record_case(
        &self,
        scope: &Scope,
        run: ScoringRunId,
        result: &CaseResult,
    ) -> Result<(), Error> {
        let result = rules::normalize(result);
        let tenant = scope.tenant_id().to_string();
        let (dimensions, body) = (
            eval::encode_dimensions(&result)?,
            eval::encode_case(&result)?,
        );
        self.write(move |conn| {
            let run_id = run.to_string();
            // Recording re-opens the run: its totals must agree with its rows.
            let reopened = db::execute(
                conn,
                forge_sql::statements::EVAL_REOPEN_RUN,
                params![tenant, run_id],
            )?;
            if reopened == 0 {
                return Err(Error::not_found("scoring run", run));
            }
            db::execute(
                conn,
                forge_sql::statements::EVAL_UPSERT_CASE,
                params![
                    tenant,
                    run_id,
                    result.case_id,
                    result.verdict.name(),
                    i64::from(result.score_ppm),
                    dimensions,
                    db::saturating(result.run_cost_micros),
                    db::saturating(result.judge_cost_micros),
                    i64::from(result.paid_calls),
                    body
                ],
            )?;
            Ok(())
        })
        .await
    }

    async fn complete_scoring(
        &self,
        scope: &Scope,
        run: ScoringRunId,
        at: Timestamp,
    ) -> Result<ScoringRun, Error> {
        let tenant = scope.tenant_id().to_string();
        self.write(move |conn| {
            db::first(
                conn,
                COMPLETE,
                params![tenant, run.to_string(), at.unix_millis()],
                decode,
            )?
            .ok_or_else(|| Error::not_found("scoring run", run))
        })
        .await
    }

    async fn scoring_run(
        &self,
        scope: &Scope,
        run: ScoringRunId,
    ) -> Result<Option<ScoringRun>, Error> {
        let tenant = scope.tenant_id().to_string();
        self.read(move |conn| {
            db::first(
                conn,
                concat!(
                    "SELECT ",
                    columns!(),
                    " FROM forge_eval_runs WHERE tenant_id = ?1 AND id = ?2"
                ),
                params![tenant, run.to_string()],
                decode,
            )
        })
        .await
    }

    async fn case_results(
        &self,
        scope: &Scope,
        run: ScoringRunId,
    ) -> Result<Vec<CaseResult>, Error> {
        let tenant = scope.tenant_id().to_string();
        self.read(move |conn| {
            db::all(
                conn,
                "SELECT body FROM forge_eval_cases WHERE tenant_id = ?1 AND run_id = ?2 \
                 ORDER BY case_id",
                params![tenant, run.to_string()],
                |row| eval::decode_case(&crate::rows::text(row, "body")?),
            )
        })
        .await
    }

    async fn latest_scoring(
        &self,
        scope: &Scope,
        dataset: &str,
    ) -> Result<Option<ScoringRun>, Error> {
        let (tenant, dataset) = (scope.tenant_id().to_string(), dataset.to_owned());
        self.read(move |conn| {
            db::first(
                conn,
                concat!(
                    "SELECT ",
                    columns!(),
                    " FROM forge_eval_runs WHERE tenant_id = ?1 AND dataset = ?2 \
                     AND status = 'completed' ORDER BY completed_at DESC, started_at DESC, id DESC LIMIT 1"
                ),
                params![tenant, dataset],
                decode,
            )
        })
        .await
    }

    async fn list_scoring(
        &self,
        scope: &Scope,
        dataset: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ScoringRun>, Error> {
        let (tenant, dataset) = (scope.tenant_id().to_string(), dataset.map(str::to_owned));
        self.read(move |conn| {
            db::all(
                conn,
                concat!(
                    "SELECT ",
                    columns!(),
                    " FROM forge_eval_runs WHERE tenant_id = ?1 AND (?2 IS NULL OR dataset = ?2) \
                     ORDER BY started_at DESC, id DESC LIMIT ?3"
                ),
                params![tenant, dataset, db::saturating(limit)],
                decode,
            )
        })
        .await
    }

    async fn judgement(
        &self,
        scope: &Scope,
        key: &JudgeKey,
    ) -> Result<Option<JudgeVerdict>, Error> {
        let (tenant, key) = (scope.tenant_id().to_string(), key.clone());
        let body: Option<String> = self
            .read(move |conn| {
                db::value(
                    conn,
                    "SELECT verdict FROM forge_eval_judgements WHERE tenant_id = ?1 AND case_id = ?2 \
                     AND input_sha256 = ?3 AND prompt = ?4 AND model = ?5",
                    params![tenant, key.case_id, key.input_sha256, key.prompt, key.model],
                )
            })
            .await?;
        body.as_deref().map(eval::decode_verdict).transpose()
    }

    async fn put_judgement(
        &self,
        scope: &Scope,
        key: &JudgeKey,
        verdict: &JudgeVerdict,
    ) -> Result<(), Error> {
        let (tenant, key) = (scope.tenant_id().to_string(), key.clone());
        let (verdict, now) = (
            eval::encode_verdict(verdict)?,
            self.clock.now().unix_millis(),
        );
        self.write(move |conn| {
            db::execute(
                conn,
                forge_sql::statements::EVAL_PUT_VERDICT,
                params![
                    tenant,
                    key.case_id,
                    key.input_sha256,
                    key.prompt,
                    key.model,
                    verdict,
                    now
                ],
            )?;
            Ok(())
        })
        .await
    }
}
