CREATE OR REPLACE FUNCTION forge_system_scope() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT coalesce(current_setting('forge.system', true), '') = 'on' $$;
REVOKE ALL ON forge_jobs, forge_interactions, forge_audit FROM forge_system;
