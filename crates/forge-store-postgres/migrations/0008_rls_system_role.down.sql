CREATE OR REPLACE FUNCTION forge_system_scope() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT coalesce(current_setting('forge.system', true), '') = 'on' $$;
DROP POLICY forge_system_read ON forge_runs;
DROP POLICY forge_system_release ON forge_model_calls;
DROP POLICY forge_system_read ON forge_model_calls;
REVOKE ALL ON forge_jobs, forge_interactions, forge_audit, forge_runs, forge_model_calls FROM forge_system;
