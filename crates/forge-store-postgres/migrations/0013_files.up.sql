-- File records (forge-files): the record whole as JSON beside what queries filter on, under
-- forced row-level security like every Forge table. The bytes live in the blob store.
CREATE TABLE forge_files (
    tenant_id text NOT NULL,
    id text NOT NULL,
    created_at timestamptz NOT NULL,
    body jsonb NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX forge_files_newest ON forge_files (tenant_id, created_at);

ALTER TABLE forge_files ENABLE ROW LEVEL SECURITY;
ALTER TABLE forge_files FORCE ROW LEVEL SECURITY;
CREATE POLICY forge_tenant ON forge_files
    USING (tenant_id = (SELECT forge_current_tenant()))
    WITH CHECK (tenant_id = (SELECT forge_current_tenant()));
