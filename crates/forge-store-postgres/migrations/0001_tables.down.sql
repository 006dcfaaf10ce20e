DROP TABLE forge_locks;
DROP TABLE forge_audit;
DROP TABLE forge_jobs;
DROP TABLE forge_run_events;
DROP TABLE forge_runs;
DROP TABLE forge_messages;
DROP TABLE forge_threads;
