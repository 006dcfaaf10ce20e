REVOKE ALL ON SEQUENCE forge_chunks_id_seq FROM forge_tenant;
REVOKE ALL ON forge_sources, forge_chunks FROM forge_tenant;
