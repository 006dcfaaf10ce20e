DROP INDEX forge_threads_newest;
ALTER TABLE forge_threads DROP COLUMN archived_at;
