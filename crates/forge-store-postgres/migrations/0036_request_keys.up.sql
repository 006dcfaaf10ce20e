-- Request keys (forge_core::ports::keys): a caller's name for a thread or a run it asked for.
-- The first claim of a tenant's key holds; erasing the thread or the run removes it. Under
-- forced row-level security like every Forge table.
CREATE TABLE forge_request_keys (
    tenant_id text NOT NULL,
    kind text NOT NULL CHECK (kind IN ('thread', 'run')),
    key text NOT NULL,
    id uuid NOT NULL,
    thread_id uuid NOT NULL,
    digest text NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, kind, key)
);
CREATE INDEX forge_request_keys_thread ON forge_request_keys (tenant_id, thread_id);

ALTER TABLE forge_request_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE forge_request_keys FORCE ROW LEVEL SECURITY;
CREATE POLICY forge_tenant ON forge_request_keys
    USING (tenant_id = (SELECT forge_current_tenant()))
    WITH CHECK (tenant_id = (SELECT forge_current_tenant()));
