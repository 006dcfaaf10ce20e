-- Nothing to revert: see 0007_rls_tenant_role.up.sql.
SELECT 1;
