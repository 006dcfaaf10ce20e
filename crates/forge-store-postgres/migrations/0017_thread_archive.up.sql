-- Threads can be archived (listed only when asked for) and are listed newest first.
ALTER TABLE forge_threads ADD COLUMN archived_at timestamptz;
CREATE INDEX forge_threads_newest ON forge_threads (tenant_id, created_at, id);
