-- Supabase mode: tenant transactions act as `forge_tenant`; signed-in users get nothing.
GRANT SELECT, INSERT, DELETE ON forge_request_keys TO forge_tenant;
REVOKE ALL ON forge_request_keys FROM authenticated, anon;
