-- Request keys (forge_core::ports::keys): a caller's name for a thread or a run it asked for.
-- The first claim of a tenant's key holds; erasing the thread or the run removes it.
CREATE TABLE forge_request_keys (
    tenant_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('thread', 'run')),
    key TEXT NOT NULL,
    id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    digest TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, kind, key)
) STRICT;
CREATE INDEX forge_request_keys_thread ON forge_request_keys (tenant_id, thread_id);
