-- Metered model calls: a reservation before each call, settled after it. Stored whole in `body`;
-- the columns beside it are what quota checks and reports filter on.
CREATE TABLE forge_model_calls (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL REFERENCES forge_runs (id),
    period_start INTEGER NOT NULL,
    at INTEGER NOT NULL,
    status TEXT NOT NULL,
    body TEXT NOT NULL
) STRICT;
CREATE INDEX forge_model_calls_period ON forge_model_calls (tenant_id, period_start);
CREATE INDEX forge_model_calls_at ON forge_model_calls (tenant_id, at);
CREATE INDEX forge_model_calls_run ON forge_model_calls (run_id, at);
