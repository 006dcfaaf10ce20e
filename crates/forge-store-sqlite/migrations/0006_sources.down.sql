DROP TRIGGER forge_chunks_fts_delete;
DROP TRIGGER forge_chunks_fts_insert;
DROP TABLE forge_chunks_fts;
DROP TABLE forge_chunks;
DROP TABLE forge_sources;
