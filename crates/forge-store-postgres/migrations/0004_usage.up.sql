-- Metered model calls: a reservation before each call, settled after it. Stored whole in `body`;
-- the columns beside it are what quota checks and reports filter on. Tenant-confined.
CREATE TABLE forge_model_calls (
    id uuid PRIMARY KEY,
    tenant_id text NOT NULL,
    run_id uuid NOT NULL REFERENCES forge_runs (id),
    period_start timestamptz NOT NULL,
    at timestamptz NOT NULL,
    status text NOT NULL,
    body jsonb NOT NULL
);
CREATE INDEX forge_model_calls_period ON forge_model_calls (tenant_id, period_start);
CREATE INDEX forge_model_calls_at ON forge_model_calls (tenant_id, at);
CREATE INDEX forge_model_calls_run ON forge_model_calls (run_id, at);

ALTER TABLE forge_model_calls ENABLE ROW LEVEL SECURITY;
ALTER TABLE forge_model_calls FORCE ROW LEVEL SECURITY;
CREATE POLICY forge_tenant ON forge_model_calls
    USING (tenant_id = (SELECT forge_current_tenant()))
    WITH CHECK (tenant_id = (SELECT forge_current_tenant()));
