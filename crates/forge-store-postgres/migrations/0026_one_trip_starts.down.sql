DROP FUNCTION forge_start_run(uuid, text, text, uuid, text, text, jsonb, timestamptz, jsonb, jsonb,
    uuid, integer, text);
DROP FUNCTION forge_insert_thread(uuid, text, text, text, jsonb, timestamptz);
