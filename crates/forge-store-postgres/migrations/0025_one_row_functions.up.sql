-- The functions that return at most one row say so. PostgreSQL costs a set-returning function
-- at a thousand rows unless told otherwise, and the step's statement evaluates, for each row the
-- function returns, whether to complete the step's job (forge_sys_complete). Costed at a thousand
-- rows, that call made the statement's generic plan look dearer than any custom plan, in which
-- the parameters fold it away; under the default plan_cache_mode PostgreSQL then planned the
-- statement afresh at every step (seen in pg_prepared_statements: no generic plan after hundreds
-- of executions, and a Bind of 0.2 ms against 0.04 ms for the lease's). At one row the generic
-- plan is the cheaper, and a connection plans the statement once.
ALTER FUNCTION forge_write_step(
    bigint, bigint, text, text, jsonb, jsonb, timestamptz, uuid, text, boolean, boolean, boolean,
    bigint, bigint[], timestamptz[], jsonb[], uuid[], uuid[], text[], jsonb[], timestamptz[],
    uuid[], timestamptz[], timestamptz[], text[], jsonb[], bigint, text[], boolean) ROWS 1;
ALTER FUNCTION forge_lease(uuid, text, text, timestamptz, timestamptz) ROWS 1;
ALTER FUNCTION forge_thread_row(uuid, text) ROWS 1;
