-- Supabase mode commits steps as forge_tenant, which checks for listeners; signed-in users get
-- nothing.
GRANT SELECT ON forge_listeners TO forge_tenant;
REVOKE ALL ON forge_listeners FROM authenticated, anon;
