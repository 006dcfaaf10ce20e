-- A step commit and a lease taken in one round trip each. The adapter used to open a transaction
-- (BEGIN and the tenant setting), send the statement, and COMMIT: three round trips, where the
-- commit and its WAL flush are the only work that has to wait. These functions set the tenant
-- themselves (a transaction-local setting, as the adapter's own), so a call in autocommit is the
-- whole transaction. They run as the caller (SECURITY INVOKER): row-level security binds every
-- statement in them exactly as it binds the adapter's. Their plans are generic: every lookup is by
-- key, and with custom plans each call planned its statement anew (about 0.5 ms of a step's
-- 0.9 ms in the database).
--
-- forge_step writes a step only when its gate `ok` passes, and the gate decides everything the
-- adapter's check_commit would refuse, so nothing refused is ever committed: the lease ($13,
-- unexpired at $7), the version ($1), the events continuing the log ($27), the run's current
-- status being one the step's status is reachable from ($28, 'status' or 'waiting:reason'), the
-- checks of the step alone that the adapter made before the call ($29), and every settled model
-- call still open. Whatever it decided, it returns the run row as it was, the ids it settled, and
-- the ids of settled calls that were not open, for the adapter to name the refusal.
CREATE FUNCTION forge_step(
    bigint, bigint, text, text, jsonb, jsonb, timestamptz, uuid, text, boolean, boolean, boolean,
    bigint, bigint[], timestamptz[], jsonb[], uuid[], uuid[], text[], jsonb[], timestamptz[],
    uuid[], timestamptz[], timestamptz[], text[], jsonb[], bigint, text[], boolean)
RETURNS TABLE (o_run forge_runs, o_settled uuid[], o_closed uuid[], o_wrote boolean)
LANGUAGE plpgsql SECURITY INVOKER
SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    r record;
    unsettled uuid;
BEGIN
    PERFORM set_config('forge.tenant_id', $9, true);
    WITH old AS (
        SELECT * FROM forge_runs WHERE id = $8 AND tenant_id = $9 FOR UPDATE
    ), closed AS (
        SELECT c.id FROM forge_model_calls c WHERE c.id = ANY($22) AND c.status <> 'reserved'
    ), ok AS (
        SELECT o.thread_id FROM old o WHERE $29 AND o.version = $1 AND o.lease_token = $13
        AND o.lease_expires_at > $7 AND ($27::bigint IS NULL OR o.last_seq + 1 = $27)
        AND (o.status || coalesce(':' || o.waiting_for, '')) = ANY($28)
        AND NOT EXISTS (SELECT 1 FROM closed)
    ), events AS (
        INSERT INTO forge_run_events (run_id, seq, tenant_id, at, body)
        SELECT $8, e.seq, $9, e.at, e.body FROM UNNEST($14, $15, $16) AS e(seq, at, body)
        WHERE EXISTS (SELECT 1 FROM ok)
    ), messages AS (
        INSERT INTO forge_messages (tenant_id, thread_id, id, run_id, role, parts, created_at)
        SELECT $9, ok.thread_id, m.id, m.run_id, m.role, m.parts, m.created_at
        FROM ok, UNNEST($17, $18, $19, $20, $21)
        WITH ORDINALITY AS m(id, run_id, role, parts, created_at, n) ORDER BY m.n
    ), calls AS (
        INSERT INTO forge_model_calls (id, tenant_id, run_id, period_start, at, status, body)
        SELECT c.id, $9, $8, c.period_start, c.at, c.status, c.body
        FROM UNNEST($22, $23, $24, $25, $26) AS c(id, period_start, at, status, body)
        WHERE EXISTS (SELECT 1 FROM ok)
        ON CONFLICT (id) DO UPDATE SET status = excluded.status, body = excluded.body
        WHERE forge_model_calls.status = 'reserved' AND forge_model_calls.tenant_id = excluded.tenant_id
        RETURNING forge_model_calls.id
    ), updated AS (
        UPDATE forge_runs SET version = version + 1, last_seq = last_seq + $2, status = $3,
        waiting_for = $4, checkpoint = $5, failure = $6, updated_at = $7,
        lease_holder = CASE WHEN $10 THEN NULL ELSE lease_holder END,
        lease_token = CASE WHEN $10 THEN NULL ELSE lease_token END,
        lease_expires_at = CASE WHEN $10 THEN NULL ELSE lease_expires_at END
        WHERE id = $8 AND tenant_id = $9 AND EXISTS (SELECT 1 FROM ok)
    )
    SELECT ROW(old.*)::forge_runs AS run, ARRAY(SELECT id FROM calls) AS settled,
        ARRAY(SELECT id FROM closed) AS closed, (SELECT thread_id FROM ok) AS thread
    INTO r FROM old;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- A conflicting call the gate could not see (another tenant's id) was not settled: the step
    -- is refused and everything it wrote rolls back. The message is the call's id.
    IF r.thread IS NOT NULL THEN
        SELECT c INTO unsettled FROM unnest($22) AS c WHERE c <> ALL (r.settled) LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'FG001', MESSAGE = unsettled::text;
        END IF;
    END IF;
    -- A step that ends its run: its pending interactions expire, and its thread's oldest queued
    -- run becomes active with its job ready (a statement of its own, so that the steps before
    -- the last do not pay for it).
    IF r.thread IS NOT NULL AND $11 THEN
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
    IF r.thread IS NOT NULL AND $12 THEN
        PERFORM pg_notify('forge_run_events', $8::text || ' ' || r.thread::text);
    END IF;
    o_run := r.run;
    o_settled := r.settled;
    o_closed := r.closed;
    o_wrote := r.thread IS NOT NULL;
    RETURN NEXT;
END
$fn$;

-- A lease taken under a lock on the run row: the next fence to $3 until $4 when no one else holds
-- an unexpired lease at $5 (the adapter's next_lease, in SQL). Returns the row as it was and
-- whether the lease was taken.
CREATE FUNCTION forge_lease(uuid, text, text, timestamptz, timestamptz)
RETURNS TABLE (o_run forge_runs, o_taken boolean)
LANGUAGE plpgsql SECURITY INVOKER
SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    r record;
BEGIN
    PERFORM set_config('forge.tenant_id', $2, true);
    WITH old AS (
        SELECT * FROM forge_runs WHERE id = $1 AND tenant_id = $2 FOR UPDATE
    ), free AS (
        SELECT 1 FROM old WHERE lease_holder IS NULL OR lease_holder = $3 OR lease_expires_at <= $5
    ), taken AS (
        UPDATE forge_runs SET lease_holder = $3, lease_token = fence + 1, lease_expires_at = $4,
        fence = fence + 1
        WHERE id = $1 AND tenant_id = $2 AND EXISTS (SELECT 1 FROM free)
    )
    SELECT ROW(old.*)::forge_runs AS run, EXISTS (SELECT 1 FROM free) AS taken INTO r FROM old;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    o_run := r.run;
    o_taken := r.taken;
    RETURN NEXT;
END
$fn$;

REVOKE ALL ON FUNCTION forge_step(
    bigint, bigint, text, text, jsonb, jsonb, timestamptz, uuid, text, boolean, boolean, boolean,
    bigint, bigint[], timestamptz[], jsonb[], uuid[], uuid[], text[], jsonb[], timestamptz[],
    uuid[], timestamptz[], timestamptz[], text[], jsonb[], bigint, text[], boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION forge_lease(uuid, text, text, timestamptz, timestamptz) FROM PUBLIC;
