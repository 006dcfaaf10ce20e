-- Supabase mode: cross-tenant access belongs to the role `forge_system` alone, through the
-- SECURITY DEFINER functions it owns (sql/system_functions.sql), executable by the login role
-- only: not by `forge_tenant`, and not by `anon` or `authenticated`, so Supabase's REST layer
-- cannot serve them.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'forge_system') THEN
        -- Needs CREATEROLE (Supabase's `postgres` has it); otherwise an administrator creates the
        -- role and grants it to the login role before Forge starts.
        CREATE ROLE forge_system NOLOGIN NOINHERIT NOBYPASSRLS;
    END IF;
    IF NOT pg_has_role(current_user, 'forge_system', 'MEMBER') THEN
        EXECUTE format('GRANT forge_system TO %I', current_user);
    END IF;
END
$$;
DO $$
BEGIN
    -- The owner of a function needs CREATE on its schema.
    IF NOT has_schema_privilege('forge_system', 'public', 'CREATE') THEN
        GRANT CREATE ON SCHEMA public TO forge_system;
    END IF;
    -- The tenant policies it passes through read the caller's claims through auth.jwt().
    IF NOT has_schema_privilege('forge_system', 'auth', 'USAGE') THEN
        GRANT USAGE ON SCHEMA auth TO forge_system;
    END IF;
    IF NOT has_function_privilege('forge_system', 'auth.jwt()', 'EXECUTE') THEN
        GRANT EXECUTE ON FUNCTION auth.jwt() TO forge_system;
    END IF;
END
$$;
SELECT set_config('forge.app_role', current_user, true);
