-- Threads, history, runs, their event logs and the job queue. Every tenant-owned row carries
-- tenant_id; every query filters on it.
CREATE TABLE forge_threads (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    created_by TEXT NOT NULL,
    title TEXT,
    state TEXT NOT NULL,
    state_version INTEGER NOT NULL,
    active_run TEXT,
    created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE forge_messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id TEXT NOT NULL,
    thread_id TEXT NOT NULL REFERENCES forge_threads (id),
    id TEXT NOT NULL UNIQUE,
    run_id TEXT NOT NULL,
    role TEXT NOT NULL,
    parts TEXT NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX forge_messages_thread ON forge_messages (thread_id, seq);

CREATE TABLE forge_runs (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    principal_id TEXT NOT NULL,
    thread_id TEXT NOT NULL REFERENCES forge_threads (id),
    agent_name TEXT NOT NULL,
    agent_version TEXT NOT NULL,
    input TEXT NOT NULL,
    status TEXT NOT NULL,
    waiting_for TEXT,
    version INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    checkpoint TEXT NOT NULL,
    failure TEXT,
    lease_holder TEXT,
    lease_token INTEGER,
    lease_expires_at INTEGER,
    fence INTEGER NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
CREATE INDEX forge_runs_thread ON forge_runs (thread_id, created_at, id);

CREATE TABLE forge_run_events (
    run_id TEXT NOT NULL REFERENCES forge_runs (id),
    seq INTEGER NOT NULL,
    tenant_id TEXT NOT NULL,
    at INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE forge_jobs (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL REFERENCES forge_runs (id),
    state TEXT NOT NULL,
    available_at INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    token INTEGER NOT NULL,
    expires_at INTEGER,
    last_error TEXT
) STRICT;
CREATE INDEX forge_jobs_ready ON forge_jobs (state, available_at, id);
CREATE INDEX forge_jobs_run ON forge_jobs (run_id);

CREATE TABLE forge_audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id TEXT NOT NULL,
    at INTEGER NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    subject TEXT NOT NULL,
    detail TEXT NOT NULL
) STRICT;
CREATE INDEX forge_audit_tenant ON forge_audit (tenant_id, seq);
