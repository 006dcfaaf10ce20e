-- A source's vectors by source: replacing a version and the cascade of a deletion find them here
-- instead of scanning every vector of the tenant (the key leads with the model).
CREATE INDEX forge_chunk_vectors_source ON forge_chunk_vectors (tenant_id, source_id);
