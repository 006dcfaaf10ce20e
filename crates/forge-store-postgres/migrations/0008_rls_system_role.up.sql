-- RLS mode: cross-tenant access belongs to the role `forge_system` alone, through the SECURITY
-- DEFINER functions it owns (sql/system_functions.sql). An administrator creates both before
-- this migration (`forge migrate --admin-url`, or `forge_store_postgres::provision_system`),
-- because a role the application could create is a role it could become.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'forge_system') THEN
        RAISE EXCEPTION 'the role forge_system does not exist'
            USING HINT = 'an administrator provisions it once: forge migrate --store <app URL> --admin-url <superuser URL of the same database>';
    END IF;
END
$$;
