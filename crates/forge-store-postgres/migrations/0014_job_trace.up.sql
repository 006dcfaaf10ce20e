-- The W3C traceparent a job was enqueued under, so the worker's spans join the request's trace.
-- The claim returns it (system functions version 2).
ALTER TABLE forge_jobs ADD COLUMN traceparent text;
