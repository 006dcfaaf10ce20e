-- Retrieval sources: each source's current version (its normalized text whole) and its chunks
-- with exact byte offsets and a full-text vector ('simple' configuration: the words ranking
-- compares, unstemmed). Tenant-confined by forced RLS like every Forge table.
CREATE TABLE forge_sources (
    tenant_id text NOT NULL,
    id text NOT NULL,
    version text NOT NULL,
    title text NOT NULL,
    label text NOT NULL,
    format text NOT NULL,
    metadata jsonb NOT NULL,
    text text NOT NULL,
    chunks integer NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, id)
);

CREATE TABLE forge_chunks (
    id bigserial PRIMARY KEY,
    tenant_id text NOT NULL,
    source_id text NOT NULL,
    version text NOT NULL,
    idx integer NOT NULL,
    start_byte bigint NOT NULL,
    end_byte bigint NOT NULL,
    heading text,
    words integer NOT NULL,
    text text NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED,
    FOREIGN KEY (tenant_id, source_id) REFERENCES forge_sources (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX forge_chunks_source ON forge_chunks (tenant_id, source_id, idx);
CREATE INDEX forge_chunks_tsv ON forge_chunks USING gin (tsv);

ALTER TABLE forge_sources ENABLE ROW LEVEL SECURITY;
ALTER TABLE forge_sources FORCE ROW LEVEL SECURITY;
CREATE POLICY forge_tenant ON forge_sources
    USING (tenant_id = (SELECT forge_current_tenant()))
    WITH CHECK (tenant_id = (SELECT forge_current_tenant()));
ALTER TABLE forge_chunks ENABLE ROW LEVEL SECURITY;
ALTER TABLE forge_chunks FORCE ROW LEVEL SECURITY;
CREATE POLICY forge_tenant ON forge_chunks
    USING (tenant_id = (SELECT forge_current_tenant()))
    WITH CHECK (tenant_id = (SELECT forge_current_tenant()));
