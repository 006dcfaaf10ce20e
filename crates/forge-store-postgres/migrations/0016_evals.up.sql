-- Evaluation (forge-eval): scoring runs, their case results and the judge's verdict cache, under
-- forced row-level security like every Forge table. Totals and per-dimension scores are derived
-- from forge_eval_cases when a run completes.
CREATE TABLE forge_eval_runs (
    tenant_id text NOT NULL,
    id uuid NOT NULL,
    dataset text NOT NULL,
    dataset_version bigint NOT NULL,
    dataset_sha256 text NOT NULL,
    label text NOT NULL,
    started_at timestamptz NOT NULL,
    completed_at timestamptz,
    status text NOT NULL CHECK (status IN ('running', 'completed')),
    totals jsonb,
    dimensions jsonb,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX forge_eval_runs_latest ON forge_eval_runs (tenant_id, dataset, status, completed_at);

CREATE TABLE forge_eval_cases (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    case_id text NOT NULL,
    verdict text NOT NULL CHECK (verdict IN ('pass', 'fail', 'unscoreable')),
    score_ppm bigint NOT NULL,
    dimensions jsonb NOT NULL,
    run_cost_micros bigint NOT NULL,
    judge_cost_micros bigint NOT NULL,
    paid_calls bigint NOT NULL,
    body jsonb NOT NULL,
    PRIMARY KEY (tenant_id, run_id, case_id),
    FOREIGN KEY (tenant_id, run_id) REFERENCES forge_eval_runs (tenant_id, id) ON DELETE CASCADE
);

CREATE TABLE forge_eval_judgements (
    tenant_id text NOT NULL,
    case_id text NOT NULL,
    input_sha256 text NOT NULL,
    prompt text NOT NULL,
    model text NOT NULL,
    verdict jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, case_id, input_sha256, prompt, model)
);

ALTER TABLE forge_eval_runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE forge_eval_runs FORCE ROW LEVEL SECURITY;
CREATE POLICY forge_tenant ON forge_eval_runs
    USING (tenant_id = (SELECT forge_current_tenant()))
    WITH CHECK (tenant_id = (SELECT forge_current_tenant()));
ALTER TABLE forge_eval_cases ENABLE ROW LEVEL SECURITY;
ALTER TABLE forge_eval_cases FORCE ROW LEVEL SECURITY;
CREATE POLICY forge_tenant ON forge_eval_cases
    USING (tenant_id = (SELECT forge_current_tenant()))
    WITH CHECK (tenant_id = (SELECT forge_current_tenant()));
ALTER TABLE forge_eval_judgements ENABLE ROW LEVEL SECURITY;
ALTER TABLE forge_eval_judgements FORCE ROW LEVEL SECURITY;
CREATE POLICY forge_tenant ON forge_eval_judgements
    USING (tenant_id = (SELECT forge_current_tenant()))
    WITH CHECK (tenant_id = (SELECT forge_current_tenant()));
