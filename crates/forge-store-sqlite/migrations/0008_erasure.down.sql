-- The reference again; calls of erased runs (attributed to the nil run id) cannot keep it and
-- are dropped.
CREATE TABLE forge_model_calls_old (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL REFERENCES forge_runs (id),
    period_start INTEGER NOT NULL,
    at INTEGER NOT NULL,
    status TEXT NOT NULL,
    body TEXT NOT NULL
) STRICT;
INSERT INTO forge_model_calls_old (id, tenant_id, run_id, period_start, at, status, body)
    SELECT id, tenant_id, run_id, period_start, at, status, body FROM forge_model_calls
    WHERE run_id IN (SELECT id FROM forge_runs);
DROP TABLE forge_model_calls;
ALTER TABLE forge_model_calls_old RENAME TO forge_model_calls;
CREATE INDEX forge_model_calls_period ON forge_model_calls (tenant_id, period_start);
CREATE INDEX forge_model_calls_at ON forge_model_calls (tenant_id, at);
CREATE INDEX forge_model_calls_run ON forge_model_calls (run_id, at);
