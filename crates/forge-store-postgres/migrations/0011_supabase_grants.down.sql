REVOKE DELETE ON forge_interactions FROM forge_tenant;
