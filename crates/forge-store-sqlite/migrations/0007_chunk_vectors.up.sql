-- Vectors of chunks under each embedding model: little-endian f32 blobs, unit length, searched by
-- brute force in the adapter. Keyed by model first, so a search reads one model's rows only.
-- Removed with their source (cascade, and explicitly by the adapter) and replaced when its
-- version changes.
CREATE TABLE forge_chunk_vectors (
    tenant_id TEXT NOT NULL,
    model TEXT NOT NULL,
    source_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    version TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (tenant_id, model, source_id, idx),
    FOREIGN KEY (tenant_id, source_id) REFERENCES forge_sources (tenant_id, id) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;
