//! `record_effect`: an example external-write tool that records each call in a PostgreSQL table
//! keyed by the call's idempotency key, counting how many times it was executed.
//!
//! It shows the shape every external write should have: the idempotency key Forge hands the tool
//! makes the effect happen once, however often the call is delivered (a resumed run re-delivers a
//! call whose step was not committed). Enabled by `forge worker --effects-db URL`.

use std::sync::Arc;

use anyhow::Context;
use forge_core::ports::tool::{ApprovalPolicy, Tool, ToolClassification, ToolError};
use forge_engine::native_tool;
use schemars::JsonSchema;
use serde::Deserialize;
use sqlx::PgPool;

/// Input of `record_effect`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RecordInput {
    /// What happened, in a few words.
    note: String,
}

const TABLE: &str = "CREATE TABLE IF NOT EXISTS forge_example_effects (
    idempotency_key text PRIMARY KEY,
    run_id uuid NOT NULL,
    note text NOT NULL,
    executions integer NOT NULL,
    first_at timestamptz NOT NULL DEFAULT now()
)";

/// Connects to the effects database, creating its table once, and returns the tool.
pub(crate) async fn record_effect(url: &str) -> anyhow::Result<Arc<dyn Tool>> {
    let pool = PgPool::connect(url)
        .await
        .context("failed to connect to the effects database")?;
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(7277267)")
        .execute(&mut *tx)
        .await?;
    sqlx::query(TABLE)
        .execute(&mut *tx)
        .await
        .context("failed to create the effects table")?;
    tx.commit().await?;
    let tool = native_tool(
        "record_effect",
        "Records that something happened in the outside world (an external write).",
        move |ctx, input: RecordInput| {
            let pool = pool.clone();
            async move {
                let executions: i32 = sqlx::query_scalar(
                    "INSERT INTO forge_example_effects (idempotency_key, run_id, note, executions) VALUES ($1, $2, $3, 1) \
                     ON CONFLICT (idempotency_key) DO UPDATE SET executions = forge_example_effects.executions + 1 \
                     RETURNING executions",
                )
                .bind(ctx.idempotency_key.to_string())
                .bind(ctx.run_id.0)
                .bind(&input.note)
                .fetch_one(&pool)
                .await
                .map_err(|e| ToolError::Unavailable(format!("the effects database failed: {e}")))?;
                Ok(serde_json::json!({ "recorded": true, "first_delivery": executions == 1 }))
            }
        },
    )
    .classification(ToolClassification::ExternalWrite)
    .approval(ApprovalPolicy::Never);
    Ok(Arc::new(tool))
}
