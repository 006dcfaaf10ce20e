GRANT SELECT, INSERT, UPDATE, DELETE ON forge_threads, forge_messages, forge_runs, forge_run_events,
    forge_jobs TO authenticated;
GRANT SELECT, INSERT ON forge_audit TO authenticated;
GRANT SELECT, INSERT, UPDATE ON forge_interactions, forge_model_calls TO authenticated;

REVOKE ALL ON forge_threads, forge_messages, forge_runs, forge_run_events, forge_jobs, forge_audit,
    forge_interactions, forge_model_calls FROM forge_tenant;
REVOKE EXECUTE ON FUNCTION forge_current_tenant(), forge_system_scope() FROM forge_tenant;

CREATE OR REPLACE FUNCTION forge_system_scope() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT coalesce(current_setting('forge.system', true), '') = 'on' AND current_user <> 'authenticated' AND current_user <> 'anon' $$;
