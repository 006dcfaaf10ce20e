DROP FUNCTION forge_thread_start(uuid, text, bigint);
