-- Hands Forge's system functions to `forge_system`: owned by it, executable by it and by the
-- application role named in the transaction setting `forge.app_role` (except `forge_sys_holds`,
-- a helper of the others), by no one else. Every other grant is revoked, including grants that
-- default privileges made (Supabase grants new functions in `public` to `anon` and
-- `authenticated`, whose REST layer would otherwise serve them). The grants are made as
-- `forge_system`, their owner, which both an administrator and Supabase's login role may become.
DO $$
DECLARE
    f regprocedure;
    grantee oid;
    app text := current_setting('forge.app_role');
    fns regprocedure[] := ARRAY(
        SELECT p.oid::regprocedure FROM pg_proc p
          JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'public' AND p.proname LIKE 'forge\_sys\_%');
BEGIN
    FOREACH f IN ARRAY fns LOOP
        EXECUTE format('ALTER FUNCTION %s OWNER TO forge_system', f);
    END LOOP;
    SET LOCAL ROLE forge_system;
    FOREACH f IN ARRAY fns LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
        FOR grantee IN SELECT DISTINCT a.grantee FROM pg_proc p, aclexplode(p.proacl) a
                        WHERE p.oid = f AND a.grantee NOT IN (0, p.proowner)
        LOOP
            EXECUTE format('REVOKE ALL ON FUNCTION %s FROM %s', f, grantee::regrole);
        END LOOP;
        IF f::text NOT LIKE 'forge_sys_holds(%' THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f, app);
        END IF;
    END LOOP;
    RESET ROLE;
END
$$;
