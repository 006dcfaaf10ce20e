CREATE TABLE forge_chunk_vectors_by_model (
    tenant_id TEXT NOT NULL,
    model TEXT NOT NULL,
    source_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    version TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (tenant_id, model, source_id, idx),
    FOREIGN KEY (tenant_id, source_id) REFERENCES forge_sources (tenant_id, id) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;
INSERT INTO forge_chunk_vectors_by_model (tenant_id, model, source_id, idx, version, vector)
    SELECT tenant_id, model, source_id, idx, version, vector FROM forge_chunk_vectors;
DROP TABLE forge_chunk_vectors;
ALTER TABLE forge_chunk_vectors_by_model RENAME TO forge_chunk_vectors;
