-- Supabase mode calls it as forge_tenant, inside its tenant transaction.
GRANT EXECUTE ON FUNCTION forge_thread_start(uuid, text, bigint) TO forge_tenant;
