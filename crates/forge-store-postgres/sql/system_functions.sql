-- Forge's system operations: the only way to touch rows across tenants. Each function is
-- SECURITY DEFINER and owned by the role `forge_system`, which the application role cannot
-- become; the row-level security policies admit cross-tenant access only when the current user
-- is `forge_system`, which inside these functions it is and outside them it never is. Whatever
-- settings the application connection makes, it can do across tenants exactly what these
-- functions do: claim, extend, settle and list queue jobs, replay or discard dead letters (with
-- an audit entry), list overdue interactions by id, and release orphaned usage reservations.
--
-- The search path is pinned (with pg_temp last) so a caller cannot redirect a name to an object
-- of its own. Bodies are PL/pgSQL, checked when called, so they may be created before the tables.

CREATE OR REPLACE FUNCTION forge_sys_version() RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT 7 $$;

-- Claims a job the filter admits (its run `p_run` when given, and its run's agent version among
-- the pairs (`p_names`, `p_versions`) when given): first a claim whose lease lapsed, longest
-- lapsed first (its worker was lost), else the oldest ready job. With nothing to claim,
-- dead-letters lapsed claims that have no attempts left.
-- Version 2 returns the job's traceparent and when it became claimable; a return type cannot be
-- replaced, so version 1's is dropped first.
DROP FUNCTION IF EXISTS forge_sys_claim(timestamptz, timestamptz, uuid, text[], text[]);
-- Version 4 looks in two narrow indexes (migration 20): the lapsing claims by expiry, then the
-- ready jobs by id, each walked in order and left at the first job the filter admits and nobody
-- holds. Sorting stays off and plans generic: with a sort allowed, a table whose statistics are
-- stale (a burst of enqueued jobs, autovacuum off or behind) is planned as "find every candidate,
-- test each, sort them", a claim then costing in proportion to the backlog (12 ms at 540 ready
-- jobs); with custom plans, each claim paid for its own planning. JIT is off: a plan that needs
-- a sort anyway is costed past JIT's thresholds by the disabled sort, and compiling it took
-- 165 ms on this schema.
-- Version 5 plans with sequential scans off: the plan is made once per connection, and one made
-- while the runs table was small (a new deployment's first claims) checked the agent filter with
-- a hashed scan of every run, which it kept as the table grew (1.9 ms a claim at 3,000 runs).
-- Every lookup of the claim is by key.
CREATE FUNCTION forge_sys_claim(p_now timestamptz, p_expires timestamptz, p_run uuid,
                                p_names text[], p_versions text[])
    RETURNS TABLE (id uuid, tenant_id text, run_id uuid, attempts integer, token bigint,
                   expires_at timestamptz, available_at timestamptz, traceparent text)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp
    SET enable_sort = off
    SET enable_seqscan = off
    SET plan_cache_mode = force_generic_plan
    SET jit = off
    AS $$
#variable_conflict use_column
DECLARE
    picked uuid;
BEGIN
    SELECT f.id INTO picked FROM forge_jobs f
     WHERE f.state = 'claimed' AND f.expires_at <= p_now AND f.attempts < f.max_attempts
       AND (p_run IS NULL OR f.run_id = p_run)
       AND (p_names IS NULL OR EXISTS (
             SELECT 1 FROM forge_runs r, unnest(p_names, p_versions) AS a (name, version)
              WHERE r.id = f.run_id AND r.agent_name = a.name AND r.agent_version = a.version))
     ORDER BY f.expires_at LIMIT 1 FOR UPDATE OF f SKIP LOCKED;
    IF picked IS NULL THEN
        SELECT f.id INTO picked FROM forge_jobs f
         WHERE f.state = 'ready' AND f.available_at <= p_now
           AND (p_run IS NULL OR f.run_id = p_run)
           AND (p_names IS NULL OR EXISTS (
                 SELECT 1 FROM forge_runs r, unnest(p_names, p_versions) AS a (name, version)
                  WHERE r.id = f.run_id AND r.agent_name = a.name AND r.agent_version = a.version))
         ORDER BY f.id LIMIT 1 FOR UPDATE OF f SKIP LOCKED;
    END IF;
    IF picked IS NULL THEN
        -- The reason is forge_core::ports::queue::WORKER_LOST.
        UPDATE forge_jobs d SET state = 'dead', expires_at = NULL,
               last_error = 'lease expired (worker lost)'
         WHERE d.id IN (SELECT f.id FROM forge_jobs f
                         WHERE f.state = 'claimed' AND f.expires_at <= p_now
                           AND f.attempts >= f.max_attempts
                           FOR UPDATE SKIP LOCKED);
        RETURN;
    END IF;
    RETURN QUERY
    UPDATE forge_jobs j
       SET state = 'claimed', attempts = j.attempts + 1, token = j.token + 1, expires_at = p_expires
     WHERE j.id = picked
    RETURNING j.id, j.tenant_id, j.run_id, j.attempts, j.token, j.expires_at, j.available_at,
              j.traceparent;
END
$$;

-- Claims up to `p_limit` jobs in one statement, each the one `forge_sys_claim` would claim after
-- the claims before it: how a worker claims at once for every claim loop that freed up together,
-- in one transaction instead of one each. Version 6.
CREATE OR REPLACE FUNCTION forge_sys_claim_many(p_now timestamptz, p_expires timestamptz,
                                                p_run uuid, p_names text[], p_versions text[],
                                                p_limit integer)
    RETURNS TABLE (id uuid, tenant_id text, run_id uuid, attempts integer, token bigint,
                   expires_at timestamptz, available_at timestamptz, traceparent text)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
BEGIN
    FOR i IN 1 .. p_limit LOOP
        RETURN QUERY SELECT * FROM forge_sys_claim(p_now, p_expires, p_run, p_names, p_versions);
        EXIT WHEN NOT FOUND;
    END LOOP;
END
$$;

-- Locks job `p_id` if `p_token` is its current, unexpired claim; false when fenced.
CREATE OR REPLACE FUNCTION forge_sys_holds(p_id uuid, p_token bigint, p_now timestamptz)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
BEGIN
    PERFORM 1 FROM forge_jobs f
      WHERE f.id = p_id AND f.state = 'claimed' AND f.token = p_token AND f.expires_at > p_now
        FOR UPDATE;
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION forge_sys_heartbeat(p_id uuid, p_token bigint, p_now timestamptz,
                                               p_expires timestamptz)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
BEGIN
    IF NOT forge_sys_holds(p_id, p_token, p_now) THEN
        RETURN false;
    END IF;
    UPDATE forge_jobs f SET expires_at = p_expires WHERE f.id = p_id;
    RETURN true;
END
$$;

-- Completes job `p_id` if `p_token` is its current, unexpired claim; false when fenced. One
-- statement since version 7: the update's own condition is the claim check `forge_sys_holds`
-- makes (re-checked on the row version it locks), without a second function call and a
-- `SELECT … FOR UPDATE` before it, in the step that ends every run.
CREATE OR REPLACE FUNCTION forge_sys_complete(p_id uuid, p_token bigint, p_now timestamptz)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
BEGIN
    UPDATE forge_jobs f SET state = 'completed', expires_at = NULL
     WHERE f.id = p_id AND f.state = 'claimed' AND f.token = p_token AND f.expires_at > p_now;
    RETURN FOUND;
END
$$;

-- Fails the claim: ready again after `p_available`, or dead with no attempts left. Returns the
-- new state, or NULL when fenced.
CREATE OR REPLACE FUNCTION forge_sys_fail(p_id uuid, p_token bigint, p_now timestamptz,
                                          p_available timestamptz, p_reason text)
    RETURNS text
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
DECLARE
    next_state text;
BEGIN
    IF NOT forge_sys_holds(p_id, p_token, p_now) THEN
        RETURN NULL;
    END IF;
    UPDATE forge_jobs f
       SET state = CASE WHEN f.attempts >= f.max_attempts THEN 'dead' ELSE 'ready' END,
           expires_at = NULL, available_at = p_available, last_error = p_reason
     WHERE f.id = p_id
    RETURNING f.state INTO next_state;
    RETURN next_state;
END
$$;

-- Gives the claim back without spending an attempt.
CREATE OR REPLACE FUNCTION forge_sys_release(p_id uuid, p_token bigint, p_now timestamptz,
                                             p_available timestamptz)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
BEGIN
    IF NOT forge_sys_holds(p_id, p_token, p_now) THEN
        RETURN false;
    END IF;
    UPDATE forge_jobs f
       SET state = 'ready', attempts = GREATEST(f.attempts - 1, 0), expires_at = NULL,
           available_at = p_available
     WHERE f.id = p_id;
    RETURN true;
END
$$;

-- Jobs for operators: one by id (`p_id`), or those in state `p_state`, oldest first.
CREATE OR REPLACE FUNCTION forge_sys_jobs(p_id uuid, p_state text, p_limit bigint)
    RETURNS TABLE (id uuid, tenant_id text, run_id uuid, state text, attempts integer,
                   max_attempts integer, last_error text)
    LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
BEGIN
    RETURN QUERY
    SELECT f.id, f.tenant_id, f.run_id, f.state, f.attempts, f.max_attempts, f.last_error
      FROM forge_jobs f
     WHERE (p_id IS NULL OR f.id = p_id) AND (p_state IS NULL OR f.state = p_state)
     ORDER BY f.id LIMIT p_limit;
END
$$;

-- How many jobs are in each state, across tenants (a gauge's reading; no tenant is named).
CREATE OR REPLACE FUNCTION forge_sys_job_counts()
    RETURNS TABLE (state text, jobs bigint)
    LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
BEGIN
    RETURN QUERY SELECT f.state, count(*) FROM forge_jobs f GROUP BY f.state;
END
$$;

-- Moves a dead job to `p_to` ('ready' resets its attempts, or 'discarded') and audits it as
-- `p_action` by `p_actor`. Returns the job as it was; a job that is not dead is returned
-- unchanged (the caller refuses it) and nothing is written.
CREATE OR REPLACE FUNCTION forge_sys_operate(p_id uuid, p_actor text, p_action text, p_to text,
                                             p_now timestamptz)
    RETURNS TABLE (id uuid, tenant_id text, run_id uuid, state text, attempts integer,
                   max_attempts integer, last_error text)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
DECLARE
    job record;
BEGIN
    IF p_to NOT IN ('ready', 'discarded') THEN
        RAISE EXCEPTION 'a dead job moves to ready or discarded, not %', p_to;
    END IF;
    SELECT * INTO job FROM forge_jobs f WHERE f.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF job.state = 'dead' THEN
        UPDATE forge_jobs f
           SET state = p_to,
               attempts = CASE WHEN p_to = 'ready' THEN 0 ELSE f.attempts END,
               available_at = CASE WHEN p_to = 'ready' THEN p_now ELSE f.available_at END
         WHERE f.id = p_id;
        INSERT INTO forge_audit (tenant_id, at, actor, action, subject, detail)
        VALUES (job.tenant_id, p_now, p_actor, p_action, 'job ' || p_id,
                jsonb_build_object('run_id', job.run_id, 'last_error', job.last_error));
    END IF;
    RETURN QUERY SELECT job.id, job.tenant_id, job.run_id, job.state, job.attempts,
                        job.max_attempts, job.last_error;
END
$$;

-- Pending interactions past their expiry, by id and tenant only: each is then expired in its own
-- tenant's transaction.
CREATE OR REPLACE FUNCTION forge_sys_due_interactions(p_now timestamptz)
    RETURNS TABLE (id uuid, tenant_id text)
    LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
BEGIN
    RETURN QUERY
    SELECT i.id, i.tenant_id FROM forge_interactions i
     WHERE i.status = 'pending' AND i.expires_at <= p_now;
END
$$;

-- Releases usage reservations still unsettled that were made before `p_before`: their workers
-- died and no re-execution replaced them (forge_core::metering::orphaned). Returns how many.
CREATE OR REPLACE FUNCTION forge_sys_release_orphans(p_before timestamptz)
    RETURNS integer
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
DECLARE
    released integer;
BEGIN
    UPDATE forge_model_calls c
       SET status = 'released', body = jsonb_set(c.body, '{status}', '"released"')
     WHERE c.status = 'reserved' AND c.at < p_before;
    GET DIAGNOSTICS released = ROW_COUNT;
    RETURN released;
END
$$;
