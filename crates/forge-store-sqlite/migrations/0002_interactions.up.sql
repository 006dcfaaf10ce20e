-- Approvals and questions of parked runs. The interaction is stored whole in `body` (JSON); the
-- columns beside it are what queries filter on.
CREATE TABLE forge_interactions (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL REFERENCES forge_runs (id),
    status TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    body TEXT NOT NULL
) STRICT;
CREATE INDEX forge_interactions_tenant ON forge_interactions (tenant_id, status, created_at);
CREATE INDEX forge_interactions_run ON forge_interactions (run_id, created_at);
CREATE INDEX forge_interactions_due ON forge_interactions (status, expires_at);
