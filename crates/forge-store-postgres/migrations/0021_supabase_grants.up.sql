-- Supabase mode calls them as forge_tenant, inside its tenant transaction.
GRANT EXECUTE ON FUNCTION forge_step(
    bigint, bigint, text, text, jsonb, jsonb, timestamptz, uuid, text, boolean, boolean, boolean,
    bigint, bigint[], timestamptz[], jsonb[], uuid[], uuid[], text[], jsonb[], timestamptz[],
    uuid[], timestamptz[], timestamptz[], text[], jsonb[], bigint, text[], boolean) TO forge_tenant;
GRANT EXECUTE ON FUNCTION forge_lease(uuid, text, text, timestamptz, timestamptz) TO forge_tenant;
