-- Retrieval sources: each source's current version (its normalized text whole), its chunks with
-- exact byte offsets, and a full-text index over the chunks. Tenant-confined by the adapter's
-- `tenant_id` filter. The index keeps no copy of the text (external content): deleting a chunk
-- row deletes its index entries through the trigger.
CREATE TABLE forge_sources (
    tenant_id TEXT NOT NULL,
    id TEXT NOT NULL,
    version TEXT NOT NULL,
    title TEXT NOT NULL,
    label TEXT NOT NULL,
    format TEXT NOT NULL,
    metadata TEXT NOT NULL,
    text TEXT NOT NULL,
    chunks INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, id)
) STRICT;

CREATE TABLE forge_chunks (
    rowid INTEGER PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    source_id TEXT NOT NULL,
    version TEXT NOT NULL,
    idx INTEGER NOT NULL,
    start_byte INTEGER NOT NULL,
    end_byte INTEGER NOT NULL,
    heading TEXT,
    words INTEGER NOT NULL,
    text TEXT NOT NULL,
    FOREIGN KEY (tenant_id, source_id) REFERENCES forge_sources (tenant_id, id) ON DELETE CASCADE
) STRICT;
CREATE INDEX forge_chunks_source ON forge_chunks (tenant_id, source_id, idx);

CREATE VIRTUAL TABLE forge_chunks_fts USING fts5(
    text, content = 'forge_chunks', content_rowid = 'rowid',
    tokenize = 'unicode61 remove_diacritics 0'
);
CREATE TRIGGER forge_chunks_fts_insert AFTER INSERT ON forge_chunks BEGIN
    INSERT INTO forge_chunks_fts (rowid, text) VALUES (new.rowid, new.text);
END;
CREATE TRIGGER forge_chunks_fts_delete AFTER DELETE ON forge_chunks BEGIN
    INSERT INTO forge_chunks_fts (forge_chunks_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
END;
