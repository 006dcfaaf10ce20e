GRANT SELECT, INSERT, DELETE ON forge_files TO forge_tenant;
