-- RLS mode, run as `forge_owner` after the migrations: the application role gets what running
-- Forge needs and nothing more — reading and writing rows (under the policies), the sequences,
-- the tenant functions, and reading the migration ledger. Owning nothing, it can change no
-- table, policy or function.
DO $$
DECLARE
    r record;
    app text := current_setting('forge.app_role');
    owner oid := (SELECT oid FROM pg_roles WHERE rolname = current_user);
BEGIN
    FOR r IN
        SELECT c.oid::regclass AS obj, c.relkind, c.relname
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = current_schema() AND c.relname LIKE 'forge\_%'
           AND c.relkind IN ('r', 'p', 'v', 'm', 'S') AND c.relowner = owner
    LOOP
        IF r.relkind = 'S' THEN
            EXECUTE format('GRANT USAGE, SELECT, UPDATE ON SEQUENCE %s TO %I', r.obj, app);
        ELSIF r.relname = 'forge_migrations' THEN
            EXECUTE format('GRANT SELECT ON TABLE %s TO %I', r.obj, app);
        ELSE
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %s TO %I', r.obj, app);
        END IF;
    END LOOP;
    FOR r IN
        SELECT p.oid::regprocedure AS obj FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = current_schema() AND p.proname LIKE 'forge\_%' AND p.proowner = owner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', r.obj, app);
    END LOOP;
END
$$;
