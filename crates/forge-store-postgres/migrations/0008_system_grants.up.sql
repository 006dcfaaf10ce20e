
-- What the system functions touch, and nothing else. The policies' system clause now asks who
-- the current user is, not what a setting says: no setting can turn it on.
GRANT SELECT, UPDATE ON forge_jobs TO forge_system;
GRANT SELECT ON forge_interactions TO forge_system;
GRANT INSERT ON forge_audit TO forge_system;
-- Claims admit a job by its run's agent version: those columns of every run, read-only.
GRANT SELECT (id, agent_name, agent_version) ON forge_runs TO forge_system;
CREATE POLICY forge_system_read ON forge_runs FOR SELECT USING ((SELECT forge_system_scope()));
-- The orphan sweep releases unsettled reservations: their status, nothing else.
GRANT SELECT, UPDATE (status, body) ON forge_model_calls TO forge_system;
CREATE POLICY forge_system_read ON forge_model_calls FOR SELECT USING ((SELECT forge_system_scope()));
CREATE POLICY forge_system_release ON forge_model_calls FOR UPDATE
    USING ((SELECT forge_system_scope())) WITH CHECK ((SELECT forge_system_scope()));

CREATE OR REPLACE FUNCTION forge_system_scope() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT current_user = 'forge_system' $$;
