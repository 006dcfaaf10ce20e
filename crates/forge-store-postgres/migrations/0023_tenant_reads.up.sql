-- The reads a run begins with (its thread, and the first page of its history) as functions that
-- set the tenant themselves, like forge_write_step: one round trip each, in autocommit, prepared
-- and planned once per connection. They were sent as one simple-query message with the tenant
-- setting and the values inlined as literals, which PostgreSQL parsed and planned on every call
-- (about a twelfth of its CPU per run in the workload benchmark). Both run as the caller
-- (SECURITY INVOKER), bound by the same policies, and plan with sequential scans off: every
-- lookup is by key.

-- A thread of the tenant ($2) by id ($1): its row, or none.
CREATE FUNCTION forge_thread_row(uuid, text)
RETURNS TABLE (id uuid, tenant_id text, created_by text, title text, state jsonb,
    state_version bigint, active_run uuid, summary jsonb, created_at timestamptz,
    archived_at timestamptz)
LANGUAGE plpgsql SECURITY INVOKER
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $fn$
#variable_conflict use_column
BEGIN
    PERFORM set_config('forge.tenant_id', $2, true);
    RETURN QUERY SELECT t.id, t.tenant_id, t.created_by, t.title, t.state, t.state_version,
        t.active_run, t.summary, t.created_at, t.archived_at
    FROM forge_threads t WHERE t.id = $1 AND t.tenant_id = $2;
END
$fn$;

-- A page of a thread's history ($1, of the tenant $2): the messages strictly between positions
-- $3 and $4, the last $5 of them when $6 (from the end) and the first $5 otherwise, oldest first
-- (forge_core's MessageWindow::page_sql). An empty page of a thread that is not the tenant's
-- raises no_data_found, with the message 'thread'.
CREATE FUNCTION forge_message_page(uuid, text, bigint, bigint, bigint, boolean)
RETURNS TABLE (seq bigint, tenant_id text, thread_id uuid, id uuid, run_id uuid, role text,
    parts jsonb, created_at timestamptz)
LANGUAGE plpgsql SECURITY INVOKER
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $fn$
#variable_conflict use_column
BEGIN
    PERFORM set_config('forge.tenant_id', $2, true);
    IF $6 THEN
        RETURN QUERY SELECT p.seq, p.tenant_id, p.thread_id, p.id, p.run_id, p.role, p.parts,
            p.created_at
        FROM (SELECT m.* FROM forge_messages m WHERE m.thread_id = $1 AND m.tenant_id = $2
              AND m.seq > $3 AND m.seq < $4 ORDER BY m.seq DESC LIMIT $5) p
        ORDER BY p.seq;
    ELSE
        RETURN QUERY SELECT m.seq, m.tenant_id, m.thread_id, m.id, m.run_id, m.role, m.parts,
            m.created_at
        FROM forge_messages m WHERE m.thread_id = $1 AND m.tenant_id = $2
        AND m.seq > $3 AND m.seq < $4 ORDER BY m.seq LIMIT $5;
    END IF;
    IF NOT FOUND AND NOT EXISTS (
        SELECT 1 FROM forge_threads t WHERE t.id = $1 AND t.tenant_id = $2
    ) THEN
        RAISE EXCEPTION USING ERRCODE = 'no_data_found', MESSAGE = 'thread';
    END IF;
END
$fn$;

REVOKE ALL ON FUNCTION forge_thread_row(uuid, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION forge_message_page(uuid, text, bigint, bigint, bigint, boolean) FROM PUBLIC;
