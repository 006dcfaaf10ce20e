CREATE OR REPLACE FUNCTION forge_system_scope() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT coalesce(current_setting('forge.system', true), '') = 'on'
              AND current_user NOT IN ('authenticated', 'anon', 'forge_tenant') $$;
DROP POLICY forge_system_read ON forge_runs;
DROP POLICY forge_system_release ON forge_model_calls;
DROP POLICY forge_system_read ON forge_model_calls;
REVOKE ALL ON forge_jobs, forge_interactions, forge_audit, forge_runs, forge_model_calls FROM forge_system;
-- Dropped as their owner: the login role is a member of forge_system, but NOINHERIT.
SET LOCAL ROLE forge_system;
DROP FUNCTION forge_sys_version(), forge_sys_claim(timestamptz, timestamptz, uuid, text[], text[]),
    forge_sys_heartbeat(uuid, bigint, timestamptz, timestamptz),
    forge_sys_complete(uuid, bigint, timestamptz),
    forge_sys_fail(uuid, bigint, timestamptz, timestamptz, text),
    forge_sys_release(uuid, bigint, timestamptz, timestamptz),
    forge_sys_jobs(uuid, text, bigint),
    forge_sys_operate(uuid, text, text, text, timestamptz),
    forge_sys_due_interactions(timestamptz),
    forge_sys_holds(uuid, bigint, timestamptz),
    forge_sys_release_orphans(timestamptz);
-- Added by version 6 of the functions (migration 32), which that migration's down leaves.
DROP FUNCTION IF EXISTS forge_sys_claim_many(timestamptz, timestamptz, uuid, text[], text[], integer);
RESET ROLE;
REVOKE CREATE ON SCHEMA public FROM forge_system;
