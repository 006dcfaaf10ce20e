
-- Supabase mode: tenant transactions act as `forge_tenant`.
GRANT SELECT, INSERT, UPDATE, DELETE ON forge_sources, forge_chunks TO forge_tenant;
GRANT USAGE ON SEQUENCE forge_chunks_id_seq TO forge_tenant;
