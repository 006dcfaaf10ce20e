ALTER TABLE forge_runs DROP COLUMN role_ids;
