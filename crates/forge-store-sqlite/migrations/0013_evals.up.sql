-- Evaluation (forge-eval): scoring runs, their case results and the judge's verdict cache.
-- Totals and per-dimension scores are derived from forge_eval_cases when a run completes.
CREATE TABLE forge_eval_runs (
    tenant_id TEXT NOT NULL,
    id TEXT NOT NULL,
    dataset TEXT NOT NULL,
    dataset_version INTEGER NOT NULL,
    dataset_sha256 TEXT NOT NULL,
    label TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    completed_at INTEGER,
    status TEXT NOT NULL CHECK (status IN ('running', 'completed')),
    totals TEXT,
    dimensions TEXT,
    PRIMARY KEY (tenant_id, id)
) STRICT;
CREATE INDEX forge_eval_runs_latest ON forge_eval_runs (tenant_id, dataset, status, completed_at);

CREATE TABLE forge_eval_cases (
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    case_id TEXT NOT NULL,
    verdict TEXT NOT NULL CHECK (verdict IN ('pass', 'fail', 'unscoreable')),
    score_ppm INTEGER NOT NULL,
    dimensions TEXT NOT NULL,
    run_cost_micros INTEGER NOT NULL,
    judge_cost_micros INTEGER NOT NULL,
    paid_calls INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (tenant_id, run_id, case_id),
    FOREIGN KEY (tenant_id, run_id) REFERENCES forge_eval_runs (tenant_id, id) ON DELETE CASCADE
) STRICT;

CREATE TABLE forge_eval_judgements (
    tenant_id TEXT NOT NULL,
    case_id TEXT NOT NULL,
    input_sha256 TEXT NOT NULL,
    prompt TEXT NOT NULL,
    model TEXT NOT NULL,
    verdict TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, case_id, input_sha256, prompt, model)
) STRICT;
