DROP TABLE forge_chunk_vectors;
