-- Supabase mode calls it as forge_tenant, inside its tenant transaction.
GRANT EXECUTE ON FUNCTION forge_write_step(
    bigint, bigint, text, text, jsonb, jsonb, timestamptz, uuid, text, boolean, boolean, boolean,
    bigint, bigint[], timestamptz[], text[], uuid[], uuid[], text[], jsonb[], timestamptz[],
    uuid[], timestamptz[], timestamptz[], text[], jsonb[], bigint, text[], boolean) TO forge_tenant;
