ALTER FUNCTION forge_write_step(
    bigint, bigint, text, text, jsonb, jsonb, timestamptz, uuid, text, boolean, boolean, boolean,
    bigint, bigint[], timestamptz[], jsonb[], uuid[], uuid[], text[], jsonb[], timestamptz[],
    uuid[], timestamptz[], timestamptz[], text[], jsonb[], bigint, text[], boolean) ROWS 1000;
ALTER FUNCTION forge_lease(uuid, text, text, timestamptz, timestamptz) ROWS 1000;
ALTER FUNCTION forge_thread_row(uuid, text) ROWS 1000;
