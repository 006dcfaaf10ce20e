ALTER TABLE forge_sources DROP COLUMN owner;
