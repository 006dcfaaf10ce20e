ALTER TABLE forge_jobs DROP COLUMN traceparent;
