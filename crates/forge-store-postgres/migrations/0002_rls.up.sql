-- Row-level security keyed on a per-transaction setting: the adapter runs
-- `set_config('forge.tenant_id', <tenant>, true)` at the start of every tenant transaction, and
-- FORCE makes the policies bind the tables' owner too.
CREATE FUNCTION forge_current_tenant() RETURNS text
    LANGUAGE sql STABLE
    AS $$ SELECT nullif(current_setting('forge.tenant_id', true), '') $$;

CREATE FUNCTION forge_system_scope() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT coalesce(current_setting('forge.system', true), '') = 'on' $$;

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
