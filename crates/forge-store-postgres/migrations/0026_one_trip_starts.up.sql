-- A thread's creation and a run's start on an idle thread, each one round trip in autocommit
-- (called through tenant_call, like forge_write_step). They were tenant transactions: the BEGIN
-- with the tenant setting, the statements, and the COMMIT, each a round trip of its own (three
-- for a thread, four for a run). Both set the tenant themselves and run as the caller (SECURITY
-- INVOKER), bound by the same policies; every lookup is by key.

-- A new thread ($1) of the tenant $2, created by $3, titled $4, with the session state $5, at $6.
-- Sent again on another connection after a connection the server closed, it finds the thread it
-- created already and passes; a thread of the same id it cannot see (another tenant's) is a
-- unique violation, as the insert alone would have been.
CREATE FUNCTION forge_insert_thread(uuid, text, text, text, jsonb, timestamptz)
RETURNS void
LANGUAGE plpgsql SECURITY INVOKER
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $fn$
BEGIN
    PERFORM set_config('forge.tenant_id', $2, true);
    INSERT INTO forge_threads (id, tenant_id, created_by, title, state, state_version, created_at)
    VALUES ($1, $2, $3, $4, $5, 0, $6)
    ON CONFLICT (id) DO NOTHING;
    IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM forge_threads t WHERE t.id = $1 AND t.tenant_id = $2
        AND t.created_by = $3 AND t.created_at = $6) THEN
        RAISE EXCEPTION USING ERRCODE = 'unique_violation', CONSTRAINT = 'forge_threads_pkey',
            MESSAGE = 'duplicate key value violates unique constraint "forge_threads_pkey"';
    END IF;
END
$fn$;

-- A new run ($1) of the tenant $2, started by $3 on the thread $4 as its active run, when that
-- thread is the tenant's and has none: the thread's row is the gate (its update is the lock and
-- the decision), and the run ($5 agent, $6 version, $7 checkpoint, at $8, input $9, roles $10)
-- and its ready job ($11, at most $12 attempts, trace $13) are written only when it passed.
-- Returns whether the run is the thread's active run, which it also is when this call was sent
-- again after a connection the server closed; otherwise nothing was written, and the adapter
-- admits the run under a lock on the thread (it queues, or is refused, or the thread is missing).
CREATE FUNCTION forge_start_run(uuid, text, text, uuid, text, text, jsonb, timestamptz, jsonb,
    jsonb, uuid, integer, text)
RETURNS boolean
LANGUAGE plpgsql SECURITY INVOKER
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $fn$
BEGIN
    PERFORM set_config('forge.tenant_id', $2, true);
    WITH activated AS (
        UPDATE forge_threads SET active_run = $1
        WHERE id = $4 AND tenant_id = $2 AND active_run IS NULL
        RETURNING id
    ), inserted AS (
        INSERT INTO forge_runs (id, tenant_id, principal_id, thread_id, agent_name, agent_version,
            status, version, last_seq, checkpoint, fence, created_at, updated_at, input, role_ids)
        SELECT $1, $2, $3, $4, $5, $6, 'queued', 0, 0, $7, 0, $8, $8, $9, $10 FROM activated
    )
    INSERT INTO forge_jobs (id, tenant_id, run_id, state, available_at, attempts, max_attempts,
        token, traceparent)
    SELECT $11, $2, $1, 'ready', $8, 0, $12, 0, $13 FROM activated;
    IF FOUND THEN
        RETURN true;
    END IF;
    RETURN EXISTS (SELECT 1 FROM forge_threads t WHERE t.id = $4 AND t.tenant_id = $2
        AND t.active_run = $1);
END
$fn$;

REVOKE ALL ON FUNCTION forge_insert_thread(uuid, text, text, text, jsonb, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION forge_start_run(uuid, text, text, uuid, text, text, jsonb, timestamptz,
    jsonb, jsonb, uuid, integer, text) FROM PUBLIC;
