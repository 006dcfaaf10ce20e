-- Approvals and questions of parked runs. The interaction is stored whole in `body`; the columns
-- beside it are what queries filter on. Tenant-confined like every tenant table; the expiry sweep
-- may list due interactions across tenants from the system scope, read-only, and then expires
-- each one in its tenant's own transaction.
CREATE TABLE forge_interactions (
    id uuid PRIMARY KEY,
    tenant_id text NOT NULL,
    run_id uuid NOT NULL REFERENCES forge_runs (id),
    status text NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    body jsonb NOT NULL
);
CREATE INDEX forge_interactions_tenant ON forge_interactions (tenant_id, status, created_at);
CREATE INDEX forge_interactions_run ON forge_interactions (run_id, created_at);
CREATE INDEX forge_interactions_due ON forge_interactions (status, expires_at);

ALTER TABLE forge_interactions ENABLE ROW LEVEL SECURITY;
ALTER TABLE forge_interactions FORCE ROW LEVEL SECURITY;
CREATE POLICY forge_tenant ON forge_interactions
    USING (tenant_id = (SELECT forge_current_tenant()))
    WITH CHECK (tenant_id = (SELECT forge_current_tenant()));
CREATE POLICY forge_system_read ON forge_interactions FOR SELECT
    USING ((SELECT forge_system_scope()));
