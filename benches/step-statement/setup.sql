-- One thread and one running run of tenant t1, leased (token 1) for a day: the step statements
-- in this directory write steps to it. Run as a superuser (it writes past row-level security).
INSERT INTO forge_threads (id, tenant_id, created_by, state, state_version, active_run, created_at)
VALUES ('22222222-2222-2222-2222-222222222222', 't1', 'u', '{}', 0, '11111111-1111-1111-1111-111111111111', now());
INSERT INTO forge_runs (id, tenant_id, principal_id, thread_id, agent_name, agent_version, input,
    status, version, last_seq, checkpoint, lease_holder, lease_token, lease_expires_at, fence,
    created_at, updated_at)
VALUES ('11111111-1111-1111-1111-111111111111', 't1', 'u', '22222222-2222-2222-2222-222222222222', 'a', '1', '[]', 'running', 0, 0, '{}', 'w', 1,
    now() + interval '1 day', 1, now(), now());
