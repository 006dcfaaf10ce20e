//! The evaluation store's rows on SQL, for both SQL stores: a scoring run from its columns, and
//! results and verdicts stored whole as JSON beside the columns completion derives totals from.

use std::collections::BTreeMap;

use forge_core::Error;
use forge_core::scope::TenantId;
use forge_eval::dimension::Dimension;
use forge_eval::judge::JudgeVerdict;
use forge_eval::score::{
    CaseResult, DimensionScore, ScoringRun, ScoringRunId, ScoringStatus, Totals,
};

use crate::rows::{Columns, corrupt, required};

/// A result as the JSON value stored beside its columns.
pub fn case_value(result: &CaseResult) -> Result<serde_json::Value, Error> {
    serde_json::to_value(result).map_err(|e| Error::invalid(format!("case result: {e}")))
}

/// A verdict as the JSON value stored.
pub fn verdict_value(v: &JudgeVerdict) -> Result<serde_json::Value, Error> {
    serde_json::to_value(v).map_err(|e| Error::invalid(format!("judge verdict: {e}")))
}

/// A result's stored body.
pub fn encode_case(result: &CaseResult) -> Result<String, Error> {
    serde_json::to_string(result).map_err(|e| Error::invalid(format!("case result: {e}")))
}

/// A stored result.
pub fn decode_case(body: &str) -> Result<CaseResult, Error> {
    serde_json::from_str(body).map_err(|e| corrupt("case result", e))
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
    serde_json::from_str(body).map_err(|e| corrupt("judge verdict", e))
}

/// A scoring run from its columns: `id`, `tenant_id`, `dataset`, `dataset_version`,
/// `dataset_sha256`, `label`, `started_at`, `completed_at`, `status`, and `totals` and
/// `dimensions` as JSON text.
pub fn scoring_run(row: &impl Columns) -> Result<ScoringRun, Error> {
    let text = |col: &str| required(row.text(col)?, col);
    let status = match text("status")?.as_str() {
        "running" => ScoringStatus::Running,
        "completed" => ScoringStatus::Completed,
        other => return Err(corrupt("scoring run status", other)),
    };
    let totals: Option<Totals> = row
        .text("totals")?
        .map(|t| serde_json::from_str(&t).map_err(|e| corrupt("totals", e)))
        .transpose()?;
    let dimensions: BTreeMap<Dimension, DimensionScore> = row
        .text("dimensions")?
        .map(|d| serde_json::from_str(&d).map_err(|e| corrupt("dimensions", e)))
        .transpose()?
        .unwrap_or_default();
    let version = required(row.int("dataset_version")?, "dataset_version")?;
    Ok(ScoringRun {
        id: ScoringRunId(required(row.uuid("id")?, "id")?),
        tenant_id: TenantId::new(text("tenant_id")?)?,
        dataset: text("dataset")?,
        dataset_version: u32::try_from(version).map_err(|e| corrupt("dataset_version", e))?,
        dataset_sha256: text("dataset_sha256")?,
        label: text("label")?,
        started_at: required(row.time("started_at")?, "started_at")?,
        completed_at: row.time("completed_at")?,
        status,
        totals,
        dimensions,
    })
}
