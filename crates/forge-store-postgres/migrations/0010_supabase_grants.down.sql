REVOKE ALL ON forge_chunk_vectors FROM forge_tenant;
