ALTER TABLE forge_threads DROP COLUMN summary;
