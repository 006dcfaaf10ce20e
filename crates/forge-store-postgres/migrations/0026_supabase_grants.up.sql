-- Supabase mode calls them as forge_tenant, inside its tenant transaction.
GRANT EXECUTE ON FUNCTION forge_insert_thread(uuid, text, text, text, jsonb, timestamptz) TO forge_tenant;
GRANT EXECUTE ON FUNCTION forge_start_run(uuid, text, text, uuid, text, text, jsonb, timestamptz,
    jsonb, jsonb, uuid, integer, text) TO forge_tenant;
