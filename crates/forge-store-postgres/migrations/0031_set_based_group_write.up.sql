-- A group of steps written as sets. Group commit (the adapter's `steps.rs`) sent a group as one
-- call of forge_write_step per step; the calls shared a round trip and a commit, but each still
-- started its own executor for each of its statements, which was most of PostgreSQL's CPU per
-- step. forge_write_steps writes the steps of one tenant at once: one update of their runs, one
-- insert each of their events, messages and settled calls, and (when any of them ends its run)
-- one statement for what follows the end of a run.
--
-- Each step is gated exactly as forge_write_step gates it, in the same update (its lease, version,
-- next sequence number, the statuses it may leave, what check_commit_alone found, every settled
-- call open), and a step it refuses is answered with the run row as it now is and its settled
-- calls that were not open, as forge_write_step answers. The steps are given by place (their
-- index in the adapter's group), which each answer row names; their events, messages and calls
-- name the place of their step. The adapter sends at most one step of a run per call (a run
-- updated twice by one UPDATE keeps only one of the changes), sorted by run id, the order the
-- update locks them in.
--
-- A settled call the gate could not see (another tenant's id) raises FG001, as forge_write_step
-- does; the adapter then sends each step of the group again alone, which names the step.
--
-- Like forge_write_step it keeps one generic plan and prefers indexes (enable_seqscan off), and it
-- never compiles a statement just in time: a scan of the small forge_listeners table (which no
-- index serves) was costed at the disabled seq scan's ten billion, over jit_above_cost, and its
-- compilation took half a second of every group.
CREATE FUNCTION forge_write_steps(
    tenant text, places int[], versions bigint[], counts bigint[], statuses text[],
    waiting text[], checkpoints jsonb[], failures jsonb[], nows timestamptz[], runs uuid[],
    releases boolean[], ends boolean[], notifies boolean[], tokens bigint[], firsts bigint[],
    froms text[], alones boolean[],
    e_places int[], e_seqs bigint[], e_ats timestamptz[], e_bodies text[],
    m_places int[], m_ids uuid[], m_runs uuid[], m_roles text[], m_parts jsonb[],
    m_ats timestamptz[],
    c_places int[], c_ids uuid[], c_period_starts timestamptz[], c_ats timestamptz[],
    c_statuses text[], c_bodies jsonb[])
RETURNS TABLE (o_place int, o_version bigint, o_last_seq bigint, o_cancel boolean,
    o_run forge_runs, o_closed uuid[])
LANGUAGE plpgsql SECURITY INVOKER ROWS 16
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $fn$
DECLARE
    set_tenant text;
    w_places int[];
    w_runs uuid[];
    w_threads uuid[];
    w_versions bigint[];
    w_last_seqs bigint[];
    w_cancels boolean[];
    w_ends boolean[];
    w_notifies boolean[];
    w_nows timestamptz[];
    settled bigint;
    expected bigint;
BEGIN
    -- An assignment, which PL/pgSQL evaluates without starting an executor.
    set_tenant := set_config('forge.tenant_id', tenant, true);
    WITH s AS (
        SELECT * FROM unnest(places, versions, counts, statuses, waiting, checkpoints, failures,
            nows, runs, releases, ends, notifies, tokens, firsts, froms, alones)
            AS s(place, version, count, status, waiting_for, checkpoint, failure, now, run,
                releases_lease, ends_run, notify, token, first, from_statuses, alone)
    ), updated AS (
        UPDATE forge_runs r SET version = r.version + 1, last_seq = r.last_seq + s.count,
            status = s.status, waiting_for = s.waiting_for, checkpoint = s.checkpoint,
            failure = s.failure, updated_at = s.now,
            lease_holder = CASE WHEN s.releases_lease THEN NULL ELSE r.lease_holder END,
            lease_token = CASE WHEN s.releases_lease THEN NULL ELSE r.lease_token END,
            lease_expires_at = CASE WHEN s.releases_lease THEN NULL ELSE r.lease_expires_at END
        FROM s
        WHERE r.id = s.run AND r.tenant_id = tenant AND s.alone AND r.version = s.version
        AND r.lease_token = s.token AND r.lease_expires_at > s.now
        AND (s.first IS NULL OR r.last_seq + 1 = s.first)
        AND (r.status || coalesce(':' || r.waiting_for, '')) = ANY(string_to_array(s.from_statuses, ','))
        AND NOT EXISTS (
            SELECT 1 FROM unnest(c_places, c_ids) AS k(place, id)
            JOIN forge_model_calls c ON c.id = k.id
            WHERE k.place = s.place AND c.status <> 'reserved')
        RETURNING s.place, r.id AS run, r.thread_id AS thread, r.version, r.last_seq,
            r.cancel_requested, s.ends_run, s.notify, s.now
    ), events AS (
        INSERT INTO forge_run_events (run_id, seq, tenant_id, at, body)
        SELECT u.run, e.seq, tenant, e.at, e.body::json
        FROM updated u JOIN unnest(e_places, e_seqs, e_ats, e_bodies) AS e(place, seq, at, body)
        ON e.place = u.place
    ), messages AS (
        INSERT INTO forge_messages (tenant_id, thread_id, id, run_id, role, parts, created_at)
        SELECT tenant, u.thread, m.id, m.run_id, m.role, m.parts, m.created_at
        FROM updated u JOIN unnest(m_places, m_ids, m_runs, m_roles, m_parts, m_ats)
            WITH ORDINALITY AS m(place, id, run_id, role, parts, created_at, n)
        ON m.place = u.place ORDER BY m.n
    ), calls AS (
        INSERT INTO forge_model_calls (id, tenant_id, run_id, period_start, at, status, body)
        SELECT c.id, tenant, u.run, c.period_start, c.at, c.status, c.body
        FROM updated u JOIN unnest(c_places, c_ids, c_period_starts, c_ats, c_statuses, c_bodies)
            AS c(place, id, period_start, at, status, body)
        ON c.place = u.place
        ON CONFLICT (id) DO UPDATE SET status = excluded.status, body = excluded.body
        WHERE forge_model_calls.status = 'reserved' AND forge_model_calls.tenant_id = excluded.tenant_id
        RETURNING forge_model_calls.id
    )
    SELECT array_agg(u.place), array_agg(u.run), array_agg(u.thread), array_agg(u.version),
        array_agg(u.last_seq), array_agg(u.cancel_requested), array_agg(u.ends_run),
        array_agg(u.notify), array_agg(u.now),
        (SELECT count(*) FROM calls),
        (SELECT count(*) FROM unnest(c_places) AS k(place) WHERE k.place IN (SELECT place FROM updated))
    INTO w_places, w_runs, w_threads, w_versions, w_last_seqs, w_cancels, w_ends, w_notifies,
        w_nows, settled, expected
    FROM updated u;
    -- A conflicting call the gate could not see was not settled: everything rolls back.
    IF settled <> expected THEN
        RAISE EXCEPTION USING ERRCODE = 'FG001', MESSAGE = 'a settled call was not open';
    END IF;
    -- The steps that end their runs, one statement each (as forge_write_step): their pending
    -- interactions expire, and each thread's oldest queued run becomes active with its job ready.
    -- By equality on each run and thread, so that the plan kept reaches them by key: a set of
    -- them (`= ANY`) was planned, on the small tables of a new database, as a scan of the
    -- tenant's threads.
    IF true = ANY(w_ends) THEN
        FOR i IN 1 .. cardinality(w_runs) LOOP
            CONTINUE WHEN NOT w_ends[i];
            WITH expired AS (
                UPDATE forge_interactions SET status = 'expired',
                    body = jsonb_set(body, '{status}', '"expired"')
                WHERE run_id = w_runs[i] AND tenant_id = tenant AND status = 'pending'
            ), next_run AS (
                SELECT n.id FROM forge_runs n WHERE n.thread_id = w_threads[i]
                AND n.tenant_id = tenant AND n.status = 'queued' AND n.id <> w_runs[i]
                ORDER BY n.created_at, n.id LIMIT 1
            ), promoted AS (
                UPDATE forge_threads SET active_run = (SELECT id FROM next_run)
                WHERE id = w_threads[i] AND tenant_id = tenant AND active_run = w_runs[i]
            )
            UPDATE forge_jobs SET state = 'ready', available_at = w_nows[i]
            WHERE run_id = (SELECT id FROM next_run) AND state = 'waiting';
        END LOOP;
    END IF;
    -- Listeners hear of every step that appended events, while a process listens.
    IF true = ANY(w_notifies) THEN
        PERFORM pg_notify('forge_run_events', x.run::text || ' ' || x.thread::text)
        FROM unnest(w_runs, w_threads, w_notifies, w_nows) AS x(run, thread, notify, now)
        WHERE x.notify AND EXISTS (SELECT 1 FROM forge_listeners l WHERE l.expires_at > x.now);
    END IF;
    RETURN QUERY
        SELECT x.place, x.version, x.last_seq, x.cancel, NULL::forge_runs, NULL::uuid[]
        FROM unnest(w_places, w_versions, w_last_seqs, w_cancels)
            AS x(place, version, last_seq, cancel);
    -- Refused (or no such run of the tenant): the row as it now is, for the adapter to name.
    IF coalesce(cardinality(w_places), 0) < cardinality(places) THEN
        RETURN QUERY
            SELECT s.place, NULL::bigint, NULL::bigint, NULL::boolean, r,
                ARRAY(SELECT c.id FROM forge_model_calls c
                    WHERE c.id = ANY(ARRAY(SELECT k.id FROM unnest(c_places, c_ids) AS k(place, id)
                        WHERE k.place = s.place))
                    AND c.status <> 'reserved')
            FROM unnest(places, runs) AS s(place, run), forge_runs r
            WHERE r.id = s.run AND r.tenant_id = tenant
            AND NOT (s.place = ANY(coalesce(w_places, '{}')));
    END IF;
END
$fn$;

REVOKE ALL ON FUNCTION forge_write_steps(
    text, int[], bigint[], bigint[], text[], text[], jsonb[], jsonb[], timestamptz[], uuid[],
    boolean[], boolean[], boolean[], bigint[], bigint[], text[], boolean[],
    int[], bigint[], timestamptz[], text[],
    int[], uuid[], uuid[], text[], jsonb[], timestamptz[],
    int[], uuid[], timestamptz[], timestamptz[], text[], jsonb[]) FROM PUBLIC;
