-- Supabase mode: Forge acts through its own role, never as `authenticated`. Supabase's REST layer
-- serves tables in `public` to any signed-in user as `authenticated`; with the grants below that
-- user can neither read nor write a Forge table directly (not its event log, not an approval it
-- would like to grant itself). RLS keyed on the JWT claim still confines `forge_tenant` to the
-- caller's tenant.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'forge_tenant') THEN
        -- Needs CREATEROLE (Supabase's `postgres` has it); otherwise an administrator creates the
        -- role and grants it to the login role before Forge starts.
        CREATE ROLE forge_tenant NOLOGIN NOINHERIT NOBYPASSRLS;
    END IF;
    IF NOT pg_has_role(current_user, 'forge_tenant', 'MEMBER') THEN
        EXECUTE format('GRANT forge_tenant TO %I', current_user);
    END IF;
    -- The policies read the caller's claims through auth.jwt().
    IF NOT has_schema_privilege('forge_tenant', 'auth', 'USAGE') THEN
        GRANT USAGE ON SCHEMA auth TO forge_tenant;
    END IF;
    IF NOT has_function_privilege('forge_tenant', 'auth.jwt()', 'EXECUTE') THEN
        GRANT EXECUTE ON FUNCTION auth.jwt() TO forge_tenant;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION forge_system_scope() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT coalesce(current_setting('forge.system', true), '') = 'on'
              AND current_user NOT IN ('authenticated', 'anon', 'forge_tenant') $$;

GRANT SELECT, INSERT, UPDATE, DELETE ON forge_threads, forge_messages, forge_runs, forge_run_events,
    forge_jobs TO forge_tenant;
GRANT SELECT, INSERT ON forge_audit TO forge_tenant;
GRANT SELECT, INSERT, UPDATE ON forge_interactions, forge_model_calls TO forge_tenant;
GRANT EXECUTE ON FUNCTION forge_current_tenant(), forge_system_scope() TO forge_tenant;

REVOKE ALL ON forge_threads, forge_messages, forge_runs, forge_run_events, forge_jobs, forge_audit,
    forge_interactions, forge_model_calls, forge_locks, forge_migrations FROM authenticated,
    anon;
