-- Vectors of chunks under each embedding model, unit length, as real[]: searched by brute force
-- in the adapter, or by pgvector's `<#>` operator on a `::vector` cast where that extension is
-- installed. Removed with their source (cascade) and replaced when its version changes.
-- Tenant-confined by forced RLS like every Forge table.
CREATE TABLE forge_chunk_vectors (
    tenant_id text NOT NULL,
    model text NOT NULL,
    source_id text NOT NULL,
    idx integer NOT NULL,
    version text NOT NULL,
    vector real[] NOT NULL,
    PRIMARY KEY (tenant_id, model, source_id, idx),
    FOREIGN KEY (tenant_id, source_id) REFERENCES forge_sources (tenant_id, id) ON DELETE CASCADE
);

ALTER TABLE forge_chunk_vectors ENABLE ROW LEVEL SECURITY;
ALTER TABLE forge_chunk_vectors FORCE ROW LEVEL SECURITY;
CREATE POLICY forge_tenant ON forge_chunk_vectors
    USING (tenant_id = (SELECT forge_current_tenant()))
    WITH CHECK (tenant_id = (SELECT forge_current_tenant()));
