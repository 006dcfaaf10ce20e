-- RLS mode: Forge's tables, sequences and tenant functions belong to `forge_owner`, a role no one
-- logs in as and the application role cannot become, so SQL run with the application's
-- credentials cannot switch row-level security off, drop a policy or replace the functions the
-- policies call. Run by an administrator before the migrations (which run as `forge_owner`):
-- what an earlier build's application role created and owns is handed over. The system
-- functions (`forge_sys_*`) stay `forge_system`'s.
DO $$
DECLARE
    r record;
    app oid := (SELECT oid FROM pg_roles WHERE rolname = current_setting('forge.app_role'));
BEGIN
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'forge_owner') THEN
            CREATE ROLE forge_owner NOLOGIN NOINHERIT NOBYPASSRLS;
        END IF;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
        -- Another database's provisioning created it first.
        NULL;
    END;
    EXECUTE format('GRANT USAGE, CREATE ON SCHEMA %I TO forge_owner', current_schema());
    -- Tables first: their sequences and indexes follow them.
    FOR r IN
        SELECT c.oid::regclass AS obj FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = current_schema() AND c.relname LIKE 'forge\_%'
           AND c.relkind IN ('r', 'p', 'v', 'm') AND c.relowner = app
    LOOP
        EXECUTE format('ALTER TABLE %s OWNER TO forge_owner', r.obj);
    END LOOP;
    FOR r IN
        SELECT c.oid::regclass AS obj FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = current_schema() AND c.relname LIKE 'forge\_%'
           AND c.relkind = 'S' AND c.relowner = app
    LOOP
        EXECUTE format('ALTER SEQUENCE %s OWNER TO forge_owner', r.obj);
    END LOOP;
    FOR r IN
        SELECT p.oid::regprocedure AS obj FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = current_schema() AND p.proname LIKE 'forge\_%'
           AND p.proname NOT LIKE 'forge\_sys\_%' AND p.proowner = app
    LOOP
        EXECUTE format('ALTER FUNCTION %s OWNER TO forge_owner', r.obj);
    END LOOP;
END
$$;
