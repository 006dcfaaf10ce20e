
-- What the system functions touch, and nothing else. The policies' system clause now asks who
-- the current user is, not what a setting says: no setting can turn it on.
GRANT SELECT, UPDATE ON forge_jobs TO forge_system;
GRANT SELECT ON forge_interactions TO forge_system;
GRANT INSERT ON forge_audit TO forge_system;

CREATE OR REPLACE FUNCTION forge_system_scope() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT current_user = 'forge_system' $$;
