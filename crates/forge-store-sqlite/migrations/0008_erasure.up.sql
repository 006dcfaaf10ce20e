-- Erasure keeps an erased run's model calls for the tenant's totals and attributes them to the
-- nil run id, which no run has: the calls no longer reference forge_runs. SQLite cannot drop a
-- constraint, so the table is rebuilt without it.
CREATE TABLE forge_model_calls_new (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    period_start INTEGER NOT NULL,
    at INTEGER NOT NULL,
    status TEXT NOT NULL,
    body TEXT NOT NULL
) STRICT;
INSERT INTO forge_model_calls_new (id, tenant_id, run_id, period_start, at, status, body)
    SELECT id, tenant_id, run_id, period_start, at, status, body FROM forge_model_calls;
DROP TABLE forge_model_calls;
ALTER TABLE forge_model_calls_new RENAME TO forge_model_calls;
CREATE INDEX forge_model_calls_period ON forge_model_calls (tenant_id, period_start);
CREATE INDEX forge_model_calls_at ON forge_model_calls (tenant_id, at);
CREATE INDEX forge_model_calls_run ON forge_model_calls (run_id, at);
