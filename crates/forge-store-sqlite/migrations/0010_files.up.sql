-- File records (forge-files): the record whole as JSON beside what queries filter on. The bytes
-- live in the blob store.
CREATE TABLE forge_files (
    tenant_id TEXT NOT NULL,
    id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id)
) STRICT;
CREATE INDEX forge_files_newest ON forge_files (tenant_id, created_at);
