-- Row-level security keyed on the caller's JWT, as Supabase projects do it: the tenant is the
-- `tenant_id` claim (top level, or inside `app_metadata`) of `auth.jwt()`, which reads
-- `request.jwt.claims`. Tenant transactions run as role `authenticated`.
CREATE FUNCTION forge_current_tenant() RETURNS text
    LANGUAGE sql STABLE
    AS $$ SELECT nullif(coalesce(auth.jwt() ->> 'tenant_id', auth.jwt() -> 'app_metadata' ->> 'tenant_id'), '') $$;

CREATE FUNCTION forge_system_scope() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT coalesce(current_setting('forge.system', true), '') = 'on' AND current_user <> 'authenticated' AND current_user <> 'anon' $$;

ALTER TABLE forge_threads ENABLE ROW LEVEL SECURITY;
ALTER TABLE forge_threads FORCE ROW LEVEL SECURITY;
CREATE POLICY forge_tenant ON forge_threads
    USING (tenant_id = (SELECT forge_current_tenant()))
    WITH CHECK (tenant_id = (SELECT forge_current_tenant()));

ALTER TABLE forge_messages ENABLE ROW LEVEL SECURITY;
ALTER TABLE forge_messages FORCE ROW LEVEL SECURITY;
CREATE POLICY forge_tenant ON forge_messages
    USING (tenant_id = (SELECT forge_current_tenant()))
    WITH CHECK (tenant_id = (SELECT forge_current_tenant()));

ALTER TABLE forge_runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE forge_runs FORCE ROW LEVEL SECURITY;
CREATE POLICY forge_tenant ON forge_runs
    USING (tenant_id = (SELECT forge_current_tenant()))
    WITH CHECK (tenant_id = (SELECT forge_current_tenant()));

ALTER TABLE forge_run_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE forge_run_events FORCE ROW LEVEL SECURITY;
CREATE POLICY forge_tenant ON forge_run_events
    USING (tenant_id = (SELECT forge_current_tenant()))
    WITH CHECK (tenant_id = (SELECT forge_current_tenant()));

-- Audit entries are read per tenant; operators write them from the system scope. No policy
-- allows UPDATE or DELETE, so with RLS forced the trail is append-only for the application role.
ALTER TABLE forge_audit ENABLE ROW LEVEL SECURITY;
ALTER TABLE forge_audit FORCE ROW LEVEL SECURITY;
CREATE POLICY forge_audit_read ON forge_audit FOR SELECT
    USING (tenant_id = (SELECT forge_current_tenant()));
CREATE POLICY forge_audit_append ON forge_audit FOR INSERT
    WITH CHECK (tenant_id = (SELECT forge_current_tenant()) OR (SELECT forge_system_scope()));

-- Claiming jobs spans tenants: allowed only inside a transaction that declared the system scope.
ALTER TABLE forge_jobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE forge_jobs FORCE ROW LEVEL SECURITY;
CREATE POLICY forge_tenant ON forge_jobs
    USING (tenant_id = (SELECT forge_current_tenant()) OR (SELECT forge_system_scope()))
    WITH CHECK (tenant_id = (SELECT forge_current_tenant()) OR (SELECT forge_system_scope()));

GRANT SELECT, INSERT, UPDATE, DELETE ON forge_threads, forge_messages, forge_runs, forge_run_events, forge_jobs TO authenticated;
GRANT SELECT, INSERT ON forge_audit TO authenticated;
GRANT EXECUTE ON FUNCTION forge_current_tenant(), forge_system_scope() TO authenticated;
