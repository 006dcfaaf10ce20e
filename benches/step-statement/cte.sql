-- The CTE of forge_write_step (migration 30) sent directly, not through the function: the same
-- run update, 8 events of 241 bytes, a message and a settled call, to compare with step.sql.
-- Row-level security needs the tenant set for the session (PGOPTIONS, see README.md).
WITH cur AS (SELECT version v, last_seq ls FROM forge_runs WHERE id = '11111111-1111-1111-1111-111111111111'),
updated AS (
        UPDATE forge_runs SET version = version + 1, last_seq = last_seq + 8, status = 'running',
        waiting_for = NULL, checkpoint = '{"a":1}'::jsonb, failure = NULL, updated_at = now(),
        lease_holder = CASE WHEN false THEN NULL ELSE lease_holder END,
        lease_token = CASE WHEN false THEN NULL ELSE lease_token END,
        lease_expires_at = CASE WHEN false THEN NULL ELSE lease_expires_at END
        FROM cur
        WHERE id = '11111111-1111-1111-1111-111111111111' AND tenant_id = 't1' AND version = cur.v AND lease_token = 1
        AND lease_expires_at > now() AND (last_seq + 1 = cur.ls + 1)
        AND (status || coalesce(':' || waiting_for, '')) = ANY(ARRAY['running'])
        AND NOT EXISTS (SELECT 1 FROM forge_model_calls c WHERE c.id = ANY(ARRAY['00000000-0000-0000-0000-00000000abcd'::uuid]) AND c.status <> 'reserved')
        RETURNING thread_id, version, last_seq, cancel_requested, cur.ls
    ), events AS (
        INSERT INTO forge_run_events (run_id, seq, tenant_id, at, body)
        SELECT '11111111-1111-1111-1111-111111111111', updated.ls + g, 't1', now(), '{"type": "text_delta", "run": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "text": "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"}'::json FROM updated, generate_series(1,8) g
    ), messages AS (
        INSERT INTO forge_messages (tenant_id, thread_id, id, run_id, role, parts, created_at)
        SELECT 't1', u.thread_id, m.id, m.run_id, m.role, m.parts, m.created_at
        FROM updated u, UNNEST(ARRAY[gen_random_uuid()], ARRAY['11111111-1111-1111-1111-111111111111'::uuid], ARRAY['assistant'], ARRAY['[{"type":"text","text":"hi"}]'::jsonb], ARRAY[now()])
        WITH ORDINALITY AS m(id, run_id, role, parts, created_at, n) ORDER BY m.n
    ), calls AS (
        INSERT INTO forge_model_calls (id, tenant_id, run_id, period_start, at, status, body)
        SELECT c.id, 't1', '11111111-1111-1111-1111-111111111111', c.period_start, c.at, c.status, c.body
        FROM updated, UNNEST(ARRAY[gen_random_uuid()], ARRAY[now()], ARRAY[now()], ARRAY['settled'], ARRAY['{"x":1}'::jsonb]) AS c(id, period_start, at, status, body)
        ON CONFLICT (id) DO UPDATE SET status = excluded.status, body = excluded.body
        WHERE forge_model_calls.status = 'reserved' AND forge_model_calls.tenant_id = excluded.tenant_id
        RETURNING forge_model_calls.id
    )
    SELECT u.thread_id AS thread, u.version, u.last_seq, u.cancel_requested,
        ARRAY(SELECT id FROM calls) AS settled
    FROM updated u;
