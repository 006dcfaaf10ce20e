-- Threads, history, runs, their event logs and the job queue. Every tenant-owned table carries
-- tenant_id; row-level security (the next migration) confines every row to its tenant.
CREATE TABLE forge_threads (
    id uuid PRIMARY KEY,
    tenant_id text NOT NULL,
    created_by text NOT NULL,
    title text,
    state jsonb NOT NULL,
    state_version bigint NOT NULL,
    active_run uuid,
    created_at timestamptz NOT NULL
);
CREATE INDEX forge_threads_tenant ON forge_threads (tenant_id, created_at);

CREATE TABLE forge_messages (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id text NOT NULL,
    thread_id uuid NOT NULL REFERENCES forge_threads (id),
    id uuid NOT NULL UNIQUE,
    run_id uuid NOT NULL,
    role text NOT NULL,
    parts jsonb NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX forge_messages_thread ON forge_messages (thread_id, seq);

CREATE TABLE forge_runs (
    id uuid PRIMARY KEY,
    tenant_id text NOT NULL,
    principal_id text NOT NULL,
    thread_id uuid NOT NULL REFERENCES forge_threads (id),
    agent_name text NOT NULL,
    agent_version text NOT NULL,
    input jsonb NOT NULL,
    status text NOT NULL,
    waiting_for text,
    version bigint NOT NULL,
    last_seq bigint NOT NULL,
    checkpoint jsonb NOT NULL,
    failure jsonb,
    lease_holder text,
    lease_token bigint,
    lease_expires_at timestamptz,
    fence bigint NOT NULL,
    cancel_requested boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);
CREATE INDEX forge_runs_thread ON forge_runs (thread_id, created_at, id);

CREATE TABLE forge_run_events (
    run_id uuid NOT NULL REFERENCES forge_runs (id),
    seq bigint NOT NULL,
    tenant_id text NOT NULL,
    at timestamptz NOT NULL,
    body jsonb NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE forge_jobs (
    id uuid PRIMARY KEY,
    tenant_id text NOT NULL,
    run_id uuid NOT NULL REFERENCES forge_runs (id),
    state text NOT NULL,
    available_at timestamptz NOT NULL,
    attempts integer NOT NULL,
    max_attempts integer NOT NULL,
    token bigint NOT NULL,
    expires_at timestamptz,
    last_error text
);
CREATE INDEX forge_jobs_ready ON forge_jobs (state, available_at, id);
CREATE INDEX forge_jobs_run ON forge_jobs (run_id);

-- Append-only: the application role may insert and read, never change or delete.
CREATE TABLE forge_audit (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id text NOT NULL,
    at timestamptz NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    subject text NOT NULL,
    detail jsonb NOT NULL
);
CREATE INDEX forge_audit_tenant ON forge_audit (tenant_id, seq);

-- Named leases for coordinating processes. Not tenant data (keys are opaque names chosen by the
-- platform), so not under row-level security. `fence` only grows, so tokens never repeat.
CREATE TABLE forge_locks (
    key text PRIMARY KEY,
    holder text,
    token bigint,
    expires_at timestamptz,
    fence bigint NOT NULL
);
