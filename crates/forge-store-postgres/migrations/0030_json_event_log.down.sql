DROP FUNCTION forge_write_step(
    bigint, bigint, text, text, jsonb, jsonb, timestamptz, uuid, text, boolean, boolean, boolean,
    bigint, bigint[], timestamptz[], text[], uuid[], uuid[], text[], jsonb[], timestamptz[],
    uuid[], timestamptz[], timestamptz[], text[], jsonb[], bigint, text[], boolean);
ALTER TABLE forge_run_events ALTER COLUMN body TYPE jsonb USING body::jsonb;
