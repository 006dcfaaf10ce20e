-- What a run begins with, read in the statement that takes its lease (or claims its job and
-- takes its lease): the thread and the first page of its history, in one row. A run's start was
-- two round trips, the lease and then this read; it is one.
--
-- The function is VOLATILE so that its query takes a snapshot of its own when it runs, after the
-- lease in the same statement was taken: a lease that waited for the run row's lock (a step of
-- the previous holder committing) still reads the messages that step wrote. A STABLE function
-- would read with the statement's snapshot, taken before that wait.
--
-- $1 the thread, of the tenant $2; at most $3 messages from the start, none when the thread has a
-- summary (the caller reads the page after it apart), and no row at all when $3 is null (the
-- lease was not taken). The page's columns are arrays in the order of the history; a thread
-- without messages has them null.
CREATE FUNCTION forge_thread_start(uuid, text, bigint)
RETURNS TABLE (t_id uuid, t_tenant_id text, t_created_by text, t_title text, t_state jsonb, t_state_version bigint,
    t_active_run uuid, t_summary jsonb, t_created_at timestamptz, t_archived_at timestamptz,
    m_ids uuid[], m_run_ids uuid[], m_roles text[], m_parts jsonb[], m_created_at timestamptz[])
LANGUAGE plpgsql VOLATILE SECURITY INVOKER ROWS 1
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $fn$
BEGIN
    IF $3 IS NULL THEN
        RETURN;
    END IF;
    PERFORM set_config('forge.tenant_id', $2, true);
    RETURN QUERY SELECT t.id, t.tenant_id, t.created_by, t.title, t.state, t.state_version, t.active_run,
        t.summary, t.created_at, t.archived_at, p.ids, p.run_ids, p.roles, p.parts, p.created
    FROM forge_threads t
    CROSS JOIN LATERAL (
        SELECT array_agg(m.id ORDER BY m.seq), array_agg(m.run_id ORDER BY m.seq),
            array_agg(m.role ORDER BY m.seq), array_agg(m.parts ORDER BY m.seq),
            array_agg(m.created_at ORDER BY m.seq)
        FROM (
            SELECT m.seq, m.id, m.run_id, m.role, m.parts, m.created_at FROM forge_messages m
            WHERE m.thread_id = t.id AND m.tenant_id = t.tenant_id AND t.summary IS NULL
            ORDER BY m.seq LIMIT $3
        ) m
    ) AS p(ids, run_ids, roles, parts, created)
    WHERE t.id = $1 AND t.tenant_id = $2;
END
$fn$;

REVOKE ALL ON FUNCTION forge_thread_start(uuid, text, bigint) FROM PUBLIC;
