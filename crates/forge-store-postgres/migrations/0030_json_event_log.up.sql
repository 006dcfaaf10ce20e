-- The event log as the text Forge wrote, not re-parsed. A step's events are most of what a run
-- writes (about 32 rows of some 260 bytes in the workload benchmark); stored as jsonb, PostgreSQL
-- parsed each into its binary form on the way in (jsonb_recv, about a twelfth of its CPU per run)
-- and printed it again on the way out, and no statement looks inside them. As json the text is
-- checked and kept as it came. json is what a reader of jsonb decodes as well, and jsonb assigns
-- to it, so the previous build's statements (forge_write_step and forge_step with jsonb[]
-- events) still write and read it during a rolling deploy.
--
-- forge_write_step takes the events as text[] in an overload of its own (the rest as migration
-- 22's, which stays for the previous build), and sets the tenant by an assignment rather than a
-- PERFORM: PL/pgSQL evaluates a simple expression directly, where PERFORM starts an executor
-- for a one-row plan on every call. It returns at most one row (migration 25).
ALTER TABLE forge_run_events ALTER COLUMN body TYPE json USING body::json;

CREATE FUNCTION forge_write_step(
    bigint, bigint, text, text, jsonb, jsonb, timestamptz, uuid, text, boolean, boolean, boolean,
    bigint, bigint[], timestamptz[], text[], uuid[], uuid[], text[], jsonb[], timestamptz[],
    uuid[], timestamptz[], timestamptz[], text[], jsonb[], bigint, text[], boolean)
RETURNS TABLE (o_version bigint, o_last_seq bigint, o_cancel boolean, o_run forge_runs, o_closed uuid[])
LANGUAGE plpgsql SECURITY INVOKER ROWS 1
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $fn$
DECLARE
    r record;
    unsettled uuid;
    tenant text;
BEGIN
    -- An assignment, which PL/pgSQL evaluates without starting an executor (PERFORM does).
    tenant := set_config('forge.tenant_id', $9, true);
    WITH updated AS (
        UPDATE forge_runs SET version = version + 1, last_seq = last_seq + $2, status = $3,
        waiting_for = $4, checkpoint = $5, failure = $6, updated_at = $7,
        lease_holder = CASE WHEN $10 THEN NULL ELSE lease_holder END,
        lease_token = CASE WHEN $10 THEN NULL ELSE lease_token END,
        lease_expires_at = CASE WHEN $10 THEN NULL ELSE lease_expires_at END
        WHERE id = $8 AND tenant_id = $9 AND $29 AND version = $1 AND lease_token = $13
        AND lease_expires_at > $7 AND ($27::bigint IS NULL OR last_seq + 1 = $27)
        AND (status || coalesce(':' || waiting_for, '')) = ANY($28)
        AND NOT EXISTS (SELECT 1 FROM forge_model_calls c WHERE c.id = ANY($22) AND c.status <> 'reserved')
        RETURNING thread_id, version, last_seq, cancel_requested
    ), events AS (
        INSERT INTO forge_run_events (run_id, seq, tenant_id, at, body)
        SELECT $8, e.seq, $9, e.at, e.body::json FROM updated, UNNEST($14, $15, $16) AS e(seq, at, body)
    ), messages AS (
        INSERT INTO forge_messages (tenant_id, thread_id, id, run_id, role, parts, created_at)
        SELECT $9, u.thread_id, m.id, m.run_id, m.role, m.parts, m.created_at
        FROM updated u, UNNEST($17, $18, $19, $20, $21)
        WITH ORDINALITY AS m(id, run_id, role, parts, created_at, n) ORDER BY m.n
    ), calls AS (
        INSERT INTO forge_model_calls (id, tenant_id, run_id, period_start, at, status, body)
        SELECT c.id, $9, $8, c.period_start, c.at, c.status, c.body
        FROM updated, UNNEST($22, $23, $24, $25, $26) AS c(id, period_start, at, status, body)
        ON CONFLICT (id) DO UPDATE SET status = excluded.status, body = excluded.body
        WHERE forge_model_calls.status = 'reserved' AND forge_model_calls.tenant_id = excluded.tenant_id
        RETURNING forge_model_calls.id
    )
    SELECT u.thread_id AS thread, u.version, u.last_seq, u.cancel_requested,
        ARRAY(SELECT id FROM calls) AS settled
    INTO r FROM updated u;
    IF NOT FOUND THEN
        -- Refused (or no such run of the tenant): the row as it now is, for the adapter to name.
        SELECT * INTO o_run FROM forge_runs WHERE id = $8 AND tenant_id = $9;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        o_closed := ARRAY(SELECT c.id FROM forge_model_calls c WHERE c.id = ANY($22) AND c.status <> 'reserved');
        RETURN NEXT;
        RETURN;
    END IF;
    -- A conflicting call the gate could not see (another tenant's id) was not settled: the step
    -- is refused and everything it wrote rolls back. The message is the call's id.
    IF cardinality(r.settled) <> coalesce(cardinality($22), 0) THEN
        SELECT c INTO unsettled FROM unnest($22) AS c WHERE c <> ALL (r.settled) LIMIT 1;
        RAISE EXCEPTION USING ERRCODE = 'FG001', MESSAGE = unsettled::text;
    END IF;
    -- A step that ends its run: its pending interactions expire, and its thread's oldest queued
    -- run becomes active with its job ready.
    IF $11 THEN
        WITH expired AS (
            UPDATE forge_interactions SET status = 'expired', body = jsonb_set(body, '{status}', '"expired"')
            WHERE run_id = $8 AND tenant_id = $9 AND status = 'pending'
        ), next_run AS (
            SELECT n.id FROM forge_runs n WHERE n.thread_id = r.thread AND n.tenant_id = $9
            AND n.status = 'queued' AND n.id <> $8 ORDER BY n.created_at, n.id LIMIT 1
        ), promoted AS (
            UPDATE forge_threads SET active_run = (SELECT id FROM next_run)
            WHERE id = r.thread AND tenant_id = $9 AND active_run = $8
        )
        UPDATE forge_jobs SET state = 'ready', available_at = $7
        WHERE run_id = (SELECT id FROM next_run) AND state = 'waiting';
    END IF;
    IF $12 THEN
        PERFORM pg_notify('forge_run_events', $8::text || ' ' || r.thread::text);
    END IF;
    o_version := r.version;
    o_last_seq := r.last_seq;
    o_cancel := r.cancel_requested;
    RETURN NEXT;
END
$fn$;

REVOKE ALL ON FUNCTION forge_write_step(
    bigint, bigint, text, text, jsonb, jsonb, timestamptz, uuid, text, boolean, boolean, boolean,
    bigint, bigint[], timestamptz[], text[], uuid[], uuid[], text[], jsonb[], timestamptz[],
    uuid[], timestamptz[], timestamptz[], text[], jsonb[], bigint, text[], boolean) FROM PUBLIC;
