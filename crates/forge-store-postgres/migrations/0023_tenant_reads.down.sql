DROP FUNCTION forge_message_page(uuid, text, bigint, bigint, bigint, boolean);
DROP FUNCTION forge_thread_row(uuid, text);
