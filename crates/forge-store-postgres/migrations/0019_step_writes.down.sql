-- The trigger of migration 6 is re-created before this (see migrate.rs); then the keys.
ALTER TABLE forge_messages
    ADD CONSTRAINT forge_messages_thread_id_fkey FOREIGN KEY (thread_id) REFERENCES forge_threads (id);
ALTER TABLE forge_run_events
    ADD CONSTRAINT forge_run_events_run_id_fkey FOREIGN KEY (run_id) REFERENCES forge_runs (id);
