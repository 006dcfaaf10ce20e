DROP TABLE forge_chunks;
DROP TABLE forge_sources;
