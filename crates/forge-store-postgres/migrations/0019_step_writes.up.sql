-- A step commit writes its events, messages and run row in one statement (see commit_step).
-- Two kinds of per-row work that statement no longer pays for:
--
-- Foreign keys from the event log to runs and from history to threads. Each appended row ran a
-- key-share lookup of its parent (about 40 a run), yet every append happens in commit_step while
-- that very parent run is locked FOR UPDATE and known to exist, and erasure deletes a run's
-- events and messages, under the same lock and only once the run has ended, before the run and
-- thread themselves. The reference is enforced by the only writer; forge_runs.thread_id and
-- forge_jobs.run_id keep their keys.
--
-- The notification trigger of migration 6. It ran once per appending statement and re-read the
-- run row for the thread id; commit_step now notifies from the run update it already makes
-- (RETURNING pg_notify), and create_run when it appends a queued run's first event. NOTIFY is
-- still sent only on commit, with the same channel and payload.
ALTER TABLE forge_run_events DROP CONSTRAINT forge_run_events_run_id_fkey;
ALTER TABLE forge_messages DROP CONSTRAINT forge_messages_thread_id_fkey;
DROP TRIGGER forge_run_events_notify ON forge_run_events;
DROP FUNCTION forge_notify_run_events();
