-- Supabase mode calls them as forge_tenant, inside its tenant transaction.
GRANT EXECUTE ON FUNCTION forge_thread_row(uuid, text) TO forge_tenant;
GRANT EXECUTE ON FUNCTION forge_message_page(uuid, text, bigint, bigint, bigint, boolean) TO forge_tenant;
