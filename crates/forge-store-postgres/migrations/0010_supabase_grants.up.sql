
-- Supabase mode: tenant transactions act as `forge_tenant`.
GRANT SELECT, INSERT, UPDATE, DELETE ON forge_chunk_vectors TO forge_tenant;
