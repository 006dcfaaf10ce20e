-- A step commit with a smaller plan. forge_step (migration 21) locked the run row in a CTE of its
-- own, decided its gate in another, made every write wait on that gate through a subquery, and
-- returned the whole row as it was: PostgreSQL built all of that for every call, and starting
-- its executor cost more than running it (about 0.37 ms of a step's 0.66 ms). forge_write_step
-- puts the gate in the run row's UPDATE itself, so that the update is the lock and the decision
-- at once (under READ COMMITTED a row changed meanwhile is checked again as it now is), and
-- every write reads the updated row. It returns the run's new version, log end and cancel flag
-- when it wrote, and only when it refused reads the row as it now is and which settled calls were
-- not open, for the adapter to name the refusal. The gate decides what forge_step's did: the
-- lease ($13, unexpired at $7), the version ($1), the events continuing the log ($27), the run's
-- status being one the step's status is reachable from ($28), the checks of the step alone ($29),
-- and every settled model call still open.
--
-- Every lookup in it is by key, and its plans are generic and kept for the connection's life, so
-- sequential scans are off while they are made: a connection that first committed a step while
-- forge_model_calls was nearly empty otherwise kept scanning the whole table for the settled
-- calls' ids on every step after (seen in a benchmark as 0.3 ms a step and growing).
--
-- forge_step stays, for the processes of the previous build during a rolling deploy.
CREATE FUNCTION forge_write_step(
    bigint, bigint, text, text, jsonb, jsonb, timestamptz, uuid, text, boolean, boolean, boolean,
    bigint, bigint[], timestamptz[], jsonb[], uuid[], uuid[], text[], jsonb[], timestamptz[],
    uuid[], timestamptz[], timestamptz[], text[], jsonb[], bigint, text[], boolean)
RETURNS TABLE (o_version bigint, o_last_seq bigint, o_cancel boolean, o_run forge_runs, o_closed uuid[])
LANGUAGE plpgsql SECURITY INVOKER
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $fn$
DECLARE
    r record;
    unsettled uuid;
BEGIN
    PERFORM set_config('forge.tenant_id', $9, true);
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
        SELECT $8, e.seq, $9, e.at, e.body FROM updated, UNNEST($14, $15, $16) AS e(seq, at, body)
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
    bigint, bigint[], timestamptz[], jsonb[], uuid[], uuid[], text[], jsonb[], timestamptz[],
    uuid[], timestamptz[], timestamptz[], text[], jsonb[], bigint, text[], boolean) FROM PUBLIC;
