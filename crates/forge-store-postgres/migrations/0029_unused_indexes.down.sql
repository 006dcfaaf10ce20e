CREATE INDEX forge_threads_tenant ON forge_threads (tenant_id, created_at);
CREATE INDEX forge_jobs_ready ON forge_jobs (state, available_at, id);
