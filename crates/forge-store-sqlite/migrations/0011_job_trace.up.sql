-- The W3C traceparent a job was enqueued under, so the worker's spans join the request's trace.
ALTER TABLE forge_jobs ADD COLUMN traceparent TEXT;
