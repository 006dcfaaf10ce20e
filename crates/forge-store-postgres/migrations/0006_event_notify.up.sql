-- Wake-ups for subscribers in other processes: after every statement that appends run events,
-- one NOTIFY per run on channel forge_run_events, payload '<run id> <thread id>'. NOTIFY is
-- delivered on commit (never for a rolled-back step) and carries no event: listeners re-read the
-- log, so a lost or duplicated notification costs latency, never correctness.
CREATE FUNCTION forge_notify_run_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('forge_run_events', r.id::text || ' ' || r.thread_id::text)
    FROM forge_runs r
    WHERE r.id IN (SELECT DISTINCT run_id FROM inserted_events);
    RETURN NULL;
END
$$;

CREATE TRIGGER forge_run_events_notify
    AFTER INSERT ON forge_run_events
    REFERENCING NEW TABLE AS inserted_events
    FOR EACH STATEMENT EXECUTE FUNCTION forge_notify_run_events();
