REVOKE SELECT, INSERT, DELETE ON forge_files FROM forge_tenant;
