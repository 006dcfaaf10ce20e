-- Chunk vectors keyed by source first, in an ordinary rowid table: replacing a source's version
-- and deleting it find its vectors by the key instead of scanning every vector of the tenant (a
-- key led by the model made SQLite's planner do just that), and rows of ~1.6 KB live in the table
-- rather than in the key's b-tree (a WITHOUT ROWID table of rows that large takes twice the space
-- and twice the time to insert into). Searches seek the allowed sources by the same key.
CREATE TABLE forge_chunk_vectors_by_source (
    tenant_id TEXT NOT NULL,
    model TEXT NOT NULL,
    source_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    version TEXT NOT NULL,
    vector BLOB NOT NULL,
    FOREIGN KEY (tenant_id, source_id) REFERENCES forge_sources (tenant_id, id) ON DELETE CASCADE
) STRICT;
INSERT INTO forge_chunk_vectors_by_source (tenant_id, model, source_id, idx, version, vector)
    SELECT tenant_id, model, source_id, idx, version, vector FROM forge_chunk_vectors;
DROP TABLE forge_chunk_vectors;
ALTER TABLE forge_chunk_vectors_by_source RENAME TO forge_chunk_vectors;
CREATE UNIQUE INDEX forge_chunk_vectors_key ON forge_chunk_vectors (tenant_id, source_id, model, idx);
