CREATE OR REPLACE FUNCTION forge_system_scope() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT coalesce(current_setting('forge.system', true), '') = 'on' $$;
DROP POLICY forge_system_read ON forge_runs;
REVOKE ALL ON forge_jobs, forge_interactions, forge_audit, forge_runs FROM forge_system;
